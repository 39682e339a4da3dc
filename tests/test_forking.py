"""A fork's decisions on their own, without a session (``chat.forking``): the history a
branch of a session or of a file carries, and whether it goes whole or as a summary,
with the note each says."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from chatloop.chat import builders, chain, forking
from chatloop.chat.agent import load_agent
from chatloop.chat.meter import Meter
from chatloop.errors import ChatloopError
from chatloop.format import Message
from chatloop.store.store import Store
from tests.conftest import T0, exchange, new_meta
from tests.fakes import STRUCTURED, FakeBackend
from tests.hosts import AGENTS, TEST_SETTINGS


def meter(window: int) -> Meter:
    agent = load_agent(AGENTS / "simple_sally.py")
    return Meter.of(FakeBackend(window=window), agent, TEST_SETTINGS)


def said(queries: int) -> list[Message]:
    return [m for n in range(queries) for m in exchange(n)]


def written(store: Store, queries: int) -> chain.Parent:
    with store.create(new_meta()) as writer:
        for message in said(queries):
            writer.append(message)
        writer.finalize(Message.create("summary", T0, text=STRUCTURED))
        return chain.closed_parent(writer)


class Summaries:
    """A ``Summarize`` that answers ``STRUCTURED`` and remembers what it was given."""

    def __init__(self) -> None:
        self.given: list[tuple[list[Message], str | None]] = []

    def __call__(self, messages: list[Message], previous: str | None) -> chain.SummaryOutcome:
        self.given.append((messages, previous))
        return chain.SummaryOutcome(STRUCTURED, fallback=False, calls=1)


def test_a_branch_of_a_session_carries_its_prefix_and_what_came_before_the_cut() -> None:
    messages = said(3)
    prefix = [Message.create("user", T0, text="from before"), *said(1)]
    summary = Message.create("summary", T0, text=STRUCTURED)
    history, at = forking.of_session([*messages, summary], [*prefix, summary], 1)
    assert at == 1 and [m.text for m in history] == [m.text for m in [*prefix, *messages[:2]]]
    history, at = forking.of_session(messages, (), None)
    assert at == 3 and history == messages
    with pytest.raises(ChatloopError, match="no query 5"):
        forking.of_session(messages, (), 5)


def test_a_branch_of_a_file_carries_it_up_to_its_last_query(store: Store) -> None:
    parent = written(store, 2)
    history, at = forking.of_file(store, parent)
    assert at == 2 and [m.text for m in history] == [m.text for m in said(2)]
    with pytest.raises(ChatloopError, match="gone or unreadable"):
        forking.of_file(store, replace(parent, path=Path("/nowhere/gone.md")))


def test_a_branch_goes_whole_when_it_fits_else_as_a_summary_of_it(store: Store) -> None:
    parent = written(store, 3)
    history, at = forking.of_file(store, parent)
    branch = builders.branch(parent, history, at, new_meta(), ("Budget 3,000 EUR",), "before")
    summaries = Summaries()
    whole, notes = forking.carried(branch, meter(32_000), summaries, lambda: T0)
    assert whole is branch and summaries.given == []
    ((text, tone),) = notes
    assert text.startswith(f"Forking session {parent.meta.id} after query 3") and tone == "restored"
    cut, notes = forking.carried(branch, meter(300), summaries, lambda: T0)
    again, same = forking.summarized(branch, meter(300), Summaries(), lambda: T0)
    assert again.copies[0].text == cut.copies[0].text and same == notes
    ((prompt,),) = (cut.copies,)
    assert prompt.restore and "Budget 3,000 EUR" in prompt.text
    assert cut.previous is not None and cut.forked_at == 3
    assert summaries.given == [(list(branch.copies), "before")]
    ((text, tone),) = notes
    assert "does not fit whole" in text and tone == "warn"
