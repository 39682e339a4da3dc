"""``Lifecycle``: THE owner of a session's state (``chat.state``) and of its unsaved
queue. No other code assigns either: a session moves through its states by the
transitions named here, and every message in hand goes through the queue.

The queue (docs/durability.md): a message that cannot be written yet (a full disk) is
kept in order, written before anything else, and never sent before it is on disk; a
message is taken off the queue once the writer has it, even if Ctrl-C or a signal lands
between the two, so nothing is written twice. Messages queued at a compaction belong to
the child: they are taken off (``take_all``) and put back in front (``put_back``) when
the child is not written yet. An addition that may be left out (a revision, what
recall brought back) is written with what is queued or not kept at all (``record``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from chatloop.chat.restoration import revised
from chatloop.chat.state import (
    Branch,
    Closing,
    Continuation,
    Fresh,
    FromSummary,
    Open,
    State,
    Waiting,
    WithHistory,
)
from chatloop.errors import StoreError
from chatloop.format import Message
from chatloop.store.writer import SessionWriter

__all__ = ["Lifecycle"]


class Lifecycle:
    """A session's state and unsaved queue. Not thread-safe: the session's thread
    alone moves it."""

    def __init__(self) -> None:
        self._state: State = Fresh()
        self._queue: list[Message] = []

    @property
    def state(self) -> State:
        """Where the session is: fresh, waiting for a continuation, open or closing."""
        return self._state

    @property
    def queued(self) -> tuple[Message, ...]:
        """The messages in hand that are not on disk yet, in order."""
        return tuple(self._queue)

    # ------------------------------------------------------------------ views
    @property
    def writer(self) -> SessionWriter | None:
        """The writer of the file being written (open or closing), else None."""
        state = self._state
        return state.writer if isinstance(state, Open | Closing) else None

    @property
    def previous(self) -> str | None:
        """The summary the session continues from (open, closing or waiting)."""
        match self._state:
            case Open(previous=previous) | Closing(previous=previous):
                return previous
            case Waiting(continuation=FromSummary(summary=summary)):
                return summary
            case Waiting(continuation=WithHistory(summary=summary)):
                return summary
            case Waiting(continuation=Branch(previous=previous)):
                return previous
        return None

    @property
    def prefix(self) -> tuple[Message, ...]:
        """A --full continuation's history, sent before the session's messages."""
        match self._state:
            case Open(prefix=prefix):
                return prefix
            case Waiting(continuation=WithHistory(history=history)):
                return history
        return ()

    @property
    def chain_base(self) -> int:
        """Tokens of every ancestor of the file being written (0 for none)."""
        return self._state.chain_base if isinstance(self._state, Open) else 0

    def messages(self) -> list[Message]:
        """The session's messages: those on disk (not those set aside as unsent), what a
        pending continuation will write (a fork's copies, a restoration prompt and
        what it carries), then those queued. A later restoration prompt takes the first
        one's place (``restoration.revised``)."""
        ahead: list[Message] = []
        match self._state:
            case Waiting(continuation=Branch(copies=copies)):
                ahead = list(copies)
            case Waiting(continuation=FromSummary(preview=preview, carried=carried)):
                ahead = [preview, *carried]
        writer = self.writer
        said = [m for m in writer.messages if not m.unsent] if writer else []
        return [*revised(said), *ahead, *self._queue]

    # ------------------------------------------------------------------ transitions
    def fresh(self) -> None:
        """Nothing written, nothing decided (the file, if any, was let go)."""
        self._state = Fresh()

    def wait(self, continuation: Continuation) -> None:
        """A continuation is decided; its child is written with the next message."""
        self._state = Waiting(continuation)

    def open(
        self,
        writer: SessionWriter,
        previous: str | None = None,
        prefix: tuple[Message, ...] = (),
        chain_base: int = 0,
    ) -> None:
        """``writer``'s file is being written (what it continues: ``previous``, a --full
        ``prefix``, the tokens of its ancestors, ``chain_base``)."""
        self._state = Open(writer, previous, prefix, chain_base)

    def revise(self, previous: str) -> None:
        """The open session continues from ``previous`` from now on (a parent's model
        summary took the place of the one built from its transcript)."""
        if isinstance(self._state, Open):
            self._state = replace(self._state, previous=previous)

    def closing(self) -> Open:
        """The open file is being finalized (``Closing``); returns the state it was in,
        for ``reopen`` when finalizing fails."""
        was = self._state
        if not isinstance(was, Open):
            raise ValueError(f"only an open session is closed, not {type(was).__name__}")
        self._state = Closing(was.writer, was.previous)
        return was

    def reopen(self, was: Open) -> None:
        """Finalizing failed: the session is open again as it ``was``."""
        self._state = was

    # ------------------------------------------------------------------ the queue
    def hold(self, message: Message) -> int:
        """``message`` in hand (last in the queue); how many are queued now."""
        self._queue.append(message)
        return len(self._queue)

    def hold_first(self, message: Message) -> None:
        """``message`` in hand, written before anything else (an acknowledgment)."""
        self._queue.insert(0, message)

    def drop(self, message: Message) -> None:
        """``message`` is no longer in hand (a revision its file refused)."""
        self._queue.remove(message)

    def record(self, message: Message, writer: SessionWriter) -> bool:
        """``message`` written to ``writer`` now, after what is in hand (in order), or
        not kept at all when the file refuses it (what was in hand stays queued): an
        addition that may be left out (a revision, what recall brought back), never a
        message the person typed. True when it was written."""
        self.hold(message)
        try:
            self.write(writer)
        except StoreError:
            self.drop(message)
            return False
        return True

    def take_all(self) -> list[Message]:
        """Every message in hand, taken off the queue (a compaction's: the child's)."""
        taken, self._queue = self._queue, []
        return taken

    def put_back(self, messages: Sequence[Message]) -> None:
        """``messages`` in hand again, in front of what was queued meanwhile."""
        self._queue[0:0] = messages

    def written(self, count: int) -> None:
        """The first ``count`` messages in hand were written (with a child's file)."""
        del self._queue[:count]

    def write(self, writer: SessionWriter) -> int:
        """Write every message in hand to ``writer``, in order; how many were written.
        Raises StoreError (the rest stay queued)."""
        written = 0
        while self._queue:
            message = self._queue[0]
            try:
                writer.append(message)
            finally:
                if writer.last_message is message:
                    self._queue.pop(0)
                    written += 1
        return written
