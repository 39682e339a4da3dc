"""Recall's room and chain on their own, without a session (``chat.recalling``): the
chain a state continues, and what a query's window leaves recall, cut while the
count says it does not fit."""

from __future__ import annotations

from chatloop.chat import builders, chain, recall, recalling
from chatloop.chat.agent import load_agent
from chatloop.chat.meter import Meter
from chatloop.chat.state import Fresh, Open, Waiting
from chatloop.format import Message
from chatloop.store.store import Store
from tests.conftest import T0, exchange, new_meta
from tests.fakes import STRUCTURED, FakeBackend
from tests.hosts import AGENTS, TEST_SETTINGS

FACT = "The staging proxy listens on port 8443 behind gateway gw-east-7."
SALLY = load_agent(AGENTS / "simple_sally.py")
QUESTION = "Which port did the staging proxy listen on behind gw-east-7?"


def parent_with_fact(store: Store) -> chain.Parent:
    with store.create(new_meta()) as writer:
        writer.append(Message.create("user", T0, text=FACT))
        writer.append(Message.create("assistant", T0, text="Noted: port 8443 on gw-east-7."))
        for n in range(1, 4):
            for message in exchange(n):
                writer.append(message)
        writer.finalize(Message.create("summary", T0, text=STRUCTURED))
        return chain.closed_parent(writer)


def test_the_chain_followed_is_the_one_the_state_continues(store: Store) -> None:
    parent = parent_with_fact(store)
    assert recalling.followed(Fresh(), store) == (None, None)
    fork = builders.branch(parent, list(exchange(0)), 1, new_meta(), (), None)
    assert recalling.followed(Waiting(fork), store) == (parent.path, 1)
    full = builders.with_history(parent, list(exchange(0)), new_meta(), ())
    assert recalling.followed(Waiting(full), store) == (parent.path, None)
    with store.create(new_meta()) as alone:  # a session that continues none
        assert recalling.followed(Open(alone), store) == (None, None)


def test_what_a_query_brings_back_fits_the_room_or_is_given_up(store: Store) -> None:
    parent = parent_with_fact(store)
    memory = recall.Recall(store)
    memory.follow(parent.path)
    meter = Meter.of(
        FakeBackend(window=8192), load_agent(AGENTS / "simple_sally.py"), TEST_SETTINGS
    )
    query = Message.create("user", T0, text=QUESTION)
    planned = meter.plan([query])

    def brought(fits: bool) -> tuple[recalling.Brought | None, tuple[tuple[str, str], ...]]:
        return recalling.brought(
            memory,
            QUESTION,
            planned,
            [query],
            automatic=True,
            picked=False,
            fits=lambda made: fits,
            now=lambda: T0,
        )

    found, notes = brought(fits=True)
    assert found is not None and notes == ()
    assert FACT in found.message.text and found.message.recalled and found.message.restore
    assert found.notice()[0].startswith("Recalled 1 earlier exchange")
    assert brought(fits=False) == (None, ())  # cut to nothing: the query goes alone


def test_nothing_to_recall_says_only_what_the_person_picked(store: Store) -> None:
    memory = recall.Recall(store)
    memory.follow(None)
    meter = Meter.of(
        FakeBackend(window=8192), load_agent(AGENTS / "simple_sally.py"), TEST_SETTINGS
    )
    planned = meter.plan([Message.create("user", T0, text=QUESTION)])

    def brought(picked: bool) -> tuple[recalling.Brought | None, tuple[tuple[str, str], ...]]:
        return recalling.brought(
            memory,
            QUESTION,
            planned,
            [],
            automatic=True,
            picked=picked,
            fits=lambda made: True,
            now=lambda: T0,
        )

    assert brought(picked=False) == (None, ())
    found, notes = brought(picked=True)
    assert found is None
    assert notes == (("The exchanges picked with /recall do not fit here.", "warn"),)
