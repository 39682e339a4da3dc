"""Issue 31, item 2: the first message of a continuation (after ``/compact``, a resume,
``--full``, a fork, an edit) is on disk before it is counted and before anything is
asked of the model (the acknowledgment, the answer). A child that must then begin
otherwise is made over in place, the message on disk throughout; one whose message
is refused is removed again and the continuation waits."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from chatloop.backends.base import Cancel, ChatMessage, Event, estimate_tokens
from chatloop.chat.session import ChatSession
from chatloop.errors import ChatloopError
from chatloop.store.store import Store
from tests.fakes import STRUCTURED, FakeBackend
from tests.hosts import chat, files

MARK = "QX-7731 the message typed for the new session"


class Watching(FakeBackend):
    """A backend with a tokenizer that, once ``armed``, notes for every count of a text
    holding ``MARK`` and for every request whether a session file on disk holds it."""

    def __init__(self, store: Store, *replies: str, **options: Any) -> None:
        super().__init__(*replies, **options)
        self.store = store
        self.armed = False
        self.seen: list[tuple[str, bool]] = []

    def _on_disk(self) -> bool:
        return any(MARK in Path(e.path).read_text() for e in self.store.session_files())

    def count_tokens(self, text: str) -> int | None:
        if self.armed and MARK in text:
            self.seen.append(("count", self._on_disk()))
        return estimate_tokens(text)

    def stream(
        self,
        messages: Sequence[ChatMessage],
        *,
        tools: Sequence[dict[str, Any]] | None = None,
        options: dict[str, Any] | None = None,
        cancel: Cancel | None = None,
    ) -> Iterator[Event]:
        if self.armed:
            self.seen.append(("request", self._on_disk()))
        return super().stream(messages, tools=tools, options=options, cancel=cancel)


def _compact(session: ChatSession) -> None:
    session.compact()


def _resume(session: ChatSession) -> None:
    session.close()
    assert session.resume("1")


def _full(session: ChatSession) -> None:
    session.close()
    assert session.resume("1", full=True)


def _fork(session: ChatSession) -> None:
    session.fork(1)


KINDS: dict[str, Callable[[ChatSession], None]] = {
    "compact": _compact,
    "resume": _resume,
    "full": _full,
    "fork": _fork,
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_first_message_of_a_continuation_is_saved_before_it_is_counted(
    store: Store, kind: str
) -> None:
    backend = Watching(store, "One.", "Two.", default=STRUCTURED)
    session, _ = chat(store, backend, context_window=4096)
    session.send("How often should I water the basil?")
    session.send("And the mint?")
    KINDS[kind](session)
    backend.armed = True
    session.send(MARK)
    session.close()
    counts = [on_disk for what, on_disk in backend.seen if what == "count"]
    requests = [on_disk for what, on_disk in backend.seen if what == "request"]
    assert counts and requests  # it was counted and answered: the check saw both
    assert all(counts) and all(requests), backend.seen
    child = files(store)[-1]
    assert [m.text for m in child.messages if m.is_query] == [MARK]


def test_an_edit_is_saved_in_its_branch_before_it_is_counted(store: Store) -> None:
    backend = Watching(store, "One.", "Two.", default=STRUCTURED)
    session, _ = chat(store, backend, context_window=4096)
    session.send("How often should I water the basil?")
    session.send("And the mint?")
    backend.armed = True
    session.again(MARK)  # /edit: the last query, changed, in a branch
    session.close()
    # (the first request is the summary of the session left: the branch's come after)
    first = backend.seen.index(("count", True))
    assert all(on_disk for _, on_disk in backend.seen[first:]), backend.seen
    assert ("count", False) not in backend.seen and ("request", True) in backend.seen


def test_a_refused_first_message_is_kept_unsent_in_the_child_which_goes_on(
    store: Store,
) -> None:
    """The restoration fits; a message too long to go with it is refused: it stays in
    the child written with it, marked as not sent (nothing sent, never a query), and
    the next message goes on in that child."""
    backend = FakeBackend("One.", STRUCTURED, "Answer.", default=STRUCTURED)
    session, _ = chat(store, backend, context_window=1200)
    session.send("How often should I water the basil?")
    session.compact()
    asked = len(backend.calls)
    long = "a long message " + "with many words " * 250
    with pytest.raises(ChatloopError, match="do not fit the context window together") as no:
        session.send(long)
    assert "marked as not sent" in no.value.hint
    assert len(backend.calls) == asked  # nothing was sent
    assert len(list(store.session_files())) == 2 and session.describe().phase == "open"
    session.send("a short one")
    session.close()
    parent, child = files(store)
    assert [m.text for m in child.messages if m.is_query] == ["a short one"]
    assert [m.text for m in child.messages if m.unsent] == [long]
    assert child.meta.parent_id == parent.meta.id and child.meta.queries == 1
    assert all("with many words" not in str(c["messages"]) for c in backend.calls[asked:])


def test_a_fork_whose_message_leaves_its_copies_no_room_is_made_over_in_place(
    store: Store,
) -> None:
    """A fork's copies fit; with the message they do not: the branch, written with the
    message, is rewritten carrying a summary of its history instead (one file, the
    message in it once, the branch's front matter kept)."""
    note = "the north beds need water every other morning " * 24
    backend = FakeBackend(default=STRUCTURED)
    session, host = chat(store, backend, context_window=1400)
    session.send(f"first: {note}")
    session.send(f"second: {note}")
    session.fork()
    assert host.said("messages carried") and not host.said("does not fit whole")
    session.send("a long message " + "with many words " * 150)
    session.close()
    assert host.said("does not fit whole")
    _parent, fork = files(store)
    assert len(list(store.session_files())) == 2
    (carried,) = [m for m in fork.messages if m.restore]
    assert "Decisions Made" in carried.text and fork.meta.extra["forked_at"] == 2
    assert [m.text[:14] for m in fork.messages if m.is_query] == ["a long message"]


def test_a_fork_message_too_long_even_beside_its_summary_is_refused_once(
    store: Store,
) -> None:
    """A branch made over as a summary of its history, whose message still does not fit
    beside it: refused (nothing sent; the message kept in the branch, marked as not
    sent), not summarized again and again. Message lengths are tried until one lands there."""
    note = "the north beds need water every other morning " * 24
    refused = 0
    for words in range(600, 900, 25):
        backend = FakeBackend(default=STRUCTURED)
        session, _ = chat(store, backend, context_window=1400)
        session.send(f"first: {note}")
        session.fork()
        before = len(list(store.session_files()))
        try:
            session.send("a long message " + "with many words " * (words // 3))
        except ChatloopError as exc:
            if "together" in exc.message:
                refused += 1
                summaries = [c for c in backend.calls if "progressive summary" in str(c)]
                assert len(summaries) <= 2  # the fork's, and the parent's at the fork
                # the branch stays, holding the message marked as not sent
                assert len(list(store.session_files())) == before + 1
                assert session.writer is not None and session.writer.messages[-1].unsent
        session.close()
    assert refused
