"""Side files of killed runs are cleaned by the next run (issue 31, item 5): a killed
reseal's temp file by the next reseal, an index side file of a dead process by the
next index build at once (not an hour later), a live process's never."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from chatloop.format import Message
from chatloop.store.index import Index
from chatloop.store.store import Store
from tests.conftest import T0, exchange, new_meta


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


@pytest.fixture
def live_pid() -> Iterator[int]:
    child = subprocess.Popen(["sleep", "60"])
    yield child.pid
    child.kill()
    child.wait()


def test_a_killed_reseals_temp_file_is_removed_by_the_next_reseal(store: Store) -> None:
    writer = store.create(new_meta())
    for m in exchange(1):
        writer.append(m)
    writer.close()
    path = writer.path
    left = path.with_name(f".{path.name}.tmp-{_dead_pid()}-a1b2c3")  # as atomic_rewrite names it
    left.write_bytes(path.read_bytes()[:100])
    path.write_bytes(path.read_bytes().replace(b"Question number 1", b"Question number one"))
    changed, _, _ = store.reseal(path)
    assert changed == 1 and not left.exists()
    assert [p.name for p in path.parent.glob(".*")] == []


def test_index_side_files_of_dead_processes_go_at_once_a_live_ones_stay(
    store: Store, live_pid: int
) -> None:
    with store.create(new_meta()) as writer:
        writer.append(Message.create("user", T0, text="hello"))
    root = store.root
    root.mkdir(exist_ok=True)
    dead = _dead_pid()
    dead_sides = [root / f"index.db.new-{dead}-0a1b2c3d{end}" for end in ("", "-wal", "-shm")]
    live_side = root / f"index.db.new-{live_pid}-0a1b2c3d"
    for side in [*dead_sides, live_side]:
        side.write_bytes(b"half a build")  # just written: not an hour old
    with Index(store) as index:
        assert index.rebuild() == 1
    assert not any(side.exists() for side in dead_sides)
    assert live_side.exists()
