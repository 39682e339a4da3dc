"""What the index answers with: plain rows, no SQLite.

``SessionRow`` (a session as listed) and ``SearchHit`` (a message that matched a
search) are what the listing, the picker, the toolbar and the JSON output read;
they live here, apart from the SQLite modules (``index*``), so that showing a row
never imports ``sqlite3``. Also the two readings of a row's values that the
index's writer and its queries must agree on: a fork point as stored
(``fork_point``) and a moment as seconds (``seconds``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from datetime import datetime

__all__ = ["SearchHit", "SessionRow", "fork_point", "seconds"]


class SessionRow(NamedTuple):
    """One session as listed. ``number`` is None for a live session, and for a file a
    later session continues (``chatloop.store.index_query``'s rule). (A named tuple,
    not a dataclass: a listing then never imports ``dataclasses``, 9 ms here.)

    A row written from the file's head alone (after the index was lost: see
    ``format.glance``) has ``queries``, ``updated`` and ``has_summary`` None where the
    head could not say them (not yet known: shown so, never as a number), and no
    ``preview``; so do ``tokens_in`` and ``tokens_out`` of a legacy file (an imported
    seed session). They are filled when its words are read."""

    number: int | None
    id: str
    path: str
    project: str
    title: str
    agent: str
    agent_name: str  # what the agent is found by (never a path to load)
    model: str
    created: str
    updated: str | None  # the last activity; None: not yet known
    status: str
    queries: int | None  # None: not yet known
    tokens_in: int | None  # None: not yet known (a legacy file read from its head)
    tokens_out: int | None
    restoration_tokens: int
    parent_id: str | None
    parent_file: str | None
    git_branch: str | None
    preview: str
    has_summary: bool | None  # None: not yet known
    legacy: bool
    problems: int
    handle: str = ""  # the short handle of the id (``chatloop.ids.handles``); "" for legacy
    forked_at: int | None = None  # a fork: the parent's query it branches after
    chain: int = 1  # listed folded: the files of its chain up to it (it included)

    @property
    def live(self) -> bool:
        """Still being written by a running chatloop (its number is None: ``*``)."""
        return self.status == "open"


class SearchHit(NamedTuple):
    """A message that matched a search, with the session it belongs to."""

    session: SessionRow
    role: str
    snippet: str


def fork_point(value: object) -> int | None:
    """A fork's ``forked_at`` front-matter value as stored (anything odd: not a fork)."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**31:
        return value
    return None


def seconds(when: datetime) -> float:
    """Seconds since the epoch (0 where the platform cannot say: a naive time in year 1)."""
    try:
        return when.timestamp()
    except (OverflowError, OSError, ValueError):
        return 0.0
