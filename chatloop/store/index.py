"""A SQLite cache of sessions for fast listing and full-text search: the object
callers hold.

``with Index(store) as index: index.sync(); index.listing(...); index.find(ref)``.
The files are the truth; this is a cache, rebuildable from them at any time.
``Index`` only wires three parts, each the owner of one thing:

- ``index_file.IndexFile``: the SQLite file and its resilience (connecting,
  corruption replaced, in memory for a read-only home, busy waited out,
  builds one at a time, side files);
- ``index_build``: freshness and building (sync against the files' looks and
  marks, batches, the worker-process scan of ``index_scan``, rebuilds);
- ``index_query.Queries``: what is asked of it (listings and their numbers,
  find by number, handle or id, search and its hits, lineage, handles).

The rows it answers with (``SessionRow``, ``SearchHit``) are ``rows``', which
does not import SQLite.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from chatloop.store import index_build
from chatloop.store.index_file import INDEX_FILE, IndexFile
from chatloop.store.index_query import Queries, hits
from chatloop.store.rows import SearchHit, SessionRow
from chatloop.store.store import Store

if TYPE_CHECKING:
    from chatloop.store.index_build import Progress

__all__ = ["Index"]


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

    def __init__(self, store: Store, memory: bool = False) -> None:
        """``memory``: an index in memory from the start, ``index.db`` never made (a
        command that only reads, on a home that does not exist: it makes none)."""
        self.store = store
        self.file = IndexFile(store.root / INDEX_FILE, memory=memory)

    @property
    def path(self) -> Path:
        return self.file.path

    @property
    def in_memory(self) -> bool:
        return self.file.in_memory

    def close(self) -> None:
        self.file.close()

    def __enter__(self) -> Index:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- freshness (index_build)
    def sync(self, all_projects: bool = True, progress: Progress | None = None) -> int:
        """Bring rows up to date with the files; returns how many files were (re)read
        (``index_build.sync``). Rows glanced at (many files to read: their words not
        read yet) get their words from a process started here (``index_text``); a
        listing never waits for them."""
        count = index_build.sync(self.file, self.store, all_projects, progress)
        if count and not self.in_memory and self.text_pending():
            from chatloop.store import index_text

            index_text.start(self.store.root)
        return count

    def text_pending(self) -> int:
        """How many sessions are listed whose words are not indexed yet."""
        return index_build.text_pending(self.file)

    def complete_text(
        self, progress: Progress | None = None, waiting: Callable[[], None] | None = None
    ) -> int:
        """Every listed session's words in the index: waits for the process reading
        them (``waiting`` is called meanwhile), or reads them here (``progress``);
        returns how many files this process read (``index_build.fill_text``)."""
        return index_build.fill_text(self.file, self.store, progress, waiting)

    def rebuild(self, progress: Progress | None = None) -> int:
        """Re-read every session file of every project into a fresh index
        (``index_build.rebuild``); returns how many were read."""
        return index_build.rebuild(self.file, self.store, progress)

    # -- reading (index_query)
    def _queries(self) -> Queries:
        return Queries(self.file.db, self.store.project)  # (db may have been replaced)

    def list_sessions(
        self, all_projects: bool = False, limit: int | None = None, fold: bool = False
    ) -> list[SessionRow]:
        """``listing`` without the count."""
        return self._queries().listing(all_projects, limit, fold)[0]

    def listing(
        self,
        all_projects: bool = False,
        limit: int | None = None,
        fold: bool = False,
        count: bool = False,
    ) -> tuple[list[SessionRow], int]:
        """Sessions, most recently updated first, numbered per project, and with
        ``count`` how many there are without ``limit`` (``Queries.listing``)."""
        return self._queries().listing(all_projects, limit, fold, count)

    def count(self, all_projects: bool = False, fold: bool = False) -> int:
        """How many sessions the index holds (``Queries.count``)."""
        return self._queries().count(all_projects, fold)

    def handles(self, wanted: set[str]) -> dict[str, str]:
        """The short handles of ``wanted`` ids (``Queries.handles``)."""
        return self._queries().handles(wanted)

    def search(self, query: str, all_projects: bool = False, limit: int = 50) -> list[SearchHit]:
        """``iter_search`` as a list."""
        return list(self.iter_search(query, all_projects, limit))

    def iter_search(
        self, query: str, all_projects: bool = False, limit: int = 50
    ) -> Iterator[SearchHit]:
        """Sessions whose text holds every word of ``query``, best match first, one hit
        per session, each yielded as soon as its snippet is read
        (``Queries.search_sessions``, then ``hits``)."""
        yield from hits(self.search_sessions(query, all_projects=all_projects, limit=limit), query)

    @staticmethod
    def hits(rows: list[SessionRow], query: str) -> Iterator[SearchHit]:
        """The hits of ``rows``, their snippets read from the files (``index_query.hits``)."""
        return hits(rows, query)

    def search_sessions(
        self,
        query: str,
        prefix: bool = False,
        all_projects: bool = False,
        limit: int = 50,
        complete: bool = True,
    ) -> list[SessionRow]:
        """The sessions ``iter_search`` would find, without reading a file for snippets
        (``Queries.search_sessions``), from every session's words (``complete_text``
        first); ``complete`` False: from the words indexed so far (a picker searching
        as the person types: it says so, ``text_pending``)."""
        if complete:
            self.complete_text()
        return self._queries().search_sessions(query, prefix, all_projects, limit)

    def search_count(self, query: str, all_projects: bool = False) -> int:
        """How many sessions ``search_sessions`` finds without a limit
        (``Queries.search_count``; the words indexed so far)."""
        return self._queries().search_count(query, all_projects)

    def find(self, ref: str) -> SessionRow:
        """The session a person means by ``ref``: a number, a handle or an id
        (``Queries.find``); raises NotFound naming the closest ones. A number is
        that of a full build even while the words are read: the rows of this
        project whose last activity is not yet known are read first
        (``index_build.settle``)."""
        if ref.isdigit():
            index_build.settle(self.file, self.store)
        return self._queries().find(ref)

    def continued_by(self, session_id: str) -> list[str]:
        """The ids of the sessions that continue ``session_id`` (``Queries.continued_by``)."""
        return self._queries().continued_by(session_id)

    def lineage(self, row: SessionRow) -> tuple[list[SessionRow], dict[str, list[SessionRow]]]:
        """The chain around ``row`` and every session's children (``Queries.lineage``)."""
        return self._queries().lineage(row)
