"""What a chat session asks of whoever shows it: the REPL, a test, a script.

``ChatSession`` never prints and never reads the keyboard. It tells its host
what happened (``notice``), streams replies into a ``ReplyView`` the host
makes, runs slow work under ``working`` (a spinner, or nothing), and asks the
person yes/no questions through ``ask``. The REPL (``chatloop.ui.repl``) is
one host; ``tests/hosts.py`` has a scripted one.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

from chatloop.backends.base import Event
from chatloop.format import Message

if TYPE_CHECKING:
    from chatloop.store.rows import SessionRow

Tone = Literal["info", "warn", "ok", "restored"]
# what an owner returns for the caller to show: a text and its tone (``Host.notice``)
Note = tuple[str, Tone]
Progress = Callable[[str], None]


@dataclass(frozen=True)
class Picked:
    """The session a person picked, and whether to fork it rather than resume it."""

    row: SessionRow
    fork: bool = False


class Lookup(Protocol):
    """What a picker may ask of the index while the person chooses."""

    def search(self, text: str, prefix: bool = False) -> list[SessionRow]:
        """Sessions holding every word of ``text``, best first (``prefix``: the last
        word may be the start of one, as while typing)."""
        ...

    def preview(self, row: SessionRow) -> str:
        """A few lines about the session: its summary, else "" (never raises)."""
        ...

    def words_pending(self) -> int:
        """How many sessions' words are still being indexed: ``search`` misses them."""
        ...


class ReplyView(Protocol):
    """One streamed reply on its way to the person."""

    def on_event(self, event: Event) -> None:
        """A piece of the reply (text, thinking, a tool call, the finish)."""

    def tool_results(self, message: Message) -> None:
        """The results of the tools the reply called, as they were saved."""

    def close(self, interrupted: bool, saved: bool) -> None:
        """The reply ended; ``interrupted``: cut short; ``saved``: some of it was kept."""


class Host(Protocol):
    """The session's window on the person."""

    def notice(self, text: str, tone: Tone = "info") -> None:
        """Tell the person something that happened (one or a few lines, plain text)."""

    def ask(self, question: str, default: bool) -> bool:
        """A yes/no question. An empty answer takes ``default``; anything that is not
        an answer (a message typed ahead, Ctrl-C) counts as *no*, and the host keeps
        what was typed for later: a question never eats a message."""
        ...

    def reply_view(self, acknowledgment: bool = False) -> ReplyView:
        """A fresh view for one streamed reply (``acknowledgment``: the model's answer
        to a restoration prompt, not to the person)."""
        ...

    def working(self, label: str, trace: bool = True) -> AbstractContextManager[Progress]:
        """Slow work under way (a summary): show it; the yielded function names the
        current step ("part 2 of 3"). ``trace``: the label stays on the screen after
        the work (a summary does; a title, cosmetic, leaves nothing)."""
        ...

    def pick(self, rows: list[SessionRow], lookup: Lookup | None = None) -> Picked | None:
        """Let the person choose a session to resume or fork (None: they chose none);
        ``lookup`` lets them search the index and see summaries while they choose."""
        ...

    def refresh(self) -> None:
        """What ``ChatSession.describe`` tells changed on its own (a summary prepared in
        the background is ready): redraw what shows it. Called from any thread."""
        ...
