"""The next compaction's summary, prepared while the person reads or types.

Once a conversation is near its compaction threshold, ``ChatSession`` starts a
``Preparation`` after each exchange: a daemon thread that waits a moment (a person
who sends at once never meets it), then asks the model for the summary of every
message the file holds so far. It never competes with the person: the next message
stops it (``stop``: the request is cancelled; a local server usually has one slot),
and a preparation that was stopped, failed or fell back to the summary built from
the transcript leaves nothing. A finished one is ``Prepared``: the summary and the
messages it covers. When the threshold comes, the compaction uses it if those
messages are still the file's first ones, as they are now, and what came after them
fits in what the child carries word for word; otherwise it summarizes as before
(docs/chains.md, "A compaction prepared ahead"). The same owner holds the other read
ahead the person's message gives way to: a waiting child's beginning read into the
server's cache (``Preparer.warm``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from chatloop.backends.base import Cancel
from chatloop.chat.chain import SummaryOutcome
from chatloop.format import Message

Make = Callable[[Cancel], SummaryOutcome]
Phase = Literal["preparing", "ready", "none"]


@dataclass(frozen=True)
class Prepared:
    """A summary of ``messages`` (the file's first ones when it was made)."""

    messages: tuple[Message, ...]
    outcome: SummaryOutcome

    def newer(self, messages: Sequence[Message]) -> list[Message] | None:
        """What ``messages`` (a file's, now) hold after the ones this covers; None when
        they no longer begin with those, as they were (a hand edit makes it stale)."""
        covered = len(self.messages)
        if tuple(messages[:covered]) != self.messages:
            return None
        return list(messages[covered:])


class Preparation:
    """One summary being made in a daemon thread: after ``idle`` seconds unless stopped
    first, ``make(cancel)``; ``on_change`` is called (from that thread) when it ends."""

    def __init__(
        self,
        messages: tuple[Message, ...],
        make: Make,
        idle: float,
        on_change: Callable[[], None],
    ) -> None:
        self.messages = messages
        self._make, self._idle, self._on_change = make, idle, on_change
        self._cancel = Cancel()
        self._stopped = threading.Event()
        self._done = threading.Event()
        self._outcome: SummaryOutcome | None = None
        threading.Thread(target=self._run, name="chatloop-prepare", daemon=True).start()

    def stop(self) -> None:
        """Give it up: the request under way is cancelled, and nothing is kept."""
        self._stopped.set()
        self._cancel.set()

    @property
    def phase(self) -> Phase:
        """``preparing`` while it runs, ``ready`` once a summary is made, else ``none``."""
        if not self._done.is_set():
            return "none" if self._stopped.is_set() else "preparing"
        return "ready" if self.prepared is not None else "none"

    @property
    def prepared(self) -> Prepared | None:
        """The summary made, once there is one (never after ``stop``)."""
        if not self._done.is_set() or self._stopped.is_set() or self._outcome is None:
            return None
        return Prepared(self.messages, self._outcome)

    def _run(self) -> None:
        outcome: SummaryOutcome | None = None
        if not self._stopped.wait(self._idle):
            try:
                outcome = self._make(self._cancel)
            except Exception:  # (Cancelled, a server gone): no summary; compaction makes one
                outcome = None
        if outcome is not None and not outcome.fallback and not self._stopped.is_set():
            self._outcome = outcome
        self._done.set()
        self._on_change()


class Preparer:
    """THE owner of the next compaction's summary: the one being made (a
    ``Preparation``) and the last one made (``Prepared``, until a newer one is). The
    session's thread alone calls it; the thread a preparation starts answers through
    its ``Preparation``, which is read here."""

    def __init__(self) -> None:
        self._running: Preparation | None = None
        self._made: Prepared | None = None
        self._warming: Cancel | None = None  # a next turn's beginning being read ahead

    def start(
        self,
        messages: tuple[Message, ...],
        make: Make,
        idle: float,
        on_change: Callable[[], None],
    ) -> None:
        """Prepare the summary of ``messages`` (``make``, after ``idle`` seconds; see
        ``Preparation``), giving up one under way."""
        self.overtake()
        self._running = Preparation(messages, make, idle, on_change)

    def covers(self, messages: tuple[Message, ...]) -> bool:
        """True when a summary of exactly ``messages`` is made or being made."""
        self._harvest()
        return any(p is not None and p.messages == messages for p in (self._running, self._made))

    def ready(self) -> Prepared | None:
        """The last summary made (one that ended since is taken first), else None."""
        self._harvest()
        return self._made

    def phase(self, messages: Sequence[Message] | None, most: int) -> str:
        """``preparing`` while a summary is being made, ``ready`` when one is made that
        ``messages`` (the file's, now; None: no file) still begin with, with no more than
        ``most`` after it (what a child carries), else ""."""
        running = self._running
        if running is not None and running.phase == "preparing":
            return "preparing"
        made = running.prepared if running is not None else None
        made = made or self._made
        if made is None or messages is None:
            return ""
        newer = made.newer(messages)
        return "ready" if newer is not None and len(newer) <= most else ""

    def warm(self, read: Callable[[Cancel], object]) -> None:
        """Run ``read`` (a next turn's beginning read into the server's cache:
        ``turn.prime``) in a daemon thread, with a Cancel that the next ``overtake``
        sets; anything read ahead before is given up first. Best effort: its outcome
        is not kept."""
        self.overtake()
        cancel = Cancel()
        self._warming = cancel
        threading.Thread(target=read, args=(cancel,), name="chatloop-warm", daemon=True).start()

    def overtake(self) -> None:
        """Stop a preparation under way and let go of a beginning being read ahead (the
        person goes first); a summary made stays."""
        self._harvest()
        if self._running is not None:
            self._running.stop()
            self._running = None
        if self._warming is not None:
            self._warming.set()
            self._warming = None

    def forget(self) -> None:
        """Stop a preparation under way and forget the one made (the file was let go)."""
        self.overtake()
        self._made = None

    def _harvest(self) -> None:
        """A preparation that has ended: its summary (if it made one) is the one made."""
        running = self._running
        if running is not None and running.phase != "preparing":
            self._running = None
            if running.prepared is not None:
                self._made = running.prepared
