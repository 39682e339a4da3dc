"""Issue 32, item 3: the next compaction's summary is prepared while the person reads,
never competes with them, and is used when the threshold comes.

The backend answers by what it is asked; summary requests wait for ``release`` (an
event) or for their cancel, so "prepared while the person read" and "overtaken by a
message" are seen, not timed."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from types import SimpleNamespace
from typing import Any

from rich.console import Console

from chatloop.backends.base import (
    Cancel,
    Cancelled,
    ChatMessage,
    Event,
    Finish,
    TextDelta,
    UsageEvent,
    estimate_prompt,
    estimate_tokens,
)
from chatloop.chat import ledger
from chatloop.chat.session import ChatSession
from chatloop.store.store import Store
from chatloop.ui import commands, render
from tests.fakes import STRUCTURED, FakeBackend
from tests.hosts import ScriptedHost, chat, files

WINDOW = 2048
NOTE = "the basil beds on the north side need water every other morning "


class Served(FakeBackend):
    """Replies by request: a summary (held until ``release``, given up on its cancel),
    an acknowledgment, or an answer. Records which thread asked for each summary."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.summary_asked = threading.Event()
        self.gave_up = threading.Event()  # a summary request whose cancel was set
        self.summaries_from: list[str] = []

    def stream(
        self,
        messages: Sequence[ChatMessage],
        *,
        tools: Sequence[dict[str, Any]] | None = None,
        options: dict[str, Any] | None = None,
        cancel: Cancel | None = None,
    ) -> Iterator[Event]:
        self.calls.append({"messages": list(messages), "tools": tools, "options": options or {}})
        last = str(messages[-1]["content"])
        text = "Water them early."
        if "progressive summary" in last:
            self.summaries_from.append(threading.current_thread().name)
            self.summary_asked.set()
            while not self.release.wait(0.01):
                if cancel is not None and cancel.is_set:
                    self.gave_up.set()
                    raise Cancelled("cancelled")
            text = STRUCTURED
        elif "Acknowledge briefly" in last:
            text = "Ready to continue."
        yield TextDelta(text)
        yield UsageEvent(estimate_prompt(messages), estimate_tokens(text))
        yield Finish("stop")


def _session(store: Store, window: int = WINDOW) -> tuple[ChatSession, ScriptedHost, Served]:
    backend = Served()
    session, host = chat(
        store,
        backend,
        context_window=window,
        auto_compact="on",
        prepare_compaction="on",
    )
    session.prepare_after = 0.0  # (the person's pause: here the test decides when)
    return session, host, backend


def _until_preparing(session: ChatSession, repeat: int = 4) -> int:
    """Send notes (``NOTE`` ``repeat`` times each) until a preparation starts; how many
    were sent."""
    for sent in range(1, 40):
        session.send(f"note {sent}: {NOTE * repeat}")
        if session.describe().prepared == "preparing":
            return sent
    raise AssertionError("no preparation started")


def test_a_compaction_uses_the_summary_prepared_while_the_person_read(store: Store) -> None:
    session, host, backend = _session(store)
    sent = _until_preparing(session)
    assert backend.summary_asked.wait(30)
    backend.release.set()  # the person reads: the summary is made
    assert host.refreshed.wait(30)  # the toolbar is told
    assert session.describe().prepared == "ready"
    console = Console(record=True, width=200)
    info = commands.parse("/info")
    assert isinstance(info, commands.Command)
    info.spec.run(SimpleNamespace(session=session, console=console), "")  # type: ignore[arg-type]
    assert "its summary is ready, made while you read" in console.export_text()
    while len(files(store)) < 2 and sent < 40:  # on to the threshold, reading each reply
        sent += 1
        host.refreshed.clear()
        session.send(f"note {sent}: {NOTE * 4}")
        if session.describe().prepared == "preparing":  # made again, with this exchange
            assert host.refreshed.wait(30)
    made = list(backend.summaries_from)  # (the exit's summary, asked below, is not one)
    session.close()
    assert host.said("Using the summary prepared while you read.")
    assert made and set(made) == {"chatloop-prepare"}  # the compaction asked for none
    parent, child = files(store)[:2]
    assert parent.summary is not None
    assert ledger.split(parent.summary.text)[0] == STRUCTURED  # the model's, then the ledger
    carried = [m for m in child.messages if m.copy]
    assert carried and carried[-1].text == "Water them early."  # the newer exchange
    said = [m.text for s in files(store) for m in s.messages if m.is_query]
    assert said == [f"note {n}: {NOTE * 4}" for n in range(1, sent + 1)]


def test_a_message_sent_while_a_summary_is_prepared_goes_first(store: Store) -> None:
    session, _host, backend = _session(store)
    _until_preparing(session)
    assert backend.summary_asked.wait(30)
    result = session.send("And the roses?")  # the summary request is under way
    assert backend.gave_up.wait(30)  # given up for the person's message
    assert result.reply == "Water them early."
    assert session.describe().prepared != "ready"  # nothing was kept of it
    backend.release.set()
    session.close()


def test_a_compact_with_instructions_summarizes_anew(store: Store) -> None:
    """What the person asks the summary to keep was not in the prepared request: it is
    not used, and the summary is asked for then, with the instructions."""
    session, _host, backend = _session(store)
    _until_preparing(session)
    assert backend.summary_asked.wait(30)
    backend.release.set()
    session.compact(instructions="keep the north side")
    assert backend.summaries_from[-1] == "MainThread"
    asked = [p for p in backend.prompts() if "progressive summary" in p]
    assert "keep the north side" in asked[-1]
    session.close()


def test_the_toolbar_says_when_a_summary_is_being_prepared_or_ready() -> None:
    parts = {"agent": "Sally", "model": "m", "session": "s", "queries": 1, "tokens": 9}
    for phase, shown in (("preparing", "preparing the summary…"), ("ready", "summary ready")):
        text = "".join(f[1] for f in render.toolbar({**parts, "prepared": phase}))
        assert shown in text
    assert "summary" not in "".join(f[1] for f in render.toolbar({**parts, "prepared": ""}))


def test_leaving_stops_a_summary_being_prepared_before_its_own(store: Store) -> None:
    session, _host, backend = _session(store)
    _until_preparing(session)
    assert backend.summary_asked.wait(30)
    closing = threading.Thread(target=session.close)  # summaries: wait (the tests' setting)
    closing.start()
    assert backend.gave_up.wait(30)  # given up before the close's own summary was asked
    backend.release.set()
    closing.join(60)
    assert not closing.is_alive()
    prepared, closed = backend.summaries_from  # the close's own came after, in its thread
    assert prepared == "chatloop-prepare" and closed == closing.name


def test_a_prepared_summary_that_timed_out_is_asked_again_once() -> None:
    """The summary's own timeout is not the person overtaking it: one retry, as for any
    summary; only the caller's cancel gives it up at once."""
    from chatloop.chat import chain
    from tests.conftest import exchange

    class SlowFirst(FakeBackend):
        def stream(self, messages, *, tools=None, options=None, cancel=None):  # type: ignore[no-untyped-def]
            self.delay = 0.05 if not self.calls else 0.0  # the first answer is too slow
            return super().stream(messages, tools=tools, options=options, cancel=cancel)

    talk = [m for i in (1, 2) for m in exchange(i)]
    retried = SlowFirst("word " * 40, STRUCTURED)
    made = chain.summarize(retried, talk, previous=None, window=4096, timeout=0.5, cancel=Cancel())
    assert len(retried.calls) == 2 and not made.fallback
    assert ledger.split(made.text)[0] == STRUCTURED


def test_a_prepared_summary_keeps_the_next_turns_beginning_for_the_server(
    store: Store,
) -> None:
    """On a one-slot server a summary request pushes the chat out of the prompt cache:
    a summary made ahead is asked as the conversation's next message when it fits (the
    chat as the last turn sent it, then the summary's instructions), else the chat's
    beginning is asked for once more after it (one token). Either way the request
    made last before the next turn begins as that turn does, message for message."""
    for window in (2048, 8192):
        session, host, backend = _session(store, window)
        sent = _until_preparing(session, 4 * window // WINDOW)
        assert backend.summary_asked.wait(30)
        backend.release.set()
        assert host.refreshed.wait(30)  # it ended (the toolbar is told)
        assert session.describe().prepared == "ready"
        asked = len(backend.calls)
        session.send(f"last note: {NOTE}")
        before, turn = backend.calls[asked - 1]["messages"], backend.calls[asked]["messages"]
        summary = next(
            c["messages"]
            for c in backend.calls
            if "progressive summary" in str(c["messages"][-1]["content"])
        )
        in_chat = str(summary[-1]["content"]).startswith("Pause our conversation here")
        kept = before[:-1] if in_chat else before
        assert kept[0]["role"] == "system" and len(kept) >= 2 * sent
        assert turn[: len(kept)] == kept, window  # the same beginning, message for message
        assert in_chat == (window == 8192)  # (at 2,048 the request and a summary do not fit)
        if not in_chat:
            assert backend.calls[asked - 1]["options"]["max_tokens"] == 1
        session.close()


def test_the_preparer_keeps_the_summary_made_and_gives_up_one_under_way() -> None:
    """The preparer alone, without a session: what it prepares, what it keeps."""
    from chatloop.chat.chain import SummaryOutcome
    from chatloop.chat.preparation import Preparer
    from chatloop.format import Message
    from tests.conftest import T0

    said = (Message.create("user", T0, text="basil"), Message.create("assistant", T0, text="ok"))
    ended = threading.Event()
    preparer = Preparer()
    preparer.start(said, lambda cancel: SummaryOutcome(STRUCTURED, False, 1), 0.0, ended.set)
    assert ended.wait(5)
    assert preparer.covers(said) and preparer.phase(said, 8) == "ready"
    made = preparer.ready()
    assert made is not None and made.outcome.text == STRUCTURED
    more = (*said, Message.create("user", T0, text="and mint"))
    assert preparer.phase(more, 0) == "" and preparer.phase(None, 8) == ""

    def stuck(cancel: Cancel) -> SummaryOutcome:
        cancel_seen.wait(5)
        return SummaryOutcome("late", False, 1)

    cancel_seen = threading.Event()
    preparer.start(more, stuck, 60.0, lambda: None)  # waits for the person's pause
    assert preparer.phase(more, 8) == "preparing" and preparer.covers(more)
    preparer.overtake()  # the person goes first
    cancel_seen.set()
    assert not preparer.covers(more) and preparer.ready() == made  # the one made stays
    preparer.forget()
    assert preparer.ready() is None
