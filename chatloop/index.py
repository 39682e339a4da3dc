"""A SQLite cache of sessions for fast listing and full-text search.

The files are the truth; this is a cache. Deleting ``index.db`` loses
nothing: it is rebuilt from the files when missing, corrupt or stale (a file
whose size or mtime differs from its row). Rows are kept per file path; an
FTS5 table holds the text of every message.

Session numbers: within a project, 1 is the most recently updated session
that is closed or interrupted; the live session (still ``open`` and locked
by a running chatloop) gets no number. ``list_sessions`` is the one place
that numbers them.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import sqlite3
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from chatloop.config import DEFAULT_PREVIEW_CHARS
from chatloop.errors import NotFound
from chatloop.fsio import FILE_MODE, ensure_dir, is_locked
from chatloop.ids import validate_session_id
from chatloop.store import Store
from chatloop.transcript import Message, ParseResult

SCHEMA_VERSION = "1"
INDEX_FILE = "index.db"
BUSY_TIMEOUT_MS = 5000
Progress = Callable[[int, int], None]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS info(key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS sessions(
    path TEXT PRIMARY KEY, id TEXT NOT NULL, project TEXT NOT NULL, title TEXT, agent TEXT,
    agent_path TEXT, model TEXT, created TEXT, updated TEXT, status TEXT, queries INTEGER,
    tokens_in INTEGER, tokens_out INTEGER, restoration_tokens INTEGER, parent_id TEXT,
    parent_file TEXT, git_branch TEXT, preview TEXT, has_summary INTEGER, legacy INTEGER,
    problems INTEGER, size INTEGER, mtime_ns INTEGER);
CREATE INDEX IF NOT EXISTS sessions_by_project ON sessions(project, updated);
CREATE INDEX IF NOT EXISTS sessions_by_id ON sessions(id);
CREATE VIRTUAL TABLE IF NOT EXISTS messages USING fts5(
    path UNINDEXED, seq UNINDEXED, role UNINDEXED, text, tokenize='unicode61');
"""


@dataclass(frozen=True)
class SessionRow:
    """One session as listed. ``number`` is None for a live session."""

    number: int | None
    id: str
    path: str
    project: str
    title: str
    agent: str
    agent_path: str
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
        """Bring rows up to date with the files; returns how many files were (re)read."""
        files = {
            e.path: (e.stat(follow_symlinks=False), e)
            for e in self.store.session_files(all_projects)
        }
        projects = {self.store.project} if not all_projects else None
        known = {
            path: (size, mtime)
            for path, project, size, mtime in self._db.execute(
                "SELECT path, project, size, mtime_ns FROM sessions"
            )
            if projects is None or project in projects
        }
        stale = [p for p, (st, _) in files.items() if known.get(p) != (st.st_size, st.st_mtime_ns)]
        gone = [p for p in known if p not in files]
        with self._db:
            for path in gone:
                self._forget(path)
            for done, path in enumerate(stale, 1):
                st = files[path][0]
                self._store_row(Path(path), self.store.read(Path(path)), st.st_size, st.st_mtime_ns)
                if progress:
                    progress(done, len(stale))
        return len(stale)

    def rebuild(self, progress: Progress | None = None) -> int:
        """Drop everything and re-read every session file of every project."""
        self._db.close()
        _remove_db(self.path)
        self._db = self._connect()
        return self.sync(all_projects=True, progress=progress)

    # -- reading
    def list_sessions(
        self, all_projects: bool = False, limit: int | None = None
    ) -> list[SessionRow]:
        """Sessions, most recently updated first, numbered per project (see module doc)."""
        sql = "SELECT * FROM sessions"
        args: list[object] = []
        if not all_projects:
            sql += " WHERE project = ?"
            args.append(self.store.project)
        sql += " ORDER BY updated DESC, id DESC"
        rows: list[SessionRow] = []
        counters: dict[str, int] = {}
        for raw in self._db.execute(sql, args):
            live = raw["status"] == "open" and is_locked(Path(raw["path"]))
            number = None
            if not live:
                counters[raw["project"]] = number = counters.get(raw["project"], 0) + 1
            rows.append(_row(raw, number, live))
            if limit is not None and len(rows) >= limit:
                break
        return rows

    def search(self, query: str, all_projects: bool = False, limit: int = 50) -> list[SearchHit]:
        """Full-text search over every message; the query is taken as plain words."""
        by_path = {r.path: r for r in self.list_sessions(all_projects)}
        terms = " ".join('"' + word.replace('"', '""') + '"' for word in query.split())
        if not terms:
            return []
        hits: list[SearchHit] = []
        cursor = self._db.execute(
            "SELECT path, role, snippet(messages, 3, '[', ']', '…', 12) AS snip FROM messages "
            "WHERE messages MATCH ? ORDER BY rank",
            (terms,),
        )
        for raw in cursor:
            row = by_path.get(raw["path"])
            if row is not None:
                hits.append(SearchHit(row, raw["role"], " ".join(raw["snip"].split())))
                if len(hits) >= limit:
                    break
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
    def _connect(self) -> sqlite3.Connection:
        ensure_dir(self.path.parent)
        for attempt in (1, 2):
            _precreate(self.path)
            db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000)
            try:
                _prepare(db)
                return db
            except sqlite3.DatabaseError:
                # A cache that cannot be read is rebuilt, never repaired.
                db.close()
                if attempt == 2:
                    raise
                _remove_db(self.path)
        raise AssertionError("unreachable")

    def _forget(self, path: str) -> None:
        self._db.execute("DELETE FROM sessions WHERE path = ?", (path,))
        self._db.execute("DELETE FROM messages WHERE path = ?", (path,))

    def _store_row(self, path: Path, result: ParseResult, size: int, mtime_ns: int) -> None:
        self._forget(str(path))
        session = result.session
        meta = session.meta
        messages = session.messages
        updated = max([meta.updated, *(m.at for m in messages)]).isoformat()
        preview = next((m.text for m in reversed(messages) if m.is_query), "")
        self._db.execute(
            "INSERT INTO sessions VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                str(path), meta.id or path.stem, path.parent.name, meta.title, meta.agent,
                meta.agent_path, meta.model, meta.created.isoformat(), updated, meta.status,
                session.query_count, meta.tokens_in, meta.tokens_out, meta.restoration_tokens,
                meta.parent_id, meta.parent_file, meta.git_branch,
                " ".join(preview.split())[:DEFAULT_PREVIEW_CHARS], session.summary is not None,
                result.legacy, len(result.problems), size, mtime_ns,
            ),
        )  # fmt: skip
        self._db.executemany(
            "INSERT INTO messages VALUES (?,?,?,?)",
            ((str(path), seq, m.role, text) for seq, m, text in _searchable(messages)),
        )


def _searchable(messages: Iterable[Message]) -> Iterable[tuple[int, Message, str]]:
    for seq, m in enumerate(messages):
        bits = [m.text, *(t.text for t in m.thinking)]
        bits += [f"{c.name} {c.arguments}" for c in m.tool_calls]
        bits += [r.content for r in m.tool_results]
        text = "\n".join(b for b in bits if b)
        if text:
            yield seq, m, text


def _row(raw: sqlite3.Row, number: int | None, live: bool) -> SessionRow:
    status = raw["status"]
    if status == "open" and not live:
        status = "interrupted"
    return SessionRow(
        number=number, id=raw["id"], path=raw["path"], project=raw["project"],
        title=raw["title"] or "", agent=raw["agent"] or "", agent_path=raw["agent_path"] or "",
        model=raw["model"] or "", created=raw["created"], updated=raw["updated"], status=status,
        queries=raw["queries"], tokens_in=raw["tokens_in"], tokens_out=raw["tokens_out"],
        restoration_tokens=raw["restoration_tokens"], parent_id=raw["parent_id"],
        parent_file=raw["parent_file"], git_branch=raw["git_branch"], preview=raw["preview"] or "",
        has_summary=bool(raw["has_summary"]), legacy=bool(raw["legacy"]),
        problems=raw["problems"],
    )  # fmt: skip


def _prepare(db: sqlite3.Connection) -> None:
    """WAL, busy timeout, schema; raises DatabaseError for a corrupt or foreign file."""
    db.row_factory = sqlite3.Row
    db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    db.execute("PRAGMA journal_mode = WAL")
    db.executescript(_SCHEMA)
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
