"""The standard streams when their reader leaves (``chatloop … | head``).

Light on purpose (the standard library only): ``chatloop.cli`` puts ``Notices``
around ``sys.stderr`` before anything else runs.
"""

from __future__ import annotations

import contextlib
import os
from typing import TextIO

__all__ = ["Notices", "write_nowhere"]


def write_nowhere(stream: TextIO) -> None:
    """The reader of ``stream`` left: what is written to it from now on (and what its
    buffer still holds, flushed at exit) goes to the null device, without an error."""
    with contextlib.suppress(OSError, ValueError):
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, stream.fileno())
        os.close(null)


class Notices:
    """``sys.stderr`` while chatloop runs: notices and errors go to it as they would,
    but one that finds its reader gone (``chatloop "…" 2>&1 | head -2``) sends the
    rest to the null device instead of stopping the run, so a one-shot question is
    still sent and saved. Everything else is the stream's own."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            write_nowhere(self._stream)
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            write_nowhere(self._stream)

    def __getattr__(self, name: str) -> object:
        return getattr(self._stream, name)
