"""The states of a ``ChatSession``, as explicit values (in the spirit of httpx's
``ClientState``), and the continuations a session may be waiting to begin.

A session is always in exactly one state:

- ``Fresh``: nothing written, nothing decided: the next message creates a new
  session file.
- ``Waiting``: a continuation is decided (a compaction, a resume, a fork) but
  not written: the next message writes the child file first (its restoration
  prompt or its copies), so a continuation left unused leaves no file.
- ``Open``: a session file is being written (``writer`` holds its lock), with
  what that file continues: the summary it began from (``previous``), a
  ``--full`` history sent before its own messages (``prefix``) and the tokens
  of its ancestors (``chain_base``).
- ``Closing``: the open file is being finalized here: its summary is being written.
  A summary written in the background is not a state of the session: the file is
  handed to a worker (``chat.background``), which holds its lock, and the session
  is let go (``Fresh``, or ``Waiting`` for the child of a compaction).

The continuations (what ``Waiting`` holds) are the kinds of
``chat.continuation.Kind`` made concrete: ``FromSummary``, ``WithHistory``
and ``Branch`` (a fork, which retry, edit and an agent switch also make).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from chatloop.chat.chain import Parent
from chatloop.format import Message, SessionMeta
from chatloop.store.writer import SessionWriter


@dataclass(frozen=True)
class FromSummary:
    """A child that begins with a restoration prompt built from ``summary``, then
    ``carried``, copies of the parent's last exchanges; the model acknowledges the
    prompt (or answers ``unanswered``, a message the parent could not take)."""

    parent: Parent
    summary: str
    template: SessionMeta
    preview: Message  # the restoration prompt as it will be written (for the budget)
    unanswered: str | None = None
    carried: tuple[Message, ...] = ()


@dataclass(frozen=True)
class WithHistory:
    """A child that sends the parent's whole ``history`` before its own messages
    (``--full``); its file holds only the link."""

    parent: Parent
    summary: str | None  # the parent's: what a later summary of the child builds on
    template: SessionMeta
    history: tuple[Message, ...]


@dataclass(frozen=True)
class Branch:
    """A fork: a child that carries ``copies`` of the parent's messages up to query
    ``forked_at`` (or one restoration prompt summarizing them, when they do not fit)."""

    parent: Parent
    previous: str | None  # the summary the copied history itself began from
    template: SessionMeta
    copies: tuple[Message, ...]
    forked_at: int


Continuation = FromSummary | WithHistory | Branch


@dataclass(frozen=True)
class Child:
    """What the file of a continuation is written with, and what it then continues:
    its front matter, the messages it opens with (a restoration prompt and the copies
    it carries, or a fork's copies; none for ``--full``), the summary it continues
    from (``Open.previous``) and the history sent before it (``Open.prefix``)."""

    meta: SessionMeta
    opening: tuple[Message, ...]
    previous: str | None
    prefix: tuple[Message, ...] = ()


@dataclass(frozen=True)
class Fresh:
    """Nothing written and nothing decided yet."""


@dataclass(frozen=True)
class Waiting:
    """A continuation decided, written with the next message."""

    continuation: Continuation


@dataclass(frozen=True)
class Open:
    """A session file being written."""

    writer: SessionWriter
    previous: str | None = None  # the summary this file continues from
    prefix: tuple[Message, ...] = ()  # --full: the parent's history, sent first
    chain_base: int = 0  # tokens of every ancestor


@dataclass(frozen=True)
class Closing:
    """The open file being finalized (its summary being written)."""

    writer: SessionWriter
    previous: str | None = None


State = Fresh | Waiting | Open | Closing


@dataclass(frozen=True)
class Status:
    """What a session says of itself (``ChatSession.describe``) for ``/info``, the
    toolbar and tests: no caller decodes the state itself."""

    phase: Literal["fresh", "waiting", "open", "closing"]
    session_id: str = ""  # "" until its file exists
    path: Path | None = None
    continues: str = ""  # the parent's id: waiting to continue it, or continuing it
    how: str = ""  # waiting: "its summary", "its whole history" or "a fork of it"
    chain_tokens: int = 0  # this session and its ancestors (0 for a session with none)
    prepared: str = ""  # the next compaction's summary: "preparing", "ready" or ""

    @property
    def started(self) -> bool:
        """True once the session has a file."""
        return self.path is not None


def status(state: State, spent: int, prepared: Callable[[list[Message]], str]) -> Status:
    """What a session in ``state`` says of itself: the continuation it waits to begin,
    or the file it writes, where an open one continuing a chain counts its ancestors'
    tokens and its own ``spent`` (what is queued included), and the phase of the next
    compaction's summary for the file's messages (``prepared``: ``Preparer.phase``)."""
    match state:
        case Waiting(continuation=continuation):
            return Status("waiting", continues=continuation.parent.meta.id, how=how(continuation))
        case Open(writer=writer, chain_base=base):
            meta = writer.meta
            return Status(
                "open",
                meta.id,
                writer.path,
                meta.parent_id or "",
                chain_tokens=base + spent if meta.parent_id else 0,
                prepared=prepared(writer.messages),
            )
        case Closing(writer=writer):
            meta = writer.meta
            return Status("closing", meta.id, writer.path, meta.parent_id or "")
    return Status("fresh")


def how(continuation: Continuation) -> str:
    """How ``continuation`` carries its parent, in words."""
    match continuation:
        case Branch():
            return "a fork of it"
        case WithHistory():
            return "its whole history"
        case FromSummary():
            return "its summary"
