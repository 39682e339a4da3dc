"""A switch of who answers on its own, without a session (``chat.switching``): the
model checked against the server's list, the meter made anew, the model an agent
names, the agent and the server a resume goes on with, and a waiting continuation
relabelled for another agent."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from chatloop.chat import builders, chain, continuation, recall, switching
from chatloop.chat.agent import load_agent
from chatloop.chat.meter import Meter
from chatloop.errors import ChatloopError
from chatloop.format import Message
from chatloop.store.store import Store
from chatloop.store.writer import SessionWriter
from tests.conftest import T0, exchange, new_meta
from tests.fakes import STRUCTURED, FakeBackend
from tests.hosts import AGENTS, TEST_SETTINGS

SALLY = load_agent(AGENTS / "simple_sally.py")


class Listing(FakeBackend):
    """A server that lists ``offered`` and remembers whether it was closed."""

    def __init__(self, *offered: str, base_url: str = "fake://local") -> None:
        super().__init__(window=8192)
        self.offered = list(offered)
        self.base_url = base_url
        self.closed = False

    def models(self) -> list[str]:
        return self.offered

    def close(self) -> None:
        self.closed = True


def located(store: Store, **fields: object) -> continuation.Located:
    writer: SessionWriter
    with store.create(new_meta(**fields)) as writer:
        for message in exchange(0):
            writer.append(message)
        writer.finalize(Message.create("summary", T0, text=STRUCTURED))
        return continuation.Located(None, chain.closed_parent(writer))  # type: ignore[arg-type]


def test_a_model_the_server_lists_is_taken_with_a_meter_made_anew() -> None:
    backend = Listing("fake-model", "other-model")
    before = Meter.of(backend, SALLY, TEST_SETTINGS)
    meter, unchecked = switching.model(backend, SALLY, TEST_SETTINGS, "other-model")
    assert unchecked is None and backend.model == "other-model"
    assert meter is not before and meter.window() == 8192


def test_a_model_the_server_does_not_list_is_refused_and_nothing_changes() -> None:
    backend = Listing("fake-model", "other-model")
    with pytest.raises(ChatloopError, match="offers no model 'othr-model'") as refused:
        switching.model(backend, SALLY, TEST_SETTINGS, "othr-model")
    assert refused.value.hint == "Did you mean other-model?" and backend.model == "fake-model"


def test_an_agent_goes_on_with_the_recall_tool_when_it_calls_tools(store: Store) -> None:
    fiona = load_agent(AGENTS / "file_fiona.py")
    meter = Meter.of(FakeBackend(window=8192), SALLY, TEST_SETTINGS)
    armed, made = switching.agent(fiona, meter, recall.Recall(store))
    assert "recall" in [tool.name for tool in armed.tools] and made is not meter
    plain, _ = switching.agent(SALLY, meter, recall.Recall(store))
    assert plain.tools == SALLY.tools  # (no tools: none given)


def test_the_model_an_agent_names_is_taken_unless_one_was_configured() -> None:
    tom = replace(SALLY, model="tom-model")
    assert switching.named_model(tom, TEST_SETTINGS, "fake-model") == "tom-model"
    assert switching.named_model(tom, TEST_SETTINGS, "tom-model") is None  # in use already
    configured = TEST_SETTINGS._replace(model="mine")
    assert switching.named_model(tom, configured, "fake-model") is None
    assert switching.named_model(SALLY, TEST_SETTINGS, "fake-model") is None  # names none


def test_a_resume_keeps_the_agent_it_was_held_with_and_says_a_change(store: Store) -> None:
    own = located(store, agent="Simple Sally", agent_name="simple_sally")
    home = store.root
    assert switching.agent_for(own, SALLY, False, store.cwd, home) == (None, ())
    other = located(store, agent="Someone Else", agent_name="someone_else")
    path, notes = switching.agent_for(other, SALLY, False, store.cwd, home)
    assert path is None and notes and notes[0][1] == "warn"
    assert notes[0][0].startswith("Session ") and "not in your agent folders" in notes[0][0]


def test_a_resume_on_the_same_server_keeps_the_backend_open(store: Store) -> None:
    backend = Listing("fake-model")
    kept = located(store, backend_url="")  # names no server: the current one goes on
    assert switching.server_for(kept, backend, TEST_SETTINGS, store.root) == (None, ())
    assert not backend.closed


def test_a_waiting_continuation_is_relabelled_for_another_agent(store: Store) -> None:
    parent = located(store).parent
    waiting = builders.with_history(parent, list(exchange(0)), new_meta(), ())
    fiona = load_agent(AGENTS / "file_fiona.py")
    relabelled = switching.relabelled(waiting, fiona)
    assert relabelled.template.agent == fiona.name
    assert relabelled.template.agent_name == Path(fiona.path).stem == "file_fiona"
    assert relabelled.parent is waiting.parent and relabelled.history == waiting.history
