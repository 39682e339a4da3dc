"""The one open writer of a session (``SessionWriter``), and the rewrite of a session
file's front matter it and the recovery share.

``SessionWriter.append`` either puts the whole record on disk (one
``os.write`` on an ``O_APPEND`` descriptor, then ``fsync``) and returns, or
leaves the file exactly as it was and raises ``StoreError``; the writer stays
usable either way. Its cost does not depend on the file's length.

A reply still streaming is kept as the file's **unfinished last frame**
(``SessionWriter.draft``): its open line and the text so far, no close
marker, grown by appends. The reply's own ``append`` replaces it; after a
crash, ``store.recovery.recover_locked`` closes it and keeps it as an
interrupted reply. A session nobody writes is settled there, not here.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

from chatloop.errors import StoreError
from chatloop.format import (
    Message,
    Session,
    SessionMeta,
    Totals,
    front_matter_end,
    parse_markdown,
    render_frame,
    render_front_matter,
    render_header,
    render_unfinished,
)
from chatloop.format.front_matter import BOM, bounded, rewrite_front_matter
from chatloop.format.values import content_of as _content
from chatloop.format.yaml_strict import MAX_FRONT_MATTER_BYTES
from chatloop.store.fsio import (
    atomic_rewrite,
    io_error,
    read_bytes,
    write_all,
)

Clock = Callable[[], datetime]
_Stamp = tuple[int, int, int]
KEPT_SIZES = 24  # the records a writer knows the sizes of (what take_back and insert reach)

__all__ = ["Clock", "SessionWriter", "refuse_unreadable", "rewrite_meta"]


class SessionWriter:
    """Appends messages to one session file and rewrites its front matter.

    Holds the session's lock until ``close``. Before every write it checks
    whether someone else changed the file (inode, size, mtime); if so it
    re-reads it and appends after their bytes instead of overwriting them.
    """

    def __init__(
        self,
        path: Path,
        session: Session,
        lock_fd: int,
        clock: Clock,
        sizes: Sequence[int] | None = None,
    ) -> None:
        """``sizes``: the record size of every message of ``session``, given by whoever
        just wrote the file whole (``Store.create``): this writer may then ``rebuild``
        it until someone else changes it."""
        self.path = path
        self._clock = clock
        self._lock_fd: int | None = lock_fd
        self._meta = session.meta
        self._messages = list(session.messages)
        self._totals = Totals.of(session.messages)
        self._fd = self._open_append()
        self._stamp = self._stat()
        self._last_frame_at = -1
        self._draft = b""  # the unfinished record at the end of the file, if any
        self._draft_key = ""
        self._draft_message: Message | None = None  # the reply that record holds
        self._sizes = list(sizes or ())[-KEPT_SIZES:]  # the last records this writer wrote
        self._whole = sizes is not None  # every record of the file is one this writer wrote

    # -- reading
    @property
    def lock_fd(self) -> int:
        """The descriptor of the session's lock file, which holds the lock (-1 once
        closed): ``chatloop.chat.background`` hands it to a worker."""
        return -1 if self._lock_fd is None else self._lock_fd

    @property
    def meta(self) -> SessionMeta:
        return self._meta

    @property
    def session(self) -> Session:
        return Session(self._meta, tuple(self._messages))

    @property
    def messages(self) -> list[Message]:
        """The messages in file order (a copy)."""
        return list(self._messages)

    @property
    def last_message(self) -> Message | None:
        """The message written last (no copy of the list)."""
        return self._messages[-1] if self._messages else None

    @property
    def query_count(self) -> int:
        return self._totals.queries

    @property
    def totals(self) -> Totals:
        """This session's counters, kept as messages are appended."""
        return self._totals

    # -- writing
    def append(self, message: Message) -> None:
        """Durably append one message; on failure the file is left unchanged. An
        unfinished reply (``draft``) is replaced by an assistant message (what the
        reply became); before any other message it is first written whole, as the
        interrupted reply it is (stop reason ``unfinished``)."""
        self._check_external_edit()
        if self._draft_message is not None and message.role != "assistant":
            self.append(self._draft_message)
        totals = self._totals.plus(message)
        record = render_frame(message, self._meta, totals.queries)
        # the draft written whole (its record begins with the draft's bytes) only grows:
        # nothing on disk is cut, so a kill meanwhile leaves the draft as it was
        grows = bool(self._draft) and record.startswith(self._draft)
        try:
            size = os.fstat(self._fd).st_size
            before = size - len(self._draft)
            if self._draft and not grows:
                os.ftruncate(self._fd, before)
        except OSError as exc:
            raise io_error("save a message to", self.path, exc) from exc
        draft, self._draft = self._draft, b""  # gone from the file: the record replaces it
        written = 0
        try:
            written = write_all(self._fd, record[len(draft) :] if grows else record)
            os.fsync(self._fd)
        except OSError as exc:
            self._draft = draft
            if grows:
                self._truncate(size, exc)  # the draft, whole, as it was
            else:
                self._truncate(before, exc)
                self._restore_draft(before)
            raise io_error("save a message to", self.path, exc) from exc
        except BaseException:  # Ctrl-C or a signal after the write: the frame is in the file
            if written and written == len(record) - (len(draft) if grows else 0):
                self._commit(message, totals, before)
            raise
        self._commit(message, totals, before)

    def take_back(self, message: Message) -> bool:
        """Cut ``message`` off the file again: the record this writer appended last (a
        message saved, then found to be one that cannot be sent). False, and nothing
        changed, when it is not the last record this writer wrote (someone changed the
        file since, or a reply is streaming); StoreError when the file cannot be cut."""
        self._check_external_edit()
        if self._draft or not self._sizes or self.last_message is not message:
            return False
        length = self._stamp[1] - self._sizes[-1]
        try:
            os.ftruncate(self._fd, length)
            os.fsync(self._fd)
        except OSError as exc:
            raise io_error("take a message back out of", self.path, exc) from exc
        self._messages.pop()
        self._sizes.pop()
        self._totals = Totals.of(self._messages)
        self._stamp = self._stat()
        self._last_frame_at = -1
        return True

    def set_aside(self, message: Message) -> bool:
        """Mark ``message``, the record this writer appended last, as one that could not
        be sent (``Message.unsent``): kept in the file, out of the conversation. The
        file is rewritten atomically, so it holds the message whatever happens, marked
        or not. False, and nothing changed, when it is not the last record this writer
        wrote (as ``take_back``); StoreError when the file cannot be rewritten."""
        self._check_external_edit()
        if self._draft or not self._sizes or self.last_message is not message:
            return False
        marked = message._replace(unsent=True)
        data = read_bytes(self.path)
        start = len(data) - self._sizes[-1]
        totals = Totals.of(self._messages[:-1])
        record = render_frame(marked, self._meta, totals.queries)
        atomic_rewrite(self.path, data[:start] + record)
        os.close(self._fd)
        self._fd = self._open_append()
        self._messages[-1] = marked
        self._totals = totals.plus(marked)
        self._stamp = self._stat()
        self._sizes[-1] = len(record)
        self._last_frame_at = -1
        return True

    def insert(self, message: Message, before: int) -> bool:
        """Durably put ``message`` before the last ``before`` messages (at most
        KEPT_SIZES, all appended by this writer, no draft pending): the acknowledgment
        of a restoration prompt, streamed after the exchanges the child carries and the
        message the person had typed were saved. The file is
        rewritten atomically (it is a new session's, a few kB): it holds those messages
        whatever happens, before ``message`` or without it. False, and nothing written,
        when the file was changed by someone else since, or those records are not
        known; StoreError when it cannot be rewritten."""
        self._check_external_edit()
        if before == 0 or self._draft or before > len(self._sizes):
            return False
        data = read_bytes(self.path)
        start = len(data) - sum(self._sizes[-before:])
        totals = self._totals.plus(message)
        record = render_frame(message, self._meta, self._totals.queries)
        atomic_rewrite(self.path, data[:start] + record + data[start:])
        os.close(self._fd)
        self._fd = self._open_append()
        self._messages.insert(len(self._messages) - before, message)
        self._totals = totals
        self._stamp = self._stat()
        self._sizes[-before:-before] = [len(record)]
        self._last_frame_at += len(record)
        return True

    def rebuild(self, meta: SessionMeta, messages: Sequence[Message]) -> bool:
        """Atomically rewrite the whole file as ``meta`` (this session's id, creation
        time and folder kept) and ``messages``: a child written with its first message,
        which must then begin otherwise (fewer copies carried, a summary instead of a
        history) and keep that message on disk throughout. The file is the old or the
        new version whatever happens. False, and nothing written, unless every record
        of the file is one this writer wrote (it made the file and nobody changed it
        since; no reply streaming); StoreError when it cannot be rewritten."""
        self._check_external_edit()
        if not self._whole or self._draft:
            return False
        mine = self._meta
        meta = bounded(
            replace(
                meta,
                id=mine.id,
                created=mine.created,
                updated=self._clock(),
                cwd=mine.cwd,
                status="open",
            )
        )
        refuse_unreadable(self.path, render_front_matter(meta))
        totals, records = Totals.of(()), []
        for message in messages:
            totals = totals.plus(message)
            records.append(render_frame(message, meta, totals.queries))
        atomic_rewrite(self.path, render_header(meta) + b"".join(records))
        os.close(self._fd)
        self._fd = self._open_append()
        self._meta, self._messages, self._totals = meta, list(messages), totals
        self._sizes = [len(record) for record in records][-KEPT_SIZES:]
        self._stamp = self._stat()
        self._last_frame_at = -1
        return True

    def draft(self, reply: Message) -> None:
        """Put ``reply``, an assistant reply still streaming, on disk as the file's
        unfinished last frame (``render_unfinished``): the first call writes its open
        line and text, later ones append only the text that is new (or rewrite the
        record when it changed otherwise: thinking that ended, a key the text came to
        hold). Nothing is counted as written: the next ``append`` replaces it. On a
        failure (``StoreError``) the file holds the last draft that was written."""
        self._check_external_edit()
        if self._draft_key and self._draft_key not in _content(reply):
            reply = reply._replace(key=self._draft_key)
        record = render_unfinished(reply, self._meta, self._totals.queries)
        grows = bool(self._draft) and record.startswith(self._draft)
        try:
            size = os.fstat(self._fd).st_size
        except OSError as exc:
            raise io_error("save the reply so far to", self.path, exc) from exc
        before = size - len(self._draft)
        try:
            if grows:
                write_all(self._fd, record[len(self._draft) :])
            else:
                os.ftruncate(self._fd, before)
                write_all(self._fd, record)
            os.fsync(self._fd)
        except OSError as exc:
            if grows:
                self._truncate(size, exc)  # the last draft, whole, as it was
            else:
                self._truncate(before, exc)
                self._restore_draft(before)
            raise io_error("save the reply so far to", self.path, exc) from exc
        self._draft, self._draft_key, self._draft_message = record, reply.key, reply
        self._stamp = self._stat()

    def _restore_draft(self, before: int) -> None:
        """After a failed write, the file cut back to ``before``: put the last draft
        back (it fitted before), best effort; when even that fails, the file is cut
        back to ``before`` again and the draft given up (the reply is in memory still)."""
        if not self._draft:
            return
        try:
            write_all(self._fd, self._draft)
            os.fsync(self._fd)
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, before)
            self._draft, self._draft_message = b"", None
        self._stamp = self._stat()

    def _commit(self, message: Message, totals: Totals, before: int) -> None:
        """Count ``message`` as written (its frame starts at offset ``before``)."""
        self._messages.append(message)
        self._totals = totals
        self._stamp = self._stat()
        self._last_frame_at = before + 1  # the record starts with a blank line
        self._draft, self._draft_key, self._draft_message = b"", "", None
        self._sizes = [*self._sizes[-(KEPT_SIZES - 1) :], self._stamp[1] - before]

    def update_meta(self, **changes: Any) -> SessionMeta:
        """Atomically rewrite the front matter with ``changes`` (and a new ``updated``).

        Only the lines of the keys that change are rewritten: comments, unknown keys
        and the order a person gave the keys are kept. A change that would make the
        front matter larger than readers accept is refused (``StoreError``) and the
        file is left as it was."""
        self._check_external_edit()
        meta = bounded(replace(self._meta, **changes, updated=self._clock()))
        data = read_bytes(self.path)
        rewrite_meta(self.path, data, meta, capped=True)
        self._meta = meta
        os.close(self._fd)
        self._fd = self._open_append()
        self._stamp = self._stat()
        return meta

    def finalize(self, summary: Message | None = None, **changes: Any) -> SessionMeta:
        """Append the summary (if any), then close the session's front matter with totals.

        In format 2 the front matter then records the summary frame's key and
        offset (``summary_key``/``summary_at``): that pointer, which no message
        can write, is what makes the summary trusted on resume.

        When the front matter cannot be rewritten (a full disk: the rewrite needs a
        whole copy of the file), the summary frame just appended is cut off again
        before the error is raised, so a finalize tried again and again leaves one
        summary frame, not one per try."""
        fields: dict[str, Any] = {}
        if self._draft_message is not None:  # a reply whose own record could not be written
            self.append(self._draft_message)
        undo = (os.fstat(self._fd).st_size, list(self._messages), self._totals, self._last_frame_at)
        if summary is not None:
            self.append(summary)
            if self._meta.format >= 2:
                fields["summary_key"] = summary.key
                fields["summary_at"] = self._last_frame_at - self._body_start()
        last = self.session.summary
        kind = None if last is None else ("fallback" if last.fallback else "model")
        fields.update({"status": "closed", "summary": kind, **self._totals.fields()})
        fields.update(changes)
        try:
            return self.update_meta(**fields)
        except StoreError as exc:
            if summary is not None:
                size, messages, totals, last_frame_at = undo
                self._truncate(size, OSError(0, exc.message))
                self._messages, self._totals, self._last_frame_at = messages, totals, last_frame_at
                self._stamp = self._stat()
            raise

    def close(self) -> None:
        """Release the file and the lock. A session not finalized stays ``open``."""
        if self._lock_fd is None:
            return
        os.close(self._fd)
        os.close(self._lock_fd)
        self._lock_fd = None

    def __enter__(self) -> SessionWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals
    def _body_start(self) -> int:
        """Where the body starts (the offset ``summary_at`` counts from)."""
        with open(self.path, "rb") as handle:
            head = handle.read(70 * 1024)
        start = len(BOM) if head.startswith(BOM) else 0
        return max(front_matter_end(head, start), 0)

    def _open_append(self) -> int:
        try:
            return os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            raise io_error("open", self.path, exc) from exc

    def _stat(self) -> _Stamp:
        st = os.stat(self.path, follow_symlinks=False)
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def _check_external_edit(self) -> None:
        try:
            stamp = self._stat()
        except FileNotFoundError as exc:
            raise StoreError(
                f"{self.path.name} was moved or deleted while chatloop was writing it",
                f"Put it back at {self.path} to keep saving this session.",
            ) from exc
        if stamp == self._stamp:
            return
        os.close(self._fd)
        self._fd = self._open_append()
        data = read_bytes(self.path)
        result = parse_markdown(data, self.path.stem)
        if not any(p.kind == "front_matter" for p in result.problems):
            self._meta = result.session.meta
        # our unfinished reply stays ours only when it is still the file's tail as we
        # wrote it; bytes someone added after it are never cut (it is left as it is)
        ours = (  # (a draft record begins with the blank line before its open marker)
            bool(self._draft)
            and result.torn
            and result.exact
            and data.endswith(self._draft)
            and result.end == len(data) - len(self._draft) + 1
        )
        if not ours:
            self._draft, self._draft_key, self._draft_message = b"", "", None
        self._sizes = []  # the records are no longer known to be ours
        self._whole = False
        self._messages = list(result.session.messages)
        self._totals = Totals.of(self._messages)
        self._stamp = self._stat()

    def _truncate(self, length: int, cause: OSError) -> None:
        try:
            os.ftruncate(self._fd, length)
            os.fsync(self._fd)
            self._stamp = self._stat()  # our own change, not someone's edit
        except OSError as exc:
            raise StoreError(
                f"Could not save a message to {self.path.name} ({cause.strerror}), "
                f"nor undo the partial write ({exc.strerror})",
                "The partial record will be set aside the next time the session is opened.",
            ) from exc


def rewrite_meta(path: Path, data: bytes, meta: SessionMeta, capped: bool = False) -> None:
    """Replace the front matter of ``data`` with ``meta``'s, editing the person's block in
    place (``rewrite_front_matter``); the body is kept as is. ``capped``: refuse a block
    the reader would not load (over ``MAX_FRONT_MATTER_BYTES``)."""
    bom = len(BOM) if data.startswith(BOM) else 0
    start = front_matter_end(data, bom)
    if start < 0:
        raise StoreError(
            f"{path.name} has no readable front matter; not rewriting it",
            "Open the file in an editor and restore the --- block at the top.",
        )
    block = rewrite_front_matter(data[bom:start], meta)
    if capped:
        refuse_unreadable(path, block)
    atomic_rewrite(path, block + data[start:])


def refuse_unreadable(path: Path, block: bytes) -> None:
    """Raise StoreError (one line and a hint) when the front matter ``block`` (``---``
    lines included) is larger than the reader loads (``MAX_FRONT_MATTER_BYTES``), so
    that no session is written that chatloop cannot read back (nor finalize)."""
    if len(block) - len(b"---\n---\n") > MAX_FRONT_MATTER_BYTES:
        raise StoreError(
            f"Not saved: the front matter of {path.name} would be larger than "
            f"{MAX_FRONT_MATTER_BYTES // 1024} KiB, which chatloop cannot read back",
            "Use a shorter value (a title, or keys added by hand to the front matter).",
        )
