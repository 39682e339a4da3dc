"""A compaction's decisions on their own, without a session (``chat.compaction``):
what a child carries, what it gives up for a first message, how a summary made
ahead keeps the next turn's beginning, and a deferral a worker cannot take."""

from __future__ import annotations

from datetime import datetime
from itertools import count
from pathlib import Path

from chatloop.backends.base import Cancel
from chatloop.chat import builders, chain, compaction
from chatloop.chat.agent import load_agent
from chatloop.chat.meter import Meter
from chatloop.chat.preparation import Prepared
from chatloop.format import Message
from chatloop.store.store import Store
from tests.conftest import T0, Clock, exchange, new_meta
from tests.fakes import STRUCTURED, FakeBackend
from tests.hosts import AGENTS, TEST_SETTINGS


def meter(window: int) -> Meter:
    agent = load_agent(AGENTS / "simple_sally.py")
    return Meter.of(FakeBackend(window=window), agent, TEST_SETTINGS)


def said(queries: int) -> list[Message]:
    return [m for n in range(queries) for m in exchange(n)]


def test_a_child_carries_the_last_exchanges_that_fit_beside_its_restoration(
    store: Store,
) -> None:
    with store.create(new_meta()) as writer:
        for message in said(4):
            writer.append(message)
        roomy = compaction.carried(writer, None, (), meter(32_000), T0)
        narrow = compaction.carried(writer, None, (), meter(1_200), T0)
    assert roomy and len(narrow) < len(roomy)
    assert roomy[-1].text == said(4)[-1].text  # the last exchange, word for word


def test_a_first_message_that_needs_the_room_leaves_out_the_oldest_copies() -> None:
    parent = chain.Parent(Path("/sessions/projects/garden/p1.md"), new_meta(id="p1"), STRUCTURED)
    copies = tuple(m._replace(restore=True, copy=True) for m in said(3))
    sizes = meter(2_000).sizes()
    waiting = builders.from_summary(parent, STRUCTURED, new_meta(), (), sizes, T0, None, copies)
    typed = [Message.create("user", T0, text="a long question " * 120)]
    clock = Clock()
    made, (text, tone) = compaction.carry_less(waiting, typed, (), meter(2_000), clock)
    assert len(made.carried) < len(copies) and tone == "warn"
    assert made.carried == copies[len(copies) - len(made.carried) :]  # the oldest went
    assert f"left out (they stay in {parent.meta.id})" in text
    assert made.preview.text != waiting.preview.text  # built again for what it carries


def test_a_summary_made_ahead_is_asked_in_the_chat_only_when_it_fits() -> None:
    ticks = count()

    def now() -> datetime:  # (the clock is asked only when a request is planned)
        next(ticks)
        return T0

    messages = said(2)
    assert compaction.next_turn_kept(messages, None, 200, meter(32_000), now, plain=False) == (
        None,
        None,
    )
    assert next(ticks) == 0
    chat, beginning = compaction.next_turn_kept(messages, None, 200, meter(32_000), now, plain=True)
    assert chat is not None and beginning is None
    chat, beginning = compaction.next_turn_kept(messages, None, 200, meter(500), now, plain=True)
    assert chat is None and beginning is not None


def test_a_deferral_no_worker_can_take_does_nothing(store: Store) -> None:
    with store.create(new_meta()) as writer:
        for message in said(2):
            writer.append(message)
        handed = compaction.deferred(
            writer,
            store,
            FakeBackend(),  # (a fake: no worker can build it)
            TEST_SETTINGS,
            previous=None,
            late={},
            leave=2,
            summary_words=200,
            home=store.root,
        )
        assert handed is None and writer.meta.status != "closed"


def test_a_summary_prepared_ahead_is_used_only_while_it_covers_the_files_beginning(
    store: Store,
) -> None:
    outcome = chain.SummaryOutcome(STRUCTURED, fallback=False, calls=1)
    with store.create(new_meta()) as writer:
        for message in said(2):
            writer.append(message)
        covering = Prepared(tuple(writer.messages), outcome)
        whole = compaction.from_prepared(covering, writer, None, (), meter(32_000), Clock())
        assert whole is not None and whole.leave == 0  # it covers all: the end carried too
        assert whole.carried == compaction.carried(writer, None, (), meter(32_000), T0)
        for message in exchange(2):
            writer.append(message)
        used = compaction.from_prepared(covering, writer, None, (), meter(32_000), Clock())
        assert used is not None and used.outcome is outcome
        assert used.leave == len(exchange(2))
        assert [m.text for m in used.carried] == [m.text for m in writer.messages[-2:]]
        assert all(m.copy for m in used.carried)
        assert used.note == ("Using the summary prepared while you read.", "info")
        stale = Prepared((exchange(7)[0], *writer.messages[1:4]), outcome)  # (a hand edit)
        assert compaction.from_prepared(stale, writer, None, (), meter(32_000), Clock()) is None


def test_a_summary_is_prepared_ahead_only_when_one_more_exchange_passes_the_threshold() -> None:
    on = TEST_SETTINGS._replace(prepare_compaction="on", compact_threshold=0.8)
    messages = said(2)
    counted, fake = meter(32_000), FakeBackend(window=32_000)
    step = max(counted.plan(e).messages_tokens for e in (messages[:2], messages[2:]))
    near = 8_000 - step  # one more exchange as large as the largest reaches 80%
    assert compaction.prepare_due(messages, near, 10_000, on, fake, counted)
    assert not compaction.prepare_due(messages, near - 1, 10_000, on, fake, counted)
    assert not compaction.prepare_due(messages, 3_000, 10_000, on, fake, counted)  # far
    assert not compaction.prepare_due(messages, near, 10_000, TEST_SETTINGS, fake, counted)
    compacting_off = on._replace(auto_compact="off")
    assert not compaction.prepare_due(messages, near, 10_000, compacting_off, fake, counted)
    fake.kind = "embedded"  # (one model in this process: never a second request)
    assert not compaction.prepare_due(messages, near, 10_000, on, fake, counted)


def test_a_summary_made_ahead_is_the_models_summary_of_the_file(store: Store) -> None:
    backend = FakeBackend(STRUCTURED, window=32_000)
    make = compaction.ahead(
        tuple(said(2)), 32_000, TEST_SETTINGS, backend, meter(32_000), None, Clock(), plain=True
    )
    assert backend.calls == []  # nothing asked until it is made
    made = make(Cancel())
    assert not made.fallback and "Water every 2 days" in made.text
    asked = backend.calls[0]["messages"]
    assert "Question number 1" in str(asked)  # the file's messages, in the chat


def test_what_a_compactions_summary_covers_and_what_its_child_carries(store: Store) -> None:
    outcome = chain.SummaryOutcome(STRUCTURED, fallback=False, calls=1)
    roomy = meter(32_000)
    with store.create(new_meta()) as writer:
        for message in said(3):
            writer.append(message)
        made_now = compaction.covered(writer, None, None, (), roomy, Clock(), answers=False)
        assert made_now.outcome is None and made_now.notes == ()
        assert made_now.carried and made_now.leave == len(made_now.carried)
        assert made_now.carried == compaction.carried(writer, None, (), roomy, T0)
        answering = compaction.covered(writer, None, None, (), roomy, Clock(), answers=True)
        assert (answering.outcome, answering.carried, answering.leave) == (None, (), 0)
        prepared = Prepared(tuple(writer.messages), outcome)
        used = compaction.covered(writer, prepared, None, (), roomy, Clock(), answers=False)
        assert used.outcome is outcome and used.leave == 0
        assert used.notes == (("Using the summary prepared while you read.", "info"),)


def test_a_compaction_defers_its_summary_only_to_a_worker_that_may_take_it() -> None:
    background = TEST_SETTINGS._replace(summaries="background")
    assert compaction.defers(background, FakeBackend())
    assert not compaction.defers(TEST_SETTINGS, FakeBackend())  # summaries: wait
    embedded = FakeBackend()
    embedded.kind = "embedded"  # (one model in this process: a worker would load a second)
    assert not compaction.defers(background, embedded)
