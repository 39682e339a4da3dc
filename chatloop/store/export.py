"""Writing sessions out: to a new file that is never overwritten, or a stream.

``chatloop export`` and ``/export`` in a chat both write through here: the
markdown export is the session files as they are (the format is the export),
one after the other, a blank line between; the target file is created new
(``O_EXCL``, mode 0600: a transcript is private wherever it is written).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO, Protocol

from chatloop.errors import ChatloopError
from chatloop.store.fsio import FILE_MODE, open_read


def open_new(target: Path) -> BinaryIO:
    """``target`` created for writing, private; raises ChatloopError (with a hint) when
    it exists already or cannot be made: an export never overwrites anything."""
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        raise ChatloopError(f"{target} already exists", "Choose another file.") from None
    except OSError as exc:
        raise ChatloopError(
            f"Cannot write {target}: {exc.strerror}",
            "Check that its folder exists and that you may write there.",
        ) from exc
    return os.fdopen(fd, "wb")


class Sink(Protocol):
    """Where an export is written: a binary file, or a filter in front of one (the
    terminal's, ``chatloop.ui.terminal_text.VisibleBytes``)."""

    def write(self, data: bytes, /) -> object: ...

    def flush(self) -> object: ...


def write_markdown(paths: Iterable[Path], sink: Sink) -> int:
    """The session files at ``paths`` written to ``sink`` as they are, in order, a
    blank line between two; streamed (memory does not grow with a file). Returns how
    many were written."""
    count = 0
    for path in paths:
        if count:
            sink.write(b"\n")
        with open_read(path) as handle:
            shutil.copyfileobj(handle, sink, 1 << 20)
        count += 1
    sink.flush()
    return count
