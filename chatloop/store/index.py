"""A SQLite cache of sessions for fast listing and full-text search.

The files are the truth; this is a cache. Deleting ``index.db`` loses
nothing: it is rebuilt from the files when missing, corrupt or stale (a file
whose size or mtime differs from its row). Every command looks at each file
(one ``stat``); a folder whose look equals the mark kept when its rows last
matched it is fresh without reading a row (see ``Index._mark``). Rows are kept
per file path and skimmed by ``chatloop.format.skim`` (no full parse). A *contentless* FTS5
table (``content=''``, ``detail=full``) indexes each session's searchable text
without storing a copy of it (the files hold it), so ``index.db`` stays a
fraction of the sessions' size and ranking (bm25) reads only the index. A
search names sessions, like ``grep -l``; the snippet is read from the file.
The text goes in as chunks of about a megabyte, each an FTS row listed in
``chunks`` with its session: a 200 MB transcript is indexed, and ranked,
without ever being one string in memory (all the words of a query must then
meet in one chunk: in practice, in one stretch of the conversation).

A contentless table cannot delete a row without its original text (SQLite
before 3.43), so a session read again gets new chunks and its old ones are
only unlisted: search joins through ``chunks``, so they are never found. Their
bytes are counted (``info.dead``); when the dead outweigh the live (and pass
DEAD_REBUILD bytes), the next sync rebuilds the index.

Many stale files (a first run, ``reindex``) are scanned by a worker process
(one per spare core) while this process inserts, into a fresh file written
without a journal and renamed into place when complete.

Session numbers: within a project, 1 is the most recently updated session
that is closed or interrupted; the live session (still ``open`` and locked
by a running chatloop) gets no number. ``_numbered`` numbers a listing as it
is read in order; ``Index._numbers_of`` numbers a few sessions (search hits) from
their places in the index's order, by the same rule (a test holds them to the
same numbers).
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import fcntl
import os
import re
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from chatloop.errors import NotFound
from chatloop.ids import MIN_HANDLE, handle_between, is_handle, tail_of, validate_session_id
from chatloop.store.fsio import FILE_MODE, ensure_dir, is_locked, lock_path
from chatloop.store.rows import SearchHit, SessionRow, fork_point, seconds
from chatloop.store.store import FolderLook, Store

if TYPE_CHECKING:  # the scanner (and YAML) load only when files must be read
    from chatloop.format import Skim as Scanned
    from chatloop.store.lookahead import LookAhead, Marks

SCHEMA_VERSION = "9"
INDEX_FILE = "index.db"
BUSY_TIMEOUT_MS = 5000
PARALLEL_FROM = 64  # stale files from which a sync scans in worker processes
STREAM_FROM = 4 << 20  # files this large are read here, their words inserted as they come
DEAD_REBUILD = 32 << 20  # unlisted chunk bytes from which a sync may rebuild the index
WRITE_WAIT_S = 120.0  # how long a write waits for a neighbour's (each try waits BUSY_TIMEOUT_MS)
BUILD_WAIT_S = 600.0  # how long a build waits for a neighbour's build before building anyway
BATCH_FILES = 256  # rows written per transaction (a neighbour waits at most one batch)
BATCH_BYTES = 32 << 20  # or this much text, whichever comes first
STALE_SIDE_S = 3600  # a side file this old was left by a process that died
Progress = Callable[[int, int], None]
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
CREATE TABLE IF NOT EXISTS chunks(
    id INTEGER PRIMARY KEY AUTOINCREMENT, num INTEGER NOT NULL, size INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS chunks_by_num ON chunks(num);
CREATE VIRTUAL TABLE IF NOT EXISTS texts USING fts5(
    text, content='', detail=full, tokenize='unicode61');
"""
_OPEN_SESSIONS = ("CREATE INDEX IF NOT EXISTS sessions_open ON sessions(project) "
                  "WHERE status = 'open'")  # fmt: skip
_MARK, _MARK_END = "folder:", "folder;"  # info keys of folder marks (";" follows ":")
_EVERY = "folders:every"  # kept when every project's rows were checked at once
# A project's mark, and the mark of the whole home, go whenever any process (an older
# chatloop too) writes or removes one of the project's rows (see Index._mark).
_TRIGGERS = tuple(
    f"CREATE TRIGGER IF NOT EXISTS unmark_on_{event.lower()} AFTER {event} ON sessions "
    f"BEGIN DELETE FROM info WHERE key IN ({keys}, '{_EVERY}'); END"
    for event, keys in (
        ("INSERT", f"'{_MARK}' || NEW.project"),
        ("DELETE", f"'{_MARK}' || OLD.project"),
        ("UPDATE", f"'{_MARK}' || OLD.project, '{_MARK}' || NEW.project"),
    )
)
# Most recent first, by the moment (``updated_at``: seconds since the epoch), not by the
# ISO text, whose offsets differ between sessions written under different time zones.
# Times are whole seconds: within one, the file written last (a compaction's child,
# written after its parent closed) comes first.
_ORDER = " ORDER BY updated_at DESC, mtime_ns DESC, id DESC, num DESC"  # total


class Index:
    """The cache of one chatloop home. ``sync`` before reading; it is cheap when fresh.

    Neighbours share it safely: rows are written in short transactions, a
    rebuild is built in a side file of its own and copied into ``index.db``
    in one transaction (readers see the old index or the new one, never a
    missing or half-written one), "busy" is waited out, and only a file that
    SQLite calls corrupt (or of another schema) is replaced. When the index
    cannot be opened or written (a read-only home), or stays busy, this
    process works from an in-memory index read from the files
    (``in_memory``): the same rows, just not kept."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.path = store.root / INDEX_FILE
        self.in_memory = False
        self._db = self._open()

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self._db.close()

    def __enter__(self) -> Index:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- freshness
    def sync(self, all_projects: bool = True, progress: Progress | None = None,
             ahead: LookAhead | None = None) -> int:  # fmt: skip
        """Bring rows up to date with the files; returns how many files were (re)read.
        An empty index with many files to read is built like ``rebuild`` does, and so
        is one whose unlisted chunks outweigh the listed ones (see module doc). With
        ``ahead`` (a look started earlier, of the same projects), a fresh index is
        known from its marks without looking again."""
        def refresh() -> int:
            if ahead is not None and ahead.all_projects == all_projects and not self.in_memory:
                marks = ahead.marks()
                if marks is not None and self._marked(marks, all_projects):
                    return 0  # fresh as of the look taken ahead
            return self._refresh(all_projects, progress, may_rebuild=True)

        count = self._guarded(refresh)
        if not self.in_memory and self._bloated():
            self.rebuild(progress)
        return count

    def _bloated(self) -> bool:
        dead = self._db.execute("SELECT value FROM info WHERE key = 'dead'").fetchone()
        if dead is None or int(dead[0]) < DEAD_REBUILD:
            return False
        live = self._db.execute("SELECT coalesce(sum(size), 0) FROM chunks").fetchone()[0]
        return int(dead[0]) > int(live)

    def _refresh(self, all_projects: bool, progress: Progress | None, may_rebuild: bool) -> int:
        if self.in_memory:
            all_projects = True  # it starts empty: what is listed must all be read
        looks = self.store.look(all_projects)
        marks = [(look.name, look.mark) for look in looks]
        if not self.in_memory and self._marked(marks, all_projects):
            return 0  # fresh: no row is read (see _mark)
        known = self._known(all_projects)
        files = Store.session_stats(looks, known)
        stale = [p for p, st in files.items() if known.get(p) != (st.st_size, st.st_mtime_ns)]
        gone = [p for p in known if p not in files]
        cold = may_rebuild and all_projects and not known and not self.in_memory
        if cold and len(stale) >= PARALLEL_FROM:
            return self._build_cold(progress)
        if not stale and not gone:
            self._mark(looks, all_projects, files)
            return 0  # fresh: nothing is read, and the scanner (and YAML) never load
        from chatloop.store.index_scan import scan_files

        big = [p for p in stale if files[p].st_size >= STREAM_FROM]
        small = [p for p in stale if files[p].st_size < STREAM_FROM]
        if gone:
            with self._write():
                for path in gone:
                    self._forget(path)
        # Rows are written in batches, each its own short transaction: a neighbour
        # waiting to write waits for one batch, never for the whole scan. Every row
        # replaces whatever a neighbour wrote for the same file meanwhile.
        batch: list[tuple[str, Scanned]] = []
        batch_bytes = 0
        scanned_files = scan_files(small, parallel=len(small) >= PARALLEL_FROM)
        for done, (path, scanned) in enumerate(scanned_files, 1):
            if scanned is not None:
                batch.append((path, scanned))
                batch_bytes += len(scanned.text)
                if len(batch) >= BATCH_FILES or batch_bytes >= BATCH_BYTES:
                    self._store_batch(batch, files)
                    batch, batch_bytes = [], 0
            if progress:
                progress(done, len(stale))
        self._store_batch(batch, files)
        for done, path in enumerate(big, len(small) + 1):
            with self._write():
                self._store_streaming(path, files[path])
            if progress:
                progress(done, len(stale))
        self._mark(looks, all_projects, files)
        return len(stale)

    def _known(self, all_projects: bool) -> dict[str, tuple[int, int]]:
        """The (size, mtime) each row was read at, by path."""
        sql = "SELECT path, size, mtime_ns FROM sessions"
        rows = (self._db.execute(sql) if all_projects else
                self._db.execute(sql + " WHERE project = ?", (self.store.project,)))  # fmt: skip
        return {path: (size, mtime) for path, size, mtime in rows}

    # A folder's mark (``FolderLook.mark``) is kept in ``info`` when its rows were
    # seen to match that look exactly. A trigger removes it whenever a row of that
    # project is written or removed, by any process (older versions of chatloop
    # included), so a kept mark that equals a new look means the rows still match
    # the files: the listing reads no row to know it is fresh.

    def _marked(self, marks: Marks, all_projects: bool) -> bool:
        """Whether every folder looked at (its name and mark, as ``FolderLook`` has
        them) has the mark kept for it; for every project, also that the marks were
        kept by a sync of every project, with no row written since (so no project
        without a folder still has rows)."""
        return _same_marks(self._kept(all_projects, [name for name, _ in marks]), marks,
                           all_projects)  # fmt: skip

    def _kept(self, all_projects: bool, names: list[str]) -> dict[str, object]:
        """The marks kept in the index, by key: every project's (and ``_EVERY`` if an
        every-project sync kept them), or those of the folders ``names``."""
        if all_projects:
            return dict(self._db.execute(
                "SELECT key, value FROM info WHERE key >= ? AND key < ? OR key = ?",
                (_MARK, _MARK_END, _EVERY)).fetchall())  # fmt: skip
        return {_MARK + name: row[0] for name in names for row in self._db.execute(
            "SELECT value FROM info WHERE key = ?", (_MARK + name,))}  # fmt: skip

    def _mark(self, looks: list[FolderLook], all_projects: bool,
              files: dict[str, os.stat_result]) -> None:  # fmt: skip
        """Keep the marks of ``looks`` if the rows match the files they saw.

        Checked in the same write transaction (a neighbour may have written rows
        since), with the triggers that remove marks made sure of in it (an older
        chatloop's rebuild replaces the whole file, triggers included). Marks only
        spare work: when the index is busy or cannot be written, none is kept and
        nothing waits or fails."""
        if self.in_memory or not looks:
            return
        wanted = {path: (st.st_size, st.st_mtime_ns) for path, st in files.items()}
        db = self._db
        try:
            with _not_waiting(db):
                db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error:
            return
        try:
            if self._known(all_projects) == wanted:
                for trigger in _TRIGGERS:
                    db.execute(trigger)
                if all_projects:
                    db.execute("DELETE FROM info WHERE key >= ? AND key < ?", (_MARK, _MARK_END))
                    db.execute("INSERT OR REPLACE INTO info VALUES (?, '1')", (_EVERY,))
                db.executemany("INSERT OR REPLACE INTO info VALUES (?, ?)",
                               [(_MARK + look.name, look.mark) for look in looks])  # fmt: skip
            db.execute("COMMIT")
        except (sqlite3.Error, UnicodeError):  # (a folder name SQLite cannot hold: no mark)
            self._end_transaction()
        except BaseException:
            self._end_transaction()
            raise

    def _store_batch(
        self, batch: list[tuple[str, Scanned]], files: dict[str, os.stat_result]
    ) -> None:
        if not batch:
            return
        with self._write():
            for path, scanned in batch:
                st = files[path]
                self._store_row(path, scanned, st.st_size, st.st_mtime_ns)

    def _store_streaming(self, path: str, st: os.stat_result) -> None:
        """Index one large file, inserting its words chunk by chunk as they are read."""
        from chatloop.store.index_scan import scan_file

        self._forget(path)
        num = int(self._db.execute("SELECT coalesce(max(num), 0) + 1 FROM sessions").fetchone()[0])

        def insert(text: bytes) -> None:
            self._insert_text(num, text)

        _, scanned = scan_file(path, insert)
        if scanned is None:
            self._unlist(num)
            return
        self._store_row(path, scanned, st.st_size, st.st_mtime_ns, num)

    def rebuild(self, progress: Progress | None = None) -> int:
        """Re-read every session file of every project into a fresh index.

        The new index is written to a side file of this process's own, without
        a journal (it is a cache: a crash leaves only the side file, removed
        once it is clearly stale), then copied into ``index.db`` in one
        transaction. One rebuild runs at a time; neighbours read meanwhile."""
        return self._guarded(lambda: self._rebuild(progress))

    def _rebuild(self, progress: Progress | None) -> int:
        if self.in_memory:
            self._db.close()
            self._db = _memory_db()
            return self._refresh(True, progress, may_rebuild=False)
        with self._build_lock():
            return self._build(progress)

    def _build_cold(self, progress: Progress | None) -> int:
        """Build an empty index, once: a neighbour that built it meanwhile saves us
        the work (what changed since is then read like any stale file)."""
        with self._build_lock():
            if self._db.execute("SELECT 1 FROM sessions LIMIT 1").fetchone() is not None:
                return self._refresh(True, progress, may_rebuild=False)
            return self._build(progress)

    def _build(self, progress: Progress | None) -> int:
        """The rebuild proper; the caller holds the build lock (or gave up waiting)."""
        self._remove_stale_sides()
        main = self._db
        side = self.path.with_name(f"{INDEX_FILE}.new-{os.getpid()}-{os.urandom(4).hex()}")
        try:
            self._db = _connect(side, bulk=True)
            try:
                count = self._refresh(True, progress, may_rebuild=False)
                with self._write():  # merged once here, not bit by bit during the inserts
                    self._db.execute("INSERT INTO texts(texts) VALUES ('optimize')")
                    self._db.execute("INSERT INTO texts(texts, rank) VALUES ('automerge', 4)")
                self._db.execute("VACUUM")  # the merged-away segments' pages: half the file
                # One write transaction on index.db: its readers see the old rows or
                # the new ones; nobody's open connection is left on a removed file.
                self._db.backup(main)
            finally:
                self._db.close()
        finally:
            self._db = main
            _remove_db(side)
        return count

    def _remove_stale_sides(self) -> None:
        """Side files of builds whose process died (a live build's is younger)."""
        with contextlib.suppress(OSError):
            for side in self.path.parent.glob(INDEX_FILE + ".new*"):
                with contextlib.suppress(OSError):
                    if time.time() - side.lstat().st_mtime > STALE_SIDE_S:
                        side.unlink()

    @contextlib.contextmanager
    def _build_lock(self) -> Iterator[None]:
        """One build at a time per home (``index.db.lock``, released when its holder
        exits, however it exits). Only spares neighbours duplicate work: a build
        that cannot take it in BUILD_WAIT_S, or cannot create it, builds anyway."""
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
                    time.sleep(0.05)
                except OSError:
                    break
            yield
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def _write(self) -> Iterator[None]:
        """One write transaction, its lock taken up front (a neighbour's write is
        waited for, up to WRITE_WAIT_S), rolled back on any error."""
        deadline = time.monotonic() + WRITE_WAIT_S
        while True:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                break
            except sqlite3.OperationalError as exc:
                if _trouble(exc) != "busy" or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        try:
            yield
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def _guarded(self, action: Callable[[], T]) -> T:
        """Run ``action``; if the index turns out corrupt, replace it and read the files
        again; if it is unusable or stays busy, go on from the files in memory."""
        refill = False
        for attempt in range(4):
            try:
                if refill:
                    self._refresh(True, None, may_rebuild=True)
                return action()
            except (sqlite3.Error, _IndexFileError) as exc:
                trouble = _trouble(exc)
                if self.in_memory or trouble is None:
                    raise
                self._end_transaction()
                if trouble == "busy" and attempt < 2:
                    time.sleep(0.1 * (attempt + 1))
                    continue
                self.close()
                if trouble == "corrupt" and attempt < 2:
                    self._db = self._open()
                else:
                    self._db, self.in_memory = _memory_db(), True
                refill = True
        raise AssertionError("unreachable")

    def _end_transaction(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")

    # -- reading
    def list_sessions(
        self, all_projects: bool = False, limit: int | None = None, fold: bool = False
    ) -> list[SessionRow]:
        """Sessions, most recently updated first, numbered per project (see module doc).
        ``fold``: a session that a later one of its project continues (compact,
        resume; not a fork) is left out, unless that continuation is still being
        written (then the session keeps its place, under the number ``/resume``
        takes); each row's ``chain`` counts the files of its chain up to it. The
        numbers stay those of the whole list, so they mean the same folded or not."""
        return self.listing(all_projects, limit, fold)[0]

    def listing(
        self, all_projects: bool = False, limit: int | None = None, fold: bool = False,
        count: bool = False,
    ) -> tuple[list[SessionRow], int]:
        """``list_sessions``, and with ``count`` how many it would list without ``limit``
        (else 0). One pass over a few columns of the index, up to the last listed,
        decides the numbers and what is listed; only the listed rows are then read
        whole, and only their handles worked out: a listing of 50 costs little more
        at 10,000 sessions than at 100."""
        sql = ("SELECT num, id, project, status, path, parent_id, forked_at FROM sessions"
               + ("" if all_projects else " WHERE project = ?") + _ORDER)  # fmt: skip
        rows_in_order = self._db.execute(sql, () if all_projects else (self.store.project,))
        continued: dict[str, set[str]] = {}  # a session -> the projects of those continuing it
        picked: list[tuple[int, int | None, bool]] = []
        total = 0
        for raw, number, live in _numbered(rows_in_order):
            session, parent, project = raw["id"], raw["parent_id"], raw["project"]
            # rows come latest first: every session continuing this one was seen already
            if fold and parent and parent != session and not live and (
                    fork_point(raw["forked_at"]) is None):  # fmt: skip
                continued.setdefault(parent, set()).add(project)
            if fold and project in continued.get(session, ()):
                continue
            if limit is not None and len(picked) >= limit:
                break
            picked.append((raw["num"], number, live))
        if count:
            total = self._folded_count(all_projects) if fold else self.count(all_projects)
        links = _Links(self._db)  # every project's: a chain's length anywhere
        full = {raw["num"]: raw for raw in self._rows([num for num, _, _ in picked])}
        short = self.handles({full[num]["id"] for num, _, _ in picked if num in full})
        rows = []
        for num, number, live in picked:
            if num not in full:
                continue  # removed by a neighbour between the two reads
            row = _row(full[num], number, live, short.get(full[num]["id"], ""))
            rows.append(row._replace(chain=_chain_length(row.id, links)) if fold else row)
        return rows, total

    def _folded_count(self, all_projects: bool) -> int:
        """How many sessions a folded listing holds: all, less those a later session of
        their project continues that is not still being written (the continuations
        are found in SQL; only the few still open are checked for their lock)."""
        where = "" if all_projects else " AND c.project = ?"
        found = self._db.execute(
            "SELECT c.parent_id, c.status, c.path FROM sessions c WHERE c.parent_id IS NOT "
            "NULL AND c.forked_at IS NULL AND c.parent_id != c.id" + where + " AND EXISTS "
            "(SELECT 1 FROM sessions p WHERE p.id = c.parent_id AND p.project = c.project AND "
            "(p.updated_at, p.mtime_ns, p.id) < (c.updated_at, c.mtime_ns, c.id))",
            () if all_projects else (self.store.project,),
        ).fetchall()
        hidden = {parent for parent, status, path in found
                  if not (status == "open" and is_locked(Path(path)))}  # fmt: skip
        return self.count(all_projects) - len(hidden)

    def _rows(self, nums: list[int]) -> Iterator[sqlite3.Row]:
        """The whole rows of sessions ``nums`` (in batches: SQLite caps parameters)."""
        for start in range(0, len(nums), 500):
            batch = nums[start : start + 500]
            marks = ",".join("?" * len(batch))
            yield from self._db.execute(f"SELECT * FROM sessions WHERE num IN ({marks})", batch)

    def handles(self, wanted: set[str]) -> dict[str, str]:
        """The short handles of ``wanted`` ids, each unique across all projects (so a
        handle works from any directory), as ``chatloop.ids.handles`` makes them; only
        each one's neighbours in the index are read: a few handles cost little at any
        size."""
        out = {}
        for session in wanted:
            tail = tail_of(session)
            if tail is None:
                continue
            before = self._db.execute("SELECT max(tail) FROM sessions WHERE tail < ?",
                                      (tail,)).fetchone()[0]  # fmt: skip
            after = self._db.execute("SELECT min(tail) FROM sessions WHERE tail > ?",
                                     (tail,)).fetchone()[0]  # fmt: skip
            out[session] = handle_between(tail, before or "", after or "")
        return out

    def count(self, all_projects: bool = False, fold: bool = False) -> int:
        """How many sessions the index holds (in this project unless ``all_projects``;
        ``fold``: as ``list_sessions`` lists them folded)."""
        if fold:
            return self._folded_count(all_projects)
        if all_projects:
            return int(self._db.execute("SELECT count(*) FROM sessions").fetchone()[0])
        sql = "SELECT count(*) FROM sessions WHERE project = ?"
        return int(self._db.execute(sql, (self.store.project,)).fetchone()[0])

    def search(self, query: str, all_projects: bool = False, limit: int = 50) -> list[SearchHit]:
        """``iter_search`` as a list."""
        return list(self.iter_search(query, all_projects, limit))

    def iter_search(
        self, query: str, all_projects: bool = False, limit: int = 50
    ) -> Iterator[SearchHit]:
        """Sessions whose text holds every word of ``query`` (case-insensitive, whole
        words; punctuation separates words), best match first (bm25 over the index
        alone), one hit per session, each yielded as soon as its snippet is read;
        sessions that hold the first word only in copies (summaries, restoration
        prompts) come after the others. The snippet and role come from the message
        where the first word occurs ("summary" or "restored" for a copy)."""
        yield from self.hits(self.search_sessions(query, all_projects=all_projects,
                                                  limit=limit), query)  # fmt: skip

    @staticmethod
    def hits(rows: list[SessionRow], query: str) -> Iterator[SearchHit]:
        """The hits of ``rows`` (``search_sessions``'s for ``query``): each with the
        message and snippet where the first word occurs, read from its file as it is
        yielded (the index is not touched); those that hold it only in copies last."""
        from chatloop.store.index_scan import hit_in, is_copy_label

        words = _WORD_RE.findall(query)
        if not words:
            return
        copies: list[SearchHit] = []  # sessions that hold the words only in copies: last
        for row in rows:
            role, snippet = hit_in(Path(row.path), words[0])
            hit = SearchHit(row, role, snippet)
            if is_copy_label(role):
                copies.append(hit)
            else:
                yield hit
        yield from copies

    def read_ahead(self, ahead: LookAhead, read: Callable[[], T]) -> T | None:
        """``read()`` (a listing, a search) done before any sync, while ``ahead`` (a look
        at every project) runs; None when its answer may not be used (then sync, and
        read again).

        ``read`` runs in one snapshot of the index, with the marks kept in it (keep it
        to the index: files are read after, outside the snapshot); its answer is
        returned only if those marks equal the look's. Marks are kept only
        with rows that matched a look, and go whenever a row is written, so the answer
        is the one a sync would have found nothing to re-read for. An index of the
        files in memory, a look of one project, no answer to come from it (then ``read``
        is not run), or any trouble with the index: None. ``read`` must only read."""
        if self.in_memory or not ahead.all_projects or not ahead.pending:
            return None
        db = self._db
        try:
            db.execute("BEGIN")  # one snapshot (from the first read) for marks and rows
            kept = self._kept(True, [])
            answer = read()
            db.execute("COMMIT")  # (a read: nothing is kept or lost)
        except sqlite3.Error as exc:
            self._end_transaction()
            if _trouble(exc) is None:  # a bug, not the index's state: say so
                raise
            return None
        except BaseException:
            self._end_transaction()
            raise
        marks = ahead.marks()
        if marks is None or not _same_marks(kept, marks, True):
            return None
        return answer

    def search_sessions(self, query: str, prefix: bool = False, all_projects: bool = False,
                        limit: int = 50) -> list[SessionRow]:  # fmt: skip
        """The sessions ``iter_search`` would find, without reading a file for snippets
        (``prefix``: the last word matches any word it begins, as while typing)."""
        words = _WORD_RE.findall(query)
        if not words:
            return []
        found = self._matching(words, all_projects, limit, prefix)
        numbers, short = self._numbers_of(found), self.handles({raw["id"] for raw in found})
        rows = []
        for raw in found:
            number, live = numbers.get(raw["path"], (None, False))
            rows.append(_row(raw, number, live, short.get(raw["id"], "")))
        return rows

    def _matching(self, words: list[str], all_projects: bool, limit: int,
                  prefix: bool = False) -> list[sqlite3.Row]:  # fmt: skip
        """The sessions rows whose text holds every word, best match first."""
        terms = " ".join('"' + word.replace('"', "") + '"' for word in words)
        if prefix:
            terms += "*"
        sql = ("SELECT c.num FROM texts JOIN chunks c ON c.id = texts.rowid "
               "WHERE texts MATCH ? ORDER BY rank")  # fmt: skip
        found: list[sqlite3.Row] = []
        seen: set[int] = set()
        project = None if all_projects else self.store.project
        for (num,) in self._db.execute(sql, (terms,)):  # best chunk first
            if num in seen:
                continue
            seen.add(num)
            raw = self._db.execute("SELECT * FROM sessions WHERE num = ?", (num,)).fetchone()
            if raw is None or (project is not None and raw["project"] != project):
                continue
            found.append(raw)
            if len(found) >= limit:
                break
        return found

    def _numbers_of(self, raws: list[sqlite3.Row]) -> dict[str, tuple[int | None, bool]]:
        """The number and liveness of each of ``raws`` (by path), as ``_numbered`` gives
        them in the whole listing: each one's place in its project's order is read
        from the index on project and order (row numbers only, no rows), and only
        the sessions still open there are checked for their lock."""
        out: dict[str, tuple[int | None, bool]] = {}
        for project in {raw["project"] for raw in raws}:
            order = self._db.execute("SELECT num FROM sessions WHERE project = ?" + _ORDER,
                                     (project,))  # fmt: skip
            place = {num: at for at, (num,) in enumerate(order)}
            opened = self._db.execute(
                "SELECT num, path FROM sessions WHERE project = ? AND status = 'open'",
                (project,),
            )  # fmt: skip
            live = sorted(place[num] for num, path in opened
                          if num in place and is_locked(Path(path)))  # fmt: skip
            for raw in raws:
                if raw["project"] != project:
                    continue
                at = place.get(raw["num"])
                if at is None:  # removed by a neighbour meanwhile: not listed either
                    out[raw["path"]] = (None, False)
                elif at in live:
                    out[raw["path"]] = (None, True)
                else:
                    out[raw["path"]] = (at + 1 - bisect.bisect_left(live, at), False)
        return out

    def find(self, ref: str, all_projects: bool = False) -> SessionRow:
        """The session a person means by ``ref``: a number (1 = most recent in this
        project), a handle (any project) or an id (any project, or its start). Raises
        NotFound naming the closest ones."""
        rows = self.list_sessions(all_projects=True)
        ref = ref.strip()
        by_handle = [r for r in rows if r.handle and r.id[-8:].startswith(ref)]
        if ref.isdigit():
            numbered = [r for r in rows if r.project == self.store.project and r.number]
            if 1 <= int(ref) <= len(numbered):
                return numbered[int(ref) - 1]
            exact = [r for r in rows if r.handle == ref]  # a handle of eight digits
            if len(exact) == 1 or self._copies(exact):
                return self._copy_here(exact)
            digits = [r for r in by_handle if r.handle.isdigit()]  # (handles of 8 digits)
            if digits and len(ref) >= MIN_HANDLE:  # a number, unless written whole
                names = ", ".join(r.handle for r in digits[:3])
                hint = f"Digits alone are a number; a handle of digits is written whole: {names}."
            else:
                hint = "`chatloop sessions` lists them with their numbers."
            count = len(numbered)
            held = ("no sessions" if not count else "1 is the only number" if count == 1
                    else f"numbers 1-{count}: each file of a chain has its own")  # fmt: skip
            raise NotFound(f"There is no session number {ref} in this project ({held})", hint)
        if is_handle(ref):
            if len(by_handle) == 1 or self._copies(by_handle):
                return self._copy_here(by_handle)
            if len(by_handle) > 1:
                names = ", ".join(f"{r.handle} ({r.id})" for r in by_handle[:5])
                raise NotFound(f"{ref!r} is the start of several handles: {names}",
                               "Type more of it.")  # fmt: skip
        validate_session_id(ref)
        exact = [r for r in rows if r.id == ref]
        if not exact and len(ref) >= 4:
            exact = [r for r in rows if r.id.startswith(ref)]
        if len(exact) == 1 or self._copies(exact):
            return self._copy_here(exact)
        if len(exact) > 1:
            names = ", ".join(r.id for r in exact[:5])
            raise NotFound(f"{ref!r} matches several sessions: {names}", "Give more of the id.")
        import difflib  # only for a reference that matched nothing

        close = difflib.get_close_matches(ref, [r.id for r in rows], n=3, cutoff=0.5)
        hint = (
            f"Did you mean {' or '.join(close)}?"
            if close
            else "`chatloop sessions --all` lists them."
        )
        raise NotFound(f"No session with id {ref!r}", hint)

    @staticmethod
    def _copies(rows: list[SessionRow]) -> bool:
        """True when ``rows`` are one session's copies (one id, in several projects:
        ``chatloop import`` into each, or a folder copied by hand)."""
        return len(rows) > 1 and len({r.id for r in rows}) == 1

    def _copy_here(self, rows: list[SessionRow]) -> SessionRow:
        """The row of ``rows`` (one session: ``_copies``) in this project, or the only
        one; raises NotFound naming the projects when the copies are all elsewhere."""
        here = [r for r in rows if r.project == self.store.project]
        if len(rows) == 1 or here:
            return (here or rows)[0]
        places = ", ".join(sorted({r.project for r in rows}))
        raise NotFound(f"Session {rows[0].id} is in several projects ({places})",
                       "Run the command from the folder of the project you mean: its copy "
                       "is the one taken there.")  # fmt: skip

    def continued_by(self, session_id: str) -> list[str]:
        """The ids of the sessions (any project) that continue ``session_id``: a
        compaction's or a resume's child, not a fork; oldest first."""
        found = self._db.execute(
            "SELECT id FROM sessions WHERE parent_id = ? AND id != parent_id "
            "AND forked_at IS NULL ORDER BY created_at, id", (session_id,))  # fmt: skip
        return [str(row[0]) for row in found]

    def lineage(self, row: SessionRow) -> tuple[list[SessionRow], dict[str, list[SessionRow]]]:
        """The compact/resume chain around ``row``: its ancestors (root first, ``row``
        last) and every session's children, by id, across all projects."""
        rows = self.list_sessions(all_projects=True)
        by_id = {r.id: r for r in rows}
        children: dict[str, list[SessionRow]] = {}
        for r in sorted(rows, key=lambda r: _moment(r.created)):
            if r.parent_id:
                children.setdefault(r.parent_id, []).append(r)
        chain = [row]
        while chain[0].parent_id in by_id and by_id[chain[0].parent_id] not in chain:
            chain.insert(0, by_id[chain[0].parent_id])
        return chain, children

    # -- internals
    def _open(self) -> sqlite3.Connection:
        """``index.db``, ready to use; a corrupt one (or one of another schema) is
        replaced first. In memory if it cannot be opened or written."""
        for attempt in range(4):
            try:
                return _connect(self.path)
            except (sqlite3.Error, _IndexFileError) as exc:
                trouble = _trouble(exc)
                if trouble is None:
                    raise
                if trouble == "corrupt" and attempt < 2:
                    with contextlib.suppress(sqlite3.Error, _IndexFileError, OSError):
                        self._replace_corrupt()
                    continue
                if trouble == "busy" and attempt < 3:
                    time.sleep(0.1 * (attempt + 1))
                    continue
                break
        self.in_memory = True
        return _memory_db()

    def _replace_corrupt(self) -> None:
        """A cache that cannot be read is replaced, never repaired: emptied in one
        transaction if SQLite can still write it, else a fresh empty file is renamed
        over it (never removed first: a neighbour must not find it missing)."""
        with self._build_lock():
            try:  # a neighbour may have replaced it while we waited
                with contextlib.closing(_connect(self.path)) as db:
                    if db.execute("PRAGMA quick_check").fetchone()[0] == "ok":
                        return
            except (sqlite3.Error, _IndexFileError) as exc:
                if _trouble(exc) != "corrupt":
                    return
            if self._empty_in_place():
                return
            fresh = self.path.with_name(f"{INDEX_FILE}.new-{os.getpid()}-{os.urandom(4).hex()}")
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
        except (sqlite3.Error, _IndexFileError):
            return False
        return True

    def _forget(self, path: str) -> None:
        nums = self._db.execute("SELECT num FROM sessions WHERE path = ?", (path,)).fetchall()
        for (num,) in nums:
            self._unlist(num)
        self._db.execute("DELETE FROM sessions WHERE path = ?", (path,))

    def _unlist(self, num: int) -> None:
        """Session ``num``'s chunks leave the listing; their bytes count as dead."""
        dead = self._db.execute("SELECT coalesce(sum(size), 0) FROM chunks WHERE num = ?",
                                (num,)).fetchone()[0]  # fmt: skip
        if dead:
            self._db.execute(
                "INSERT INTO info VALUES ('dead', ?) ON CONFLICT(key) DO UPDATE "
                "SET value = CAST(value AS INTEGER) + excluded.value", (dead,),
            )  # fmt: skip
            self._db.execute("DELETE FROM chunks WHERE num = ?", (num,))

    def _insert_text(self, num: int, text: bytes) -> None:
        """One chunk of session ``num``'s words: listed in ``chunks``, indexed in ``texts``."""
        cursor = self._db.execute("INSERT INTO chunks(num, size) VALUES (?, ?)", (num, len(text)))
        self._db.execute("INSERT INTO texts(rowid, text) VALUES (?, ?)", (cursor.lastrowid, text))

    def _store_row(
        self, path: str, scanned: Scanned, size: int, mtime_ns: int, num: int | None = None,
    ) -> None:  # fmt: skip
        """The session's row (numbered ``num`` when its words were already inserted by
        ``_store_streaming``, which forgot the old row first), and its words as one
        chunk unless they were. Any row for the same path goes first, even one a
        neighbour wrote since this process looked."""
        if num is None:
            self._forget(path)
        meta = scanned.meta
        cursor = self._db.execute(
            "INSERT INTO sessions VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                num, path, meta.id or Path(path).stem, Path(path).parent.name, meta.title,
                meta.agent, meta.agent_ref, meta.model, meta.created.isoformat(),
                scanned.updated.isoformat(), meta.status, scanned.queries, meta.tokens_in,
                meta.tokens_out, meta.restoration_tokens, meta.parent_id, meta.parent_file,
                meta.git_branch, scanned.preview, scanned.has_summary, scanned.legacy,
                scanned.problems, size, mtime_ns, fork_point(meta.extra.get("forked_at")),
                tail_of(meta.id or Path(path).stem), seconds(scanned.updated),
                seconds(meta.created),
            ),
        )  # fmt: skip
        if num is None and cursor.lastrowid is not None:
            self._insert_text(cursor.lastrowid, scanned.text)


_WORD_RE = re.compile(r"[^\W_]+")  # a word as FTS5's unicode61 sees it: "_" separates


def _moment(iso: str) -> float:
    """Seconds since the epoch of a row's ISO time (0 for one that cannot be read)."""
    from datetime import datetime

    try:
        return seconds(datetime.fromisoformat(iso))
    except ValueError:
        return 0.0


def _same_marks(kept: dict[str, object], marks: Marks, all_projects: bool) -> bool:
    """Whether the marks ``kept`` (``Index._kept``) say the rows match the look ``marks``."""
    if not marks:
        return False
    if all_projects:
        kept = dict(kept)
        if kept.pop(_EVERY, None) is None or len(kept) != len(marks):
            return False
    elif len(marks) != 1:
        return False
    return all(kept.get(_MARK + name) == mark for name, mark in marks)


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


def _row(raw: sqlite3.Row, number: int | None, live: bool, handle: str = "") -> SessionRow:
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
        problems=raw["problems"], handle=handle, forked_at=raw["forked_at"],
    )  # fmt: skip


class _Links:
    """Sessions' parent and fork point by id, read from the index as they are asked
    for: a listing's chains cost what their lengths do, not what the index holds."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db
        self._read: dict[str, tuple[str | None, int | None] | None] = {}

    def get(self, session: str) -> tuple[str | None, int | None] | None:
        """``session``'s parent and fork point; None when no session has that id."""
        if session not in self._read:
            raw = self._db.execute("SELECT parent_id, forked_at FROM sessions WHERE id = ? "
                                   "ORDER BY num LIMIT 1", (session,)).fetchone()  # fmt: skip
            self._read[session] = None if raw is None else (raw[0], fork_point(raw[1]))
        return self._read[session]


def _chain_length(session: str, links: _Links) -> int:
    """The files of the chain that ends at ``session``: it and the sessions it continues
    (a fork begins a chain of its own; a loop of links is counted once)."""
    length, seen = 1, {session}
    parent, forked = links.get(session) or (None, None)
    while parent is not None and forked is None and parent not in seen:
        link = links.get(parent)
        if link is None:
            break
        length += 1
        seen.add(parent)
        parent, forked = link
    return length


_UNWRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM)


class _IndexFileError(Exception):
    """The index file (or its directory) may not be created: read-only, as trouble."""


class _SchemaChanged(sqlite3.DatabaseError):
    """The file is an index of another schema version: as good as corrupt."""


def _trouble(exc: BaseException) -> str | None:
    """What an error says about the index: "busy" (a neighbour holds a lock: wait),
    "corrupt" (replace it), "unusable" (cannot open or write it: read-only, full,
    I/O error: work in memory), or None (a bug: let it show)."""
    if isinstance(exc, _SchemaChanged):
        return "corrupt"
    if isinstance(exc, _IndexFileError):
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
            raise _IndexFileError(f"cannot create {path}: {exc}") from exc
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
        with _not_waiting(db), contextlib.suppress(sqlite3.OperationalError):
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
def _not_waiting(db: sqlite3.Connection) -> Iterator[None]:
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


def _remove_db(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{path}{suffix}")
