"""A child's beginning on its own, without a session (``chat.beginning``): written with
what was typed for it, made over when its first message needs the room, removed again
when nothing can give way, its acknowledgment asked and kept, its beginning read
ahead only where a server caches it."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from chatloop.backends.base import Cancel, Event, TextDelta
from chatloop.chat import beginning, builders, chain
from chatloop.chat.agent import load_agent
from chatloop.chat.lifecycle import Lifecycle
from chatloop.chat.meter import Meter
from chatloop.chat.state import FromSummary, Open, Waiting, WithHistory
from chatloop.errors import BackendError, ChatloopError
from chatloop.format import Message
from chatloop.store.store import Store
from tests.conftest import T0, Clock, exchange, new_meta
from tests.fakes import STRUCTURED, Capped, FakeBackend
from tests.hosts import AGENTS, TEST_SETTINGS

TERMS = beginning.Terms(("the shed is blue",), "fake-model", "", acknowledged=True)


def meter(window: int = 32_000) -> Meter:
    agent = load_agent(AGENTS / "simple_sally.py")
    return Meter.of(FakeBackend(window=window), agent, TEST_SETTINGS)


def closed(store: Store, pins: tuple[str, ...] = ()) -> chain.Parent:
    """A closed session of three exchanges with the model's summary."""
    with store.create(new_meta(pins=pins)) as writer:
        for n in range(3):
            for message in exchange(n):
                writer.append(message)
        writer.finalize(Message.create("summary", T0, text=STRUCTURED))
        return chain.closed_parent(writer)


def waiting(parent: chain.Parent, copies: int = 0, window: int = 32_000) -> FromSummary:
    carried = tuple(m._replace(restore=True, copy=True) for n in range(copies) for m in exchange(n))
    sizes = meter(window).sizes()
    return builders.from_summary(parent, STRUCTURED, new_meta(), (), sizes, T0, None, carried)


@dataclass
class View:
    text: list[str] = field(default_factory=list)
    closed: list[tuple[bool, bool]] = field(default_factory=list)

    def on_event(self, event: Event) -> None:
        if isinstance(event, TextDelta):
            self.text.append(event.text)

    def tool_results(self, message: Message) -> None:
        raise AssertionError("an acknowledgment runs no tools")

    def close(self, interrupted: bool, saved: bool) -> None:
        self.closed.append((interrupted, saved))


def test_a_child_is_written_with_what_was_typed_for_it_and_opened(store: Store) -> None:
    parent = closed(store)
    lifecycle = Lifecycle()
    typed = Message.create("user", T0, text="And the mint?")
    lifecycle.hold(typed)
    continuation = waiting(parent, copies=1)
    with_it, notes = beginning.written(continuation, TERMS, store, lifecycle, Clock())
    with with_it as writer:
        assert lifecycle.queued == ()  # written with the child, in one write
        state = lifecycle.state
        assert isinstance(state, Open) and state.writer is writer
        assert state.previous == STRUCTURED and state.chain_base > 0
        assert writer.path.parent == parent.path.parent  # the parent's project
        roles = [(m.role, m.restore, m.copy) for m in writer.messages]
        assert roles[:2] == [("user", True, False), ("assistant", True, False)]  # + ack
        assert writer.messages[-1].text == "And the mint?"
        assert writer.meta.parent_id == parent.meta.id
        assert writer.meta.pins == TERMS.pins and writer.meta.model == "fake-model"
    assert notes[0][1] == "restored" and parent.meta.id in notes[0][0]


def test_a_first_message_needing_the_room_leaves_out_copies_then_nothing_gives_way(
    store: Store,
) -> None:
    parent = closed(store)
    typed = [Message.create("user", T0, text="a long question " * 120)]
    begins = waiting(parent, copies=3, window=2_000)
    made, notes = beginning.otherwise(begins, typed, (), meter(2_000), lambda *_: _no(), Clock())
    assert isinstance(made, FromSummary) and len(made.carried) < len(begins.carried)
    assert notes[0][1] == "warn"
    with pytest.raises(ChatloopError, match="do not fit the context window together"):
        beginning.otherwise(waiting(parent), typed, (), meter(), lambda *_: _no(), Clock())


def test_a_full_history_that_no_longer_fits_goes_on_from_the_summary_with_the_chains_pins(
    store: Store,
) -> None:
    parent = closed(store, pins=("the gate squeaks",))
    full = builders.with_history(parent, exchange(0), new_meta(), ("the gate squeaks",))
    assert isinstance(full, WithHistory)
    made, notes = beginning.otherwise(full, [], ("mine",), meter(), lambda *_: _no(), Clock())
    assert isinstance(made, FromSummary) and made.template.pins == ("the gate squeaks", "mine")
    assert "continuing from the summary" in notes[0][0]


def test_a_child_whose_first_message_is_refused_is_removed_and_waits_again(
    store: Store,
) -> None:
    parent = closed(store)
    lifecycle = Lifecycle()
    for text in ("first", "refused"):
        lifecycle.hold(Message.create("user", T0, text=text))
    continuation = waiting(parent)
    writer, _ = beginning.written(continuation, TERMS, store, lifecycle, Clock())
    path = writer.path
    beginning.unbegun(continuation, writer, 2, store, lifecycle)
    assert not path.exists()  # a continuation left unused leaves no file
    assert [m.text for m in lifecycle.queued] == ["first"]  # the refused one is Up's
    assert lifecycle.state == Waiting(continuation)


def test_an_acknowledgment_cut_by_its_cap_ends_at_a_whole_sentence_and_goes_before_the_copies(
    store: Store,
) -> None:
    parent = closed(store)
    backend = FakeBackend(Capped("I have the summary. We were watering the"))
    view = View()
    ack, notes = beginning.acknowledged(
        backend,
        meter(),
        view,
        wire=lambda: [{"role": "user", "content": "We are continuing"}],
        options=lambda: {"max_tokens": 20},
        now=Clock(),
        answers=False,
    )
    assert ack is not None and notes == ()
    assert ack.text == "I have the summary." and ack.restore and ack.role == "assistant"
    assert backend.calls[0]["options"] == {"max_tokens": 20} and view.closed == [(False, False)]
    lifecycle = Lifecycle()
    lifecycle.hold(Message.create("user", T0, text="typed"))
    with beginning.written(waiting(parent, copies=1), TERMS, store, lifecycle, Clock())[0] as w:
        assert beginning.kept(w, ack, 3, lifecycle) == ()  # before the 2 copies and "typed"
        assert w.messages[-4].text == "I have the summary."


def test_an_acknowledgment_the_server_fails_is_skipped_and_said() -> None:
    backend = FakeBackend(BackendError("the server is gone", ""))
    ack, notes = beginning.acknowledged(
        backend,
        meter(),
        View(),
        wire=lambda: [],
        options=lambda: {},
        now=Clock(),
        answers=True,
    )
    assert ack is None and notes == (
        ("No acknowledgment (the server is gone); the summary is in place.", "warn"),
    )


def test_a_beginning_is_read_ahead_only_into_a_caching_server_with_a_written_ack(
    store: Store,
) -> None:
    continuation = waiting(closed(store))
    fake = FakeBackend()
    assert beginning.warming(continuation, "written", fake, meter(), Clock()) is None
    fake.kind = "openai"  # (a server over HTTP, as far as the rule is concerned)
    assert beginning.warming(continuation, "model", fake, meter(), Clock()) is None
    read = beginning.warming(continuation, "written", fake, meter(), Clock())
    assert read is not None
    read(Cancel())
    sent = fake.calls[0]["messages"]
    assert sent[-1]["role"] == "assistant" and "Understood" in sent[-1]["content"]
    assert fake.calls[0]["options"] == {"max_tokens": 1}


def _no() -> chain.SummaryOutcome:
    raise AssertionError("nothing here is summarized")


def test_a_waiting_childs_restoration_is_built_again_with_what_changed(store: Store) -> None:
    before = waiting(closed(store), copies=1)
    after = beginning.restated(before, ("the gate squeaks",), meter())
    assert "the gate squeaks" not in before.preview.text
    assert "the gate squeaks" in after.preview.text
    assert after.carried == before.carried and after.preview.key == before.preview.key


def test_a_new_sessions_front_matter_names_who_answers_and_completes_a_file(
    store: Store, tmp_path: Path
) -> None:
    (tmp_path / "repo" / ".git").mkdir(parents=True)
    (tmp_path / "repo" / ".git" / "HEAD").write_text("ref: refs/heads/garden\n")
    (tmp_path / "repo" / "src").mkdir()
    assert beginning.git_branch(tmp_path / "repo" / "src") == "garden"
    assert beginning.git_branch(tmp_path / "nowhere") is None
    agent = load_agent(AGENTS / "simple_sally.py")
    made = beginning.new_meta(agent, FakeBackend(), tmp_path / "repo", "Basil", ("a pin",), T0)
    assert (made.agent, made.agent_name, made.model) == (agent.name, "simple_sally", "fake-model")
    assert (made.git_branch, made.title, made.pins, made.created) == (
        "garden",
        "Basil",
        ("a pin",),
        T0,
    )
    with store.create(new_meta(agent="", agent_name="", model="")) as writer:
        assert beginning.completed(writer, made) == ()
        assert (writer.meta.agent, writer.meta.model) == (agent.name, "fake-model")
        assert writer.meta.pins == ("a pin",) and writer.meta.title == "Basil"


def test_a_waiting_continuation_condensed_by_compact(store: Store) -> None:
    parent = closed(store, pins=("the shed is blue",))
    summarized = waiting(parent)
    with pytest.raises(ChatloopError, match="already continues from its summary"):
        beginning.condensed(summarized, (), meter(), _no, Clock())  # type: ignore[arg-type]
    full = builders.with_history(parent, list(exchange(0)), new_meta(), ("mine",))
    made, notes = beginning.condensed(full, ("mine",), meter(), _no, Clock())  # type: ignore[arg-type]
    assert isinstance(made, FromSummary) and made.parent is parent
    assert made.template.pins == ("the shed is blue", "mine")
    assert notes == (("Continuing from the summary instead of the full history.", "ok"),)


def test_a_child_awaiting_its_first_message_says_so() -> None:
    text, tone = beginning.awaited(chain.Parent(Path("p.md"), new_meta(id="X", queries=3), None))
    assert text.startswith("Continuing session X (3 ") and tone == "restored"
    assert text.endswith("the new session begins with your next message.")


def test_an_acknowledgment_is_asked_without_what_follows_the_restoration(store: Store) -> None:
    backend = FakeBackend("I have the summary.")
    lifecycle = Lifecycle()
    lifecycle.hold(Message.create("user", T0, text="typed"))
    continuation = waiting(closed(store), copies=1)
    unacknowledged = replace(TERMS, acknowledged=False)  # (the model's acknowledgment)
    with beginning.written(continuation, unacknowledged, store, lifecycle, Clock())[0] as w:
        ack, notes = beginning.acknowledgment(
            w, backend, meter(), {"temperature": 0.1}, (), View(), Clock(), after=3
        )
        assert ack is not None and ack.text.strip() == "I have the summary." and notes == ()
        sent = backend.calls[0]["messages"]
        assert len(sent) == 2 and sent[-1]["role"] == "user"  # the system prompt, the restoration
        assert all(m["content"] != "typed" for m in sent)
        asked = backend.calls[0]["options"]
        assert asked["temperature"] == 0.1 and asked["max_tokens"] == meter().ack_cap()
        answering = FakeBackend("Here is your answer.")
        beginning.acknowledgment(
            w, answering, meter(), {}, (), View(), Clock(), answers="typed", after=3
        )
        assert answering.calls[0]["messages"] == sent  # it answers what the restoration carries
        assert answering.calls[0]["options"]["max_tokens"] == meter().reply_options()["max_tokens"]
