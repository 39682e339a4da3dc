"""A SQLite cache of sessions for fast listing and full-text search.

The files are the truth; this is a cache. Deleting ``index.db`` loses
nothing: it is rebuilt from the files when missing, corrupt or stale (a file
whose size or mtime differs from its row). Rows are kept per file path and
skimmed by ``chatloop.format.skim`` (no full parse); an FTS5 table holds each
session's searchable text (``detail=none``: word queries, no phrases), so a
search names sessions, like ``grep -l``. The text is stored in chunks of about
a megabyte (rowid ``num << CHUNK_SHIFT | chunk``): a 200 MB transcript is
indexed, and ranked, without ever being one string in memory (all the words
of a query must then meet in one chunk: in practice, in one stretch of the
conversation).

Many stale files (a first run, ``reindex``) are scanned by a worker process
(one per spare core) while this process inserts, into a fresh file written
without a journal and renamed into place when complete.

Session numbers: within a project, 1 is the most recently updated session
that is closed or interrupted; the live session (still ``open`` and locked
by a running chatloop) gets no number. ``_numbered`` is the one place that
numbers them.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import re
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from chatloop.errors import NotFound
from chatloop.fsio import FILE_MODE, ensure_dir, is_locked
from chatloop.ids import validate_session_id
from chatloop.store import Store

if TYPE_CHECKING:  # the scanner (and YAML) load only when files must be read
    from chatloop.format import Skim as Scanned

SCHEMA_VERSION = "4"
INDEX_FILE = "index.db"
BUSY_TIMEOUT_MS = 5000
PARALLEL_FROM = 64  # stale files from which a sync scans in worker processes
STREAM_FROM = 4 << 20  # files this large are read here, their words inserted as they come
CHUNK_SHIFT = 16  # an FTS row's rowid is (session num << CHUNK_SHIFT) + chunk number
Progress = Callable[[int, int], None]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS info(key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS sessions(
    num INTEGER PRIMARY KEY, path TEXT NOT NULL UNIQUE, id TEXT NOT NULL, project TEXT NOT NULL,
    title TEXT, agent TEXT, agent_name TEXT, model TEXT, created TEXT, updated TEXT, status TEXT,
    queries INTEGER, tokens_in INTEGER, tokens_out INTEGER, restoration_tokens INTEGER,
    parent_id TEXT, parent_file TEXT, git_branch TEXT, preview TEXT, has_summary INTEGER,
    legacy INTEGER, problems INTEGER, size INTEGER, mtime_ns INTEGER);
CREATE INDEX IF NOT EXISTS sessions_by_project ON sessions(project, updated);
CREATE INDEX IF NOT EXISTS sessions_by_id ON sessions(id);
CREATE VIRTUAL TABLE IF NOT EXISTS texts USING fts5(text, detail=none, tokenize='unicode61');
"""
_ORDER = " ORDER BY updated DESC, id DESC"


@dataclass(frozen=True)
class SessionRow:
    """One session as listed. ``number`` is None for a live session."""

    number: int | None
    id: str
    path: str
    project: str
    title: str
    agent: str
    agent_name: str  # what the agent is found by (never a path to load)
    model: str
    created: str
    updated: str
    status: str
    queries: int
    tokens_in: int
    tokens_out: int
    restoration_tokens: int
    parent_id: str | None
    parent_file: str | None
    git_branch: str | None
    preview: str
    has_summary: bool
    legacy: bool
    problems: int


@dataclass(frozen=True)
class SearchHit:
    """A message that matched a search, with the session it belongs to."""

    session: SessionRow
    role: str
    snippet: str


class Index:
    """The cache of one chatloop home. ``sync`` before reading; it is cheap when fresh."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.path = store.root / INDEX_FILE
        self._db = self._connect()

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Index:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- freshness
    def sync(self, all_projects: bool = True, progress: Progress | None = None) -> int:
        """Bring rows up to date with the files; returns how many files were (re)read.
        An empty index with many files to read is built like ``rebuild`` does."""
        return self._refresh(all_projects, progress, may_rebuild=True)

    def _refresh(self, all_projects: bool, progress: Progress | None, may_rebuild: bool) -> int:
        from chatloop.index_scan import scan_files

        entries = self.store.session_files(all_projects)
        files = {e.path: e.stat(follow_symlinks=False) for e in entries}
        projects = {self.store.project} if not all_projects else None
        known = {
            path: (size, mtime)
            for path, project, size, mtime in self._db.execute(
                "SELECT path, project, size, mtime_ns FROM sessions"
            )
            if projects is None or project in projects
        }
        stale = [p for p, st in files.items() if known.get(p) != (st.st_size, st.st_mtime_ns)]
        gone = [p for p in known if p not in files]
        if may_rebuild and all_projects and not known and len(stale) >= PARALLEL_FROM:
            return self.rebuild(progress)
        big = [p for p in stale if files[p].st_size >= STREAM_FROM]
        small = [p for p in stale if files[p].st_size < STREAM_FROM]
        with self._db:
            for path in gone:
                self._forget(path)
            scanned_files = scan_files(small, parallel=len(small) >= PARALLEL_FROM)
            for done, (path, scanned) in enumerate(scanned_files, 1):
                st = files[path]
                if scanned is not None:
                    self._store_row(path, scanned, st.st_size, st.st_mtime_ns, path in known)
                if progress:
                    progress(done, len(stale))
            for done, path in enumerate(big, len(small) + 1):
                self._store_streaming(path, files[path], path in known)
                if progress:
                    progress(done, len(stale))
        return len(stale)

    def _store_streaming(self, path: str, st: os.stat_result, replacing: bool) -> None:
        """Index one large file, inserting its words chunk by chunk as they are read."""
        from chatloop.index_scan import scan_file

        if replacing:
            self._forget(path)
        num = int(self._db.execute("SELECT coalesce(max(num), 0) + 1 FROM sessions").fetchone()[0])
        chunks = [0]

        def insert(text: bytes) -> None:
            rowid = (num << CHUNK_SHIFT) + chunks[0]
            self._db.execute("INSERT INTO texts(rowid, text) VALUES (?, ?)", (rowid, text))
            chunks[0] += 1

        _, scanned = scan_file(path, insert)
        if scanned is None:
            self._db.execute("DELETE FROM texts WHERE rowid >= ? AND rowid < ?",
                             _chunk_range(num))  # fmt: skip
            return
        self._store_row(path, scanned, st.st_size, st.st_mtime_ns, False, num)

    def rebuild(self, progress: Progress | None = None) -> int:
        """Re-read every session file of every project into a fresh index.

        The new index is written to a side file without a journal (it is a
        cache: a crash leaves only the side file, removed next time) and
        renamed over the old one when complete."""
        self._db.close()
        fresh = self.path.with_name(INDEX_FILE + ".new")
        _remove_db(fresh)
        self._db = self._connect(fresh, bulk=True)
        try:
            count = self._refresh(True, progress, may_rebuild=False)
            with self._db:  # merged once here, not bit by bit during the inserts
                self._db.execute("INSERT INTO texts(texts) VALUES ('optimize')")
                self._db.execute("INSERT INTO texts(texts, rank) VALUES ('automerge', 4)")
        finally:
            self._db.close()
        _remove_db(self.path)
        os.replace(fresh, self.path)
        self._db = self._connect()
        return count

    # -- reading
    def list_sessions(
        self, all_projects: bool = False, limit: int | None = None
    ) -> list[SessionRow]:
        """Sessions, most recently updated first, numbered per project (see module doc)."""
        sql, args = "SELECT * FROM sessions", []
        if not all_projects:
            sql, args = sql + " WHERE project = ?", [self.store.project]
        rows: list[SessionRow] = []
        for raw, number, live in _numbered(self._db.execute(sql + _ORDER, args)):
            rows.append(_row(raw, number, live))
            if limit is not None and len(rows) >= limit:
                break
        return rows

    def count(self, all_projects: bool = False) -> int:
        """How many sessions the index holds (in this project unless ``all_projects``)."""
        if all_projects:
            return int(self._db.execute("SELECT count(*) FROM sessions").fetchone()[0])
        sql = "SELECT count(*) FROM sessions WHERE project = ?"
        return int(self._db.execute(sql, (self.store.project,)).fetchone()[0])

    def search(self, query: str, all_projects: bool = False, limit: int = 50) -> list[SearchHit]:
        """Sessions whose text holds every word of ``query`` (case-insensitive, whole
        words; punctuation separates words), best match first, one hit per session.
        The snippet and role come from the message where the first word occurs."""
        from chatloop.index_scan import hit_in

        words = _WORD_RE.findall(query)
        if not words:
            return []
        terms = " ".join('"' + word + '"' for word in words)
        sql = (f"SELECT s.* FROM texts JOIN sessions s ON s.num = texts.rowid >> {CHUNK_SHIFT} "
               "WHERE texts MATCH ?")  # fmt: skip
        args: list[object] = [terms]
        if not all_projects:
            sql, args = sql + " AND s.project = ?", [terms, self.store.project]
        found: list[sqlite3.Row] = []
        seen: set[int] = set()
        for raw in self._db.execute(sql + " ORDER BY rank", args):  # best chunk first
            if raw["num"] not in seen:
                seen.add(raw["num"])
                found.append(raw)
                if len(found) >= limit:
                    break
        if not found:
            return []
        numbers = {
            raw["path"]: (number, live)
            for raw, number, live in _numbered(
                self._db.execute("SELECT path, project, status FROM sessions" + _ORDER)
            )
        }
        hits = []
        for raw in found:
            number, live = numbers.get(raw["path"], (None, False))
            role, snippet = hit_in(Path(raw["path"]), words[0])
            hits.append(SearchHit(_row(raw, number, live), role, snippet))
        return hits

    def find(self, ref: str, all_projects: bool = False) -> SessionRow:
        """The session a person means by ``ref``: a number (1 = most recent in this
        project) or an id (any project). Raises NotFound naming the closest ones."""
        rows = self.list_sessions(all_projects=True)
        ref = ref.strip()
        if ref.isdigit():
            numbered = [r for r in rows if r.project == self.store.project and r.number]
            if 1 <= int(ref) <= len(numbered):
                return numbered[int(ref) - 1]
            raise NotFound(
                f"There is no session number {ref} in this project ({len(numbered)} sessions)",
                "`chatloop sessions` lists them with their numbers.",
            )
        validate_session_id(ref)
        exact = [r for r in rows if r.id == ref]
        if not exact and len(ref) >= 4:
            exact = [r for r in rows if r.id.startswith(ref)]
        if len(exact) == 1:
            return exact[0]
        if len(exact) > 1:
            names = ", ".join(r.id for r in exact[:5])
            raise NotFound(f"{ref!r} matches several sessions: {names}", "Give more of the id.")
        close = difflib.get_close_matches(ref, [r.id for r in rows], n=3, cutoff=0.5)
        hint = (
            f"Did you mean {' or '.join(close)}?"
            if close
            else "`chatloop sessions --all` lists them."
        )
        raise NotFound(f"No session with id {ref!r}", hint)

    def lineage(self, row: SessionRow) -> tuple[list[SessionRow], dict[str, list[SessionRow]]]:
        """The compact/resume chain around ``row``: its ancestors (root first, ``row``
        last) and every session's children, by id, across all projects."""
        rows = self.list_sessions(all_projects=True)
        by_id = {r.id: r for r in rows}
        children: dict[str, list[SessionRow]] = {}
        for r in sorted(rows, key=lambda r: r.created):
            if r.parent_id:
                children.setdefault(r.parent_id, []).append(r)
        chain = [row]
        while chain[0].parent_id in by_id and by_id[chain[0].parent_id] not in chain:
            chain.insert(0, by_id[chain[0].parent_id])  # type: ignore[index]
        return chain, children

    # -- internals
    def _connect(self, path: Path | None = None, bulk: bool = False) -> sqlite3.Connection:
        path = path or self.path
        ensure_dir(path.parent)
        for attempt in (1, 2):
            _precreate(path)
            db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000)
            try:
                _prepare(db, bulk)
                return db
            except sqlite3.DatabaseError:
                # A cache that cannot be read is rebuilt, never repaired.
                db.close()
                if attempt == 2:
                    raise
                _remove_db(path)
        raise AssertionError("unreachable")

    def _forget(self, path: str) -> None:
        nums = self._db.execute("SELECT num FROM sessions WHERE path = ?", (path,)).fetchall()
        for (num,) in nums:
            self._db.execute("DELETE FROM texts WHERE rowid >= ? AND rowid < ?",
                             _chunk_range(num))  # fmt: skip
        self._db.execute("DELETE FROM sessions WHERE path = ?", (path,))

    def _store_row(
        self, path: str, scanned: Scanned, size: int, mtime_ns: int, replacing: bool,
        num: int | None = None,
    ) -> None:  # fmt: skip
        """The session's row (numbered ``num`` when its words were already inserted by
        ``_store_streaming``), and its words as one chunk unless they were."""
        if replacing:
            self._forget(path)
        meta = scanned.meta
        cursor = self._db.execute(
            "INSERT INTO sessions VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                num, path, meta.id or Path(path).stem, Path(path).parent.name, meta.title,
                meta.agent, meta.agent_ref, meta.model, meta.created.isoformat(),
                scanned.updated.isoformat(), meta.status, scanned.queries, meta.tokens_in,
                meta.tokens_out, meta.restoration_tokens, meta.parent_id, meta.parent_file,
                meta.git_branch, scanned.preview, scanned.has_summary, scanned.legacy,
                scanned.problems, size, mtime_ns,
            ),
        )  # fmt: skip
        if num is None and cursor.lastrowid is not None:
            self._db.execute(
                "INSERT INTO texts(rowid, text) VALUES (?, ?)",
                (cursor.lastrowid << CHUNK_SHIFT, scanned.text),
            )


def _chunk_range(num: int) -> tuple[int, int]:
    """The rowids of one session's FTS chunks: [start, end)."""
    return num << CHUNK_SHIFT, (num + 1) << CHUNK_SHIFT


_WORD_RE = re.compile(r"[^\W_]+")  # a word as FTS5's unicode61 sees it: "_" separates


def _numbered(
    raws: Iterator[sqlite3.Row],
) -> Iterator[tuple[sqlite3.Row, int | None, bool]]:
    """Rows in listing order with their number (None when live) and liveness."""
    counters: dict[str, int] = {}
    for raw in raws:
        live = raw["status"] == "open" and is_locked(Path(raw["path"]))
        number = None
        if not live:
            counters[raw["project"]] = number = counters.get(raw["project"], 0) + 1
        yield raw, number, live


def _row(raw: sqlite3.Row, number: int | None, live: bool) -> SessionRow:
    status = raw["status"]
    if status == "open" and not live:
        status = "interrupted"
    return SessionRow(
        number=number, id=raw["id"], path=raw["path"], project=raw["project"],
        title=raw["title"] or "", agent=raw["agent"] or "", agent_name=raw["agent_name"] or "",
        model=raw["model"] or "", created=raw["created"], updated=raw["updated"], status=status,
        queries=raw["queries"], tokens_in=raw["tokens_in"], tokens_out=raw["tokens_out"],
        restoration_tokens=raw["restoration_tokens"], parent_id=raw["parent_id"],
        parent_file=raw["parent_file"], git_branch=raw["git_branch"], preview=raw["preview"] or "",
        has_summary=bool(raw["has_summary"]), legacy=bool(raw["legacy"]),
        problems=raw["problems"],
    )  # fmt: skip


def _prepare(db: sqlite3.Connection, bulk: bool = False) -> None:
    """WAL (no journal and no syncing for a ``bulk`` build), busy timeout, schema;
    raises DatabaseError for a corrupt or foreign file."""
    db.row_factory = sqlite3.Row
    db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    if bulk:
        db.execute("PRAGMA journal_mode = OFF")
        db.execute("PRAGMA synchronous = OFF")
        db.execute("PRAGMA cache_size = -16384")  # 16 MB: a 200 MB transcript stays small
    else:
        db.execute("PRAGMA journal_mode = WAL")
    db.executescript(_SCHEMA)
    if bulk:  # segments are merged once, by the 'optimize' that ends a rebuild
        db.execute("INSERT INTO texts(texts, rank) VALUES ('automerge', 0)")
    version = db.execute("SELECT value FROM info WHERE key = 'schema'").fetchone()
    if version is None:
        with db:
            db.execute("INSERT INTO info VALUES ('schema', ?)", (SCHEMA_VERSION,))
    elif version[0] != SCHEMA_VERSION:
        raise sqlite3.DatabaseError("schema version changed")
    db.execute("SELECT count(*) FROM sessions").fetchone()


def _precreate(path: Path) -> None:
    """Create the database file 0600 ourselves, so SQLite's WAL files inherit that mode."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE))


def _remove_db(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{path}{suffix}")
