"""The index's SQLite file, kept usable whatever happens to it.

``IndexFile`` owns the one connection to ``index.db`` and every decision about
the file itself: how it is connected (created 0600, WAL, busy timeout, schema
checked), what an error means (``trouble``: busy, corrupt, unusable, or a bug),
replacing a corrupt file (never repairing it; never removing it first: a
neighbour must not find it missing), falling back to an index in memory when
the file cannot be opened or written (a read-only home) or stays busy,
waiting out a neighbour's write (``write``), one build at a time per home
(``build_lock``) and the side files builds are written to (``side``).

It knows nothing of sessions beyond the schema: what goes in the rows is
``index_build``'s, what is read from them ``index_query``'s.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from chatloop.store.fsio import FILE_MODE, ensure_dir, lock_path, pid_alive

__all__ = ["INDEX_FILE", "IndexFile", "IndexFileError", "not_waiting", "trouble"]

SCHEMA_VERSION = "12"  # 12: NULL queries, updated, has_summary, tokens: not yet known (a glance)
INDEX_FILE = "index.db"
BUSY_TIMEOUT_MS = 5000
WRITE_WAIT_S = 120.0  # how long a write waits for a neighbour's (each try waits BUSY_TIMEOUT_MS)
BUILD_WAIT_S = 600.0  # how long a build waits for a neighbour's build before building anyway
STALE_SIDE_S = 3600  # a side file this old was left by a process that died
T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS info(key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS sessions(
    num INTEGER PRIMARY KEY, path TEXT NOT NULL UNIQUE, id TEXT NOT NULL, project TEXT NOT NULL,
    title TEXT, agent TEXT, agent_name TEXT, model TEXT, created TEXT, updated TEXT, status TEXT,
    queries INTEGER, tokens_in INTEGER, tokens_out INTEGER, restoration_tokens INTEGER,
    parent_id TEXT, parent_file TEXT, git_branch TEXT, preview TEXT, has_summary INTEGER,
    legacy INTEGER, problems INTEGER, size INTEGER, mtime_ns INTEGER, forked_at INTEGER,
    tail TEXT, updated_at REAL, created_at REAL);
CREATE INDEX IF NOT EXISTS sessions_by_project ON sessions(project, updated_at, mtime_ns, id);
CREATE INDEX IF NOT EXISTS sessions_by_id ON sessions(id);
CREATE INDEX IF NOT EXISTS sessions_by_tail ON sessions(tail);
CREATE INDEX IF NOT EXISTS sessions_continuing ON sessions(project)
    WHERE parent_id IS NOT NULL AND forked_at IS NULL;
CREATE TABLE IF NOT EXISTS chunks(
    id INTEGER PRIMARY KEY AUTOINCREMENT, num INTEGER NOT NULL, size INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS chunks_by_num ON chunks(num);
CREATE VIRTUAL TABLE IF NOT EXISTS texts USING fts5(
    text, content='', detail=full, tokenize='unicode61');
CREATE TABLE IF NOT EXISTS untexted(num INTEGER PRIMARY KEY);
"""
_OPEN_SESSIONS = (
    "CREATE INDEX IF NOT EXISTS sessions_open ON sessions(project) WHERE status = 'open'"
)


class IndexFile:
    """``index.db`` (or, ``bulk``, a side file a build writes without a journal), open:
    ``db`` is the connection, ``in_memory`` says it is an index in memory instead (the
    same tables, just not kept). Whoever holds it may find ``db`` replaced after a
    ``guarded`` action: read it afresh each time, never keep it."""

    def __init__(self, path: Path, bulk: bool = False, memory: bool = False) -> None:
        self.path = path
        self.in_memory = memory  # (``memory``: never opened or made, as for a home not made)
        self.db = _memory_db() if memory else _connect(path, bulk=True) if bulk else self._open()

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self.db.close()

    def guarded(self, action: Callable[[], T], refill: Callable[[], object]) -> T:
        """Run ``action``; if the index turns out corrupt, replace it and ``refill`` it
        (read the files again) before running it again; if it is unusable or stays
        busy, go on in memory (refilled the same way)."""
        refilling = False
        for attempt in range(4):
            try:
                if refilling:
                    refill()
                return action()
            except (sqlite3.Error, IndexFileError) as exc:
                found = trouble(exc)
                if self.in_memory or found is None:
                    raise
                self.end_transaction()
                if found == "busy" and attempt < 2:
                    time.sleep(0.1 * (attempt + 1))
                    continue
                self.close()
                if found == "corrupt" and attempt < 2:
                    self.db = self._open()
                else:
                    self.db, self.in_memory = _memory_db(), True
                refilling = True
        raise AssertionError("unreachable")

    def empty_memory(self) -> None:
        """An index in memory starts again empty (its rebuild)."""
        self.db.close()
        self.db = _memory_db()

    @contextlib.contextmanager
    def write(self) -> Iterator[None]:
        """One write transaction, its lock taken up front (a neighbour's write is
        waited for, up to WRITE_WAIT_S), rolled back on any error."""
        deadline = time.monotonic() + WRITE_WAIT_S
        while True:
            try:
                self.db.execute("BEGIN IMMEDIATE")
                break
            except sqlite3.OperationalError as exc:
                if trouble(exc) != "busy" or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        try:
            yield
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def end_transaction(self) -> None:
        """Roll back whatever transaction is open (after an error in it)."""
        with contextlib.suppress(sqlite3.Error):
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")

    @contextlib.contextmanager
    def build_lock(self, waiting: Callable[[], None] | None = None) -> Iterator[None]:
        """One build at a time per home (``index.db.lock``, released when its holder
        exits, however it exits). Only spares neighbours duplicate work: a build
        that cannot take it in BUILD_WAIT_S, or cannot create it, builds anyway.
        ``waiting`` is called while a neighbour holds it (a progress line)."""
        try:
            flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(lock_path(self.path), flags, FILE_MODE)
        except OSError:
            yield
            return
        try:
            deadline = time.monotonic() + BUILD_WAIT_S
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        break
                    if waiting is not None:
                        waiting()
                    time.sleep(0.05)
                except OSError:
                    break
            yield
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def side(self) -> Iterator[IndexFile]:
        """A side file of this process's own beside ``index.db``, written without a
        journal (it is a cache: a crash leaves only the side file), removed when
        done; side files of builds whose process died go first: at once when the
        pid in the name is no live process, else after ``STALE_SIDE_S`` (a pid
        reused since)."""
        with contextlib.suppress(OSError):
            for stale in self.path.parent.glob(INDEX_FILE + ".new*"):
                with contextlib.suppress(OSError):
                    if _dead_side(stale.name) or (
                        time.time() - stale.lstat().st_mtime > STALE_SIDE_S
                    ):
                        stale.unlink()
        path = self._side_path()
        try:
            side = IndexFile(path, bulk=True)
            try:
                yield side
            finally:
                side.db.close()
        finally:
            _remove_db(path)

    def _side_path(self) -> Path:
        return self.path.with_name(f"{INDEX_FILE}.new-{os.getpid()}-{os.urandom(4).hex()}")

    def _open(self) -> sqlite3.Connection:
        """``index.db``, ready to use; a corrupt one (or one of another schema) is
        replaced first. In memory if it cannot be opened or written."""
        for attempt in range(4):
            try:
                return _connect(self.path)
            except (sqlite3.Error, IndexFileError) as exc:
                found = trouble(exc)
                if found is None:
                    raise
                if found == "corrupt" and attempt < 2:
                    with contextlib.suppress(sqlite3.Error, IndexFileError, OSError):
                        self._replace_corrupt()
                    continue
                if found == "busy" and attempt < 3:
                    time.sleep(0.1 * (attempt + 1))
                    continue
                break
        self.in_memory = True
        return _memory_db()

    def _replace_corrupt(self) -> None:
        """A cache that cannot be read is replaced, never repaired: emptied in one
        transaction if SQLite can still write it, else a fresh empty file is renamed
        over it (never removed first: a neighbour must not find it missing)."""
        with self.build_lock():
            try:  # a neighbour may have replaced it while we waited
                with contextlib.closing(_connect(self.path)) as db:
                    if db.execute("PRAGMA quick_check").fetchone()[0] == "ok":
                        return
            except (sqlite3.Error, IndexFileError) as exc:
                if trouble(exc) != "corrupt":
                    return
            if self._empty_in_place():
                return
            fresh = self._side_path()
            _precreate(fresh)
            for suffix in ("-wal", "-shm"):  # they belong to the corrupt file
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(f"{self.path}{suffix}")
            os.replace(fresh, self.path)

    def _empty_in_place(self) -> bool:
        """Overwrite ``index.db`` with an empty index in one transaction; False when
        SQLite cannot even write it (the caller then renames a fresh file over it)."""
        try:
            with (
                contextlib.closing(_memory_db()) as empty,
                contextlib.closing(
                    sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000)
                ) as target,
            ):
                target.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
                empty.backup(target)
            _connect(self.path).close()
        except (sqlite3.Error, IndexFileError):
            return False
        return True


_UNWRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM)


class IndexFileError(Exception):
    """The index file (or its directory) may not be created: read-only, as trouble."""


class _SchemaChanged(sqlite3.DatabaseError):
    """The file is an index of another schema version: as good as corrupt."""


def trouble(exc: BaseException) -> str | None:
    """What an error says about the index: "busy" (a neighbour holds a lock: wait),
    "corrupt" (replace it), "unusable" (cannot open or write it: read-only, full,
    I/O error: work in memory), or None (a bug: let it show)."""
    if isinstance(exc, _SchemaChanged):
        return "corrupt"
    if isinstance(exc, IndexFileError):
        return "unusable"
    if isinstance(exc, (sqlite3.ProgrammingError, sqlite3.InterfaceError)):
        return None
    if not isinstance(exc, sqlite3.Error):
        return None
    code = (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF
    text = str(exc).lower()
    if code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED) or "locked" in text or "busy" in text:
        return "busy"
    if (
        code in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)
        or "malformed" in text
        or "not a database" in text
    ):
        return "corrupt"
    return "unusable"


def _connect(path: Path, bulk: bool = False) -> sqlite3.Connection:
    """A connection to the index file at ``path`` (created 0600 if missing), prepared."""
    try:
        ensure_dir(path.parent)
        _precreate(path)
    except OSError as exc:
        if exc.errno in _UNWRITABLE:  # a read-only home; anything else is an error
            raise IndexFileError(f"cannot create {path}: {exc}") from exc
        raise
    db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
    try:
        _prepare(db, bulk)
    except BaseException:
        db.close()
        raise
    return db


def _memory_db() -> sqlite3.Connection:
    """An empty index in memory, for a process that cannot use the file."""
    db = sqlite3.connect(":memory:", isolation_level=None)
    _prepare(db)
    return db


def _prepare(db: sqlite3.Connection, bulk: bool = False) -> None:
    """WAL (no journal and no syncing for a ``bulk`` build), busy timeout, schema;
    raises DatabaseError for a corrupt or foreign file (``_SchemaChanged`` for an
    index of another version)."""
    db.row_factory = sqlite3.Row
    db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    if db.execute("SELECT 1 FROM sqlite_master").fetchone() is None:
        # a new file: it can give back the pages its merged segments leave
        # (``index_build``'s incremental_vacuum; on an older file that does nothing)
        db.execute("PRAGMA auto_vacuum = INCREMENTAL")
    if bulk:
        db.execute("PRAGMA journal_mode = OFF")
        db.execute("PRAGMA synchronous = OFF")
        db.execute("PRAGMA cache_size = -16384")  # 16 MB: a 200 MB transcript stays small
    else:
        db.execute("PRAGMA journal_mode = WAL")
    if db.execute("SELECT 1 FROM sqlite_master WHERE name = 'info'").fetchone() is not None:
        version = db.execute("SELECT value FROM info WHERE key = 'schema'").fetchone()
        if version is not None and version[0] != SCHEMA_VERSION:  # before its tables are
            raise _SchemaChanged("schema version changed")  # touched: they may differ
    db.executescript(_SCHEMA)
    if db.execute("SELECT 1 FROM sqlite_master WHERE name = 'sessions_open'").fetchone() is None:
        # added after schema 7 was out (an older chatloop's rebuild leaves it out): made
        # when the index can be written at once, never waited for; without it, search
        # finds the sessions still open by reading every row of the project
        with not_waiting(db), contextlib.suppress(sqlite3.OperationalError):
            db.execute(_OPEN_SESSIONS)
    if bulk:  # segments are merged once, by the 'optimize' that ends a rebuild
        db.execute("INSERT INTO texts(texts, rank) VALUES ('automerge', 0)")
    version = db.execute("SELECT value FROM info WHERE key = 'schema'").fetchone()
    if version is None:  # a new file (a neighbour may be writing the same row)
        db.execute("INSERT OR IGNORE INTO info VALUES ('schema', ?)", (SCHEMA_VERSION,))
        version = db.execute("SELECT value FROM info WHERE key = 'schema'").fetchone()
    if version is None or version[0] != SCHEMA_VERSION:
        raise _SchemaChanged("schema version changed")
    db.execute("SELECT count(*) FROM sessions").fetchone()


@contextlib.contextmanager
def not_waiting(db: sqlite3.Connection) -> Iterator[None]:
    """Statements that are worth doing only if the index can be written at once: a
    busy neighbour makes them fail at once instead of after the busy timeout."""
    db.execute("PRAGMA busy_timeout = 0")
    try:
        yield
    finally:
        db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")


def _precreate(path: Path) -> None:
    """Create the database file 0600 ourselves, so SQLite's WAL files inherit that mode."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE))


def _dead_side(name: str) -> bool:
    """True when ``name`` is a side file (``index.db.new-PID-xxxxxxxx``, or its
    ``-wal``/``-shm``/``-journal``) of a process that is no longer alive."""
    pid = name.removeprefix(INDEX_FILE + ".new-").split("-")[0]
    return name.startswith(INDEX_FILE + ".new-") and pid.isdigit() and not pid_alive(int(pid))


def _remove_db(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{path}{suffix}")
