"""A fork's decisions, as functions: where it cuts and what the branch carries.

``chat.builders`` builds a ``Branch`` from a history (``builders.branch``) and says
where a fork cuts a list of messages (``builders.fork_point``). Here is what a fork
decides with the store and the meter: the history a branch of the current session
or of a session file carries (``of_session``, ``of_file``), and whether that
history goes whole (it fits the budget) or as a restoration built from a summary of
it (``carried``). Nothing here holds a session: the store, the meter, a
``summarize`` callable and the clock are parameters, and what is to be said comes
back as notes for the caller to show.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime

from chatloop.chat import builders, chain, restoration
from chatloop.chat.host import Note
from chatloop.chat.meter import Meter
from chatloop.chat.state import Branch
from chatloop.errors import ChatloopError
from chatloop.format import Message
from chatloop.store.store import Store

__all__ = ["Summarize", "carried", "of_file", "of_session", "summarized"]

# the summary of some messages (``ChatSession.summarize``: never raises for the model)
Summarize = Callable[[list[Message], "str | None"], chain.SummaryOutcome]


def of_session(
    messages: Sequence[Message], prefix: Sequence[Message], upto: int | None
) -> tuple[list[Message], int]:
    """What a branch of a session after its query ``upto`` (None: after the last)
    carries: ``prefix`` (a ``--full`` continuation's history, sent before it) and its
    own ``messages`` up to that point, its summaries left out; and the query it
    branches after (numbered in the session's own messages). Raises ChatloopError
    when there is nothing to fork or no such query (``builders.fork_point``)."""
    own = [m for m in messages if m.role != "summary"]
    cut, at = builders.fork_point(own, upto)
    return [*(m for m in prefix if m.role != "summary"), *own[:cut]], at


def of_file(store: Store, parent: chain.Parent) -> tuple[list[Message], int]:
    """What a branch of the session file of ``parent`` after its last query carries
    (``chatloop -r N --fork``), and that query's number. Raises ChatloopError when the
    file is gone or unreadable, or holds nothing to fork."""
    try:
        session = store.read(parent.path).session
    except (ChatloopError, OSError):
        raise ChatloopError(
            f"The session file {parent.path} is gone or unreadable",
            "`chatloop reindex` refreshes the list.",
        ) from None
    messages = [m for m in session.messages if m.role != "summary"]
    cut, at = builders.fork_point(messages, None)
    return messages[:cut], at


def carried(
    branch: Branch, meter: Meter, summarize: Summarize, now: Callable[[], datetime]
) -> tuple[Branch, tuple[Note, ...]]:
    """``branch`` as it is to wait for the next message, and what to say of it: its
    copies whole when they fit the budget ``meter`` plans with, else ``summarized``."""
    parent, at = branch.parent, branch.forked_at
    if meter.plan(list(branch.copies)).fits:
        where = (
            f"after query {at} ({len(branch.copies)} messages carried)" if at else "at its start"
        )
        said = (
            f"Forking session {parent.meta.id} {where}: the branch begins with your next "
            f"message; {parent.meta.id} stays as it is."
        )
        return branch, ((said, "restored"),)
    return summarized(branch, meter, summarize, now)


def summarized(
    branch: Branch, meter: Meter, summarize: Summarize, now: Callable[[], datetime]
) -> tuple[Branch, tuple[Note, ...]]:
    """``branch`` carrying one restoration prompt built from a summary of its copies
    (``summarize``, fitted with the branch's pins: ``restoration.fit`` and
    ``restoration.build``) instead of the copies, the summary then being what the
    branch continues from; and the warning that says so. Used when its history does
    not fit whole: as it waits (``carried``), at a compaction before it is written,
    or when its first message does not fit beside it."""
    parent, at = branch.parent, branch.forked_at
    outcome = summarize(list(branch.copies), branch.previous)
    pins, sizes = branch.template.pins, meter.sizes()
    summary = restoration.fit(outcome.text, pins, sizes)
    text = restoration.build(parent, summary, pins, sizes)
    prompt = Message.create("user", now(), text=text, restore=True)
    note: Note = (
        f"The history up to query {at} does not fit whole: the branch carries a summary of it.",
        "warn",
    )
    return replace(branch, copies=(prompt,), previous=summary), (note,)
