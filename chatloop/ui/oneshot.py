"""One question, one answer, no REPL: ``chatloop "question"``, ``echo text | chatloop``,
``chatloop -c "follow-up"``.

The reply goes to stdout as it streams (plain text; control characters are
made visible when stdout is a terminal, passed through untouched to a pipe),
everything else (notices, where the session was saved) to stderr, so
``chatloop "…" > answer.txt`` holds the answer alone. The session is saved
like any other (written before the request, closed with its summary), so
``chatloop -c "…"`` continues it. No question is ever asked: a one-shot run
takes each question's default answer. Nor is the model asked for a title: a new
session is named by the first line of the question (``settings_once``).

When the reader of the output leaves (``chatloop "…" | head -1``), nothing is
lost: the reply stops there and is kept, marked interrupted, as after Ctrl-C,
and the session is saved and closed as usual; what would have been written to
that reader goes nowhere. (Notices on a stderr whose reader left are dropped by
``chatloop.ui.streams.Notices``, which the CLI puts around ``sys.stderr``.)
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, TextIO

from chatloop.backends.base import (
    Cancelled,
    Event,
    Finish,
    TextDelta,
    ThinkingDelta,
    ToolCallEvent,
)
from chatloop.chat.host import Lookup, Picked, Progress, Tone
from chatloop.config import Settings
from chatloop.format import Message, empty_reply
from chatloop.ui.streams import write_nowhere
from chatloop.ui.terminal_text import visible
from chatloop.ui.waiting import Ticker

if TYPE_CHECKING:
    from chatloop.backends.base import Backend
    from chatloop.chat.agent import Agent
    from chatloop.chat.arming import Arming
    from chatloop.chat.continuation import Kind, Located
    from chatloop.chat.session import ChatSession
    from chatloop.store.rows import SessionRow
    from chatloop.store.store import Store


class PrintedReply:
    """A reply streamed as plain text to ``out``."""

    def __init__(self, out: TextIO, terminal: bool, acknowledgment: bool = False) -> None:
        self.out = out
        self.terminal = terminal
        self.acknowledgment = acknowledgment
        self.ended_line = True
        self.printed = False  # anything of the reply written yet
        self.said = self.thought = False  # as in the REPL's view: to say a reply was empty
        self.ended: str | None = None
        self.ticker: Ticker | None = None  # the wait for the model, when shown (PlainHost)

    def wait(self) -> None:
        if self.ticker is not None:
            self.ticker.show()

    def hold(self) -> None:
        """Erase the wait's line (the first piece came, or something else is said)."""
        if self.ticker is not None:
            self.ticker.hide()

    def on_event(self, event: Event) -> None:
        self.hold()
        if isinstance(event, TextDelta):
            text = visible(event.text) if self.terminal else event.text
            if not self.printed:  # blank lines before the reply's first words are not
                text = text.lstrip("\r\n")  # printed: `| head -1` gets those words (the
                if not text:  # file keeps the reply as it came)
                    return
                self.printed = True
            try:
                if self.acknowledgment and not self.said and event.text.strip():
                    self.out.write("The model acknowledges the summary:\n")  # as the chat says
                self.out.write(text)
                self.out.flush()
            except BrokenPipeError:  # the reader left: the reply ends here, kept as it is
                write_nowhere(self.out)
                raise Cancelled("the reader of the output left") from None
            self.ended_line = text.endswith("\n")
            self.said = self.said or bool(event.text.strip())
        elif isinstance(event, ToolCallEvent):
            self.said = True
            print(visible(f"[tool {event.name}]"), file=sys.stderr)
        elif isinstance(event, ThinkingDelta):
            self.thought = True
        elif isinstance(event, Finish):
            self.ended = event.reason

    def tool_results(self, message: Message) -> None:
        self.said = self.thought = False
        self.ended = None
        self.wait()  # the model is asked again, with the results

    def close(self, interrupted: bool, saved: bool) -> None:
        self.hold()
        try:
            if not self.ended_line:
                self.out.write("\n")
                self.ended_line = True
            self.out.flush()
        except BrokenPipeError:
            write_nowhere(self.out)
        if self.ended is not None and not self.said and not interrupted:  # stdout: the answer
            print(empty_reply(self.acknowledgment, self.ended, self.thought), file=sys.stderr)


class PlainHost:
    """A host with no keyboard: notices on stderr, each question's default answer."""

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out or sys.stdout
        self.terminal = self.out.isatty()
        self._view: PrintedReply | None = None  # the last reply's (its wait shown?)
        # the wait for the model, on stderr when it is a terminal (``ui.waiting``)
        self._ticker = Ticker(sys.stderr) if sys.stderr.isatty() else None

    def hold(self) -> None:
        """No wait for the model is shown (a reply view an error left included)."""
        if self._view is not None:
            self._view.hold()

    def notice(self, text: str, tone: Tone = "info") -> None:
        self.hold()
        print(visible(text), file=sys.stderr)

    def refresh(self) -> None:
        """Nothing to redraw: a one-shot has no toolbar."""

    def ask(self, question: str, default: bool) -> bool:
        """Each question's default answer, said on stderr with the question, so nothing
        is decided silently (an explicit option answers ahead)."""
        answer = "yes" if default else "no"
        self.hold()
        print(
            visible(f"{question} {answer} (the default: a one-shot run asks nothing)"),
            file=sys.stderr,
        )
        return default

    def reply_view(self, acknowledgment: bool = False) -> PrintedReply:
        """The answer on stdout; an acknowledgment of a restoration prompt on stderr."""
        self.hold()
        if acknowledgment:
            self._view = PrintedReply(sys.stderr, sys.stderr.isatty(), acknowledgment=True)
        else:
            self._view = PrintedReply(self.out, self.terminal)
        self._view.ticker = self._ticker
        self._view.wait()
        return self._view

    @contextlib.contextmanager
    def working(self, label: str, trace: bool = True) -> Iterator[Progress]:
        self.hold()
        if trace:
            print(visible(label), file=sys.stderr)
        yield lambda step: None

    def pick(self, rows: list[SessionRow], lookup: Lookup | None = None) -> Picked | None:
        return None


def settings_once(settings: Settings) -> Settings:
    """A one-shot run's settings: ``titles: model`` becomes ``first`` (a script asked for
    one answer, so no title request is made; the question's first line names it)."""
    if settings.titles == "model":
        return settings._replace(titles="first")
    return settings


def ask_once(session: ChatSession, text: str) -> int:
    """Send ``text``, print the reply, close the session with its summary; the exit
    code (1 when the server failed: the exchange is marked in the file)."""
    try:
        session.send(text)
    finally:
        if isinstance(session.host, PlainHost):  # (an error is said on a clean line)
            session.host.hold()
        closed = session.close()
        for message in closed.unsaved:
            print(visible(f"not saved [{message.role}]: {message.text}"), file=sys.stderr)
    return 0


def answer_once(
    agent: Agent,
    backend: Backend,
    store: Store,
    settings: Settings,
    question: str,
    located: Located | None,
    kind: Kind,
    agent_named: bool = False,
    arming: Arming | None = None,
) -> int:
    """``chatloop "question"`` (after continuing ``located`` as ``kind`` says, when
    given): the answer on stdout, the session saved with its summary; the exit code."""
    from chatloop.chat.session import ChatSession

    if backend.kind == "embedded":  # (on stderr: the answer alone goes to stdout)
        from chatloop.config import EMBEDDED_NOTE

        print(f"note: {EMBEDDED_NOTE}", file=sys.stderr)
    session = ChatSession(
        agent,
        backend,
        store,
        settings_once(settings),
        PlainHost(),
        agent_named=agent_named,
        arming=arming,  # type: ignore[arg-type]  # (None: the environment's)
    )
    if located is not None:
        session.continue_from(located, kind)
    return ask_once(session, question)
