"""THE owner of a session's title and of how far its naming has gone.

``Naming`` holds the title, the phase of its naming and the title request under
way (``titles.Asking``); it is the only code that assigns them. Each method that
makes a title returns it (a ``titles.Title`` to write, or the front-matter changes to
finalize with); ``kept`` writes one into the file it is given (the one being written)
and learns whether the file took it (``written``); ``after_turn`` and ``taken`` are
the two moments a session names itself (after an exchange that ended well, and as a
title asked comes). A new session begins its naming anew (``forget``).

The phases: ``untried`` (to be named after the first exchange that ends well),
``asking`` (asked of the model off the person's path: ``take`` collects it),
``done`` (named and saved, given by the person, or none could be made) and
``unsaved`` (made, but the file refused it: written with the summary at close).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from chatloop.backends.base import Backend
from chatloop.chat import titles
from chatloop.config import DEFAULT_TITLE_TIMEOUT
from chatloop.errors import ChatloopError, StoreError
from chatloop.format import Message, SessionMeta
from chatloop.format.front_matter import MAX_TITLE_CHARS
from chatloop.store.writer import SessionWriter

Phase = Literal["untried", "asking", "done", "unsaved"]

__all__ = ["Naming", "Phase", "first_request", "given"]


def given(title: str) -> str:
    """A title the person gives (``/rename``), cut to the longest a title may be
    (``MAX_TITLE_CHARS``); an empty one is refused (``ChatloopError``)."""
    if not title:
        raise ChatloopError("Give the new title", "For example: /rename Balcony garden plan")
    return title[:MAX_TITLE_CHARS]


def first_request(messages: Sequence[Message]) -> str:
    """The text of the first message the person typed among ``messages``, or ""."""
    return next((m.text for m in messages if m.is_query), "")


@dataclass
class Naming:
    """A session's title (``title``, "" for none yet), its naming ``phase`` and the
    title request under way. Not thread-safe: the request's own thread only answers
    through its ``titles.Asking``."""

    title: str = ""
    phase: Phase = "untried"
    _asking: titles.Asking | None = field(default=None, repr=False)

    def forget(self) -> None:
        """Begin anew, for a new session: no title, ``untried``, no request under way
        (one still asked is let go: the session that asked it took it or left it)."""
        self.title, self.phase, self._asking = "", "untried", None

    def untitled(self, meta: SessionMeta, mode: str) -> bool:
        """Whether the session of ``meta`` is still to be named: titles are on
        (``mode``), it has no title here nor in its file, no parent (a continuation or
        a branch took its parent's), and naming has not been tried. At close, that
        means no exchange ended well (cut short by Ctrl-C, or by a reader of a one-shot
        run who left)."""
        if mode == "off" or self.title or meta.title:
            return False
        return meta.parent_id is None and self.phase == "untried"

    def after_exchange(
        self,
        meta: SessionMeta,
        messages: Sequence[Message],
        reply: str,
        mode: str,
        backend: Backend,
        timeout: float = DEFAULT_TITLE_TIMEOUT,
    ) -> titles.Title | None:
        """After an exchange that ended well (``reply``), name a session still
        ``untitled``, once: ``mode`` ``model`` asks ``backend`` in a thread (never the
        embedded model, which is not thread-safe) and returns None (``take`` collects
        it); ``first`` (and the embedded model) returns the first request's line, to be
        written now; ``off``, or a session named already, returns None and asks
        nothing."""
        if not self.untitled(meta, mode):
            return None
        self.phase = "done"  # once a session: a conversation no title fits asks no more
        first = first_request(messages)
        if mode == "model" and backend.kind != "embedded":
            self.phase = "asking"
            self._asking = titles.Asking(backend, first, reply, timeout=timeout)
            return None
        return titles.Title(titles.fallback(first), True)

    def after_turn(
        self,
        writer: SessionWriter | None,
        reply: str,
        mode: str,
        backend: Backend,
        timeout: float = DEFAULT_TITLE_TIMEOUT,
    ) -> None:
        """After an exchange that ended well (``reply``) in ``writer``'s file (None: no
        file, nothing done): ``after_exchange``, and a title made now (``first``, the
        embedded model) kept in that file (``kept``); one asked of the model is written
        by ``taken``. Cosmetic: never raises for the store."""
        if writer is None:
            return
        made = self.after_exchange(writer.meta, writer.messages, reply, mode, backend, timeout)
        if made is not None:
            self.kept(made, writer)

    def taken(self, wait: bool, writer: SessionWriter | None) -> None:
        """The title asked (``take``: ``wait``ed for, or cancelled when not come), kept
        in ``writer``'s file, the one being written, once it has come."""
        made = self.take(wait)
        if made is not None:
            self.kept(made, writer)

    def take(self, wait: bool) -> titles.Title | None:
        """The title asked (``after_exchange``), to be written, once it has come. Not
        ``wait`` (before the person's next request): one not come yet is cancelled, so a
        one-slot server is free for that request, and the session is ``untried`` again
        (asked after the next exchange that ends well). ``wait`` (at close): waited for,
        within its bound. None when nothing was asked, or the person named the session
        meanwhile (theirs wins)."""
        asking, self._asking = self._asking, None
        if asking is None:
            return None
        made = asking.take(wait and self.phase == "asking")
        if self.phase != "asking":
            return None
        if made is None:
            self.phase = "untried"
            return None
        self.phase = "done"
        return made

    def written(self, title: str, saved: bool) -> None:
        """``title`` is the session's: written to its file (``saved``), or refused by it
        (then ``unsaved``: ``late`` gives it to the summary's finalize)."""
        self.title = title
        if not saved:
            self.phase = "unsaved"

    def kept(self, made: titles.Title, writer: SessionWriter | None) -> None:
        """Write ``made`` into ``writer``'s file (the one being written; None: none yet,
        nothing done) and learn whether the file took it (``written``: a refusal is
        written with the summary at close). Cosmetic: never raises for the store."""
        if not made.text or writer is None:
            return
        try:
            writer.update_meta(title=made.text)
        except StoreError:
            self.written(made.text, saved=False)
        else:
            self.written(made.text, saved=True)

    def named(self, title: str) -> None:
        """The person gave ``title`` (``given``; written first): it wins over a title
        being asked, which is not taken."""
        self.phase = "done"
        self.title = title

    def late(self, meta: SessionMeta, messages: Sequence[Message], mode: str) -> dict[str, str]:
        """The title to finalize the session of ``meta`` with (as front-matter changes),
        after ``take``: one the file refused (if it has none since), else the first
        request's line for a session never named; else nothing."""
        if self.phase == "unsaved" and not meta.title:
            return {"title": self.title}
        if self.untitled(meta, mode):
            named = titles.fallback(first_request(messages))
            return {"title": named} if named else {}
        return {}
