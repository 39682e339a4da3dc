"""Folder marks: a listing whose folders did not change reads no row of the index,
and every change (to a file, to a row, by any process) is still seen."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from chatloop.store import index_build
from chatloop.store.index import Index
from chatloop.store.store import Store
from tests.index_helpers import populate, statements, two_projects


@pytest.mark.parametrize("all_projects", [True, False])
def test_an_unchanged_folder_is_known_fresh_without_reading_rows(
    store: Store, all_projects: bool
) -> None:
    populate(store, 3)
    with Index(store) as index:
        assert index.sync(all_projects) == 3
        seen = statements(index)
        assert index.sync(all_projects) == 0
        assert seen and not [s for s in seen if "FROM sessions" in s], seen
        assert len(index.list_sessions()) == 3


def test_a_hand_edit_a_new_file_and_a_removed_one_are_each_seen(store: Store) -> None:
    first, second = populate(store, 2)
    with Index(store) as index:
        index.sync()
        index.sync()
        first.write_bytes(first.read_bytes().replace(b"unicorn0", b"narwhal0"))
        assert index.sync() == 1
        assert [h.session.path for h in index.search("narwhal0")] == [str(first)]
        index.sync()  # marked again
        (third,) = populate(store, 1, word="okapi")
        assert index.sync() == 1
        assert [h.session.path for h in index.search("okapi0")] == [str(third)]
        index.sync()
        second.unlink()
        index.sync()
        assert {r.path for r in index.list_sessions()} == {str(first), str(third)}


def test_a_row_written_by_a_neighbour_clears_the_mark(store: Store) -> None:
    # a neighbour (any version of chatloop) that writes or removes a row makes the
    # next sync compare file by file: the trigger in the index, not the writer's code
    (path,) = populate(store, 1)
    with Index(store) as index:
        index.sync()
        index.sync()
        with sqlite3.connect(store.root / "index.db") as other:
            other.execute("UPDATE sessions SET size = size + 1 WHERE path = ?", (str(path),))
        seen = statements(index)
        assert index.sync() == 1  # the row no longer matched the file: read again
        assert [s for s in seen if "FROM sessions" in s]
        with sqlite3.connect(store.root / "index.db") as other:
            other.execute("DELETE FROM sessions")
        assert index.sync() == 1
        assert [r.path for r in index.list_sessions()] == [str(path)]


def test_no_mark_is_kept_when_a_neighbour_wrote_an_older_row_meanwhile(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # between this sync's look at the folder and keeping its mark, a slower neighbour
    # writes the row of a file as it was before an edit: the mark must not be kept,
    # or the edit would stay unseen until the folder changed again
    (path,) = populate(store, 1)
    with Index(store) as index:
        index.sync()
        old = os.stat(path)
        path.write_bytes(path.read_bytes().replace(b"unicorn0", b"narwhal0"))
        keep = index_build._mark

        def neighbour_first(*args: object) -> None:
            with sqlite3.connect(store.root / "index.db") as other:
                other.execute(
                    "UPDATE sessions SET size = ?, mtime_ns = ? WHERE path = ?",
                    (old.st_size, old.st_mtime_ns, str(path)),
                )
            keep(*args)  # type: ignore[arg-type]

        monkeypatch.setattr(index_build, "_mark", neighbour_first)
        assert index.sync() == 1
        monkeypatch.setattr(index_build, "_mark", keep)
        assert index.sync() == 1  # no mark was kept: the stale row is seen and read again
        assert [h.session.path for h in index.search("narwhal0")] == [str(path)]


def test_a_project_folder_removed_leaves_every_project_listing(store: Store) -> None:
    two_projects(store, 2)
    with Index(store) as index:
        index.sync()
        index.sync()
        assert len(index.list_sessions(all_projects=True)) == 3
        for path in store.project_dir.iterdir():
            path.unlink()
        store.project_dir.rmdir()
        index.sync()
        assert [r.title for r in index.list_sessions(all_projects=True)] == ["session 0"]


def test_rows_of_a_project_whose_mark_went_and_whose_folder_went_are_forgotten(
    store: Store,
) -> None:
    # every-project listings trust marks only when they were kept by an every-project
    # sync with no row written since: here a neighbour writes a row of this project
    # (its mark goes), then the folder goes; the other project's mark still matches
    two_projects(store, 1)
    with Index(store) as index:
        index.sync()
        index.sync()
        with sqlite3.connect(store.root / "index.db") as neighbour:
            neighbour.execute(
                "UPDATE sessions SET title = 'edited' WHERE project = ?", (store.project,)
            )
        for path in store.project_dir.iterdir():
            path.unlink()
        store.project_dir.rmdir()
        index.sync()
        assert [r.title for r in index.list_sessions(all_projects=True)] == ["session 0"]


def test_marks_are_kept_only_with_the_triggers_that_remove_them(store: Store) -> None:
    # an older chatloop's rebuild copies in a file without triggers (or marks): the
    # next sync that keeps marks puts the triggers back in the same transaction
    populate(store, 1)
    with Index(store) as index:
        index.sync()
        with sqlite3.connect(store.root / "index.db") as older:
            for name in ("unmark_on_insert", "unmark_on_delete", "unmark_on_update"):
                older.execute(f"DROP TRIGGER IF EXISTS {name}")
            older.execute("DELETE FROM info WHERE key LIKE 'folder%'")
        index.sync()
        with sqlite3.connect(store.root / "index.db") as older:
            triggers = older.execute(
                "SELECT count(*) FROM sqlite_master WHERE type = 'trigger'"
            ).fetchone()[0]
            older.execute("UPDATE sessions SET size = size + 1")  # an older writer's row
        assert triggers == 3
        assert index.sync() == 1


def test_a_moved_home_is_read_at_its_new_place(store: Store, tmp_path: Path) -> None:
    # rows hold full paths; a folder moved with its files keeps their times, so the
    # mark holds the folder's path too
    populate(store, 2)
    with Index(store) as index:
        index.sync()
        index.sync()
    moved = tmp_path / "moved-home"
    store.root.rename(moved)
    there = Store(moved, cwd=store.cwd, clock=store.clock)
    with Index(there) as index:
        index.sync()
        paths = [Path(r.path) for r in index.list_sessions()]
    assert len(paths) == 2 and all(p.exists() and moved in p.parents for p in paths)


def test_a_busy_index_keeps_no_mark_and_waits_for_nobody(store: Store) -> None:
    # marks only spare work: a neighbour holding the write lock is not waited for
    populate(store, 1)
    with Index(store) as index:
        index.sync()
        with sqlite3.connect(store.root / "index.db", isolation_level=None) as neighbour:
            neighbour.execute("PRAGMA journal_mode = WAL")
            with sqlite3.connect(store.root / "index.db") as wiper:
                wiper.execute("DELETE FROM info WHERE key LIKE 'folder%'")
            neighbour.execute("BEGIN IMMEDIATE")
            try:
                assert index.sync() == 0  # returns at once: the lock is still held here
                kept = index.file.db.execute(
                    "SELECT count(*) FROM info WHERE key LIKE 'folder%'"
                ).fetchone()[0]
            finally:
                neighbour.execute("ROLLBACK")
        assert kept == 0
        index.sync()
        assert (
            index.file.db.execute("SELECT count(*) FROM info WHERE key LIKE 'folder%'").fetchone()[
                0
            ]
            == 2
        )


def test_a_folder_name_sqlite_cannot_hold_keeps_no_mark_and_breaks_nothing(
    store: Store,
) -> None:
    populate(store, 1)
    os.mkdir(os.path.join(os.fsencode(store.root / "projects"), b"caf\xe9"))
    with Index(store) as index:
        index.sync()
        assert not index.file.db.in_transaction  # nothing left locked for the neighbours
        assert len(index.list_sessions(all_projects=True)) == 1
        with sqlite3.connect(store.root / "index.db", timeout=0) as neighbour:
            neighbour.execute("BEGIN IMMEDIATE")
            neighbour.execute("ROLLBACK")


def test_an_index_without_the_open_sessions_index_opens_at_once_when_busy(
    store: Store,
) -> None:
    # an older chatloop's rebuild leaves out the partial index of open sessions: making
    # it again must not wait for a neighbour's write (the busy timeout is seconds)
    import time

    populate(store, 2)
    with Index(store) as index:
        index.sync()
    with sqlite3.connect(store.root / "index.db", isolation_level=None) as neighbour:
        neighbour.execute("DROP INDEX sessions_open")
        neighbour.execute("BEGIN IMMEDIATE")
        try:
            started = time.monotonic()
            with Index(store) as index:
                rows = index.list_sessions()
            waited = time.monotonic() - started
        finally:
            neighbour.execute("ROLLBACK")
        made = neighbour.execute(
            "SELECT count(*) FROM sqlite_master WHERE name = 'sessions_open'"
        ).fetchone()[0]
    assert len(rows) == 2 and made == 0
    assert waited < 3  # (the busy timeout is 5 s)
    with Index(store) as index:
        index.sync()
    with sqlite3.connect(store.root / "index.db") as db:
        assert (
            db.execute(
                "SELECT count(*) FROM sqlite_master WHERE name = 'sessions_open'"
            ).fetchone()[0]
            == 1
        )
