"""How a session ends, on its own, without a session (``chat.ending``): its summary
(made, cut short, or built from the transcript while leaving), its file finalized
here or not handed to a worker that cannot start, and what each says."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from chatloop.chat import chain, ending
from chatloop.chat.agent import load_agent
from chatloop.chat.host import Progress
from chatloop.chat.meter import Meter
from chatloop.store.store import Store
from tests.conftest import T0, exchange, new_meta
from tests.fakes import STRUCTURED, FakeBackend
from tests.hosts import AGENTS, TEST_SETTINGS


def meter(backend: FakeBackend) -> Meter:
    return Meter.of(backend, load_agent(AGENTS / "simple_sally.py"), TEST_SETTINGS)


class Working:
    """A ``Working`` that records its labels; ``interrupt``: Ctrl-C as it begins."""

    def __init__(self, interrupt: bool = False) -> None:
        self.labels: list[str] = []
        self.interrupt = interrupt

    @contextmanager
    def __call__(self, label: str) -> Iterator[Progress]:
        self.labels.append(label)
        if self.interrupt:
            raise KeyboardInterrupt
        yield lambda _: None


def summary_of(
    backend: FakeBackend, working: Working, leaving: bool = False
) -> tuple[chain.SummaryOutcome, tuple[tuple[str, str], ...]]:
    messages = [*exchange(0), *exchange(1)]
    return ending.summary(
        backend,
        messages,
        None,
        meter=meter(backend),
        settings=TEST_SETTINGS,
        working=working,
        leaving=leaving,
    )


def test_a_summary_is_the_models_else_one_built_from_the_transcript() -> None:
    backend, working = FakeBackend(STRUCTURED, window=8192), Working()
    outcome, notes = summary_of(backend, working)
    assert not outcome.fallback and notes == () and working.labels
    assert len(backend.calls) == 1
    backend, working = FakeBackend(STRUCTURED, window=8192), Working()
    outcome, notes = summary_of(backend, working, leaving=True)  # a signal: no model call
    assert outcome.fallback and notes == () and backend.calls == [] and working.labels == []
    backend = FakeBackend(STRUCTURED, window=8192)
    outcome, notes = summary_of(backend, Working(interrupt=True))
    assert outcome.fallback and notes == (
        ("Summary cut short: using one built from the transcript.", "warn"),
    )


def written(store: Store) -> chain.Parent:
    with store.create(new_meta()) as writer:
        for message in [*exchange(0), *exchange(1)]:
            writer.append(message)
        return chain.Parent(writer.path, writer.meta, None)


def test_a_session_finalized_here_keeps_its_late_title_and_what_it_leaves(store: Store) -> None:
    parent = written(store)
    outcome = chain.SummaryOutcome(STRUCTURED, fallback=False, calls=1)
    with store.open(parent.path) as writer:
        closed, (said, tone) = ending.finalized(writer, outcome, {"title": "Basil"}, 2, T0)
    assert closed.summary == STRUCTURED and closed.meta.title == "Basil"
    assert closed.meta.summary_leaves == 2 and closed.meta.status == "closed"
    assert said.startswith(f"Saved session {parent.meta.id} with its summary: 2 queries")
    assert tone == "ok"
    assert ending.left_unused(store, closed) == (
        f"Nothing new to save; session {parent.meta.id} is closed with its summary, "
        "ready to resume.",
        "ok",
    )


def test_a_worker_that_cannot_start_leaves_the_file_to_be_finalized_here(store: Store) -> None:
    parent = written(store)
    with store.open(parent.path) as writer:  # (a fake backend: no worker can build it)
        assert (
            ending.handed_off(writer, store, FakeBackend(), TEST_SETTINGS, {}, store.root) is None
        )
        assert writer.meta.status != "closed"
    said, _ = ending.left_unused(store, parent)
    assert said.endswith("as it was (its summary is made again when it is resumed).")
