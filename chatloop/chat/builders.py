"""How a continuation's child is built: pure functions from values to values.

``chat.continuation`` decides which session is continued, by which agent, as which
kind; ``chat.state`` names the kinds (``FromSummary``, ``WithHistory``, ``Branch``).
Here each kind is built: the continuation waiting for the next message
(``from_summary``), the child file it is written as (``child_of``: its front matter
and the messages it opens with) and what is said when it is (``begun``). Nothing here
reads a file, calls a model or holds a session: the callers pass the pins, the sizes,
the clock's time and the folder, and show the notes returned.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path

from chatloop.chat import chain, restoration
from chatloop.chat.state import Branch, Child, Continuation, FromSummary, WithHistory
from chatloop.errors import ChatloopError
from chatloop.format import Message, SessionMeta

__all__ = [
    "begun",
    "branch",
    "child_of",
    "fork_point",
    "from_summary",
    "merged",
    "queries",
    "with_history",
]


def from_summary(
    parent: chain.Parent,
    summary: str,
    template: SessionMeta,
    pins: tuple[str, ...],
    sizes: restoration.Sizes,
    now: datetime,
    unanswered: str | None = None,
    carried: tuple[Message, ...] = (),
) -> FromSummary:
    """The continuation of ``parent`` from ``summary`` (fitted already to its budget),
    with ``pins`` (the chain's, merged): its restoration prompt built once, here
    (``restoration.build``), as the preview it is planned with and the prompt its file
    is written with (``child_of``); ``carried``: copies of the parent's last exchanges
    after it; ``unanswered``: a message the child must answer."""
    text = restoration.build(parent, summary, pins, sizes, unanswered, len(carried))
    preview = Message.create("user", now, text=text, restore=True)
    return FromSummary(parent, summary, replace(template, pins=pins), preview, unanswered, carried)


def with_history(
    parent: chain.Parent, history: Sequence[Message], template: SessionMeta, pins: tuple[str, ...]
) -> WithHistory:
    """The continuation of ``parent`` that sends its whole ``history`` before the
    child's own messages (``--full``), with ``pins`` (the chain's, merged)."""
    return WithHistory(parent, parent.summary, replace(template, pins=pins), tuple(history))


def branch(
    parent: chain.Parent,
    history: Sequence[Message],
    at: int,
    template: SessionMeta,
    pins: tuple[str, ...],
    previous: str | None,
) -> Branch:
    """A fork of ``parent`` after query ``at``, carrying ``history`` (what came before
    that point) with ``pins`` (the chain's, merged); ``previous``: the summary the
    carried history began from. What was said is copied as a copy; what was brought in
    (a restoration and its acknowledgment, an earlier fork's copies) is carried as it
    was marked. The branch takes the parent's title."""
    base = replace(
        template, pins=pins, title=parent.meta.title, extra={**template.extra, "forked_at": at}
    )
    copies = tuple(m if m.restore else m._replace(restore=True, copy=True) for m in history)
    return Branch(parent, previous, base, copies, at)


def fork_point(messages: Sequence[Message], upto: int | None) -> tuple[int, int]:
    """Where a fork after query ``upto`` cuts ``messages`` (after that query's answer
    and tool results: before the next query; 0: before the first; None: after all of
    them, a session that holds no query yet included), and the query it branches
    after. Raises ChatloopError when there is nothing to fork or no such query."""
    starts = [i for i, m in enumerate(messages) if m.is_query]
    if not messages:
        raise ChatloopError("Nothing to fork yet", "Send a message first.")
    if upto is None:  # all of it (a restoration prompt and its answer, when no query yet)
        return len(messages), len(starts)
    if not 0 <= upto <= len(starts):
        raise ChatloopError(
            f"There is no query {upto} here (this session has {len(starts)})",
            "/fork N branches after query N; /fork alone, after the last.",
        )
    cut = starts[upto] if upto < len(starts) else len(messages)
    return cut, upto


def merged(first: Sequence[str], second: Sequence[str]) -> tuple[str, ...]:
    """The facts (pins) of both, in order, each once."""
    return tuple(dict.fromkeys([*first, *second]))


def child_of(
    continuation: Continuation,
    pins: tuple[str, ...],
    model: str,
    title: str,
    now: datetime,
    folder: Path,
    acknowledged: bool = False,
) -> Child:
    """What the child of ``continuation`` is written with, in ``folder`` at ``now``: its
    front matter (with ``pins``, ``model`` and ``title``, as they are when it is
    written: pinned, switched or renamed while it waited) and the messages it opens
    with: the restoration prompt (the preview's text; ``acknowledged``
    (``acknowledgment: written``): chatloop's acknowledgment after it, unless the
    child answers a message at once) and the copies it carries, a fork's copies (or
    the restoration of their summary), nothing but the link for ``--full``."""
    parent = continuation.parent
    template = replace(
        continuation.template,
        pins=pins,
        model=model,
        title=title or continuation.template.title,
    )
    if isinstance(continuation, Branch):  # linked, ``forked_at`` in its front matter
        meta = chain.child_meta(template, parent, now, folder)
        return Child(meta, continuation.copies, continuation.previous)
    # how the parent was made (a fork of its own parent, a full restoration) is not
    # how this child is: a continuation of a fork is a continuation, not a fork
    extra = {k: v for k, v in template.extra.items() if k not in ("forked_at", "restored")}
    meta = chain.child_meta(replace(template, extra=extra), parent, now, folder)
    if isinstance(continuation, WithHistory):
        meta = replace(meta, extra={**meta.extra, "restored": "full"})
        return Child(meta, (), continuation.summary, continuation.history)
    prompt = Message.create("user", now, text=continuation.preview.text, restore=True)
    if acknowledged and continuation.unanswered is None:
        # chatloop's acknowledgment, written with the child: no call, no second write
        ack = restoration.acknowledgment(parent.meta.id, now)
        return Child(meta, (prompt, ack, *continuation.carried), continuation.summary)
    return Child(meta, (prompt, *continuation.carried), continuation.summary)


def begun(continuation: Continuation, child_id: str) -> str:
    """What is said when the child ``child_id`` of ``continuation`` is written."""
    parent = continuation.parent
    if isinstance(continuation, Branch):
        return f"Forked: {child_id} branches from {parent.meta.id} " + _carrying(continuation)
    carried = len(continuation.carried) if isinstance(continuation, FromSummary) else 0
    said = (
        f"Session Restored: {child_id} continues {parent.meta.id} ({queries(parent.meta.queries)})"
    )
    return said + (f", carrying its last {carried} messages word for word." if carried else ".")


def queries(count: int) -> str:
    """``count`` queries, in words ("1 query", "2 queries")."""
    return f"{count:,} {'query' if count == 1 else 'queries'}"


def _carrying(branch: Branch) -> str:
    """Where ``branch`` begins and what it carries, as its notice says it: a branch at
    the start of a session that began from another carries what it began with (its
    restoration, or an earlier fork's copies)."""
    at, carried = branch.forked_at, len(branch.copies)
    if at:
        return f"after query {at} ({carried} message{'s' * (carried != 1)} carried)."
    if carried:
        return f"at its start, carrying the {carried} message{'s' * (carried != 1)} it began with."
    return "at its start (none of its exchanges carried)."
