"""What recall brings back for a query, sized to the room the window leaves, and which
chain it follows, as functions.

``chat.recall`` reads a chain and finds what matches; ``ChatSession`` writes what is
brought back after the query (sent in front of it: ``context.with_recalled``) and
moves the state. Between the two, what a continuation follows (``followed``: the
parent a waiting or open session continues, up to a fork's point) and how much the
query's window gives recall (``brought``: within window // RECALL_SHARE tokens and
the room left beside the query and the reply, cut again while the server's count
says it does not fit) are here, over parameters; what is to be said comes back as
notes (``host.Note``). Nothing here holds a session.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from chatloop.backends.base import estimate_tokens
from chatloop.chat import recall
from chatloop.chat.context import Plan
from chatloop.chat.host import Note
from chatloop.chat.state import Branch, Closing, FromSummary, Open, State, Waiting, WithHistory
from chatloop.config import RECALL_SHARE
from chatloop.format import Message
from chatloop.store.store import Store

__all__ = ["Brought", "brought", "followed"]


@dataclass(frozen=True)
class Brought:
    """What recall brings back for a query: what it ``found`` and the ``message`` that
    says it (written after the query), with the line that tells it."""

    found: recall.Recalled
    message: Message

    def notice(self) -> Note:
        return self.found.notice(estimate_tokens(self.message.text)), "info"


def followed(state: State, store: Store) -> tuple[Path | None, int | None]:
    """The chain a session in ``state`` continues, for recall to read: its latest
    earlier file (None: it continues none) and, for a fork, how many of its queries the
    session carries (None: all)."""
    match state:
        case Waiting(continuation=Branch(parent=parent, forked_at=at)):
            return parent.path, at
        case Waiting(continuation=FromSummary(parent=parent) | WithHistory(parent=parent)):
            return parent.path, None
        case Open(writer=writer) | Closing(writer=writer):
            forked = writer.meta.extra.get("forked_at")
            upto = forked if isinstance(forked, int) and not isinstance(forked, bool) else None
            return store.parent_of(writer.path, writer.meta), upto
    return None, None


def brought(
    recalls: recall.Recall,
    text: str,
    planned: Plan,
    held: Sequence[Message],
    *,
    automatic: bool,
    picked: bool,
    fits: Callable[[Message], bool],
    now: Callable[[], datetime],
) -> tuple[Brought | None, tuple[Note, ...]]:
    """What ``recalls`` brings back for the query ``text`` (``Recall.before``), when the
    next call is ``planned`` and the session holds ``held``: within
    window // RECALL_SHARE tokens and the room the window has left beside the query
    and the reply, its last exchanges given up while ``fits`` (the server's count: the
    estimate runs low) says the message does not fit. None when nothing matches or
    nothing fits; and what to say (a chain that could not be read, exchanges the person
    ``picked`` that do not fit)."""
    room = int(planned.budget.available / planned.margin) - planned.messages_tokens
    budget = min(room, planned.budget.window // RECALL_SHARE)
    found = recalls.before(text, held, budget, estimate_tokens, automatic)
    notes: tuple[Note, ...] = ()
    if (failure := recalls.failure()) is not None:
        notes = ((f"Recall could not read this chain ({failure}).", "warn"),)
    if found is None:
        if picked:
            notes = (*notes, ("The exchanges picked with /recall do not fit here.", "warn"))
        return None, notes
    made = recall.recalled_message(found, now())
    while not fits(made):
        less = found.without_last()
        if less is None:
            return None, notes
        found, made = less, recall.recalled_message(less, made.at)
    return Brought(found, made), notes
