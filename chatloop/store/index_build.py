"""Keeping the index's rows in step with the files: freshness and building.

The files are the truth; the index is a cache. Deleting ``index.db`` loses
nothing: it is rebuilt from the files when missing, corrupt or stale (a file
whose size or mtime differs from its row). Every command looks at each file
(one ``stat``); a folder whose look equals the mark kept when its rows last
matched it is fresh without reading a row (see ``_mark``). Rows are kept per
file path and skimmed by ``chatloop.format.skim`` (no full parse), through
``index_scan``. A *contentless* FTS5 table (``content=''``, ``detail=full``)
indexes each session's searchable text without storing a copy of it (the
files hold it), so ``index.db`` stays a fraction of the sessions' size. The
text goes in as chunks of about a megabyte, each an FTS row listed in
``chunks`` with its session: a 200 MB transcript is indexed without ever
being one string in memory.

A contentless table cannot delete a row without its original text (SQLite
before 3.43), so a session read again gets new chunks and its old ones are
only unlisted (queries join through ``chunks``, so they are never found).
Their bytes are counted (``info.dead``); when the dead outweigh the live (and
pass DEAD_REBUILD bytes), the next sync rebuilds the index.

Many stale files (a first run, an index lost, an import) would keep a listing
waiting for every file's words, so a sync **glances** at them instead
(``format.glance``): every session's row is written from its head alone,
whatever its format or state (what the head cannot say is NULL, not yet known),
its text left for later and the row listed in ``untexted``. The words
are read afterwards by ``fill_text``, in a process of its own that the
``Index`` starts (``index_text``), or by the first search, which never answers
from part of the text. Files are read in full in the process that inserts
their words: handing the words to it from worker processes cost as much CPU as
reading them and saved no time (bench/RESULTS.md, issue 34). ``reindex``
writes into a side file without a journal, copied into ``index.db`` in one
transaction when complete (``IndexFile.side``). Rows are written in batches,
each its own short transaction, so a neighbour waits for one batch, never for
a scan; in a batch every row goes first, then the words (see ``_store_batch``).

Functions over an ``IndexFile`` (the connection and its resilience) and the
``Store`` (the files); nothing here decides what a listing or a search shows.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from chatloop.errors import ChatloopError
from chatloop.ids import tail_of
from chatloop.store.index_file import IndexFile, not_waiting
from chatloop.store.rows import fork_point, seconds
from chatloop.store.store import FolderLook, Store

if TYPE_CHECKING:  # the scanner (and YAML) load only when files must be read
    from chatloop.format import Skim as Scanned

__all__ = ["Progress", "fill_text", "rebuild", "settle", "sync", "text_pending"]

GLANCE_FROM = 64  # stale files from which a sync glances (their words are read later)
STREAM_FROM = 4 << 20  # files this large are read here, their words inserted as they come
DEAD_REBUILD = 32 << 20  # unlisted chunk bytes from which a sync may rebuild the index
BATCH_FILES = 256  # rows written per transaction (a neighbour waits at most one batch)
BATCH_BYTES = 32 << 20  # or this much text, whichever comes first
Progress = Callable[[int, int], None]
Marks = list[tuple[str, bytes]]  # (project folder name, its mark), as Store.look makes them

_MARK, _MARK_END = "folder:", "folder;"  # info keys of folder marks (";" follows ":")
_EVERY = "folders:every"  # kept when every project's rows were checked at once
# A project's mark, and the mark of the whole home, go whenever any process (an older
# chatloop too) writes or removes one of the project's rows (see _mark).
_TRIGGERS = tuple(
    f"CREATE TRIGGER IF NOT EXISTS unmark_on_{event.lower()} AFTER {event} ON sessions "
    f"BEGIN DELETE FROM info WHERE key IN ({keys}, '{_EVERY}'); END"
    for event, keys in (
        ("INSERT", f"'{_MARK}' || NEW.project"),
        ("DELETE", f"'{_MARK}' || OLD.project"),
        ("UPDATE", f"'{_MARK}' || OLD.project, '{_MARK}' || NEW.project"),
    )
)


def sync(
    file: IndexFile, store: Store, all_projects: bool = True, progress: Progress | None = None
) -> int:
    """Bring rows up to date with the files; returns how many files were (re)read.
    Many files to read (an empty index among them) are glanced at, their words left
    for ``fill_text``; an index whose unlisted chunks outweigh the listed ones is
    rebuilt like ``rebuild`` does (see module doc)."""
    count = file.guarded(
        lambda: _refresh(file, store, all_projects, progress, may_glance=True),
        lambda: _refill(file, store),
    )
    if not file.in_memory and _bloated(file.db):
        rebuild(file, store, progress)
    return count


def rebuild(file: IndexFile, store: Store, progress: Progress | None = None) -> int:
    """Re-read every session file of every project into a fresh index.

    The new index is written to a side file of this process's own (see
    ``IndexFile.side``), then copied into ``index.db`` in one transaction. One
    rebuild runs at a time; neighbours read meanwhile."""
    return file.guarded(lambda: _rebuild(file, store, progress), lambda: _refill(file, store))


def _refill(file: IndexFile, store: Store) -> None:
    """Every file read again, into an index replaced or moved to memory."""
    _refresh(file, store, True, None, may_glance=True)


def text_pending(file: IndexFile) -> int:
    """How many rows a glance wrote whose words are not indexed yet."""
    return int(file.db.execute("SELECT count(*) FROM untexted").fetchone()[0])


def fill_text(
    file: IndexFile,
    store: Store,
    progress: Progress | None = None,
    waiting: Callable[[], None] | None = None,
) -> int:
    """Read in full every file whose row a glance wrote, its words into the index,
    one process at a time (the build lock; ``waiting`` is called while a neighbour
    holds it, as a progress line); returns how many files were read. A file changed
    or gone since is read as it is now, or forgotten."""
    return file.guarded(lambda: _fill(file, progress, waiting), lambda: _refill(file, store))


def settle(file: IndexFile, store: Store) -> int:
    """Read in full this project's glanced rows whose last activity their head could
    not say (a session open or interrupted, a legacy seed), so that the numbers of
    the project, its sessions' places by last activity (``index_query``), are those a
    full build gives: ``-c``, ``-r N`` and ``show N`` name the same session either way.
    A home holds few such files; returns how many were read."""
    return file.guarded(lambda: _settle(file, store), lambda: _refill(file, store))


def _settle(file: IndexFile, store: Store) -> int:
    if file.in_memory:
        return 0  # (read in full already: memory is never glanced)
    found = file.db.execute(
        "SELECT s.path FROM untexted u JOIN sessions s ON s.num = u.num "
        "WHERE s.project = ? AND s.updated IS NULL",
        (store.project,),
    ).fetchall()
    files: dict[str, os.stat_result] = {}
    for (path,) in found:
        with contextlib.suppress(OSError):  # (gone: the next sync forgets it)
            files[str(path)] = os.stat(path)
    _read(file, list(files), files, None)  # (one unreadable now keeps its glanced row)
    return len(files)


def _fill(file: IndexFile, progress: Progress | None, waiting: Callable[[], None] | None) -> int:
    if file.in_memory or not text_pending(file):
        return 0
    with file.build_lock(waiting):
        db = file.db
        rows = db.execute(
            "SELECT s.path FROM untexted u JOIN sessions s ON s.num = u.num ORDER BY s.num"
        ).fetchall()
        with file.write():
            db.execute("DELETE FROM untexted WHERE num NOT IN (SELECT num FROM sessions)")
        if not rows:
            return 0
        paths = [str(row[0]) for row in rows]
        files: dict[str, os.stat_result] = {}
        gone: list[str] = []
        for path in paths:
            try:
                files[path] = os.stat(path)
            except OSError:
                gone.append(path)
        todo = [p for p in paths if p in files]
        gone += _read(file, todo, files, progress)  # unreadable now: no row, read next sync
        if gone:
            with file.write():
                for path in gone:
                    _forget(db, path)
        if len(todo) >= GLANCE_FROM:
            with file.write():  # the many small segments of the batches, merged once
                db.execute("INSERT INTO texts(texts) VALUES ('optimize')")
            # and the pages they held given back (a sixth of the file), when nobody
            # writes (a script: Python steps a statement without columns only once)
            with contextlib.suppress(sqlite3.OperationalError):
                db.executescript("PRAGMA incremental_vacuum;")
        return len(todo)


def _bloated(db: sqlite3.Connection) -> bool:
    dead = db.execute("SELECT value FROM info WHERE key = 'dead'").fetchone()
    if dead is None or int(dead[0]) < DEAD_REBUILD:
        return False
    live = db.execute("SELECT coalesce(sum(size), 0) FROM chunks").fetchone()[0]
    return int(dead[0]) > int(live)


def _refresh(
    file: IndexFile,
    store: Store,
    all_projects: bool,
    progress: Progress | None,
    may_glance: bool,
) -> int:
    if file.in_memory:
        all_projects = True  # it starts empty: what is listed must all be read
    db = file.db
    looks = store.look(all_projects)
    marks = [(look.name, look.mark) for look in looks]
    if not file.in_memory and _marked(db, store, marks, all_projects):
        return 0  # fresh: no row is read (see _mark)
    known = _known(db, store, all_projects)
    files = Store.session_stats(looks, known)
    stale = [p for p, st in files.items() if known.get(p) != (st.st_size, st.st_mtime_ns)]
    gone = [p for p in known if p not in files]
    glance = may_glance and not file.in_memory and len(stale) >= GLANCE_FROM
    if not stale and not gone:
        _mark(file, store, looks, all_projects, files)
        return 0  # fresh: nothing is read, and the scanner (and YAML) never load
    if gone:
        with file.write():
            for path in gone:
                _forget(db, path)
    _read(file, _glance(file, stale, files) if glance else stale, files, progress)
    _mark(file, store, looks, all_projects, files)
    return len(stale)


def _read(
    file: IndexFile,
    paths: list[str],
    files: dict[str, os.stat_result],
    progress: Progress | None,
) -> list[str]:
    """Rows and words of ``paths`` (their looks in ``files``), each file read in full
    here, once: skimmed, a large one streamed; returns the paths
    that could not be read (they get no row now). Rows are written in batches, each
    its own short transaction: a neighbour waiting to write waits for one batch,
    never for the whole scan. Every row replaces whatever a neighbour wrote for the
    same file meanwhile."""
    from chatloop.store.index_scan import scan_file

    big = [p for p in paths if files[p].st_size >= STREAM_FROM]
    small = [p for p in paths if files[p].st_size < STREAM_FROM]
    failed: list[str] = []
    batch: list[tuple[str, Scanned]] = []
    batch_bytes = 0
    for done, (path, scanned) in enumerate(map(scan_file, small), 1):
        if scanned is None:
            failed.append(path)
        else:
            batch.append((path, scanned))
            batch_bytes += len(scanned.text)
            if len(batch) >= BATCH_FILES or batch_bytes >= BATCH_BYTES:
                _store_batch(file, batch, files)
                batch, batch_bytes = [], 0
        if progress:
            progress(done, len(paths))
    _store_batch(file, batch, files)
    for done, path in enumerate(big, len(small) + 1):
        with file.write():
            _store_streaming(file.db, path, files[path])
        if progress:
            progress(done, len(paths))
    return failed


def _known(db: sqlite3.Connection, store: Store, all_projects: bool) -> dict[str, tuple[int, int]]:
    """The (size, mtime) each row was read at, by path."""
    sql = "SELECT path, size, mtime_ns FROM sessions"
    rows = (
        db.execute(sql)
        if all_projects
        else db.execute(sql + " WHERE project = ?", (store.project,))
    )
    return {path: (size, mtime) for path, size, mtime in rows}


# A folder's mark (``FolderLook.mark``) is kept in ``info`` when its rows were
# seen to match that look exactly. A trigger removes it whenever a row of that
# project is written or removed, by any process (older versions of chatloop
# included), so a kept mark that equals a new look means the rows still match
# the files: the listing reads no row to know it is fresh.


def _marked(db: sqlite3.Connection, store: Store, marks: Marks, all_projects: bool) -> bool:
    """Whether every folder looked at (its name and mark, as ``FolderLook`` has
    them) has the mark kept for it; for every project, also that the marks were
    kept by a sync of every project, with no row written since (so no project
    without a folder still has rows)."""
    return _same_marks(_kept(db, all_projects, [name for name, _ in marks]), marks, all_projects)


def _kept(db: sqlite3.Connection, all_projects: bool, names: list[str]) -> dict[str, object]:
    """The marks kept in the index, by key: every project's (and ``_EVERY`` if an
    every-project sync kept them), or those of the folders ``names``."""
    if all_projects:
        return dict(
            db.execute(
                "SELECT key, value FROM info WHERE key >= ? AND key < ? OR key = ?",
                (_MARK, _MARK_END, _EVERY),
            ).fetchall()
        )
    return {
        _MARK + name: row[0]
        for name in names
        for row in db.execute("SELECT value FROM info WHERE key = ?", (_MARK + name,))
    }


def _same_marks(kept: dict[str, object], marks: Marks, all_projects: bool) -> bool:
    """Whether the marks ``kept`` (``_kept``) say the rows match the look ``marks``."""
    if not marks:
        return False
    if all_projects:
        kept = dict(kept)
        if kept.pop(_EVERY, None) is None or len(kept) != len(marks):
            return False
    elif len(marks) != 1:
        return False
    return all(kept.get(_MARK + name) == mark for name, mark in marks)


def _mark(
    file: IndexFile,
    store: Store,
    looks: list[FolderLook],
    all_projects: bool,
    files: dict[str, os.stat_result],
) -> None:
    """Keep the marks of ``looks`` if the rows match the files they saw.

    Checked in the same write transaction (a neighbour may have written rows
    since), with the triggers that remove marks made sure of in it (an older
    chatloop's rebuild replaces the whole file, triggers included). Marks only
    spare work: when the index is busy or cannot be written, none is kept and
    nothing waits or fails."""
    if file.in_memory or not looks:
        return
    wanted = {path: (st.st_size, st.st_mtime_ns) for path, st in files.items()}
    db = file.db
    try:
        with not_waiting(db):
            db.execute("BEGIN IMMEDIATE")
    except sqlite3.Error:
        return
    try:
        if _known(db, store, all_projects) == wanted:
            for trigger in _TRIGGERS:
                db.execute(trigger)
            if all_projects:
                db.execute("DELETE FROM info WHERE key >= ? AND key < ?", (_MARK, _MARK_END))
                db.execute("INSERT OR REPLACE INTO info VALUES (?, '1')", (_EVERY,))
            db.executemany(
                "INSERT OR REPLACE INTO info VALUES (?, ?)",
                [(_MARK + look.name, look.mark) for look in looks],
            )
        db.execute("COMMIT")
    except (sqlite3.Error, UnicodeError):  # (a folder name SQLite cannot hold: no mark)
        file.end_transaction()
    except BaseException:
        file.end_transaction()
        raise


GLANCE_PARALLEL = 4096  # files from which glances are read by a worker process too
Row = tuple[object, ...]  # a sessions row's values after ``num`` (``_row``)


def _glance(file: IndexFile, paths: list[str], files: dict[str, os.stat_result]) -> list[str]:
    """Rows for ``paths`` from their heads alone (``format.glance``), their words left
    for ``fill_text`` (listed in ``untexted``); returns the paths a head cannot say
    enough of (damage, a legacy file whose first question or summary is past its 8 kB):
    they are read in full.
    Many are glanced by a worker process while this one inserts (a row, not the
    file's text, is what comes back)."""
    todo = [(p, files[p].st_size, files[p].st_mtime_ns) for p in paths]
    workers = min(os.cpu_count() or 1, 4)  # (this process mostly waits for them)
    if len(todo) >= GLANCE_PARALLEL and workers >= 2 and _forks():
        import multiprocessing

        with multiprocessing.get_context("fork").Pool(workers) as pool:
            return _store_glanced(file, pool.imap(_glanced, todo, chunksize=256))
    return _store_glanced(file, map(_glanced, todo))


def _forks() -> bool:
    """Whether worker processes can be forked. Only forked ones are used: a spawned one is
    a new interpreter started with our path, which may hold the working directory
    (``chatloop.children``); without fork, the glances are read in this process."""
    import multiprocessing

    return "fork" in multiprocessing.get_all_start_methods()


def _glanced(look: tuple[str, int, int]) -> tuple[str, Row | None]:
    """A file's row from its head (``format.glance``; None: it must be read in full),
    for ``_glance``, in whichever process."""
    from chatloop.format import GLANCE_BYTES, glance, glance_wants_tail
    from chatloop.store.fsio import open_read

    path, size, mtime_ns = look
    try:
        with open_read(path) as handle:
            head = handle.read(GLANCE_BYTES)
            tail = None
            if glance_wants_tail(head):  # (a legacy file: its end says if it closed)
                handle.seek(max(len(head), size - GLANCE_BYTES))
                tail = handle.read(GLANCE_BYTES)
            seen = glance(head, _stem(path), tail)
    except (OSError, ChatloopError):
        return path, None
    return path, (None if seen is None else _row(path, seen, size, mtime_ns))


def _store_glanced(file: IndexFile, rows: Iterable[tuple[str, Row | None]]) -> list[str]:
    """Write glanced ``rows`` in batches, each listed in ``untexted``; returns the paths
    that had none."""
    rest: list[str] = []
    batch: list[tuple[str, Row]] = []
    for path, row in rows:
        if row is None:
            rest.append(path)
            continue
        batch.append((path, row))
        if len(batch) >= BATCH_FILES * 4:
            _insert_glanced(file, batch)
            batch = []
    _insert_glanced(file, batch)
    return rest


def _insert_glanced(file: IndexFile, batch: list[tuple[str, Row]]) -> None:
    if not batch:
        return
    with file.write():
        db = file.db
        for path, row in batch:
            _forget(db, path)
            cursor = db.execute(_INSERT_ROW, (None, *row))
            db.execute("INSERT INTO untexted(num) VALUES (?)", (cursor.lastrowid,))


def _store_batch(
    file: IndexFile,
    batch: list[tuple[str, Scanned]],
    files: dict[str, os.stat_result],
) -> None:
    if not batch:
        return
    with file.write():
        nums = []
        for path, scanned in batch:
            st = files[path]
            nums.append(_store_row(file.db, path, scanned, st.st_size, st.st_mtime_ns))
        # The words after every row: a write to another table between two inserts
        # into ``texts`` makes FTS5 flush what it holds as a segment of its own
        # (one per file, merged again and again), at twice the cost of the inserts.
        for num, (_, scanned) in zip(nums, batch, strict=True):
            _insert_text(file.db, num, scanned.text)


def _store_streaming(db: sqlite3.Connection, path: str, st: os.stat_result) -> None:
    """Index one large file, inserting its words chunk by chunk as they are read."""
    from chatloop.store.index_scan import scan_file

    _forget(db, path)
    num = int(db.execute("SELECT coalesce(max(num), 0) + 1 FROM sessions").fetchone()[0])

    def insert(text: bytes) -> None:
        _insert_text(db, num, text)

    _, scanned = scan_file(path, insert)
    if scanned is None:
        _unlist(db, num)
        return
    _store_row(db, path, scanned, st.st_size, st.st_mtime_ns, num)


def _rebuild(file: IndexFile, store: Store, progress: Progress | None) -> int:
    if file.in_memory:
        file.empty_memory()
        return _refresh(file, store, True, progress, may_glance=False)
    with file.build_lock():
        return _build(file, store, progress)


def _build(file: IndexFile, store: Store, progress: Progress | None) -> int:
    """The rebuild proper; the caller holds the build lock (or gave up waiting)."""
    with file.side() as side:
        count = _refresh(side, store, True, progress, may_glance=False)
        with side.write():  # merged once here, not bit by bit during the inserts
            side.db.execute("INSERT INTO texts(texts) VALUES ('optimize')")
            side.db.execute("INSERT INTO texts(texts, rank) VALUES ('automerge', 4)")
        side.db.execute("VACUUM")  # the merged-away segments' pages: half the file
        # One write transaction on index.db: its readers see the old rows or
        # the new ones; nobody's open connection is left on a removed file.
        side.db.backup(file.db)
    return count


def _forget(db: sqlite3.Connection, path: str) -> None:
    nums = db.execute("SELECT num FROM sessions WHERE path = ?", (path,)).fetchall()
    if not nums:
        return  # (a first build: no row to forget, nothing more to ask)
    for (num,) in nums:
        _unlist(db, num)
        db.execute("DELETE FROM untexted WHERE num = ?", (num,))
    db.execute("DELETE FROM sessions WHERE path = ?", (path,))


def _unlist(db: sqlite3.Connection, num: int) -> None:
    """Session ``num``'s chunks leave the listing; their bytes count as dead."""
    dead = db.execute("SELECT coalesce(sum(size), 0) FROM chunks WHERE num = ?", (num,)).fetchone()[
        0
    ]
    if dead:
        db.execute(
            "INSERT INTO info VALUES ('dead', ?) ON CONFLICT(key) DO UPDATE "
            "SET value = CAST(value AS INTEGER) + excluded.value",
            (dead,),
        )
        db.execute("DELETE FROM chunks WHERE num = ?", (num,))


def _insert_text(db: sqlite3.Connection, num: int, text: bytes) -> None:
    """One chunk of session ``num``'s words: listed in ``chunks``, indexed in ``texts``."""
    cursor = db.execute("INSERT INTO chunks(num, size) VALUES (?, ?)", (num, len(text)))
    db.execute("INSERT INTO texts(rowid, text) VALUES (?, ?)", (cursor.lastrowid, text))


def _store_row(
    db: sqlite3.Connection,
    path: str,
    scanned: Scanned,
    size: int,
    mtime_ns: int,
    num: int | None = None,
) -> int:
    """The session's row, numbered ``num`` when its words were already inserted by
    ``_store_streaming`` (which forgot the old row first); returns its number (its
    words go in by ``_insert_text``). Any row for the same path goes first, even one
    a neighbour wrote since this process looked."""
    if num is None:
        _forget(db, path)
    cursor = db.execute(_INSERT_ROW, (num, *_row(path, scanned, size, mtime_ns)))
    return num if num is not None else int(cursor.lastrowid or 0)


_INSERT_ROW = "INSERT INTO sessions VALUES (" + ",".join("?" * 28) + ")"


def _row(path: str, scanned: Scanned, size: int, mtime_ns: int) -> Row:
    """The values of a sessions row after its ``num``, from a file's skim or glance
    (what a glance does not know is NULL: ``SessionRow``)."""
    meta = scanned.meta
    stem = _stem(path)
    updated = scanned.updated
    # not yet known (a glance): NULL, shown as such; the front matter's moment orders it
    return (
        path,
        meta.id or stem,
        os.path.basename(os.path.dirname(path)),
        meta.title,
        meta.agent,
        meta.agent_ref,
        meta.model,
        meta.created.isoformat(),
        None if updated is None else updated.isoformat(),
        meta.status,
        scanned.queries,
        meta.tokens_in if scanned.tokens_known else None,
        meta.tokens_out if scanned.tokens_known else None,
        meta.restoration_tokens,
        meta.parent_id,
        meta.parent_file,
        meta.git_branch,
        scanned.preview,
        scanned.has_summary,
        scanned.legacy,
        scanned.problems,
        size,
        mtime_ns,
        fork_point(meta.extra.get("forked_at")),
        tail_of(meta.id or stem),
        seconds(meta.updated if updated is None else updated),
        seconds(meta.created),
    )


def _stem(path: str) -> str:
    """A session file's name without its suffix (``Path(path).stem``, at a tenth of
    its cost: a first build asks it of every file)."""
    name = os.path.basename(path)
    dot = name.rfind(".")
    return name[:dot] if dot > 0 else name
