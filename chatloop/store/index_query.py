"""What the index is asked: listings, numbers, finding a session, search, lineage.

Everything here only reads the index (and, for a hit's snippet or a live
session's lock, the session's file); keeping the rows fresh is
``index_build``'s. ``Queries`` reads over one connection, for one project.

Session numbers are THE rows of the listing a person sees (``chatloop
sessions``, folded): within a project, 1 is the most recently updated session
that is closed or interrupted and that no later session of its project
continues (a compaction's or a resume's child; a fork is a line of its own).
Two kinds of file have no number: the live session (still ``open`` and locked
by a running chat: ``*``; one whose summary a worker writes after the chat
ended is numbered, ``summarizing``), and a file a later one continues (hidden when
the listing is folded, ``-`` in ``--expand``: reached by its handle or id). A
continuation still being written hides nothing yet. ``_numbered`` applies the
rule to rows read in order; ``listing``, ``find`` and the numbers of search
hits (``Queries._numbers_of``) all take their numbers from it.

Search ranks with bm25 over the index alone (the FTS table is contentless:
``index_build``) and names sessions, like ``grep -l``; the snippet is read
from the file. All the words of a query must meet in one chunk of about a
megabyte: in practice, in one stretch of the conversation.
"""

from __future__ import annotations

import functools
import re
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

from chatloop.errors import NotFound
from chatloop.ids import MIN_HANDLE, handle_between, is_handle, tail_of, validate_session_id
from chatloop.store.fsio import SUMMARY_HOLDER, lock_holder
from chatloop.store.rows import SearchHit, SessionRow, fork_point, seconds

__all__ = ["Queries", "hits"]

# Most recent first, by the moment (``updated_at``: seconds since the epoch), not by the
# ISO text, whose offsets differ between sessions written under different time zones.
# Times are whole seconds: within one, the file written last (a compaction's child,
# written after its parent closed) comes first.
_ORDER = " ORDER BY updated_at DESC, mtime_ns DESC, id DESC, num DESC"  # total
_NUMBERING = "SELECT num, id, project, status, path, parent_id, forked_at FROM sessions"
_WORD_RE = re.compile(r"[^\W_]+")  # a word as FTS5's unicode61 sees it: "_" separates


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _one_snapshot(
    method: Callable[Concatenate[Queries, _P], _R],
) -> Callable[Concatenate[Queries, _P], _R]:
    """``method``, its reads made in one read transaction: the index as it was at its
    first read, whatever a neighbour (another chat, the words process) writes
    meanwhile. A query reads in several statements (the numbering, then the listed
    rows); each on its own would see the index of its moment, and a row the words
    process rewrote in between (forgotten, inserted again under a new ``num``) would
    be missing from the answer. Inside a transaction already open (a query calling
    another), it joins that one."""

    @functools.wraps(method)
    def in_one(self: Queries, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        if self._db.in_transaction:
            return method(self, *args, **kwargs)
        self._db.execute("BEGIN")
        try:
            return method(self, *args, **kwargs)
        finally:
            if self._db.in_transaction:  # (an error may have ended it: theirs is raised)
                self._db.execute("COMMIT")

    return in_one


class Queries:
    """The index's answers, read over ``db`` (which only reads), for ``project`` (the
    current one: numbers and "this project" are its)."""

    def __init__(self, db: sqlite3.Connection, project: str) -> None:
        self._db = db
        self.project = project

    @_one_snapshot
    def listing(
        self,
        all_projects: bool = False,
        limit: int | None = None,
        fold: bool = False,
        count: bool = False,
    ) -> tuple[list[SessionRow], int]:
        """Sessions, most recently updated first, numbered per project (see module doc),
        and with ``count`` how many it would list without ``limit`` (else 0).
        ``fold``: a session that a later one of its project continues (compact,
        resume; not a fork) is left out, unless that continuation is still being
        written (then the session keeps its place and its number); each row's
        ``chain`` counts the files of its chain up to it. Folded or not, a number
        is the same row (see the module doc): unfolded, the files left out
        folded are listed without one.

        One pass over a few columns of the index, up to the last listed, decides
        the numbers and what is listed; only the listed rows are then read whole,
        and only their handles worked out: a listing of 50 costs little more at
        10,000 sessions than at 100."""
        sql = _NUMBERING + ("" if all_projects else " WHERE project = ?") + _ORDER
        rows_in_order = self._db.execute(sql, () if all_projects else (self.project,))
        picked: list[tuple[int, int | None, str | None]] = []
        total = 0
        for raw, number, holder, hidden in _numbered(rows_in_order):
            if fold and hidden:
                continue
            if limit is not None and len(picked) >= limit:
                break
            picked.append((raw["num"], number, holder))
        if count:
            total = self.count(all_projects, fold)
        links = _Links(self._db)  # every project's: a chain's length anywhere
        full = {raw["num"]: raw for raw in self._rows([num for num, _, _ in picked])}
        short = self.handles({full[num]["id"] for num, _, _ in picked if num in full})
        rows = []
        for num, number, holder in picked:
            if num not in full:
                continue  # removed by a neighbour between the two reads
            row = _row(full[num], number, holder, short.get(full[num]["id"], ""))
            rows.append(row._replace(chain=_chain_length(row.id, links)) if fold else row)
        return rows, total

    @_one_snapshot
    def count(self, all_projects: bool = False, fold: bool = False) -> int:
        """How many sessions the index holds (in this project unless ``all_projects``;
        ``fold``: as ``listing`` lists them folded)."""
        if fold:
            return self._folded_count(all_projects)
        if all_projects:
            return int(self._db.execute("SELECT count(*) FROM sessions").fetchone()[0])
        sql = "SELECT count(*) FROM sessions WHERE project = ?"
        return int(self._db.execute(sql, (self.project,)).fetchone()[0])

    def _folded_count(self, all_projects: bool) -> int:
        """How many sessions a folded listing holds: all, less those a later session of
        their project continues that is not still being written (the continuations
        are found in SQL; only the few still open are checked for their lock). Each
        parent is looked up by its id: left to choose, SQLite scanned the project's
        older sessions for it, and a listing of 10,000 sessions, a third of them
        continuations, took 1.1 s to count (bench/listing.py)."""
        where = "" if all_projects else " AND c.project = ?"
        found = self._db.execute(
            "SELECT c.parent_id, c.status, c.path FROM sessions c WHERE c.parent_id IS NOT "
            "NULL AND c.forked_at IS NULL AND c.parent_id != c.id" + where + " AND EXISTS "
            "(SELECT 1 FROM sessions p INDEXED BY sessions_by_id WHERE p.id = c.parent_id AND "
            "p.project = c.project AND "
            "(p.updated_at, p.mtime_ns, p.id) < (c.updated_at, c.mtime_ns, c.id))",
            () if all_projects else (self.project,),
        ).fetchall()
        hidden = {
            parent
            for parent, status, path in found
            if not (status == "open" and lock_holder(Path(path)) == "chat")
        }
        return self.count(all_projects) - len(hidden)

    def _rows(self, nums: list[int]) -> Iterator[sqlite3.Row]:
        """The whole rows of sessions ``nums`` (in batches: SQLite caps parameters)."""
        for start in range(0, len(nums), 500):
            batch = nums[start : start + 500]
            marks = ",".join("?" * len(batch))
            yield from self._db.execute(f"SELECT * FROM sessions WHERE num IN ({marks})", batch)

    @_one_snapshot
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
            before = self._db.execute(
                "SELECT max(tail) FROM sessions WHERE tail < ?", (tail,)
            ).fetchone()[0]
            after = self._db.execute(
                "SELECT min(tail) FROM sessions WHERE tail > ?", (tail,)
            ).fetchone()[0]
            out[session] = handle_between(tail, before or "", after or "")
        return out

    @_one_snapshot
    def search_sessions(
        self, query: str, prefix: bool = False, all_projects: bool = False, limit: int = 50
    ) -> list[SessionRow]:
        """The sessions whose text holds every word of ``query`` (case-insensitive,
        whole words; punctuation separates words), best match first (bm25 over the
        index alone), one row per session, without reading a file for snippets
        (``hits`` does); ``prefix``: the last word matches any word it begins, as
        while typing."""
        words = _WORD_RE.findall(query)
        if not words:
            return []
        found = self._matching(words, all_projects, limit, prefix)
        numbers, short = self._numbers_of(found), self.handles({raw["id"] for raw in found})
        rows = []
        for raw in found:
            number, holder = numbers.get(raw["path"], (None, None))
            rows.append(_row(raw, number, holder, short.get(raw["id"], "")))
        return rows

    @_one_snapshot
    def search_count(self, query: str, all_projects: bool = False) -> int:
        """How many sessions ``search_sessions`` finds without a limit (no ranking)."""
        words = _WORD_RE.findall(query)
        if not words:
            return 0
        sql = (
            "SELECT count(DISTINCT c.num) FROM texts JOIN chunks c ON c.id = texts.rowid "
            "JOIN sessions s ON s.num = c.num WHERE texts MATCH ?"
        )
        if all_projects:
            return int(self._db.execute(sql, (_terms(words),)).fetchone()[0])
        found = self._db.execute(sql + " AND s.project = ?", (_terms(words), self.project))
        return int(found.fetchone()[0])

    def _matching(
        self, words: list[str], all_projects: bool, limit: int, prefix: bool = False
    ) -> list[sqlite3.Row]:
        """The sessions rows whose text holds every word, best match first."""
        terms = _terms(words)
        if prefix:
            terms += "*"
        sql = (
            "SELECT c.num FROM texts JOIN chunks c ON c.id = texts.rowid "
            "WHERE texts MATCH ? ORDER BY rank"
        )
        found: list[sqlite3.Row] = []
        seen: set[int] = set()
        project = None if all_projects else self.project
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

    def _numbers_of(self, raws: list[sqlite3.Row]) -> dict[str, tuple[int | None, str | None]]:
        """The number and lock holder of each of ``raws`` (by path), as ``_numbered``
        gives them in the listing: each one's project is read in order (a few columns
        of each row), until the last of them is numbered."""
        out: dict[str, tuple[int | None, str | None]] = {}
        for project in {raw["project"] for raw in raws}:
            wanted = {raw["num"]: raw["path"] for raw in raws if raw["project"] == project}
            order = self._db.execute(_NUMBERING + " WHERE project = ?" + _ORDER, (project,))
            for raw, number, holder, _hidden in _numbered(order):
                if raw["num"] in wanted:
                    out[wanted.pop(raw["num"])] = (number, holder)
                    if not wanted:
                        break
            for path in wanted.values():  # removed by a neighbour meanwhile: not listed
                out[path] = (None, None)
        return out

    @_one_snapshot
    def find(self, ref: str) -> SessionRow:
        """The session a person means by ``ref``: a number (1 = most recent in this
        project; digits that start with 0 are never a number), a handle (any project)
        or an id (any project, or its start). Raises NotFound naming the closest ones."""
        rows = self.listing(all_projects=True)[0]
        ref = ref.strip()
        by_handle = [r for r in rows if r.handle and (tail_of(r.id) or "").startswith(ref)]
        if ref.isdigit() and not ref.startswith("0"):
            numbered = [r for r in rows if r.project == self.project and r.number]
            if 1 <= int(ref) <= len(numbered):
                return numbered[int(ref) - 1]
            exact = [r for r in rows if r.handle == ref]  # a handle of eight digits
            if len(exact) == 1 or _copies(exact):
                return self._copy_here(exact)
            digits = [r for r in by_handle if r.handle.isdigit()]  # (handles of 8 digits)
            if digits and len(ref) >= MIN_HANDLE:  # a number, unless written whole
                names = ", ".join(r.handle for r in digits[:3])
                hint = f"Digits alone are a number; a handle of digits is written whole: {names}."
            else:
                hint = "`chatloop sessions` lists them with their numbers."
            count = len(numbered)
            held = (
                "no sessions"
                if not count
                else "1 is the only number"
                if count == 1
                else f"numbers 1-{count}, as `chatloop sessions` lists them"
            )
            raise NotFound(f"There is no session number {ref} in this project ({held})", hint)
        if is_handle(ref):
            if len(by_handle) == 1 or _copies(by_handle):
                return self._copy_here(by_handle)
            if len(by_handle) > 1:
                names = ", ".join(f"{r.handle} ({r.id})" for r in by_handle[:5])
                raise NotFound(
                    f"{ref!r} is the start of several handles: {names}", "Type more of it."
                )
        validate_session_id(ref)
        exact = [r for r in rows if r.id == ref]
        if not exact and len(ref) >= 4:
            exact = [r for r in rows if r.id.startswith(ref)]
        if len(exact) == 1 or _copies(exact):
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

    def _copy_here(self, rows: list[SessionRow]) -> SessionRow:
        """The row of ``rows`` (one session: ``_copies``) in this project, or the only
        one; raises NotFound naming the projects when the copies are all elsewhere."""
        here = [r for r in rows if r.project == self.project]
        if len(rows) == 1 or here:
            return (here or rows)[0]
        places = ", ".join(sorted({r.project for r in rows}))
        raise NotFound(
            f"Session {rows[0].id} is in several projects ({places})",
            "Run the command from the folder of the project you mean: its copy "
            "is the one taken there.",
        )

    @_one_snapshot
    def continued_by(self, session_id: str) -> list[str]:
        """The ids of the sessions (any project) that continue ``session_id``: a
        compaction's or a resume's child, not a fork; oldest first."""
        found = self._db.execute(
            "SELECT id FROM sessions WHERE parent_id = ? AND id != parent_id "
            "AND forked_at IS NULL ORDER BY created_at, id",
            (session_id,),
        )
        return [str(row[0]) for row in found]

    @_one_snapshot
    def lineage(self, row: SessionRow) -> tuple[list[SessionRow], dict[str, list[SessionRow]]]:
        """The compact/resume chain around ``row``: its ancestors (root first, ``row``
        last) and every session's children, by id, across all projects."""
        rows = self.listing(all_projects=True)[0]
        by_id = {r.id: r for r in rows}
        children: dict[str, list[SessionRow]] = {}
        for r in sorted(rows, key=lambda r: _moment(r.created)):
            if r.parent_id:
                children.setdefault(r.parent_id, []).append(r)
        chain = [row]
        while chain[0].parent_id in by_id and by_id[chain[0].parent_id] not in chain:
            chain.insert(0, by_id[chain[0].parent_id])
        return chain, children


def _terms(words: list[str]) -> str:
    """An FTS5 query holding every one of ``words`` (each a phrase: no operators)."""
    return " ".join('"' + word.replace('"', "") + '"' for word in words)


def hits(rows: list[SessionRow], query: str) -> Iterator[SearchHit]:
    """The hits of ``rows`` (``Queries.search_sessions``'s for ``query``): each with the
    message and snippet where the first word occurs, read from its file as it is
    yielded (the index is not touched); those that hold it only in copies (summaries,
    restoration prompts: role "summary" or "restored") last."""
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


def _copies(rows: list[SessionRow]) -> bool:
    """True when ``rows`` are one session's copies (one id, in several projects:
    ``chatloop import`` into each, or a folder copied by hand)."""
    return len(rows) > 1 and len({r.id for r in rows}) == 1


def _moment(iso: str) -> float:
    """Seconds since the epoch of a row's ISO time (0 for one that cannot be read)."""
    from datetime import datetime

    try:
        return seconds(datetime.fromisoformat(iso))
    except ValueError:
        return 0.0


def _numbered(
    raws: Iterator[sqlite3.Row],
) -> Iterator[tuple[sqlite3.Row, int | None, str | None, bool]]:
    """Rows (``_NUMBERING``'s columns) in listing order with their number, who holds
    their lock (``fsio.lock_holder``: a session is live while a chat holds it), and
    whether a later session of their project continues them (hidden when folded): the
    rule of the module doc, stated here once. A number is None when live or hidden; a
    session whose summary a worker is writing, after its chat ended, has one."""
    counters: dict[str, int] = {}
    continued: dict[str, set[str]] = {}  # a session -> the projects of those continuing it
    for raw in raws:
        session, parent, project = raw["id"], raw["parent_id"], raw["project"]
        holder = lock_holder(Path(raw["path"])) if raw["status"] == "open" else None
        live = holder == "chat"
        # rows come latest first: every session continuing this one was seen already
        if parent and parent != session and not live and fork_point(raw["forked_at"]) is None:
            continued.setdefault(parent, set()).add(project)
        hidden = project in continued.get(session, ())
        number = None
        if not live and not hidden:
            counters[project] = number = counters.get(project, 0) + 1
        yield raw, number, holder, hidden


def _row(raw: sqlite3.Row, number: int | None, holder: str | None, handle: str = "") -> SessionRow:
    """A listed session. Its status, as the person should read it: ``open`` only while
    a chat writes it, ``summarizing`` while a worker writes its summary after the chat
    ended, ``interrupted`` when nobody does (its writer died)."""
    status = raw["status"]
    if status == "open" and holder != "chat":
        status = "summarizing" if holder == SUMMARY_HOLDER else "interrupted"
    return SessionRow(
        number=number,
        id=raw["id"],
        path=raw["path"],
        project=raw["project"],
        title=raw["title"] or "",
        agent=raw["agent"] or "",
        agent_name=raw["agent_name"] or "",
        model=raw["model"] or "",
        created=raw["created"],
        updated=raw["updated"],
        status=status,
        queries=raw["queries"],
        tokens_in=raw["tokens_in"],
        tokens_out=raw["tokens_out"],
        restoration_tokens=raw["restoration_tokens"],
        parent_id=raw["parent_id"],
        parent_file=raw["parent_file"],
        git_branch=raw["git_branch"],
        preview=raw["preview"] or "",
        has_summary=None if raw["has_summary"] is None else bool(raw["has_summary"]),
        legacy=bool(raw["legacy"]),
        problems=raw["problems"],
        handle=handle,
        forked_at=raw["forked_at"],
    )


class _Links:
    """Sessions' parent and fork point by id, read from the index as they are asked
    for: a listing's chains cost what their lengths do, not what the index holds."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db
        self._read: dict[str, tuple[str | None, int | None] | None] = {}

    def get(self, session: str) -> tuple[str | None, int | None] | None:
        """``session``'s parent and fork point; None when no session has that id."""
        if session not in self._read:
            raw = self._db.execute(
                "SELECT parent_id, forked_at FROM sessions WHERE id = ? ORDER BY num LIMIT 1",
                (session,),
            ).fetchone()
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
