"""A session nobody writes, settled before it is opened, resumed or read: what a
crash or a kill left in or beside its file.

``recover_locked`` is the one repair, run with the session's lock held (by
``Store.open``, ``Store.adopt`` and ``Store.recover``): what a rewrite killed before
its rename left beside the file is settled (``remove_strays``: a close killed half
way is completed, any other temp file removed), an unfinished reply a crash left
(``SessionWriter.draft``) is closed and kept as an interrupted reply, any other torn
tail is set aside in a ``.corrupt-*`` file and cut, and an ``open`` session nobody
holds becomes ``interrupted``. Legacy files are only read. The writer of an open
session is ``store.writer``; this module holds no state.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from chatloop.errors import StoreError
from chatloop.format import (
    ParseResult,
    Problem,
    Totals,
    close_unfinished,
    open_document,
    parse_markdown,
)
from chatloop.store.fsio import (
    fsync_dir,
    io_error,
    open_read,
    read_bytes,
    temp_files,
    write_all,
    write_new_file,
)
from chatloop.store.writer import Clock, rewrite_meta

__all__ = ["UNFINISHED_KEPT", "recover_locked", "remove_strays"]


def remove_strays(path: Path) -> bool:
    """With the lock held: settle what a rewrite of ``path`` killed before its rename
    left beside it (its temp files, ``fsio.temp_files``; none can be in use, since
    every rewrite of the file holds its lock). A close (``finalize``) killed after it
    appended the summary and wrote the closed front matter to its temp file is
    completed: that temp file takes the file's place (``_completes_close``). Every
    other temp file is removed, which undoes its rewrite (the file is the old
    version, whole). True when a close was completed."""
    completed = False
    temps = []
    for temp in temp_files(path):
        with contextlib.suppress(FileNotFoundError):
            temps.append((os.stat(temp, follow_symlinks=False).st_mtime_ns, temp))
    for _, temp in sorted(temps, reverse=True):  # the newest first: the last try
        if not completed and _completes_close(path, temp):
            try:
                os.replace(temp, path)
                fsync_dir(path.parent)
            except OSError as exc:
                raise io_error("finish closing", path, exc) from exc
            completed = True
            continue
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
    return completed


def _completes_close(path: Path, temp: Path) -> bool:
    """True when ``temp`` is what a close of the session ``path`` (not closed: ``open``,
    or ``interrupted`` when a resume was writing its summary) was about to put in its
    place: it is not older than the file (no hand edit came after it), its front
    matter reads whole and closes this very session, and its body is the file's,
    byte for byte (a rewrite of the front matter changes nothing else; a temp file
    cut short by the kill differs). Reads both a piece at a time."""
    try:
        with open_read(path) as mine, open_read(temp) as theirs:
            if os.fstat(theirs.fileno()).st_mtime_ns < os.fstat(mine.fileno()).st_mtime_ns:
                return False
            now, then = open_document(mine, path.stem), open_document(theirs, path.stem)
            if not (now.exact and then.exact) or now.legacy or then.legacy or then.problems:
                return False
            if now.meta.status == "closed" or then.meta.status != "closed":
                return False
            if then.meta.id != now.meta.id or now.body_start < 0 or then.body_start < 0:
                return False
            size = os.fstat(mine.fileno()).st_size - now.body_start
            if os.fstat(theirs.fileno()).st_size - then.body_start != size:
                return False
            mine.seek(now.body_start)
            theirs.seek(then.body_start)
            while piece := mine.read(1 << 20):
                if theirs.read(len(piece)) != piece:
                    return False
            return True
    except (OSError, StoreError):
        return False


def recover_locked(path: Path, clock: Clock) -> ParseResult:
    """With the lock held: set a torn tail aside and cut it, mark a dead open session.

    The returned problems say what was repaired (``repaired``) instead of
    ``torn_tail``. Legacy files are only read, never changed.
    """
    remove_strays(path)
    data = read_bytes(path)
    result = parse_markdown(data, path.stem)
    if result.legacy:
        return result
    problems = list(result.problems)
    if result.torn and result.exact:
        kept = _close_unfinished(path, data, result)
        if kept is not None:
            data, result = kept
            problems = [p for p in problems if p.kind != "torn_tail"]
            problems.append(Problem("repaired", result.end, UNFINISHED_KEPT))
    if result.torn and result.exact:
        aside = path.with_name(f"{path.name}.corrupt-{clock().strftime('%Y%m%dT%H%M%S%f')}")
        write_new_file(aside, data[result.end :])
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                os.ftruncate(fd, result.end)
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise io_error("repair", path, exc) from exc
        data = data[: result.end]
        problems = [p for p in problems if p.kind != "torn_tail"]
        problems.append(
            Problem("repaired", result.end, f"incomplete last record moved to {aside.name}")
        )
    if result.session.meta.status == "open":
        messages = list(result.session.messages)
        last = max([result.session.meta.updated, *(m.at for m in messages)])
        fields: dict[str, Any] = {
            "status": "interrupted",
            "updated": last,
            **Totals.of(messages).fields(),
        }
        meta = replace(result.session.meta, **fields)
        rewrite_meta(path, data, meta)
        data = read_bytes(path)
    return replace(parse_markdown(data, path.stem), problems=tuple(problems))


UNFINISHED_KEPT = "the reply that was streaming when chatloop stopped is kept, marked interrupted"


def _close_unfinished(
    path: Path, data: bytes, result: ParseResult
) -> tuple[bytes, ParseResult] | None:
    """With the lock held: close the unfinished reply a crash left at the end of
    ``data`` (a ``SessionWriter.draft``) with its close marker, so it reads as the
    interrupted reply it is; the new bytes and their reading. None (the file
    untouched) when the torn tail is not such a reply, or does not read back as one
    message after the others (text with frames of its own in it, for one)."""
    closed = close_unfinished(data[result.end :], result.session.meta.format)
    if closed is None:
        return None
    fixed = data[: result.end] + closed
    again = parse_markdown(fixed, path.stem)
    before = len(result.session.messages)
    messages = again.session.messages
    if (
        again.torn
        or len(messages) != before + 1
        or messages[-1].role != "assistant"
        or not messages[-1].interrupted
        or len(again.problems) != len(result.problems) - 1
    ):
        return None
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            tail = data[result.end :]
            if closed.startswith(tail):  # the usual case: only the close marker is new
                write_all(fd, closed[len(tail) :])
            else:  # a character cut in half is dropped first
                os.ftruncate(fd, result.end)
                write_all(fd, closed)
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise io_error("repair", path, exc) from exc
    return fixed, again
