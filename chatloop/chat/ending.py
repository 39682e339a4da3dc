"""How a session is let go, as functions: its summary made, its file handed to the
background worker or finalized here, and what is said of each.

``ChatSession`` decides when a session ends (an exit, ``/new``, a switch, a fork, a
compaction) and moves its state (``Lifecycle.closing``, ``fresh``). What the ending
does with the file is here, over what it needs as parameters (the backend, the
meter, the settings, the store, the clock's time, a ``working`` indicator): the
summary (``summary``: never raises for the model), the hand-off to the worker
(``handed_off``), the summary written here (``finalized``), and what is said of a
continuation left unused (``left_unused``) and of a file that could not be finalized
(``not_finalized``). Notes come back as values
(``host.Note``) for the caller to show.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

from chatloop.backends.base import Backend
from chatloop.chat import background, builders, chain
from chatloop.chat.host import Note, Progress
from chatloop.chat.meter import Meter
from chatloop.config import Settings
from chatloop.errors import ChatloopError, StoreError
from chatloop.format import Message
from chatloop.store.fsio import SUMMARY_HOLDER, lock_holder
from chatloop.store.store import Store
from chatloop.store.writer import SessionWriter

__all__ = ["Working", "finalized", "handed_off", "left_unused", "not_finalized", "summary"]

# the host's indicator of work under way (``Host.working``)
Working = Callable[[str], AbstractContextManager[Progress]]


def summary(
    backend: Backend,
    messages: list[Message],
    previous: str | None,
    *,
    meter: Meter,
    settings: Settings,
    working: Working,
    leaving: bool = False,
    instructions: str = "",
) -> tuple[chain.SummaryOutcome, tuple[Note, ...]]:
    """The summary of ``messages`` (``chain.summarize`` within the meter's window and
    cap and ``summary_timeout``, shown as work under way) and what to say of it; never
    raises for the model, never hangs forever. Cut short (Ctrl-C), or ``leaving`` (a
    signal asked chatloop to leave: no model call), the one built from the transcript
    is used (``chain.fallback``)."""
    words = meter.summary_words()
    if leaving:
        return chain.fallback(messages, previous, words), ()
    try:
        with working("Generating session summary...") as progress:
            outcome = chain.summarize(
                backend,
                messages,
                previous=previous,
                window=meter.window(),
                max_tokens=meter.summary_cap(),
                timeout=settings.summary_timeout,
                progress=progress,
                instructions=instructions,
                count=meter.tokens.text,
            )
    except KeyboardInterrupt:
        cut: Note = ("Summary cut short: using one built from the transcript.", "warn")
        return chain.fallback(messages, previous, words), (cut,)
    if outcome.fallback and outcome.error:
        failed: Note = (
            f"The model could not summarize ({outcome.error}); wrote a summary "
            "built from the transcript.",
            "warn",
        )
        return outcome, (failed,)
    return outcome, ()


def handed_off(
    writer: SessionWriter,
    store: Store,
    backend: Backend,
    settings: Settings,
    late: dict[str, str],
    home: Path,
) -> tuple[chain.Parent, Note] | None:
    """``writer``'s session handed to the background worker (``background.hand_off``),
    which writes its summary, ``late`` (a late title) and its totals: the parent as the
    worker will have written it, without a summary yet, and what to say. None when the
    worker cannot start (``writer`` untouched: the caller finalizes it)."""
    # as the worker will write it: the totals and a late title (a fork takes it)
    totals: dict[str, Any] = {**writer.totals.fields(), **late}
    meta = replace(writer.meta, **totals)
    if background.hand_off(writer, store, backend, settings, late, home) is None:
        return None
    said: Note = (
        f"Saved session {meta.id} ({builders.queries(meta.queries)}) → {writer.path}; "
        "its summary is being written in the background.",
        "ok",
    )
    return chain.Parent(writer.path, meta, None), said


def finalized(
    writer: SessionWriter,
    outcome: chain.SummaryOutcome,
    late: dict[str, str],
    leave: int,
    now: datetime,
) -> tuple[chain.Parent, Note]:
    """``writer``'s session finalized with ``outcome``'s summary and ``late`` (a late
    title); ``leave``: its last messages the summary does not cover (written as
    ``summary_leaves``: a later resume carries them too). The parent as it is now, and
    what to say. Raises StoreError, with the file as it was."""
    changes: dict[str, Any] = {**late}
    if leave:
        changes["summary_leaves"] = leave
    meta = writer.finalize(outcome.message(now), **changes)
    kind = "fallback summary" if outcome.fallback else "summary"
    said: Note = (
        f"Saved session {meta.id} with its {kind}: {builders.queries(meta.queries)}, "
        f"{meta.tokens_in + meta.tokens_out:,} tokens → {writer.path}",
        "ok",
    )
    return chain.closed_parent(writer), said


def left_unused(store: Store, parent: chain.Parent) -> Note:
    """What is said when a session ends with a continuation of ``parent`` still waiting
    (nothing written: it leaves no file): how ``parent`` is left."""
    try:
        kept = chain.read_parent(store, parent.path).summary is not None
    except (ChatloopError, OSError):  # (gone meanwhile: said as not kept)
        kept = False
    if kept:
        state = "closed with its summary, ready to resume."
    elif lock_holder(parent.path) == SUMMARY_HOLDER:  # (a compaction's: deferred)
        state = "closed; its summary is being written in the background."
    else:
        state = "as it was (its summary is made again when it is resumed)."
    return f"Nothing new to save; session {parent.meta.id} is {state}", "ok"


def not_finalized(writer: SessionWriter, exc: StoreError) -> Note:
    """What is said when ``writer``'s file could not be finalized as the session ended:
    it stays open, and the next start recovers it."""
    return (
        f"Could not finalize {writer.path.name}: {exc.message}. It stays "
        "open and is recovered at the next start.",
        "warn",
    )
