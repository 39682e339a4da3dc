"""The look taken ahead in a child process: it sees what a look sees, a sync trusts it
only for what it saw, and no child outlives its reader."""

from __future__ import annotations

import os
import threading

import pytest

from chatloop.store.index import Index
from chatloop.store.lookahead import LookAhead
from chatloop.store.store import FolderLook, Store
from tests.test_index import _populate
from tests.test_index_marks import _statements, _two_projects


def _gone(pid: int) -> bool:
    """True once ``pid`` is no child of ours any more (exited and reaped)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


@pytest.mark.parametrize("all_projects", [True, False])
def test_the_child_sees_the_marks_a_look_makes(store: Store, all_projects: bool) -> None:
    _two_projects(store, 3)
    with LookAhead(store, all_projects) as ahead:
        assert ahead.pid > 0  # a child was started
        marks = ahead.marks()
    assert marks == [(look.name, look.mark) for look in store.look(all_projects)]
    assert len(marks) == (2 if all_projects else 1)
    assert _gone(ahead.pid)


def test_a_fresh_index_is_known_from_the_marks_taken_ahead(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    _populate(store, 3)
    with Index(store) as index:
        index.sync()
        seen = _statements(index)
        with LookAhead(store, True) as ahead:  # (the child is started: it looks as before)

            def looked_again(all_projects: bool = False) -> list[FolderLook]:
                raise AssertionError("the folders were looked at again")

            monkeypatch.setattr(store, "look", looked_again)
            assert index.sync(ahead=ahead) == 0
        assert seen and not [s for s in seen if "FROM sessions" in s], seen


def test_a_file_changed_before_the_look_ahead_is_read_again(store: Store) -> None:
    first, _ = _populate(store, 2)
    with Index(store) as index:
        index.sync()
        first.write_bytes(first.read_bytes().replace(b"unicorn0", b"narwhal0"))
        with LookAhead(store, True) as ahead:
            assert index.sync(ahead=ahead) == 1
        assert [h.session.path for h in index.search("narwhal0")] == [str(first)]


def test_a_look_ahead_of_another_scope_is_not_used(store: Store) -> None:
    other = _two_projects(store, 2)
    with Index(store) as index:
        index.sync(all_projects=True)
        _populate(other, 1, word="okapi")  # a new file in the other project only
        with LookAhead(store, all_projects=False) as ahead:
            # this project's marks are fresh, but every project is asked for
            assert index.sync(all_projects=True, ahead=ahead) == 1


def test_a_closed_look_ahead_leaves_no_child(store: Store) -> None:
    _populate(store, 2)
    ahead = LookAhead(store, True)
    pid = ahead.pid
    assert pid > 0
    ahead.close()  # never read: the child is stopped and reaped
    assert _gone(pid)
    assert ahead.marks() is None


def test_a_process_with_threads_takes_no_look_ahead_and_still_syncs(store: Store) -> None:
    _populate(store, 2)
    release = threading.Event()
    waiting = threading.Thread(target=release.wait)
    waiting.start()
    try:
        with LookAhead(store, True) as ahead, Index(store) as index:
            assert ahead.pid == 0 and ahead.marks() is None  # forking here is unsafe
            assert index.sync(ahead=ahead) == 2
    finally:
        release.set()
        waiting.join()


def test_a_home_without_projects_gives_no_marks_and_the_sync_looks_itself(
    store: Store,
) -> None:
    with LookAhead(store, True) as ahead, Index(store) as index:
        assert ahead.marks() == []
        assert index.sync(ahead=ahead) == 0
        _populate(store, 1)
        assert index.sync(ahead=ahead) == 1  # the old answer is never taken as fresh
