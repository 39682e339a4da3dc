"""One builder of a child's restoration text (``chat.restoration.build``), called once
per child: the preview a waiting child is planned with is the prompt its file is
written with, never built again along another path. The builder's other calls size
what the child carries (at ``MAX_CARRIED`` copies, the most a child may carry)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from chatloop.chat import chain, restoration
from chatloop.config import MAX_CARRIED
from chatloop.store.store import Store
from tests.fakes import STRUCTURED, FakeBackend
from tests.hosts import chat, continue_file, files


def counted(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, str]]:
    """Every call of the builder from now on: how many copies it was told follow the
    prompt, and the text it built."""
    calls: list[tuple[int, str]] = []
    real = restoration.build

    def build(
        parent: chain.Parent,
        summary: str,
        pins: Sequence[str],
        sizes: restoration.Sizes,
        unanswered: str | None = None,
        carried: int = 0,
    ) -> str:
        text = real(parent, summary, pins, sizes, unanswered, carried)
        calls.append((carried, text))
        return text

    monkeypatch.setattr(restoration, "build", build)
    return calls


def built_for_children(calls: list[tuple[int, str]]) -> list[str]:
    """The texts built for a child (not to size a carry)."""
    return [text for carried, text in calls if carried != MAX_CARRIED]


def test_a_compaction_builds_its_childs_restoration_once(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    session, _ = chat(store, FakeBackend("One.", "Two.", STRUCTURED, "Ready.", "Three."))
    session.send("tomatoes need six hours of sun")
    session.send("and the basil")
    calls = counted(monkeypatch)
    session.compact()
    planned = session.plan().wire  # the preview, as the next call would send it
    session.send("go on")
    _parent, child = files(store)[-2:]
    assert built_for_children(calls) == [child.messages[0].text]
    assert any(child.messages[0].text == m.get("content") for m in planned)
    session.close()


def test_a_pin_while_the_child_waits_builds_it_again_with_the_pin(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    session, _ = chat(store, FakeBackend("One.", STRUCTURED, "Ready.", "Two."))
    session.send("tomatoes need six hours of sun")
    calls = counted(monkeypatch)
    session.compact()
    session.pin("The budget is 3,000 EUR")
    session.send("go on")
    session.close()
    child = files(store)[-1]
    first, last = built_for_children(calls)  # the preview, then after the pin
    assert "3,000 EUR" not in first and last == child.messages[0].text
    assert "3,000 EUR" in last


def test_a_resume_builds_its_childs_restoration_once(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, _ = chat(store, FakeBackend("One.", STRUCTURED))
    first.send("tomatoes need six hours of sun")
    first.close()
    (parent,) = files(store)
    session, _ = chat(store, FakeBackend("Ready.", "Two.", STRUCTURED))
    calls = counted(monkeypatch)
    assert session.resume(parent.meta.id)
    session.send("go on")
    session.close()
    child = files(store)[-1]
    assert child.meta.parent_id == parent.meta.id
    assert built_for_children(calls) == [child.messages[0].text]


def test_a_fork_copies_its_history_and_builds_no_restoration(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = counted(monkeypatch)
    session, _ = chat(store, FakeBackend("One.", "Two.", "Branch.", STRUCTURED, STRUCTURED))
    session.send("first question")
    session.send("second question")
    session.fork(1)  # its history is copied: nothing built
    session.send("a branch question")
    session.close()
    assert calls == []


def test_a_fork_whose_history_is_summarized_builds_its_restoration_once(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    long = "the tide came in over the stones and the boats waited " * 30
    wide, _ = chat(store, FakeBackend("A.", "B.", STRUCTURED), context_window=8000)
    wide.send("first " + long)
    wide.send("second " + long)
    wide.close()
    (entry,) = store.session_files()
    calls = counted(monkeypatch)
    narrow, _ = chat(store, FakeBackend(STRUCTURED, "Branch.", STRUCTURED), context_window=700)
    continue_file(narrow, Path(entry.path), fork=True)  # does not fit whole: a summary is carried
    narrow.send("go on")
    narrow.close()
    fork = files(store)[-1]
    (carried,) = [m for m in fork.messages if m.restore]
    assert built_for_children(calls) == [carried.text]
