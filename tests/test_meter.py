"""The meter (``chat.meter``) on its own, without a session: the window asked once and
corrected by the server, replies capped to the window, plans with the agent's system
prompt, counts learnt from replies, and what a switch of agent keeps."""

from __future__ import annotations

from datetime import UTC, datetime

from chatloop.chat.agent import Agent, load_agent
from chatloop.chat.context import ack_cap, reply_cap, summary_cap
from chatloop.chat.meter import Meter
from chatloop.format import Message
from chatloop.format.values import Usage
from tests.fakes import FakeBackend
from tests.hosts import AGENTS, TEST_SETTINGS

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


class Counted(FakeBackend):
    """A fake whose tokenizer answers (a token a word) and that counts the questions
    about its window."""

    def __init__(self, window: int | None) -> None:
        super().__init__(window=window)
        self.asked = 0

    def context_window(self) -> int | None:
        self.asked += 1
        return self.window

    def count_tokens(self, text: str) -> int | None:
        return len(text.split())


def sally() -> Agent:
    return load_agent(AGENTS / "simple_sally.py")


def test_the_window_is_the_settings_else_the_servers_asked_once_and_told() -> None:
    backend = Counted(4096)
    meter = Meter.of(backend, sally(), TEST_SETTINGS)
    assert meter.window() == 4096 and meter.window() == 4096 and backend.asked == 1
    meter.told(2048)  # the server said it overflowed at its real window
    assert meter.window() == 2048
    configured = Meter.of(Counted(4096), sally(), TEST_SETTINGS._replace(context_window=1000))
    assert configured.window() == 1000
    assert Meter.of(Counted(None), sally(), TEST_SETTINGS).window() is None


def test_replies_and_acknowledgments_are_capped_to_the_window() -> None:
    agent = sally()
    meter = Meter.of(Counted(2048), agent, TEST_SETTINGS)
    own = int(agent.options.get("max_tokens") or 0)
    cap = reply_cap(2048, TEST_SETTINGS.max_tokens, own)
    assert meter.reply_options() == {"max_tokens": cap}
    assert meter.ack_cap() == ack_cap(2048, cap)
    assert meter.summary_cap() == summary_cap(2048, TEST_SETTINGS.summary_max_tokens)
    sizes = meter.sizes()
    assert sizes.window == 2048 and sizes.ack_cap == meter.ack_cap()
    assert sizes.count("three words here") == 3  # the server's count


def test_a_plan_sends_the_system_prompt_the_prefix_then_the_messages() -> None:
    agent = sally()
    meter = Meter.of(Counted(4096), agent, TEST_SETTINGS)
    earlier = Message.create("user", NOW, text="an earlier question")
    now = Message.create("user", NOW, text="the question")
    planned = meter.plan([now], prefix=[earlier])
    contents = [item.get("content") for item in planned.wire]
    assert contents == [agent.system_prompt, "an earlier question", "the question"]
    assert planned.fits and planned.exact  # counted by the server's tokenizer
    assert meter.wire([now]) == meter.plan([now]).wire


def test_a_replys_reported_length_is_its_count_and_an_agent_switch_keeps_it() -> None:
    backend = Counted(4096)
    meter = Meter.of(backend, sally(), TEST_SETTINGS)
    question = Message.create("user", NOW, text="how much sun do tomatoes need")
    meter.wire([question])
    reply = Message.create("assistant", NOW, text="Six hours a day.", usage=Usage(40, 11))
    meter.learn(reply)
    assert meter.tokens.text("Six hours a day.") == 11  # as reported, not asked
    other = meter.for_agent(sally())
    assert other.tokens is meter.tokens and other.window() == 4096 and backend.asked == 1
    assert Meter.of(backend, sally(), TEST_SETTINGS).tokens.text("Six hours a day.") == 4


def test_a_child_carries_the_last_exchanges_that_fit_after_its_opening() -> None:
    meter = Meter.of(Counted(4096), sally(), TEST_SETTINGS)
    exchanges = [
        [
            Message.create("user", NOW, text=f"question {n} " + "word " * 100),
            Message.create("assistant", NOW, text=f"answer {n} " + "word " * 100),
        ]
        for n in range(4)
    ]
    opening = meter.opening("a restoration prompt of a few words", NOW)
    assert opening > meter.ack_cap()
    carried = meter.carry(exchanges, opening)
    assert carried and len(carried) % 2 == 0 and len(carried) < 8
    assert carried[-1].text.startswith("answer 3")  # the last exchanges, word for word
    assert all(m.copy and m.restore for m in carried)
    assert meter.carry(exchanges, 4096) == ()  # an opening that takes all leaves no room
