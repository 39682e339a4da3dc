"""The look taken ahead in a child process: it sees what a look sees, a sync trusts it
only for what it saw, and no child outlives its reader."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from chatloop.store.index import Index, SearchHit
from chatloop.store.lookahead import LookAhead
from chatloop.store.store import FolderLook, Store
from tests.index_helpers import populate, statements, two_projects


def _forbid_looking(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on, a look at the folders in this process fails the test (a child
    already started looks as before)."""

    def looked_again(all_projects: bool = False) -> list[FolderLook]:
        raise AssertionError("the folders were looked at again")

    monkeypatch.setattr(store, "look", looked_again)


def _gone(pid: int) -> bool:
    """True once ``pid`` is no child of ours any more (exited and reaped)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


@pytest.mark.parametrize("all_projects", [True, False])
def test_the_child_sees_the_marks_a_look_makes(store: Store, all_projects: bool) -> None:
    two_projects(store, 3)
    with LookAhead(store, all_projects) as ahead:
        assert ahead.pid > 0  # a child was started
        marks = ahead.marks()
    assert marks == [(look.name, look.mark) for look in store.look(all_projects)]
    assert len(marks) == (2 if all_projects else 1)
    assert _gone(ahead.pid)


def test_a_fresh_index_is_known_from_the_marks_taken_ahead(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    populate(store, 3)
    with Index(store) as index:
        index.sync()
        seen = statements(index)
        with LookAhead(store, True) as ahead:  # (the child is started: it looks as before)
            _forbid_looking(store, monkeypatch)
            assert index.sync(ahead=ahead) == 0
        assert seen and not [s for s in seen if "FROM sessions" in s], seen


def test_a_file_changed_before_the_look_ahead_is_read_again(store: Store) -> None:
    first, _ = populate(store, 2)
    with Index(store) as index:
        index.sync()
        first.write_bytes(first.read_bytes().replace(b"unicorn0", b"narwhal0"))
        with LookAhead(store, True) as ahead:
            assert index.sync(ahead=ahead) == 1
        assert [h.session.path for h in index.search("narwhal0")] == [str(first)]


@pytest.mark.parametrize("ahead_all", [True, False])
def test_a_look_ahead_of_another_scope_is_not_used(store: Store, ahead_all: bool) -> None:
    other = two_projects(store, 2)
    with Index(store) as index:
        index.sync(all_projects=True)
        index.sync(all_projects=False)  # both scopes marked
        populate(other if ahead_all else store, 1, word="okapi")  # where the sync looks
        with LookAhead(store, all_projects=ahead_all) as ahead:
            index._db.execute("DELETE FROM info WHERE key LIKE 'mark:%' OR key = 'every'")
            index.sync(all_projects=not ahead_all)  # kept again, as the new files are
            # a look of the other scope is not compared with this scope's marks
            assert ahead.pid > 0
            assert index.sync(all_projects=not ahead_all, ahead=ahead) == 0


def test_a_look_ahead_answers_once(store: Store) -> None:
    first, _ = populate(store, 2)
    with Index(store) as index:
        index.sync()
        with LookAhead(store, True) as ahead:
            assert index.sync(ahead=ahead) == 0
            first.write_bytes(first.read_bytes().replace(b"unicorn0", b"narwhal0"))
            assert ahead.marks() is None  # its moment has passed
            assert index.sync(ahead=ahead) == 1
        assert [h.session.path for h in index.search("narwhal0")] == [str(first)]


def test_a_closed_look_ahead_leaves_no_child(store: Store) -> None:
    populate(store, 2)
    ahead = LookAhead(store, True)
    pid = ahead.pid
    assert pid > 0
    ahead.close()  # never read: the child is stopped and reaped
    assert _gone(pid)
    assert ahead.marks() is None


def test_a_process_with_threads_takes_no_look_ahead_and_still_syncs(store: Store) -> None:
    populate(store, 2)
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
        populate(store, 1)
        assert index.sync(ahead=ahead) == 1


def test_no_child_is_started_where_nobody_may_wait_for_it(store: Store) -> None:
    populate(store, 1)
    previous = signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children reaped by the kernel
    try:
        with LookAhead(store, True) as ahead:
            assert ahead.pid == 0 and ahead.marks() is None
    finally:
        signal.signal(signal.SIGCHLD, previous)


CHILD_OUTLIVES = """
import os, sys, time
from pathlib import Path
from chatloop.store.lookahead import LookAhead
from chatloop.store.store import Store

store = Store(Path(sys.argv[1]), cwd=Path(sys.argv[2]))
def slow(all_projects=False):
    time.sleep(30)
    return []
store.look = slow  # the child takes a long look
ahead = LookAhead(store, True)
print(ahead.pid, flush=True)
time.sleep(60)
"""


def test_a_killed_command_leaves_no_child_holding_its_output(store: Store) -> None:
    """Whoever reads chatloop's output (a pipe, a test) sees it end when chatloop is
    killed, even while the child is still looking."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    proc = subprocess.Popen([sys.executable, "-c", CHILD_OUTLIVES, str(store.root),
                             str(store.cwd)], stdout=subprocess.PIPE, env=env)  # fmt: skip
    assert proc.stdout is not None
    child = int(proc.stdout.readline())
    try:
        proc.kill()
        proc.wait(timeout=10)
        done = threading.Event()
        rest: list[bytes] = []

        def read_to_end() -> None:
            assert proc.stdout is not None
            rest.append(proc.stdout.read())
            done.set()

        threading.Thread(target=read_to_end, daemon=True).start()
        assert done.wait(timeout=10), "the output stayed open: the child holds it"
    finally:
        with contextlib.suppress(OSError):
            os.kill(child, signal.SIGKILL)


def test_a_home_that_cannot_be_worked_out_takes_no_look_ahead(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import chatloop.config
    from chatloop.cli import _look_ahead

    def no_home() -> Path:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(chatloop.config, "chatloop_home", no_home)
    assert _look_ahead(["sessions"]) is None  # (--sessions-dir may still name one)


def test_a_look_ahead_of_another_home_is_stopped_before_the_command_goes_on(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """CHATLOOP_HOME names one home, --sessions-dir another: the look taken ahead of the
    first is stopped and reaped at once, not when the command (a whole chat) ends."""
    import chatloop.cli
    from chatloop.ui import listing

    populate(store, 1)
    elsewhere = Store(tmp_path / "elsewhere", cwd=store.cwd)
    populate(elsewhere, 1)
    started: list[LookAhead] = []
    real_init = LookAhead.__init__

    def recorded(self: LookAhead, *args: object, **kwargs: object) -> None:
        real_init(self, *args, **kwargs)  # type: ignore[arg-type]
        started.append(self)

    seen: list[bool] = []
    real_text = listing.sessions_text

    def text(*args: object, **kwargs: object) -> str:
        seen.append(_gone(started[0].pid))  # the command is still running here
        return real_text(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(LookAhead, "__init__", recorded)
    monkeypatch.setattr(listing, "sessions_text", text)
    monkeypatch.setenv("CHATLOOP_HOME", str(elsewhere.root))
    monkeypatch.setenv("CHATLOOP_CONFIG", "")
    monkeypatch.chdir(store.cwd)
    assert chatloop.cli.main(["sessions", "--sessions-dir", str(store.root)]) == 0
    assert len(started) == 2 and started[0].root == elsewhere.root and started[0].pid > 0
    assert seen == [True]
    assert "session 0" in capsys.readouterr().out


# ------------------------------------------------------------------ hits found ahead


def test_hits_found_ahead_of_a_fresh_index_are_the_synced_search(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    two_projects(store, 3)
    with Index(store) as index:
        index.sync()
        expected = index.search("unicorn1")
        with LookAhead(store, True) as ahead:
            _forbid_looking(store, monkeypatch)
            def search() -> list[SearchHit]:
                return index.search("unicorn1")

            assert index.read_ahead(ahead, search) == expected != []
            assert index.read_ahead(ahead, search) is None  # the look is spent


def test_hits_found_ahead_of_a_file_changed_before_the_look_are_not_used(store: Store) -> None:
    first, _ = populate(store, 2)
    with Index(store) as index:
        index.sync()
        first.write_bytes(first.read_bytes().replace(b"unicorn0", b"narwhal0"))
        with LookAhead(store, True) as ahead:
            assert index.read_ahead(ahead, lambda: index.search("narwhal0")) is None
            assert index.sync(ahead=ahead) == 1
        assert [h.session.path for h in index.search("narwhal0")] == [str(first)]


def test_hits_found_ahead_after_a_neighbour_synced_a_newer_look_are_not_used(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The look was taken; then a file changed and a neighbour synced it (keeping new
    marks): the rows no longer match this look, so the hits found are not used."""
    first, _ = populate(store, 2)
    looked = tmp_path / "looked"
    real_look = store.look

    def look_and_say(all_projects: bool = False) -> list[FolderLook]:
        seen = real_look(all_projects)
        looked.touch()  # (in the child: the look is taken)
        return seen

    monkeypatch.setattr(store, "look", look_and_say)
    with Index(store) as index:
        index.sync()
        looked.unlink()
        with LookAhead(store, True) as ahead:
            deadline = time.monotonic() + 30
            while not looked.exists():  # the child's look is taken before the change
                assert time.monotonic() < deadline, "the child never looked"
                time.sleep(0.01)
            first.write_bytes(first.read_bytes().replace(b"unicorn0", b"narwhal0"))
            with Index(store) as neighbour:
                assert neighbour.sync() == 1  # rows of the change, and new marks
            assert index.read_ahead(ahead, lambda: index.search("narwhal0")) is None
        assert [h.session.path for h in index.search("narwhal0")] == [str(first)]


def test_no_hits_are_found_ahead_from_an_index_in_memory(store: Store) -> None:
    populate(store, 1)
    with Index(store) as index, LookAhead(store, True) as ahead:
        index.in_memory = True
        assert index.read_ahead(ahead, lambda: index.search("unicorn0")) is None


def test_nothing_is_read_ahead_when_no_answer_will_come(store: Store) -> None:
    """No child (here: SIGCHLD ignored) or its answer taken: the read is not even run,
    so the command does not search twice."""
    populate(store, 1)
    reads: list[int] = []
    previous = signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    try:
        with Index(store) as index, LookAhead(store, True) as ahead:
            assert not ahead.pending
            assert index.read_ahead(ahead, lambda: reads.append(1)) is None
    finally:
        signal.signal(signal.SIGCHLD, previous)
    with Index(store) as index, LookAhead(store, True) as ahead:
        assert ahead.pending
        ahead.marks()
        assert not ahead.pending
        assert index.read_ahead(ahead, lambda: reads.append(1)) is None
    assert reads == []


def test_a_read_ahead_that_fails_as_a_bug_says_so(store: Store) -> None:
    populate(store, 1)
    with Index(store) as index:
        index.sync()
    with Index(store) as index, LookAhead(store, True) as ahead:

        def wrong() -> object:
            return index._db.execute("SELECT ?, ?", (1,)).fetchall()  # a bug: two marks, one value

        with pytest.raises(sqlite3.ProgrammingError):
            index.read_ahead(ahead, wrong)
        assert not index._db.in_transaction
        assert index.sync(ahead=ahead) == 0  # (the index is fine)


@pytest.mark.parametrize("stale", [False, True])
def test_search_prints_each_hit_as_its_snippet_is_read_and_reads_each_once(
    store: Store, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    stale: bool,
) -> None:
    """The read ahead of the files' look is the index's only: the snippets are read after,
    one by one as the hits are printed, once each, fresh index or not."""
    import chatloop.cli
    from chatloop.store import index_scan
    from chatloop.ui import listing

    paths = populate(store, 4)
    with Index(store) as index:
        index.sync()
    if stale:
        paths[0].write_bytes(paths[0].read_bytes().replace(b"question", b"questions"))
    read: list[str] = []
    at_print: list[int] = []
    real_hit_in, real_line = index_scan.hit_in, listing.hit_line

    def hit_in(path: Path, word: str) -> tuple[str, str]:
        read.append(str(path))
        return real_hit_in(path, word)

    def hit_line(hit: SearchHit, show_project: bool = False, columns: int | None = None) -> str:
        at_print.append(len(read))
        return real_line(hit, show_project, columns)

    monkeypatch.setattr(index_scan, "hit_in", hit_in)
    monkeypatch.setattr(listing, "hit_line", hit_line)
    monkeypatch.setenv("CHATLOOP_HOME", str(store.root))
    monkeypatch.setenv("CHATLOOP_CONFIG", "")
    monkeypatch.chdir(store.cwd)
    assert chatloop.cli.main(["search", "question"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == (3 if stale else 4)  # (a changed file says "questions")
    assert at_print == [1, 2, 3] if stale else at_print == [1, 2, 3, 4]
    assert len(read) == len(set(read)) == len(at_print)


def test_show_finds_a_session_the_index_has_not_seen_yet(
    store: Store, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Looked for ahead of the look in an index that does not list it yet: not an error,
    but a sync, then found."""
    import chatloop.cli

    populate(store, 1)
    with Index(store) as index:
        index.sync()
    (new,) = populate(store, 1, word="okapi")
    monkeypatch.setenv("CHATLOOP_HOME", str(store.root))
    monkeypatch.setenv("CHATLOOP_CONFIG", "")
    monkeypatch.chdir(store.cwd)
    assert chatloop.cli.main(["show", new.stem]) == 0
    assert "okapi0 question" in capsys.readouterr().out
    assert chatloop.cli.main(["tree", new.stem]) == 0
    assert new.stem in capsys.readouterr().out
    assert chatloop.cli.main(["show", "20990101-000000-deadbeef"]) == 1
    assert "error:" in capsys.readouterr().err


def test_search_of_every_project_names_the_project_of_each_hit(
    store: Store, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Numbers count per project: a hit from another project says which."""
    import chatloop.cli

    other = two_projects(store, 1)
    monkeypatch.setenv("CHATLOOP_HOME", str(store.root))
    monkeypatch.setenv("CHATLOOP_CONFIG", "")
    monkeypatch.chdir(store.cwd)
    assert chatloop.cli.main(["search", "question", "--all"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert sorted(line.rsplit("  (", 1)[1] for line in lines) == sorted(
        [f"{store.project})", f"{other.project})"])  # fmt: skip
    assert chatloop.cli.main(["search", "question"]) == 0
    assert "  (" not in capsys.readouterr().out  # one project: no names
