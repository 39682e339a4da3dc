"""Writes that a kill or a full disk cannot tear, and front matter that stays readable
(issue 31, item 5): titles and model ids cut when written, an unreadable block
refused with one line, failed forks and compactions leaving nothing behind."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chatloop.backends.base import Event, TextDelta
from chatloop.chat.naming import Naming
from chatloop.errors import StoreError
from chatloop.format.front_matter import MAX_MODEL_CHARS, MAX_TITLE_CHARS
from chatloop.store.store import Store
from tests.conftest import fill, new_meta
from tests.fakes import STRUCTURED, FakeBackend
from tests.hosts import chat, files


def test_a_70kb_model_id_and_title_compact_into_a_finalized_readable_child(
    store: Store,
) -> None:
    backend = FakeBackend("A.", "B.", STRUCTURED, "Acknowledged.", "C.", STRUCTURED)
    backend.model = "m" * 70_000  # what a server answered
    session, _ = chat(store, backend)
    session.naming = Naming(title="t" * 70_000)  # as a parent's title is inherited, uncut
    session.send("one")
    session.send("two")
    session.compact()
    session.send("three")
    session.close()
    parent, child = files(store)
    assert child.meta.parent_id == parent.meta.id
    for done in (parent, child):
        assert done.meta.status == "closed"
        assert done.meta.title == "t" * MAX_TITLE_CHARS
        assert done.meta.model == "m" * MAX_MODEL_CHARS
    assert next(m.text for m in child.messages if not m.restore) == "three"


def test_front_matter_the_reader_would_refuse_is_refused_at_write_time(store: Store) -> None:
    made = store.create(new_meta(title="t" * 70_000, model="m" * 70_000))
    made.close()
    meta = store.read(made.path).session.meta
    assert (len(meta.title), len(meta.model)) == (MAX_TITLE_CHARS, MAX_MODEL_CHARS)
    before = sorted(store.project_dir.iterdir())
    with pytest.raises(StoreError) as refused:
        store.create(new_meta(extra={"notes": "x" * 70_000}))
    assert "cannot read back" in refused.value.message and "\n" not in refused.value.message
    assert sorted(store.project_dir.iterdir()) == before  # nothing half made


def _reply(msgs: list[dict[str, object]]) -> str:
    return STRUCTURED if "progressive summary" in str(msgs[-1]["content"]) else "Short reply."


def _reserve(disk: Path, size: int) -> None:
    """Fill ``disk`` but for about ``size`` bytes."""
    reserve = disk / "reserve"
    reserve.write_bytes(b"\0" * size)
    fill(disk)
    reserve.unlink()


def test_a_compaction_failing_on_a_full_disk_again_and_again_leaves_one_summary(
    small_disk: Path,
) -> None:
    store = Store(small_disk / "home", cwd=small_disk / "project")
    (small_disk / "project").mkdir()
    session, _ = chat(store, FakeBackend(default=_reply), context_window=10**6)
    for i in range(2):
        session.send(f"question {i}: " + "the garden beds and their drainage " * 8_000)
    _reserve(small_disk, 48 * 1024)  # room for a summary frame, not for a rewrite
    for _ in range(3):
        with pytest.raises(StoreError) as caught:
            session.compact()
        assert caught.value.message.startswith("Could not compact")
        (parent,) = files(store)
        assert not [m for m in parent.messages if m.role == "summary"]
        assert parent.meta.status == "open"
    (small_disk / "filler").unlink()
    session.compact()
    session.send("after the compaction")
    session.close()
    parent, child = files(store)
    assert len([m for m in parent.messages if m.role == "summary"]) == 1
    assert parent.summary is not None and parent.meta.status == "closed"
    assert child.meta.parent_id == parent.meta.id


def test_a_fork_whose_copies_fill_the_disk_leaves_no_partial_branch(small_disk: Path) -> None:
    store = Store(small_disk / "home", cwd=small_disk / "project")
    (small_disk / "project").mkdir()
    session, _ = chat(store, FakeBackend(default=_reply), context_window=10**6)
    asked = [f"question {i}: " + "the soil and its drainage " * 3_000 for i in range(3)]
    for text in asked:
        session.send(text)
    session.fork(2)  # the parent is closed; the branch is written with the next message
    _reserve(small_disk, 120 * 1024)  # room for the file and a copy or two, not all four
    for _ in range(2):
        with pytest.raises(StoreError):
            session.send("on the branch")
        assert len(files(store)) == 1  # the parent only: no partial branch, no lock
        parent_id = files(store)[0].meta.id
        assert all(p.name.startswith(parent_id) for p in store.project_dir.iterdir())
    (small_disk / "filler").unlink()
    session.send("on the branch, with space")
    session.close()
    parent, branch = files(store)
    assert branch.meta.parent_id == parent.meta.id
    carried = [m.text.strip() for m in branch.messages if m.restore]
    assert carried == [asked[0].strip(), "Short reply.", asked[1].strip(), "Short reply."]
    assert [m.text for m in branch.messages if m.is_query] == [  # each kept, queued
        "on the branch",
        "on the branch",
        "on the branch, with space",
    ]


def test_a_broken_stream_says_the_partial_reply_was_kept_only_when_some_was(
    store: Store,
) -> None:
    from chatloop.backends.base import NOTHING_CAME, PARTIAL_KEPT, StreamInterrupted

    broken = StreamInterrupted("The reply ended before the model finished", PARTIAL_KEPT)
    session, _ = chat(store, FakeBackend(broken))
    with pytest.raises(StreamInterrupted) as caught:
        session.send("a question")
    assert caught.value.hint == NOTHING_CAME

    class BreaksAfterAWord(FakeBackend):
        def stream(self, *args: Any, **kwargs: Any) -> Iterator[Event]:
            yield TextDelta("Half ")
            raise StreamInterrupted("The reply ended before the model finished", PARTIAL_KEPT)

    session, _ = chat(store, BreaksAfterAWord())
    with pytest.raises(StreamInterrupted) as caught:
        session.send("another question")
    assert caught.value.hint == PARTIAL_KEPT
    (_, kept) = files(store)
    assert kept.messages[-1].text.strip() == "Half"
