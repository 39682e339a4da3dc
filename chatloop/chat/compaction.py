"""A compaction's decisions, as functions: what the child carries word for word,
what it gives up when the first message needs the room, how a summary made ahead
keeps the next turn in a server's cache, and a compaction that does not wait for the
model.

``ChatSession.compact`` moves the state (the queue set aside, the parent let go,
the child waiting); what it decides with the meter, the pins and the store is here,
over parameters, with the notes to show returned as values (``host.Note``). The
restoration a carry is counted against is built by ``restoration.build``, as the
child's own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from chatloop.backends.base import Backend, Cancel, ChatMessage, estimate_tokens
from chatloop.chat import background, chain, ledger, prompts, restoration
from chatloop.chat.context import summary_cap
from chatloop.chat.host import Note
from chatloop.chat.meter import Meter
from chatloop.chat.preparation import Make, Prepared
from chatloop.chat.state import FromSummary
from chatloop.chat.turn import prime
from chatloop.config import MAX_CARRIED, PREPARE_LOOKBACK, Settings
from chatloop.format import Message, exchanges
from chatloop.store.store import Store
from chatloop.store.writer import SessionWriter

__all__ = [
    "Covered",
    "Used",
    "ahead",
    "carried",
    "carry_less",
    "covered",
    "deferred",
    "defers",
    "from_prepared",
    "next_turn_kept",
    "prepare_due",
]


def carried(
    writer: SessionWriter,
    previous: str | None,
    pins: tuple[str, ...],
    meter: Meter,
    now: datetime,
) -> tuple[Message, ...]:
    """The last exchanges of ``writer``'s session that its child carries word for word
    (``chain.carry`` within ``context.carry_budget``; docs/chains.md), counted against
    a restoration prompt (with ``pins``) whose summary takes all the room it may have;
    ``previous``: the summary the session began from, whose ledger its own ends with."""
    parent = chain.Parent(writer.path, writer.meta, None)
    # the ledger its summary will end with is known now (it is not the model's)
    earlier = ledger.split(previous)[1]
    known = chain.ledger_of(earlier, writer.messages)
    sizes = meter.sizes()
    text = restoration.build(parent, ledger.join("", known), pins, sizes, None, MAX_CARRIED)
    # the summary's text at the most it may take
    room = restoration.summary_room(known, pins, sizes)
    opening = meter.opening(text, now, room)
    return meter.carry(list(exchanges(writer.messages)), opening)


def carry_less(
    waiting: FromSummary,
    typed: Sequence[Message],
    pins: tuple[str, ...],
    meter: Meter,
    now: Callable[[], datetime],
) -> tuple[FromSummary, Note]:
    """``waiting`` carrying fewer copies (the oldest exchanges go first) until the
    messages ``typed`` for its child fit after them (its restoration built again with
    ``pins`` for each count), and what to say of those left out; with none left the
    caller finds it still does not fit."""
    carried, made = waiting.carried, waiting
    sizes = meter.sizes()
    while carried:
        carried = chain.without_oldest(carried)
        text = restoration.build(
            waiting.parent, waiting.summary, pins, sizes, waiting.unanswered, len(carried)
        )
        preview = Message.create("user", now(), text=text, restore=True)
        made = replace(waiting, carried=carried, preview=preview)
        if meter.plan([preview, *carried, *typed]).fits:
            break
    left = len(waiting.carried) - len(carried)
    note: Note = (
        f"Your message leaves no room for all the messages the new session was to carry "
        f"word for word: {left} of {len(waiting.carried)} left out (they stay in "
        f"{waiting.parent.meta.id}).",
        "warn",
    )
    return made, note


def next_turn_kept(
    messages: Sequence[Message],
    previous: str | None,
    cap: int,
    meter: Meter,
    now: Callable[[], datetime],
    *,
    plain: bool,
) -> tuple[list[ChatMessage] | None, list[ChatMessage] | None]:
    """How a summary of ``messages`` (a file's) made ahead keeps the next turn's
    beginning (its system prompt and those messages, as it will send them) in a
    one-slot server's prompt cache, which a summary request would otherwise push
    out: ``(chat, None)`` when the summary can be asked as the conversation's next
    message (``chain.summarize``'s ``chat``: the request and a summary of ``cap``
    tokens fit the window, nothing left out of it); ``(None, beginning)`` when it
    cannot: that beginning is asked for once more after the summary (``prime``);
    ``(None, None)`` unless ``plain`` (an agent with tools, or a ``--full`` history
    before the file: the turn's beginning differs from any request made here)."""
    if not plain:
        return None, None
    beginning = meter.plan(list(messages), reuse=True).wire
    words = chain.asked_words(chain.summary_words(cap))
    ask = prompts.summary_in_chat(previous is not None, "", words)
    request = Message.create("user", now(), text=ask)
    planned = meter.plan([*messages, request], reuse=True, reserve=cap)
    if planned.pruned or not planned.fits:
        return None, beginning
    return planned.wire[:-1], None


def defers(settings: Settings, backend: Backend) -> bool:
    """Whether a compaction may leave its model summary to the background worker
    (``deferred``): not with ``summaries: wait``, nor with the embedded model (one
    model in this process: a worker would load a second)."""
    return settings.summaries == "background" and backend.kind != "embedded"


def deferred(
    writer: SessionWriter,
    store: Store,
    backend: Backend,
    settings: Settings,
    *,
    previous: str | None,
    late: dict[str, str],
    leave: int,
    summary_words: int,
    home: Path,
) -> tuple[chain.Parent, Note] | None:
    """A compaction that does not wait for the model: ``writer``'s session handed to
    the background worker (``chat.background``), which writes the model's summary of
    all but its last ``leave`` messages (with ``late``, a late title) when the person
    pauses; the parent returned carries the summary built from the transcript
    (``chain.fallback`` within ``summary_words``, ``previous``'s ledger included),
    which the child begins from at once. None, with nothing done, when the worker
    cannot start (the caller summarizes here)."""
    messages = writer.messages
    covered = messages[: len(messages) - leave]
    made = chain.fallback(covered, previous, summary_words)
    changes: dict[str, Any] = {**late, "summary_leaves": leave} if leave else dict(late)
    totals: dict[str, Any] = {**writer.totals.fields(), **late}
    meta = replace(writer.meta, **totals)
    if background.hand_off(writer, store, backend, settings, changes, home) is None:
        return None
    note: Note = (
        f"Compacting without waiting for the model: the new session begins from a "
        f"summary built from the transcript of {meta.id}; the model's summary is "
        "written in the background when you pause, and takes its place then.",
        "ok",
    )
    return chain.Parent(writer.path, meta, made.text), note


@dataclass(frozen=True)
class Used:
    """A summary prepared ahead, as a compaction uses it: its ``outcome``, what the
    child ``carried`` with it, how many of the file's last messages it ``leave``s out,
    and what to say of it."""

    outcome: chain.SummaryOutcome
    carried: tuple[Message, ...]
    leave: int
    note: Note = ("Using the summary prepared while you read.", "info")


def from_prepared(
    prepared: Prepared,
    writer: SessionWriter,
    previous: str | None,
    pins: tuple[str, ...],
    meter: Meter,
    now: Callable[[], datetime],
) -> Used | None:
    """``prepared`` as ``writer``'s compaction uses it, when it covers the file's first
    messages as they are now and what came after them, whole exchanges, fits in what a
    child carries word for word (``Meter.carry`` after a restoration built with
    ``pins``); nothing said since: it covers all, and the child carries the end as
    ``carried`` chooses (``previous``: the summary the session began from). Else None:
    summarized as before."""
    newer = prepared.newer(writer.messages)
    if newer is None:
        return None
    recent = list(exchanges(newer))
    if sum(len(exchange) for exchange in recent) != len(newer):
        return None
    if recent:  # the child carries exactly what came after, or it is not used
        parent = chain.Parent(writer.path, writer.meta, None)
        sizes = meter.sizes()
        summary = restoration.fit(prepared.outcome.text, pins, sizes)
        text = restoration.build(parent, summary, pins, meter.sizes(), None, MAX_CARRIED)
        opening = meter.opening(text, now())
        kept = meter.carry(recent, opening, keep_first=False)
        if len(kept) != len(newer):
            return None
        return Used(prepared.outcome, kept, len(kept))
    return Used(prepared.outcome, carried(writer, previous, pins, meter, now()), 0)


@dataclass(frozen=True)
class Covered:
    """What a compaction's summary covers: the summary prepared ahead (``outcome``;
    None: made now), the copies of the last exchanges the child ``carried`` word for
    word, how many of the file's last messages the summary ``leave``s to them, and
    what to say."""

    outcome: chain.SummaryOutcome | None
    carried: tuple[Message, ...]
    leave: int
    notes: tuple[Note, ...] = ()


def covered(
    writer: SessionWriter,
    prepared: Prepared | None,
    previous: str | None,
    pins: tuple[str, ...],
    meter: Meter,
    now: Callable[[], datetime],
    *,
    answers: bool,
) -> Covered:
    """How ``writer``'s compaction is summarized: with the summary ``prepared`` while
    the person read when it still covers the file (``from_prepared``), else made now
    over all but the last exchanges the child carries (``carried``). A child that
    ``answers`` a message its parent could not take carries none: that answer sees its
    restoration prompt alone, which holds the message."""
    used = from_prepared(prepared, writer, previous, pins, meter, now) if prepared else None
    if used is not None:
        return Covered(used.outcome, used.carried, used.leave, (used.note,))
    kept = () if answers else carried(writer, previous, pins, meter, now())
    return Covered(None, kept, len(kept))


def prepare_due(
    messages: Sequence[Message],
    used: int,
    window: int,
    settings: Settings,
    backend: Backend,
    meter: Meter,
) -> bool:
    """Whether the summary of a file's ``messages`` is to be prepared for the compaction
    to come, after an exchange that left ``used`` tokens of the ``window`` taken, below
    the threshold: when one more exchange as large as the largest of the last
    PREPARE_LOOKBACK would pass it. Once a compaction, not earlier: on a one-slot
    server a summary request pushes the chat's own prompt out of the server's cache,
    and the next turn reads it again. Never for the embedded model (one model in this
    process) nor when compaction is off or ``prepare_compaction`` is."""
    if (
        settings.prepare_compaction != "on"
        or settings.auto_compact == "off"
        or backend.kind == "embedded"
    ):
        return False
    threshold = settings.compact_threshold * window
    if used < threshold / 2:  # (far from it: nothing counted)
        return False
    recent = list(exchanges(messages))[-PREPARE_LOOKBACK:]
    step = max((meter.plan(e).messages_tokens for e in recent), default=0)
    return used + step >= threshold


def ahead(
    messages: tuple[Message, ...],
    window: int,
    settings: Settings,
    backend: Backend,
    meter: Meter,
    previous: str | None,
    now: Callable[[], datetime],
    *,
    plain: bool,
) -> Make:
    """What makes the summary of a file's ``messages`` ahead of its compaction (for a
    ``Preparer``): ``chain.summarize`` over values taken now (``previous``: the summary
    the file began from), counted by estimate (never the chat's server counts: nothing
    is shared with the chat's thread), asked in the chat or followed by the next turn's
    beginning read again as ``next_turn_kept`` says (``plain``: no tools, no
    ``--full`` history before the file)."""
    cap = summary_cap(window, settings.summary_max_tokens)
    chat, beginning = next_turn_kept(messages, previous, cap, meter, now, plain=plain)

    def make(cancel: Cancel) -> chain.SummaryOutcome:
        made = chain.summarize(
            backend,
            messages,  # (as marked: chain.summarize reads them, ledger_of too)
            previous=previous,
            window=window,
            max_tokens=cap,
            timeout=settings.summary_timeout,
            count=estimate_tokens,
            cancel=cancel,
            chat=chat,
        )
        if beginning is not None:  # the next turn's beginning back in the server's cache
            prime(backend, beginning, cancel)
        return made

    return make
