"""The turn path's decisions on their own, without a session (``chat.turning``): the
request a person's message goes in, the refusals of a message that cannot be sent and
what it leaves in the file, one answer recorded as it happens, and what a full window
leads to."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from chatloop.backends.base import ContextOverflow, Event, TextDelta
from chatloop.chat import turning
from chatloop.chat.agent import Agent, load_agent
from chatloop.chat.lifecycle import Lifecycle
from chatloop.chat.meter import Meter
from chatloop.chat.turn import TurnResult
from chatloop.errors import BackendError, ChatloopError, StoreError
from chatloop.format import Message
from chatloop.store.store import Store
from tests.conftest import T0, Clock, exchange, new_meta
from tests.fakes import FakeBackend
from tests.hosts import AGENTS, TEST_SETTINGS


def sally() -> Agent:
    return load_agent(AGENTS / "simple_sally.py")


def meter(window: int = 32_000, agent: Agent | None = None) -> Meter:
    return Meter.of(FakeBackend(window=window), agent or sally(), TEST_SETTINGS)


@dataclass
class View:
    text: list[str] = field(default_factory=list)
    tools: list[Message] = field(default_factory=list)
    closed: list[tuple[bool, bool]] = field(default_factory=list)

    def on_event(self, event: Event) -> None:
        if isinstance(event, TextDelta):
            self.text.append(event.text)

    def tool_results(self, message: Message) -> None:
        self.tools.append(message)

    def close(self, interrupted: bool, saved: bool) -> None:
        self.closed.append((interrupted, saved))


def test_a_persons_message_goes_to_the_wire_after_the_prefix_within_the_budget() -> None:
    counted = meter()
    prefix = exchange(0)
    asked = Message.create("user", T0, text="And the mint?")
    wire = turning.wire_messages(asked.text, [*exchange(1), asked], prefix, counted)
    assert wire == counted.plan([*exchange(1), asked], prefix, reuse=True).wire
    assert wire[0]["role"] == "system" and wire[-1]["content"] == "And the mint?"
    assert "Question number 0" in str(wire[1]["content"])  # the --full history first


def test_a_message_that_cannot_be_sent_is_refused_saying_why() -> None:
    small = Message.create("user", T0, text="And the mint?")
    huge = Message.create("user", T0, text="a long question " * 2_000)
    tokens = meter().tokens
    assert turning.refusal(meter().plan([small]), sally(), tokens, "on") is None
    alone = turning.refusal(meter(2_000).plan([huge]), sally(), tokens, "on")
    assert alone is not None and "does not fit the context window" in alone.message
    off = turning.refusal(meter().plan([small]), sally(), tokens, "off")
    assert off is not None and "no longer fits" in off.message and "/compact" in off.hint


def test_a_message_only_the_tools_leave_no_room_for_names_whose_tools(
    store: Store,
) -> None:
    fiona = load_agent(AGENTS / "file_fiona.py")
    assert fiona.tools
    small = Message.create("user", T0, text="And the mint?")
    tools = meter(agent=fiona).plan([small]).budget.tools
    narrow = meter(tools + 60, agent=fiona)
    refused = turning.refusal(narrow.plan([small]), fiona, narrow.tokens, "on")
    assert refused is not None
    assert refused.message.startswith("The tool definitions take about ")
    assert "the agent itself" in refused.message and "fewer tools" in refused.hint


def test_a_message_set_aside_stays_in_the_file_marked_not_sent(store: Store) -> None:
    message = Message.create("user", T0, text="a message that cannot go")
    assert not turning.set_aside(None, message)
    with store.create(new_meta()) as writer:
        writer.append(message)
        assert turning.set_aside(writer, message)
        assert writer.messages[-1].unsent
        kept = turning.kept_unsent(writer, ChatloopError("Too long", "Shorten it."))
        assert kept.message == "Too long"
        assert (
            kept.hint == f"It is kept in session {writer.meta.id}, marked as not sent. Shorten it."
        )


def test_the_queue_is_told_truly() -> None:
    one = turning.queued_error(StoreError("Disk full", ""), 1)
    assert one.message == "Disk full" and one.hint.startswith("1 message kept in memory")
    assert turning.queued_error(StoreError("x", ""), 3).hint.startswith("3 messages kept")


def test_an_answer_is_recorded_as_it_happens_and_asked_through_wire_messages(
    store: Store,
) -> None:
    backend = FakeBackend("The mint wants shade.")
    counted, lifecycle, view = meter(), Lifecycle(), View()
    asked = Message.create("user", T0, text="And the mint?")
    with store.create(new_meta()) as writer:
        writer.append(asked)
        lifecycle.open(writer)
        result, failure = turning.answered(
            asked.text,
            [asked],
            (),
            agent=sally(),
            backend=backend,
            meter=counted,
            lifecycle=lifecycle,
            flush=lambda: lifecycle.write(writer) and None,
            view=view,
            settings=TEST_SETTINGS,
            home=store.root,
            clock=Clock(),
        )
        assert failure is None and result.reply.strip() == "The mint wants shade."
        assert writer.messages[-1].role == "assistant"  # written as it came
        assert lifecycle.queued == ()
    assert backend.calls[0]["messages"] == meter().plan([asked], reuse=True).wire
    assert view.closed == [(False, False)]


def test_an_answer_the_file_refuses_stays_queued_and_is_returned(store: Store) -> None:
    lifecycle = Lifecycle()
    asked = Message.create("user", T0, text="And the mint?")

    def refused() -> None:
        raise StoreError("Disk full", "")

    result, failure = turning.answered(
        asked.text,
        [asked],
        (),
        agent=sally(),
        backend=FakeBackend("Shade."),
        meter=meter(),
        lifecycle=lifecycle,
        flush=refused,
        view=View(),
        settings=TEST_SETTINGS,
        home=store.root,
        clock=Clock(),
    )
    assert failure is not None and failure.message == "Disk full"
    assert [m.role for m in lifecycle.queued] == ["assistant"]  # kept, in order
    assert result.reply.strip() == "Shade."


def test_a_full_window_the_server_tells_leads_to_a_compaction_when_on() -> None:
    counted = meter()
    overflow = ContextOverflow("too long", "", window=4_096)
    note = turning.overflowed(TurnResult(error=overflow), counted, "on")
    assert note is not None and "compacting" in note[0] and counted.window() == 4_096
    with pytest.raises(ContextOverflow):
        turning.overflowed(TurnResult(error=overflow), counted, "off")
    with pytest.raises(BackendError, match="gone"):
        turning.overflowed(TurnResult(error=BackendError("gone", "")), counted, "on")
    assert turning.overflowed(TurnResult(), counted, "on") is None


def test_past_the_threshold_is_said() -> None:
    assert turning.threshold(700, 1_000, 0.8) is None
    assert turning.threshold(850, 1_000, 0.8) == ("Context 85% full (850 of 1,000 tokens).", "warn")
