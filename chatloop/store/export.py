"""Writing sessions out: to a new file that is never overwritten, or a stream.

``chatloop export`` and ``/export`` in a chat both write through here: the
markdown export is the session files as they are (the format is the export),
one after the other, a blank line between, except that a carried copy in a file
written before copies were headed ``## Carried over`` is written as chatloop
writes one now (``format.resealing.carried_copy``: the same message, its heading
and checksum new), so that every copy reads as one; the target file is created
new (``O_EXCL``, mode 0600: a transcript is private wherever it is written).
"""

from __future__ import annotations

import io
import os
import shutil
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import BinaryIO, Protocol

from chatloop.errors import ChatloopError
from chatloop.format import Document, Message, Plain, SessionMeta, open_document
from chatloop.store.fsio import FILE_MODE, open_read

# what a document writer (JSON, HTML) is given: each session's front matter and views
Sessions = Iterator[tuple[SessionMeta, Iterator[Message | Plain]]]


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


def write_documents(
    paths: Iterable[Path],
    sink: BinaryIO,
    write: Callable[[Sessions, Callable[[str], object]], None],
) -> list[Document]:
    """The session files at ``paths``, in order, written as text (UTF-8) on ``sink`` by
    ``write`` (``ui.as_json.write_sessions_json``, ``ui.as_html.write_html``), which is
    given each file's front matter and views as the file is read (streamed: memory
    does not grow with a file). Returns the documents read, whose ``problems`` say
    what their reading met (the caller chooses what to note)."""
    text = io.TextIOWrapper(sink, encoding="utf-8", write_through=False)
    read: list[Document] = []

    def sessions() -> Sessions:
        for path in paths:
            with open_read(path) as handle:
                doc = open_document(handle, path.stem)
                read.append(doc)
                yield doc.meta, doc.views()

    write(sessions(), text.write)
    text.flush()
    text.detach()
    return read


def write_markdown(paths: Iterable[Path], sink: Sink) -> int:
    """The session files at ``paths`` written to ``sink`` as they are (but for old
    copies' headings: see the module's doc), in order, a blank line between two;
    streamed (memory does not grow with a file). Returns how many were written."""
    count = 0
    for path in paths:
        if count:
            sink.write(b"\n")
        with open_read(path) as handle:
            if _has_old_copies(handle):
                _write_relabelled(path, handle, sink)
            else:
                shutil.copyfileobj(handle, sink, 1 << 20)
        count += 1
    sink.flush()
    return count


def _has_old_copies(handle: BinaryIO) -> bool:
    """Whether the file may hold a copy under its old heading (a quick look for the
    heading's bytes, in pieces; the handle is put back at its start)."""
    from chatloop.format.resealing import OLD_COPY_HEADING

    tail = b""
    found = False
    while piece := handle.read(1 << 20):
        if OLD_COPY_HEADING in tail + piece:
            found = True
            break
        tail = piece[-len(OLD_COPY_HEADING) :]
    handle.seek(0)
    return found


def _write_relabelled(path: Path, handle: BinaryIO, sink: Sink) -> None:
    """``handle``'s file to ``sink``: every byte as found, but each old copy's frame
    written anew (``carried_copy``); frames are found by the one scanner, the bytes
    around them copied from a second handle of the same file."""
    from chatloop.format import open_document
    from chatloop.format.resealing import carried_copy

    doc = open_document(handle, path.stem)
    done = 0
    with open_read(path) as raw:
        for frame in doc.frames():
            fresh = carried_copy(frame, doc.meta)
            if fresh is None:
                continue
            _copy_span(raw, sink, frame.offset - done)
            sink.write(fresh)
            raw.seek(frame.end)
            done = frame.end
        shutil.copyfileobj(raw, sink, 1 << 20)


def _copy_span(raw: BinaryIO, sink: Sink, size: int) -> None:
    """``size`` bytes from ``raw`` (where it stands) to ``sink``, in pieces."""
    while size > 0:
        piece = raw.read(min(size, 1 << 20))
        if not piece:
            return
        sink.write(piece)
        size -= len(piece)
