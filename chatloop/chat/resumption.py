"""The decisions of a resume, as functions: a parent made ready to be continued and
what its child carries.

``chat.continuation`` decides which session is continued, by which agent, as which
kind; ``chat.builders`` builds the continuation. Between the two, a resume must
settle the parent (a close a kill cut), give it a summary when it has none (waiting
for a background worker writing one, or writing one here), decide whether its whole
history fits (``--full``) and how many of its last exchanges the child carries word
for word. Around them: what ``/resume`` continues (``located``: a reference, or the
person's pick), what refuses a resume (``not_own``, ``not_saved``), the wait for a
worker writing a summary (``waiting``), and what is said as a continuation begins
(``arrival``, ``with_full_history``). Each of those is a function here over what it
needs (the store, the meter, a ``summarize`` callable, a ``wait`` callable, the
clock's time); none holds a session, and what is to be said comes back as notes
(``host.Note``: a text and its tone) for the caller to show, in order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from chatloop.backends.base import Backend
from chatloop.chat import chain, continuation, restoration, sharing
from chatloop.chat.ending import Working
from chatloop.chat.host import Note
from chatloop.chat.meter import Meter
from chatloop.chat.pins import inherited
from chatloop.config import MAX_CARRIED
from chatloop.errors import ChatloopError, StoreError
from chatloop.format import Message, Totals, no_text
from chatloop.store.fsio import SUMMARY_HOLDER, lock_holder, wait_for_lock
from chatloop.store.store import Store
from chatloop.store.writer import SessionWriter

__all__ = [
    "Readied",
    "Summarize",
    "Wait",
    "arrival",
    "carried",
    "continued_already",
    "full_history",
    "last_exchange",
    "leaves_too_many",
    "located",
    "not_own",
    "not_saved",
    "readied",
    "recent_exchanges",
    "settled",
    "summarized",
    "summarized_whole",
    "unwaited",
    "waiting",
    "with_full_history",
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
    history: list[Message] | None = None  # a --full continuation's, when it fits


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


def readied(
    store: Store,
    located: continuation.Located,
    meter: Meter,
    prefix: Sequence[Message] = (),
    *,
    full: bool,
) -> Readied:
    """``located``'s parent ``settled``, with its whole history when ``full`` asks for
    it and it fits (``full_history``), and what to say of both, in order. Its summary
    may still be missing (``summarized`` gives it one)."""
    readied = settled(store, located.parent)
    if not full:
        return readied
    history, notes = full_history(store, readied.parent, meter, prefix)
    return replace(readied, notes=(*readied.notes, *notes), history=history)


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


def located(
    store: Store, ref: str, kind: continuation.Kind, pick: continuation.Pick
) -> tuple[continuation.Located, continuation.Kind] | None:
    """What ``/resume`` continues, and as which kind: the session ``ref`` names (a
    number of the listing, a handle or an id: ``continuation.locate``, as ``chatloop
    -r``), or for "" the one the person picks (``pick``; they may choose to fork
    there). None when they picked nothing. Raises ChatloopError for a ``ref`` that
    names none."""
    if ref:
        return continuation.locate(store, ref), kind
    picked = continuation.choose(store, pick)
    if picked is None:
        return None
    found = continuation.locate(store, picked.row)
    return found, continuation.Kind.FORK if picked.fork else kind


def not_own(located: continuation.Located, writer: SessionWriter | None) -> None:
    """Refuse (ChatloopError) to continue the file being written (``writer``'s):
    a session goes on in itself, or anew by ``/compact``."""
    if writer is not None and located.path == writer.path:
        raise ChatloopError("That is the session you are in", "/compact continues it anew.")


def not_saved(unsaved: int, exc: StoreError) -> ChatloopError:
    """Why nothing is resumed while ``unsaved`` messages of the current session cannot
    be saved (``exc``): they belong to it, and leaving shows them to copy."""
    return ChatloopError(
        f"Not resumed: {unsaved} message(s) of this session are not saved yet ({exc.message})",
        "Free some space and send again; leaving shows them to copy.",
    )


def waiting(home: Path, backend: Backend, working: Working, seconds: float) -> Wait:
    """The wait for a background worker writing a parent's summary, as the person's:
    the worker is asked to go now (``sharing.step_back``), the wait (``seconds`` at
    most) is shown as work under way, and Ctrl-C ends it (None: make one here)."""

    def wait(parent: chain.Parent) -> bool | None:
        sharing.step_back(home, backend)  # (the worker goes now)
        try:
            with working(
                f"Waiting for the summary of {parent.meta.id}, being written in the "
                "background (Ctrl-C: make one now)..."
            ):
                return wait_for_lock(parent.path, seconds)
        except KeyboardInterrupt:
            return None

    return wait


def arrival(
    parent: chain.Parent,
    recent: list[list[Message]],
    located: continuation.Located | None = None,
) -> tuple[Note, ...]:
    """What is said as ``parent`` is continued: where it ended (the last of ``recent``,
    its last exchanges: ``last_exchange``), and when ``located`` is continued by
    another already, that this starts a second line (``continued_already``)."""
    notes: list[Note] = []
    said = last_exchange(parent, recent[-1] if recent else [])
    if said:
        notes.append((said, "info"))
    again = continued_already(located) if located is not None else None
    if again:
        notes.append((again, "warn"))
    return tuple(notes)


def with_full_history(parent: chain.Parent, history: Sequence[Message]) -> Note:
    """What is said when ``parent`` is continued with its whole ``history``."""
    return (
        f"Continuing session {parent.meta.id} with its full history "
        f"({len(history)} messages): the new session begins with your next message.",
        "restored",
    )
