"""What the screen shows from Enter to a reply's first piece: a spinner, what is waited
for, and the time since, drawn afresh about ten times a second. The REPL draws it as a
transient ``rich`` live line (``render.StreamView``); a one-shot on stderr when that is
a terminal (``Ticker``). Either erases it when the first piece (text, thinking, a tool
call, the end) comes, and shows it again while the model reads a tool's results.
Nothing here imports rich: a one-shot never loads it."""

from __future__ import annotations

import threading
import time
from typing import TextIO

WAITING = "waiting for the model…"
SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
TICK = 0.1  # seconds between two draws


def waiting_line(seconds: float) -> str:
    """The line shown ``seconds`` after the model was asked."""
    whole = int(seconds)
    frame = SPINNER[int(seconds / TICK) % len(SPINNER)]
    return f"{frame} {WAITING} {whole // 60}:{whole % 60:02d}"


class Ticker:
    """``waiting_line`` redrawn on ``out`` (a terminal) by a thread of its own, from
    ``start`` to ``stop``, which erases it before returning: whatever is written after
    ``stop`` never meets a half-drawn line."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._stopped.clear()
            self._thread = threading.Thread(target=self._run, name="waiting", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        thread, self._thread = self._thread, None
        if thread is not None:
            self._stopped.set()
            thread.join()

    def _run(self) -> None:
        since = time.monotonic()
        try:
            while True:
                self.out.write(f"\r{waiting_line(time.monotonic() - since)}\x1b[K")
                self.out.flush()
                if self._stopped.wait(TICK):
                    break
            self.out.write("\r\x1b[K")
            self.out.flush()
        except (OSError, ValueError):  # the terminal went away: nothing to draw on
            return
