"""What the screen shows from Enter to a reply's first piece: a spinner, what is waited
for, and the time since, redrawn about ten times a second on a terminal. The chat's
reply view (``render.StreamView``) and a one-shot's (on stderr) show it and hide it;
hiding erases it, so the reply, a question or other work begins on a clean line. It is
shown again while the model reads a tool's results. Nothing here imports rich: a
one-shot never loads it."""

from __future__ import annotations

import threading
import time
from typing import IO

WAITING = "waiting for the model…"
SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
TICK = 0.1  # seconds between two draws
DELAY = 0.2  # a reply that comes sooner never shows it (nothing flickers)


def waiting_line(seconds: float) -> str:
    """The line shown ``seconds`` after the model was asked."""
    whole = int(seconds)
    frame = SPINNER[int(seconds / TICK) % len(SPINNER)]
    return f"{frame} {WAITING} {whole // 60}:{whole % 60:02d}"


class Ticker:
    """``waiting_line`` drawn on ``out`` (a terminal) between ``show`` and ``hide``.

    One per chat or one-shot, made before any turn: its drawing thread starts with it,
    so ``show`` and ``hide`` only set a flag under a lock (a Ctrl-C in a turn never
    lands in a thread's start). ``hide`` erases the line before it returns, and nothing
    is drawn after it until the next ``show``."""

    def __init__(self, out: IO[str]) -> None:
        self.out = out
        self._lock = threading.Lock()
        self._since: float | None = None  # shown since (None: hidden)
        self._drawn = False  # a line is on the screen
        self._wake = threading.Event()
        threading.Thread(target=self._run, name="waiting", daemon=True).start()

    def show(self) -> None:
        with self._lock:
            if self._since is None:
                self._since = time.monotonic()
            self._wake.set()

    def hide(self) -> None:
        with self._lock:
            self._since = None
            self._wake.clear()
            if self._drawn:
                self._drawn = False
                self._write("\r\x1b[K")

    def _run(self) -> None:
        while True:
            self._wake.wait()
            time.sleep(TICK)
            with self._lock:
                if self._since is None:
                    continue
                waited = time.monotonic() - self._since
                if waited >= DELAY:
                    self._drawn = True
                    self._write(f"\r\x1b[2m{waiting_line(waited)}\x1b[0m\x1b[K")

    def _write(self, text: str) -> None:
        try:
            self.out.write(text)
            self.out.flush()
        except (OSError, ValueError):  # the terminal went away: nothing to draw on
            return
