"""The decisions of a resume on their own, without a session (``chat.resumption``): a
parent given its summary (written, waited for, or built from the transcript), its
full history when it fits, what a child carries, and the notes each returns."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from chatloop.chat import chain, continuation, resumption
from chatloop.chat.agent import load_agent
from chatloop.chat.host import Picked
from chatloop.chat.meter import Meter
from chatloop.errors import ChatloopError, StoreError
from chatloop.format import Message
from chatloop.store.store import Store
from tests.conftest import T0, exchange, new_meta
from tests.fakes import STRUCTURED, FakeBackend
from tests.hosts import AGENTS, TEST_SETTINGS


def meter(window: int) -> Meter:
    return Meter.of(
        FakeBackend(window=window), load_agent(AGENTS / "simple_sally.py"), TEST_SETTINGS
    )


def written(store: Store, queries: int = 2, closed: bool = True) -> chain.Parent:
    """A session of ``queries`` exchanges, closed with a summary (or left open)."""
    with store.create(new_meta()) as writer:
        for n in range(queries):
            for message in exchange(n):
                writer.append(message)
        if closed:
            writer.finalize(Message.create("summary", T0, text=STRUCTURED))
            return chain.closed_parent(writer)
        return chain.Parent(writer.path, writer.meta, None)


class Summaries:
    """A ``Summarize`` that answers ``STRUCTURED`` and remembers what it was given."""

    def __init__(self) -> None:
        self.given: list[list[Message]] = []

    def __call__(self, messages: list[Message], previous: str | None) -> chain.SummaryOutcome:
        self.given.append(messages)
        return chain.SummaryOutcome(STRUCTURED, fallback=False, calls=1)


def never_waited(parent: chain.Parent) -> bool | None:
    raise AssertionError("nobody holds this parent: nothing to wait for")


def test_a_parent_without_a_summary_gets_one_written_into_its_file(store: Store) -> None:
    parent = written(store, closed=False)
    summaries = Summaries()
    readied = resumption.summarized(
        store,
        parent,
        summarize=summaries,
        wait=never_waited,
        summary_words=200,
        summary_wait=1.0,
        now=lambda: T0,
    )
    assert readied.parent.summary == STRUCTURED
    assert readied.notes == ((f"Wrote the missing summary into {parent.path.name}.", "info"),)
    assert len(summaries.given) == 1 and summaries.given[0][0].text.startswith("Question")
    again = chain.read_parent(store, parent.path)  # in the file: trusted on the next resume
    assert again.summary == STRUCTURED and again.meta.status == "closed"


def test_a_summary_still_being_written_past_the_wait_is_built_from_the_transcript(
    store: Store,
) -> None:
    parent = written(store, closed=False)
    readied = resumption.unwaited(store, parent, summary_words=200, waited=2.5)
    assert readied.parent.summary  # built without the model, nothing written
    assert chain.read_parent(store, parent.path).summary is None
    (text, tone), *_ = readied.notes
    assert "after 2.5 s" in text and tone == "warn"
    assert readied.parent.meta.queries == 2  # counted here: the worker writes them at its end


def test_a_settled_parent_says_what_was_wrong_with_it(store: Store) -> None:
    parent = written(store)
    assert resumption.settled(store, parent) == resumption.Readied(parent)
    noted = replace(parent, note="its summary is damaged")
    assert resumption.settled(store, noted).notes == (
        (f"Session {parent.meta.id}: its summary is damaged.", "warn"),
    )


def test_the_full_history_when_it_fits_else_why_not(store: Store) -> None:
    parent = written(store, queries=3)
    history, notes = resumption.full_history(store, parent, meter(32_000))
    assert history is not None and notes == ()
    assert [m.role for m in history if m.role == "summary"] == []
    history, notes = resumption.full_history(store, parent, meter(300))
    assert history is None
    ((text, tone),) = notes
    assert "does not fit the budget" in text and tone == "warn"


def test_a_child_carries_as_many_last_exchanges_as_fit_beside_its_restoration(
    store: Store,
) -> None:
    parent = written(store, queries=4)
    recent = resumption.recent_exchanges(store, parent)
    assert len(recent) == 4 and recent[-1][0].text.startswith("Question number 3")
    roomy = resumption.carried(parent, STRUCTURED, recent, (), meter(32_000), T0)
    narrow = resumption.carried(parent, STRUCTURED, recent, (), meter(1_000), T0)
    assert 0 < len(narrow) < len(roomy) and roomy[-1].text == recent[-1][-1].text
    assert resumption.carried(parent, STRUCTURED, recent, (), meter(600), T0) == ()
    gone = replace(parent, path=parent.path.with_name("gone.md"))
    assert resumption.recent_exchanges(store, gone) == []


def test_a_whole_summary_is_made_of_every_message_said(store: Store) -> None:
    parent = written(store, queries=2)
    summaries = Summaries()
    assert resumption.summarized_whole(store, parent, summaries) == STRUCTURED
    assert all(m.role != "summary" for m in summaries.given[0])
    assert "leaves its last" in resumption.leaves_too_many(parent)
    with pytest.raises(ChatloopError, match="gone or unreadable"):
        resumption.summarized_whole(
            store, replace(parent, path=Path("/nowhere/gone.md")), summaries
        )


def test_where_it_ended_and_a_second_line_are_said_as_values(store: Store) -> None:
    parent = written(store, queries=2)
    last = resumption.recent_exchanges(store, parent)[-1]
    said = resumption.last_exchange(parent, last)
    assert said is not None and said.startswith("Where it ended:\nYou: Question number 1")
    assert "(called read_file)" in said
    assert resumption.last_exchange(parent, []) is None
    row = None  # (the row is not read by the note)
    alone = continuation.Located(row, parent)  # type: ignore[arg-type]
    assert resumption.continued_already(alone) is None
    later = continuation.Located(row, parent, ("c1", "c2"))  # type: ignore[arg-type]
    note = resumption.continued_already(later)
    assert note is not None and "continued already, in c2" in note


def test_a_resume_of_the_file_being_written_or_with_messages_unsaved_is_refused(
    store: Store,
) -> None:
    parent = written(store, closed=False)
    located = continuation.Located(None, parent)  # type: ignore[arg-type]
    resumption.not_own(located, None)  # nothing being written: nothing refused
    with store.create(new_meta()) as other:
        resumption.not_own(located, other)
    with store.open(parent.path) as own, pytest.raises(ChatloopError, match="you are in"):
        resumption.not_own(located, own)
    refused = resumption.not_saved(2, StoreError("No space left on device", ""))
    assert refused.message.startswith("Not resumed: 2 message(s) of this session")
    assert "No space left on device" in refused.message and "leaving shows" in refused.hint


def test_a_parent_readied_with_its_full_history_when_asked_and_it_fits(store: Store) -> None:
    parent = written(store, queries=3)
    located = continuation.Located(None, parent)  # type: ignore[arg-type]
    plain = resumption.readied(store, located, meter(32_000), full=False)
    assert plain == resumption.Readied(parent)
    full = resumption.readied(store, located, meter(32_000), full=True)
    assert full.history is not None
    assert len(full.history) == sum(len(exchange(n)) for n in range(3))
    narrow = resumption.readied(store, located, meter(300), full=True)
    assert narrow.history is None and "does not fit the budget" in narrow.notes[0][0]
    text, tone = resumption.with_full_history(parent, full.history)
    assert f"({len(full.history)} messages)" in text and tone == "restored"


def test_what_is_said_as_a_parent_is_continued(store: Store) -> None:
    parent = written(store, queries=2)
    recent = resumption.recent_exchanges(store, parent)
    ((where, tone),) = resumption.arrival(parent, recent)
    assert where.startswith("Where it ended:") and tone == "info"
    later = continuation.Located(None, parent, ("c1",))  # type: ignore[arg-type]
    notes = resumption.arrival(parent, recent, later)
    assert notes[0] == (where, "info") and notes[1][1] == "warn" and "in c1" in notes[1][0]
    assert resumption.arrival(parent, []) == ()


def test_resume_locates_a_session_by_its_number_or_the_persons_pick(store: Store) -> None:
    parent = written(store)
    kind = continuation.Kind.of(False, False)
    found = resumption.located(store, "1", kind, lambda rows, lookup: None)
    assert found is not None and found[0].path == parent.path and found[1] is kind
    assert resumption.located(store, "", kind, lambda rows, lookup: None) is None  # none picked
    forked = resumption.located(store, "", kind, lambda rows, lookup: Picked(rows[0], True))
    assert forked is not None and forked[1] is continuation.Kind.FORK
