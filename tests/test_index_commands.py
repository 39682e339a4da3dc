"""The commands that read the index (sessions, show, tree, search) answer from an
index synced with the files first: what changed is found, a session the index has
not seen yet is found, and hits are printed as their snippets are read.

(Moved from the tests of the look taken ahead in a child process, removed with it:
these are the assertions that hold of any listing.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from chatloop.store.index import Index
from chatloop.store.rows import SearchHit
from chatloop.store.store import Store
from tests.index_helpers import populate, two_projects


def test_a_file_changed_since_the_last_sync_is_read_again(store: Store) -> None:
    first, _ = populate(store, 2)
    with Index(store) as index:
        index.sync()
        first.write_bytes(first.read_bytes().replace(b"unicorn0", b"narwhal0"))
        assert index.sync() == 1
        assert [h.session.path for h in index.search("narwhal0")] == [str(first)]


def test_a_home_without_projects_syncs_nothing_then_reads_what_comes(store: Store) -> None:
    with Index(store) as index:
        assert index.sync() == 0
        populate(store, 1)
        assert index.sync() == 1


def test_rows_a_neighbour_synced_are_found_by_an_open_index(store: Store) -> None:
    first, _ = populate(store, 2)
    with Index(store) as index:
        index.sync()
        first.write_bytes(first.read_bytes().replace(b"unicorn0", b"narwhal0"))
        with Index(store) as neighbour:
            assert neighbour.sync() == 1  # rows of the change, and new marks
        assert [h.session.path for h in index.search("narwhal0")] == [str(first)]


def test_sessions_dir_names_the_home_listed_whatever_chatloop_home_says(
    store: Store,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import chatloop.cli

    populate(store, 1)
    elsewhere = Store(tmp_path / "elsewhere", cwd=store.cwd)
    populate(elsewhere, 1)
    monkeypatch.setenv("CHATLOOP_HOME", str(elsewhere.root))
    monkeypatch.setenv("CHATLOOP_CONFIG", "")
    monkeypatch.chdir(store.cwd)
    assert chatloop.cli.main(["sessions", "--sessions-dir", str(store.root)]) == 0
    assert "session 0" in capsys.readouterr().out


@pytest.mark.parametrize("stale", [False, True])
def test_search_prints_each_hit_as_its_snippet_is_read_and_reads_each_once(
    store: Store,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    stale: bool,
) -> None:
    """The index is read first; the snippets are read after, one by one as the hits
    are printed, once each, fresh index or not."""
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
    """Asked for before the index lists it: not an error, but a sync, then found."""
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
        [f"{store.project})", f"{other.project})"]
    )
    assert chatloop.cli.main(["search", "question"]) == 0
    assert "  (" not in capsys.readouterr().out  # one project: no names
