"""THE place a continuation is located, and the rule that chooses its agent.

Every entry point that continues a session goes through here: ``-c``,
``-r N|HANDLE|ID``, ``--resume`` alone (the picker), ``search WORDS
--resume``, and ``/resume`` in a chat. None of them reads the parent itself.

- ``locate`` finds what a person means (a number of the listing they see, a
  handle, an id, the most recent session, or a row a picker or a search
  already chose) and reads the parent once: its front matter and the summary
  chatloop trusts (``chain.read_parent``), and which later sessions already
  continue it.
- ``choose`` lets the person pick one from the listing (folded, as
  ``chatloop sessions`` shows it), searching the index as they type.
- ``agent_for`` is the one rule for the agent of a continued session (stated
  in docs/chains.md); ``chat.server.connect`` is the one rule for its server.
- ``Kind`` names how a session is continued: from its summary (a new file
  linked to it, the summary in a restoration prompt), with its full history
  sent before the new messages, or as a fork (its messages copied into a
  branch; retry, edit and an agent switch in a chat are forks after a query).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from chatloop.chat import chain
from chatloop.chat.agent import find_agent_file, normalise
from chatloop.chat.host import Lookup, Picked
from chatloop.errors import ChatloopError, NotFound, UsageError
from chatloop.store.store import Store

if TYPE_CHECKING:
    from chatloop.store.rows import SessionRow

PICK_LIMIT = 500  # sessions a picker lists (and search hits it shows)
Pick = Callable[[list["SessionRow"], Lookup], "Picked | None"]


class Kind(enum.Enum):
    """How a session is continued."""

    SUMMARY = "summary"  # a new linked file that begins with the parent's summary
    FULL = "full"  # the parent's whole history sent first, when it fits (else SUMMARY)
    FORK = "fork"  # a branch carrying the parent's messages as copies

    @classmethod
    def of(cls, full: bool = False, fork: bool = False) -> Kind:
        """The kind the flags ``--full`` and ``--fork`` ask for (one at most)."""
        if full and fork:
            raise UsageError(
                "--fork and --full ask for two ways to continue; give one",
                "--fork branches with the session's exchanges copied as they were; --full "
                "sends its whole history to the model; neither: it begins from the summary.",
            )
        return cls.FORK if fork else cls.FULL if full else cls.SUMMARY


@dataclass(frozen=True)
class Located:
    """A session to continue, read once: its index row, its front matter and trusted
    summary, and the ids of the sessions that already continue it (oldest first)."""

    row: SessionRow
    parent: chain.Parent
    continued_by: tuple[str, ...] = ()

    @property
    def path(self) -> Path:
        return self.parent.path


def locate(store: Store, ref: str | SessionRow, *, latest: bool = False) -> Located:
    """The session ``ref`` names (see ``Index.find``: a number of the listing, a
    handle or an id), or the row a picker or a search chose, read once. ``latest``:
    ``ref`` is ``-c``'s "1", and an empty project is said as such. Raises NotFound
    (with the closest matches) or ChatloopError (the file is gone or unreadable)."""
    from chatloop.store.index import Index

    with Index(store) as index:
        index.sync(all_projects=True)
        if isinstance(ref, str):
            if latest and not index.count():
                raise NotFound(
                    "There is no session to continue in this project yet",
                    "Start one with `chatloop`; `chatloop sessions --all` lists other "
                    "projects' sessions (`-r HANDLE` resumes one).",
                )
            row = index.find(ref)
        else:
            row = ref
        later = tuple(index.continued_by(row.id))
    path = Path(row.path)
    try:
        parent = chain.read_parent(store, path)
    except (ChatloopError, OSError):
        raise ChatloopError(
            f"The session file {path} is gone or unreadable",
            "`chatloop reindex` refreshes the list.",
        ) from None
    return Located(row, parent, later)


def choose(store: Store, pick: Pick) -> Picked | None:
    """Let the person pick a session of this project with ``pick`` (the listing as
    ``chatloop sessions`` shows it: a chain as its last file; most recent first),
    searching the index as they type. None: they picked none."""
    from chatloop.chat.lookup import IndexLookup
    from chatloop.store.index import Index

    with Index(store) as index:
        index.sync(all_projects=True)
        rows = index.list_sessions(limit=PICK_LIMIT, fold=True)
        return pick(rows, IndexLookup(index, store, PICK_LIMIT))


@dataclass(frozen=True)
class AgentChoice:
    """The agent file a continued session goes on with, and what to say about it."""

    path: Path
    note: str | None = None


def _agent_named(names: tuple[str, ...], dirs: Iterable[Path]) -> Path:
    """The agent file of the first of ``names`` found in the agent folders ``dirs``
    (by name only); raises the first name's ChatloopError when none is."""
    first: ChatloopError | None = None
    for name in dict.fromkeys(n for n in names if n):
        try:
            return find_agent_file(name, dirs, names_only=True)
        except ChatloopError as exc:
            first = first or exc
    raise first or ChatloopError("The session names no agent", "")


def agent_for(
    located: Located, *, current: Path, current_name: str, named: bool, dirs: Iterable[Path]
) -> AgentChoice:
    """THE rule for the agent of a continued session, whatever the entry point:

    1. an agent the person named for this run (``--agent``, or ``/agent`` in the
       chat) goes on: it is ``current`` (called ``current_name``);
    2. else the agent the session was held with, found by its name in the agent
       folders ``dirs`` (by name only: a session file never names a file to run),
       else by the name it was shown with (an imported session's "Simple Sally");
    3. else ``current`` (the configured agent).

    Whenever the agent that goes on is not the one the session was held with, or
    not ``current``, a note says so: nothing changes silently."""
    meta = located.parent.meta
    recorded = meta.agent_ref
    held = meta.agent or recorded
    if not recorded or normalise(recorded) == normalise(current.stem):
        return AgentChoice(current)
    if named:
        return AgentChoice(
            current, f"session {meta.id} was with {held}; continuing it with {current_name}."
        )
    try:
        own = _agent_named((recorded, meta.agent), dirs)
    except ChatloopError:
        return AgentChoice(
            current,
            f"session {meta.id} was held with the agent {held!r}, "
            "which is not in your agent folders; continuing with "
            f"{current_name} (--agent chooses the one to continue with).",
        )
    if own.resolve() == current.resolve():
        return AgentChoice(current)
    return AgentChoice(
        own, f"continuing with the session's own agent, {held} (--agent chooses another)."
    )
