"""The revision of a deferred compaction's restoration on its own, without a session
(``chat.revision``): the parent's model summary, once its worker let go, makes a new
restoration prompt; a summary still being written is asked again later; one the worker
built from the transcript, or a parent that cannot be read, changes nothing."""

from __future__ import annotations

import os

from chatloop.chat import chain
from chatloop.chat.agent import load_agent
from chatloop.chat.lifecycle import Lifecycle
from chatloop.chat.meter import Meter
from chatloop.chat.revision import Reviser, applied
from chatloop.format import Message
from chatloop.store.fsio import mark_summary, take_lock
from chatloop.store.store import Store
from chatloop.store.writer import SessionWriter
from tests.conftest import T0, Clock, exchange, new_meta
from tests.fakes import STRUCTURED, FakeBackend
from tests.hosts import AGENTS, TEST_SETTINGS

MODELS = "Water every 2 days"  # a line only the model's summary has


def meter() -> Meter:
    agent = load_agent(AGENTS / "simple_sally.py")
    return Meter.of(FakeBackend(window=32_000), agent, TEST_SETTINGS)


def parent(store: Store, fallback: bool = False) -> chain.Parent:
    """A closed session of two exchanges whose summary is the model's (or, with
    ``fallback``, one built from its transcript)."""
    with store.create(new_meta()) as writer:
        for n in range(2):
            for message in exchange(n):
                writer.append(message)
        text = f"{STRUCTURED}\n{MODELS}"
        writer.finalize(Message.create("summary", T0, text=text, fallback=fallback))
        return chain.closed_parent(writer)


def child(store: Store, copies: int = 0) -> SessionWriter:
    """An open child holding its restoration prompt and ``copies`` carried messages."""
    writer = store.create(new_meta(id=""))
    writer.append(Message.create("user", T0, text="We are continuing", restore=True))
    for message in exchange(9)[:copies]:
        writer.append(message._replace(restore=True, copy=True))
    return writer


def test_nothing_awaited_is_nothing_due(store: Store) -> None:
    with child(store) as writer:
        assert Reviser().due(store, writer, (), meter(), Clock()) is None


def test_the_model_summary_makes_the_restoration_that_takes_the_first_ones_place(
    store: Store,
) -> None:
    made = parent(store)
    reviser = Reviser()
    reviser.expect(made.path, unanswered="Is it dry?")
    with child(store, copies=2) as writer:
        revision = reviser.due(store, writer, ("the shed is blue",), meter(), Clock())
    assert revision is not None and reviser.awaited is None  # asked once
    message = revision.message
    assert message.role == "user" and message.restore and not message.copy
    assert MODELS in message.text and MODELS in revision.summary
    assert "the shed is blue" in message.text and "Is it dry?" in message.text
    text, tone = revision.note
    assert made.meta.id in text and tone == "restored"


def test_a_summary_still_being_written_is_asked_again_later(store: Store) -> None:
    made = parent(store)
    reviser = Reviser()
    reviser.expect(made.path)
    fd = take_lock(made.path)  # a worker's hold on the parent, as it marks it
    try:
        mark_summary(fd, os.getpid())
        with child(store) as writer:
            assert reviser.due(store, writer, (), meter(), Clock()) is None
        assert reviser.awaited is not None  # still awaited
    finally:
        os.close(fd)
    with child(store) as writer:
        assert reviser.due(store, writer, (), meter(), Clock()) is not None


def test_a_summary_from_the_transcript_or_an_unreadable_parent_changes_nothing(
    store: Store,
) -> None:
    reviser = Reviser()
    reviser.expect(parent(store, fallback=True).path)
    with child(store) as writer:
        assert reviser.due(store, writer, (), meter(), Clock()) is None
        assert reviser.awaited is None  # given up on: never asked again
        reviser.expect(store.root / "gone.md")
        assert reviser.due(store, writer, (), meter(), Clock()) is None
        assert reviser.awaited is None


def test_a_revision_applied_is_written_and_continued_from(store: Store) -> None:
    made = parent(store)
    reviser, lifecycle = Reviser(), Lifecycle()
    reviser.expect(made.path)
    with child(store) as writer:
        lifecycle.open(writer, previous="the transcript's summary")
        before = len(writer.messages)
        due = reviser.due(store, writer, (), meter(), Clock())
        notes = applied(due, writer, lifecycle)
        assert len(notes) == 1 and notes[0][1] == "restored"
        assert len(writer.messages) == before + 1 and MODELS in writer.messages[-1].text
        assert lifecycle.previous is not None and MODELS in lifecycle.previous
        assert not lifecycle.queued
        assert applied(reviser.due(store, writer, (), meter(), Clock()), writer, lifecycle) == ()
