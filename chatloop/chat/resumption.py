"""The decisions of a resume, as functions: a parent made ready to be continued and
what its child carries.

``chat.continuation`` decides which session is continued, by which agent, as which
kind; ``chat.builders`` builds the continuation. Between the two, a resume must
settle the parent (a close a kill cut), give it a summary when it has none (waiting
for a background worker writing one, or writing one here), decide whether its whole
history fits (``--full``) and how many of its last exchanges the child carries word
for word. Each of those is a function here over what it needs (the store, the meter,
a ``summarize`` callable, a ``wait`` callable, the clock's time); none holds a
session, and what is to be said comes back as notes (``host.Note``: a text and its tone)
for the caller to show, in order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from chatloop.chat import chain, continuation, restoration
from chatloop.chat.host import Note
from chatloop.chat.meter import Meter
from chatloop.chat.pins import inherited
from chatloop.config import MAX_CARRIED
from chatloop.errors import ChatloopError
from chatloop.format import Message, Totals, no_text
from chatloop.store.fsio import SUMMARY_HOLDER, lock_holder
from chatloop.store.store import Store

__all__ = [
    "Readied",
    "Summarize",
    "Wait",
    "carried",
    "continued_already",
    "full_history",
    "last_exchange",
    "leaves_too_many",
    "recent_exchanges",
    "settled",
    "summarized",
    "summarized_whole",
    "unwaited",
]

# the summary of some messages (``ChatSession.summarize``: never raises for the model)
Summarize = Callable[[list[Message], "str | None"], chain.SummaryOutcome]
# waits for the background worker writing a parent's summary to let go of its file:
# True when it did, False when the wait ran out, None when the person cut it short
Wait = Callable[[chain.Parent], "bool | None"]


@dataclass(frozen=True)
class Readied:
    """A parent as it is to be continued, and what to say of it (in order)."""

    parent: chain.Parent
    notes: tuple[Note, ...] = ()


def settled(store: Store, parent: chain.Parent) -> Readied:
    """``parent`` with a close a kill cut completed (``Store.settle``: read again), and
    its note (damaged, interrupted) as a warning; not when a worker is writing its
    summary, which is neither missing nor interrupted (the wait for it says so)."""
    if parent.meta.status != "closed" and store.settle(parent.path):
        parent = chain.read_parent(store, parent.path)
    being_written = parent.summary is None and lock_holder(parent.path) == SUMMARY_HOLDER
    if parent.note and not being_written:
        return Readied(parent, ((f"Session {parent.meta.id}: {parent.note}.", "warn"),))
    return Readied(parent)


def full_history(
    store: Store, parent: chain.Parent, meter: Meter, prefix: Sequence[Message] = ()
) -> tuple[list[Message] | None, tuple[Note, ...]]:
    """``parent``'s whole history for a ``--full`` continuation (after ``prefix``, the
    history the current session sends first), or None and why when it does not fit
    the budget ``meter`` plans with (the child then begins from the summary)."""
    session = store.read(parent.path).session
    history = [m for m in session.messages if m.role != "summary"]
    fit = meter.plan(history, prefix)
    if fit.fits:
        return history, ()
    note = (
        f"The full history of {parent.meta.id} (about {fit.messages_tokens:,} tokens) does "
        f"not fit the budget ({fit.budget.available:,}); using its summary instead."
    )
    return None, ((note, "warn"),)


def summarized(
    store: Store,
    parent: chain.Parent,
    *,
    summarize: Summarize,
    wait: Wait,
    summary_words: int,
    summary_wait: float,
    now: Callable[[], datetime],
) -> Readied:
    """``parent``, which has no usable summary, with one: written into its file when it
    can be. One whose summary a background worker is writing (a chat that just ended)
    is waited for first (``wait``): that worker writes the very summary wanted. Past
    that wait (``False``: a model slow or stuck) the summary built from the transcript
    is used (``unwaited``) and the worker goes on writing the file's own; a wait the
    person cut short (``None``) makes one here, as for a parent another chatloop holds.
    A legacy file gets a model's summary in its seed's markers; a file another chatloop
    holds is summarized without being written. Raises ChatloopError or StoreError when
    the file cannot be read or finalized."""
    if lock_holder(parent.path) == SUMMARY_HOLDER:
        free = wait(parent)
        if free is not None:
            again = chain.read_parent(store, parent.path)
            if again.summary is not None:
                return Readied(again)
            parent = again
            if not free:
                return unwaited(store, parent, summary_words, summary_wait)
    found = store.read(parent.path)
    writer = None
    if not found.legacy:  # (a legacy copy gets its summary in the seed's markers)
        try:
            writer = store.open(parent.path)
        except ChatloopError:  # open in another chatloop: summarize without writing
            writer = None
    try:
        messages = writer.messages if writer else list(found.session.messages)
        outcome = summarize(messages, chain.began_from(store, parent))
        wrote: Note = (f"Wrote the missing summary into {parent.path.name}.", "info")
        if writer is None:
            notes: tuple[Note, ...] = ()
            if found.legacy and not outcome.fallback:  # made once, kept (not a stand-in)
                try:
                    store.add_legacy_summary(parent.path, outcome.text)
                    notes = (wrote,)
                except ChatloopError:  # locked, or changed meanwhile: this resume uses it
                    pass
            return Readied(replace(parent, summary=outcome.text), notes)
        writer.finalize(outcome.message(now()))
        return Readied(chain.closed_parent(writer), (wrote,))
    finally:
        if writer is not None:
            writer.close()


def unwaited(store: Store, parent: chain.Parent, summary_words: int, waited: float) -> Readied:
    """``parent``, whose summary a worker is still writing after ``waited`` seconds,
    with the summary built from its transcript (``chain.fallback``; nothing asked of
    the model, which may be the one still busy with it; nothing written: the worker
    holds the file) and its totals counted here (the worker writes them at its end)."""
    note: Note = (
        f"The summary of {parent.meta.id} is still being written in the background "
        f"after {waited:g} s: continuing from one built from its transcript.",
        "warn",
    )
    messages = list(store.read(parent.path).session.messages)  # (as marked)
    previous = chain.began_from(store, parent)
    outcome = chain.fallback(messages, previous, summary_words)
    totals = Totals()
    for message in messages:
        totals = totals.plus(message)
    counted: dict[str, Any] = totals.fields()
    meta = replace(parent.meta, **counted)
    return Readied(replace(parent, meta=meta, summary=outcome.text), (note,))


def recent_exchanges(store: Store, parent: chain.Parent) -> list[list[Message]]:
    """The last exchanges of ``parent``'s file, as many as a child may carry ([] for a
    file too large to walk for them, or unreadable)."""
    try:
        return store.recent_exchanges(parent.path, MAX_CARRIED)
    except (ChatloopError, OSError):
        return []


def carried(
    parent: chain.Parent,
    summary: str,
    recent: list[list[Message]],
    pins: tuple[str, ...],
    meter: Meter,
    now: datetime,
) -> tuple[Message, ...]:
    """What a child resumed from ``summary`` carries of ``recent`` (the parent's last
    exchanges), counted against the restoration prompt it will have: the summary
    fitted with ``pins`` (the continuing session's, as ``builders.from_summary``'s
    caller fits it) and built with the chain's (``pins.inherited``)."""
    sizes = meter.sizes()
    fitted = restoration.fit(summary, pins, sizes)
    chain_pins = inherited(parent.meta.pins, pins)
    text = restoration.build(parent, fitted, chain_pins, sizes, None, MAX_CARRIED)
    return meter.carry(recent, meter.opening(text, now), keep_first=False)


def leaves_too_many(parent: chain.Parent) -> str:
    """Why ``summarized_whole`` is needed for ``parent`` (said before it is made)."""
    return (
        f"The summary of {parent.meta.id} leaves its last {parent.meta.summary_leaves} "
        "messages to be carried word for word, and they do not all fit here: "
        "summarizing the whole session for this continuation."
    )


def summarized_whole(store: Store, parent: chain.Parent, summarize: Summarize) -> str:
    """A summary of all ``parent``'s messages, made now and not written: its own
    summary leaves its last messages to the child that carries them, and more of them
    than this child can carry (a smaller window, a file too large to walk). Raises
    ChatloopError when the file is gone or unreadable."""
    try:
        messages = list(store.read(parent.path).session.messages)
    except (ChatloopError, OSError) as exc:
        raise ChatloopError(
            f"The session file {parent.path} is gone or unreadable",
            "`chatloop reindex` refreshes the list.",
        ) from exc
    said = [m for m in messages if m.role != "summary"]
    return summarize(said, chain.began_from(store, parent)).text


def last_exchange(parent: chain.Parent, last: Sequence[Message]) -> str | None:
    """Where ``parent`` ended, as said before its continuation: ``last``, its last
    exchange, one short line per message (None for none)."""
    if not last:
        return None
    lines = [
        f"{'You' if m.role == 'user' else parent.meta.agent or 'Agent'}: "
        f"{_short(m.text) or _said_without_text(m)}"
        for m in last
        if m.role != "tool"
    ]
    return "Where it ended:\n" + "\n".join(lines)


def continued_already(located: continuation.Located) -> str | None:
    """Resuming a session that another already continues (an older file of a chain,
    found by its handle or by a search) starts a second line from it: what to say of
    it, and where the first one went on (None: nothing continues it yet)."""
    later = located.continued_by
    if not later:
        return None
    return (
        f"Session {located.parent.meta.id} was continued already, in {later[-1]}: this "
        "resume starts a second line from it (`chatloop tree` shows both; `chatloop -r "
        f"{later[-1]}` goes on with the later one)."
    )


def _said_without_text(message: Message) -> str:
    """What a message without text did: called tools, else what the chat and ``show``
    say of a reply without text (``format.no_text``)."""
    if message.role != "assistant":
        return "(an empty message)"
    if message.tool_calls and not message.interrupted:
        return "(called " + ", ".join(dict.fromkeys(c.name for c in message.tool_calls)) + ")"
    return no_text(message)


def _short(text: str, limit: int = 300) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
