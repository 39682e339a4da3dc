"""Issue 34, item 1: no command waits for the sessions' words.

After the index is lost (or many sessions arrive at once), a sync writes each
closed session's row from its front matter alone (``format.glance``) and a
process of its own reads the words (``store.index_text``): listing, numbering and
``show`` answer at once, a search waits for every word (saying so on stderr, on
a terminal or not) and then finds what ``grep -ril`` finds. Real processes, real
files; waits are on events (a line, a lock, a process ending), never on time.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chatloop.format import Message
from chatloop.store import index_scan
from chatloop.store.index import Index
from chatloop.store.index_build import GLANCE_FROM
from chatloop.store.index_file import INDEX_FILE, IndexFile
from chatloop.store.rows import SessionRow
from chatloop.store.store import Store
from tests.conftest import T0, new_meta

WORD = "okapiwise"


def finalized(store: Store, count: int) -> list[Path]:
    """``count`` sessions closed with a summary, as chatloop closes them; every
    seventh mentions WORD; every fifth has no title."""
    paths = []
    for i in range(count):
        writer = store.create(new_meta(title=f"glanced {i}" if i % 5 else ""))
        said = f"{WORD} question {i}" if i % 7 == 0 else f"plain question {i}"
        writer.append(Message.create("user", T0, text=said))
        writer.append(Message.create("assistant", T0, text=f"answer {i}"))
        writer.finalize(Message.create("summary", T0, text=f"**Pending:** item {i}"))
        writer.close()
        paths.append(writer.path)
    return paths


def holding_word(paths: list[Path]) -> set[str]:
    """What ``grep -rilw WORD`` finds: the ids of the files holding WORD."""
    pattern = re.compile(rf"\b{WORD}\b", re.IGNORECASE)
    return {p.stem for p in paths if pattern.search(p.read_text(encoding="utf-8"))}


def index_processes(home: Path) -> list[int]:
    """The pids of the processes reading the words of ``home``'s index."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"chatloop.store.index_text" in argv and str(home).encode() in argv:
            found.append(int(entry.name))
    return found


def wait_gone(home: Path, limit: float = 120.0) -> None:
    """Until no process reads ``home``'s words (each ends once they are indexed)."""
    deadline = time.monotonic() + limit
    while index_processes(home):
        assert time.monotonic() < deadline, "a background indexing process never ended"
        time.sleep(0.05)


def shown(row: SessionRow) -> tuple[object, ...]:
    """What a listing shows of a row that a glance can say (all but the preview)."""
    return (row.number, row.id, row.title, row.status, row.queries, row.has_summary)


def lose_index(home: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        (home / (INDEX_FILE + suffix)).unlink(missing_ok=True)


@pytest.mark.parametrize("parallel", [False, True], ids=["here", "in-workers"])
def test_a_listing_after_the_index_is_lost_reads_heads_and_a_search_every_word(
    store: Store, monkeypatch: pytest.MonkeyPatch, parallel: bool
) -> None:
    from chatloop.store import index_build

    paths = finalized(store, GLANCE_FROM + 16)
    # (many files are glanced by worker processes: here from the first file on)
    monkeypatch.setattr(index_build, "GLANCE_PARALLEL", 1 if parallel else 10**9)
    with Index(store) as index:
        index.rebuild()  # every file read in full: what a listing must show
        full = index.list_sessions(all_projects=True)
    wait_gone(store.root)
    lose_index(store.root)
    read: list[str] = []
    scan = index_scan.scan_file

    def counted(path: str, words: object = None):  # type: ignore[no-untyped-def]
        read.append(path)
        return scan(path, words)  # type: ignore[arg-type]

    monkeypatch.setattr(index_scan, "scan_file", counted)
    with Index(store) as index:
        assert index.sync() == len(paths)
        assert read == []  # no file was read past its front matter here
        listed = index.list_sessions(all_projects=True)
        assert [shown(r) for r in listed] == [shown(r) for r in full]
        assert {r.id: r.preview for r in listed}.keys() == {r.id for r in full}
        hits = index.search_sessions(WORD, all_projects=True, limit=1000)
        assert {r.id for r in hits} == holding_word(paths)  # every word, none missed
        assert index.text_pending() == 0
        assert index.list_sessions(all_projects=True) == full  # previews read too
    wait_gone(store.root)


def test_a_listing_answers_while_the_words_are_indexed_and_a_search_says_it_waits(
    store: Store,
) -> None:
    paths = finalized(store, GLANCE_FROM + 16)
    env = {**os.environ, "CHATLOOP_HOME": str(store.root), "CHATLOOP_CONFIG": ""}
    lose_index(store.root)
    held = IndexFile(store.root / INDEX_FILE)
    lock = held.build_lock()
    lock.__enter__()  # a neighbour indexing the words: nobody else may
    try:
        listing = subprocess.run(
            [sys.executable, "-m", "chatloop.cli", "sessions", "--all", "--limit", "1000"],
            cwd=store.cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert listing.returncode == 0, listing.stderr
        assert f"words of {len(paths)} sessions are still being indexed" in listing.stderr
        assert "(untitled)" in listing.stdout and "Traceback" not in listing.stderr
        assert sum(line.strip()[:1].isdigit() for line in listing.stdout.splitlines()) == len(paths)
        search = subprocess.Popen(
            [sys.executable, "-m", "chatloop.cli", "search", WORD, "--all", "--json"],
            cwd=store.cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert search.stderr is not None
        first = search.stderr.readline()  # it says it waits, though stderr is a pipe
        assert "waiting for the words of" in first and "sessions to be indexed" in first
    finally:
        lock.__exit__(None, None, None)
        held.close()
    out, err = search.communicate(timeout=120)
    assert search.returncode == 0, err
    import json

    assert {hit["id"] for hit in json.loads(out)} == holding_word(paths)
    wait_gone(store.root)
