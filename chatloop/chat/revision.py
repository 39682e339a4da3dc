"""``Reviser``: THE owner of the parent a child awaits the model's summary of.

A compaction that does not wait for the model (``compaction.deferred``) begins the
child from the summary built from the parent's transcript and hands the parent to the
background worker, which writes the model's summary when the person pauses. The
child then awaits it (``Reviser.expect``); before each of its requests, once the
worker has let go of the parent's file, the model's summary makes a new restoration
prompt (``Reviser.due``), recorded after everything said so far and sent from then on
in the first one's place (``restoration.revised``). A worker that gave up (its summary
built from the transcript) changes nothing. ``applied`` writes the revision
through the lifecycle it is given (the unsaved queue is the lifecycle's) and returns
its note for ``ChatSession`` to show; the reviser holds no session.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from chatloop.chat import chain, restoration
from chatloop.chat.host import Note
from chatloop.chat.lifecycle import Lifecycle
from chatloop.chat.meter import Meter
from chatloop.chat.restoration import Awaited
from chatloop.errors import ChatloopError
from chatloop.format import Message
from chatloop.store.fsio import SUMMARY_HOLDER, lock_holder
from chatloop.store.store import Store
from chatloop.store.writer import SessionWriter

__all__ = ["Reviser", "Revision", "applied"]


@dataclass(frozen=True)
class Revision:
    """The restoration prompt a parent's model summary makes (``message``, to be written
    after what was said), the summary the session continues from with it (``summary``,
    fitted) and what to say of it."""

    message: Message
    summary: str
    note: Note


class Reviser:
    """The parent awaited, if any. Not thread-safe: the session's thread alone asks."""

    def __init__(self) -> None:
        self._awaited: Awaited | None = None

    @property
    def awaited(self) -> Awaited | None:
        """The parent whose model summary is awaited (None: none)."""
        return self._awaited

    def expect(self, path: Path, unanswered: str | None = None) -> None:
        """The child begins without the model's summary of the parent at ``path``
        (``unanswered``: the message its restoration prompt carries, if any)."""
        self._awaited = Awaited(path, unanswered)

    def forget(self) -> None:
        """Nothing is awaited (the child was let go)."""
        self._awaited = None

    def due(
        self,
        store: Store,
        writer: SessionWriter,
        pins: tuple[str, ...],
        meter: Meter,
        now: Callable[[], datetime],
    ) -> Revision | None:
        """The revision of ``writer``'s restoration (the child's, open) once the awaited
        summary is written: built with ``pins`` within ``meter``'s sizes, counting the
        copies the child carries. None while the worker still holds the parent (asked
        again next time); None, and nothing awaited any more, when the parent cannot be
        read or its summary is the transcript's (the worker gave up)."""
        awaited = self._awaited
        if awaited is None:
            return None
        if lock_holder(awaited.path) == SUMMARY_HOLDER:
            return None  # still being written
        self._awaited = None
        try:
            found = store.summary_of(awaited.path)
            parent = chain.read_parent(store, awaited.path)
        except (ChatloopError, OSError):
            return None
        if found.message is None or found.message.fallback or parent.summary is None:
            return None
        sizes = meter.sizes()
        summary = restoration.fit(parent.summary, pins, sizes)
        carried = sum(1 for m in writer.messages if m.copy)
        text = restoration.build(parent, summary, pins, sizes, awaited.unanswered, carried)
        message = Message.create("user", now(), text=text, restore=True)
        note: Note = (
            f"The model's summary of {parent.meta.id} is written: it takes the place of "
            "the one built from the transcript from this message on.",
            "restored",
        )
        return Revision(message, summary, note)


def applied(
    revision: Revision | None, writer: SessionWriter, lifecycle: Lifecycle
) -> tuple[Note, ...]:
    """``revision`` (``Reviser.due``'s, for ``writer``'s open child; None: nothing
    due) recorded after everything said so far (with what ``lifecycle`` holds unsaved,
    in order) and, once on disk, what the lifecycle continues from and sends in the
    first restoration's place; its note. One the file refuses leaves the first
    restoration (nothing lost)."""
    if revision is None or not lifecycle.record(revision.message, writer):
        return ()
    lifecycle.revise(revision.summary)
    return (revision.note,)
