"""The interactive loop: read a line, run a command or send it, show what happens.

The REPL decides nothing about the conversation: ``ChatSession``
(chatloop.chat.session) does, and this module is its ``Host`` (notices,
questions, the streaming view, the spinner, the picker) and the person's
keyboard. Each line goes through one error boundary (``handle``): no command,
save error, server error or bug ends the chat; each becomes one line and a hint.

Devices are parameters: prompt_toolkit input/output and a rich Console are
passed in, so tests drive whole conversations with ``create_pipe_input()``,
``DummyOutput()`` and ``Console(file=StringIO())``.

Questions never eat messages, and only the person's answer answers them (one
rule, ``_answer``, for every question): what was typed before a question was
drawn (a line typed while a reply streamed, say) is not read by it but kept for
the next prompt, which shows it; a line typed at a question that is not an
answer (``y``, ``n``, empty; ``a`` too when a tool asks) counts as *no* and is
sent next.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from datetime import datetime
from types import FrameType
from typing import TYPE_CHECKING

from prompt_toolkit import PromptSession
from prompt_toolkit.formatted_text import StyleAndTextTuples
from prompt_toolkit.input import Input
from prompt_toolkit.key_binding import KeyPress
from prompt_toolkit.output import Output
from rich.console import Console

from chatloop.backends.base import Backend
from chatloop.chat.agent import Agent, agent_dirs, agent_names
from chatloop.chat.approval import Answer
from chatloop.chat.arming import Arming
from chatloop.chat.continuation import Kind, Located
from chatloop.chat.host import Lookup, Picked, Progress, ReplyView, Tone
from chatloop.chat.session import ChatSession
from chatloop.config import DEFAULT_WINDOW, EMBEDDED_NOTE, Settings
from chatloop.errors import ChatloopError
from chatloop.store.store import Store
from chatloop.ui import commands, render
from chatloop.ui.prompt import (
    PROMPT,
    chat_prompt,
    completed_unread,
    file_history,
    retype,
    typed_unread,
)
from chatloop.ui.terminal_text import visible
from chatloop.ui.waiting import Ticker

if TYPE_CHECKING:
    from chatloop.store.rows import SessionRow
    from chatloop.store.writer import SessionWriter

TONES: dict[Tone, str] = {"info": "dim", "warn": "yellow", "ok": "green", "restored": "cyan"}
YES, NO, ALWAYS = ("y", "yes"), ("n", "no"), ("a", "always")
_LEAVE_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _columns() -> int | None:
    """The terminal's width while prompt_toolkit draws the toolbar (None outside)."""
    from prompt_toolkit.application import get_app_or_none

    app = get_app_or_none()
    if app is None:
        return None
    try:
        return app.output.get_size().columns
    except OSError:  # no terminal to ask
        return None


class Repl:
    """One interactive chatloop: the ``Host`` of a ``ChatSession`` and the ``Shell`` its
    commands run in. ``run`` returns the process exit code."""

    def __init__(
        self,
        agent: Agent,
        backend: Backend,
        store: Store,
        settings: Settings,
        console: Console | None = None,
        *,
        input: Input | None = None,
        output: Output | None = None,
        clock: Callable[[], datetime] | None = None,
        agent_named: bool = False,
        prompt: PromptSession[str] | None = None,
        arming: Arming | None = None,
    ) -> None:
        self.console = console or Console()  # the terminal, unless a test passes one
        self.input, self.output = input, output
        # what arms agents in this chat (/agent, /resume): the one that armed ``agent``
        # (the command line's), from now on asking here
        self.arming = arming or Arming.of(settings, say=self._warn)
        self.arming.attach(self.ask, self.approve, self._warn, self._starting)
        self.approvals = self.arming.approvals
        self.session = ChatSession(
            agent, backend, store, settings, host=self, agent_named=agent_named, arming=self.arming
        )
        if clock is not None:
            self.session.clock = clock
        self.signalled = 0  # the signal that asked chatloop to leave, once one has
        self._leave = False
        # what questions did not take, in the order typed: lines typed at a question
        # that were no answer, and keys typed before one was drawn (for the next prompt)
        self._typed_ahead: list[str | list[KeyPress]] = []
        self.notes: list[str] = []  # said with the banner (the agent file's notes)
        self.busy = False  # the server was busy at the check: the banner asks it nothing
        # run when the chat has ended: the MCP servers of every agent armed in it
        self.closers: list[Callable[[], None]] = [self.arming.close]
        self._acknowledgment: render.StreamView | None = None  # the last view, if one
        self._view: render.StreamView | None = None  # the last reply view (its wait shown?)
        # the wait for the model, drawn on a terminal (its thread starts here, not in a turn)
        self._ticker = Ticker(self.console.file) if self.console.is_terminal else None
        self._first: Callable[[], str] | None = None
        if prompt is None:  # the terminal's, unless the first prompt made it already
            history = None if input is not None else file_history(store.project_dir)
            names = agent_names(agent_dirs(store.cwd, self.arming.home))
            prompt = chat_prompt(names, history, input, output)
        self.prompt = prompt

    # ------------------------------------------------------------------ the loop
    def run(
        self,
        resume: Located | None = None,
        kind: Kind | None = None,
        first: Callable[[], str] | None = None,
        saved: SessionWriter | None = None,
        opening: Sequence[str] = (),
    ) -> int:
        """Chat until the person leaves. ``resume``: a session to continue first, as
        ``kind`` says (``chatloop.chat.continuation``: its agent and server were chosen
        by the caller). ``first``: the outcome of a first prompt read before this loop
        was made (``chatloop.ui.start``, which printed the banner too); ``saved``: the
        new session file that already holds it, when it is a message (it is answered
        first, with ``ChatSession.send_saved``). ``opening``: lines acted on before the
        first prompt, as if typed. Returns the exit code."""
        self._first = first
        if first is None:
            self.banner()
        previous = {sig: signal.signal(sig, self._on_signal) for sig in _LEAVE_SIGNALS}
        try:
            if saved is not None:
                self._first = None
                self._guarded(lambda: self.session.send_saved(saved))
            if resume is not None:
                try:
                    self.session.continue_from(resume, kind or Kind.SUMMARY)
                except ChatloopError as exc:
                    render.error(self.console, exc)
                    return 1
            for typed in opening:
                self.handle(typed)
            while not self._leave and not self.signalled:
                line = self._next_line()
                if line is not None and line.strip():
                    self.handle(line)
        finally:
            if self.signalled:
                render.note(self.console, "Signal received: saving and leaving.")
            self.finish()  # the handlers stay ours until the file is saved
            for close in self.closers:
                close()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return 0

    def _next_line(self) -> str | None:
        """A line typed at a question that was no answer, else the next from the prompt,
        given first the keys a question did not read (None after Ctrl-C at an empty
        prompt, or when the person leaves)."""
        kept_keys = bool(self._typed_ahead)
        if self._typed_ahead:
            kept = self._typed_ahead.pop(0)
            if isinstance(kept, str):
                return kept
            retype(self.prompt.input, kept)
        first, self._first = self._first, None
        self._hold()
        try:
            if not kept_keys and completed_unread(self.prompt.input):  # typed meanwhile
                retype(self.prompt.input, typed_unread(self.prompt.input))  # (Ctrl-D: leave)
            if first is not None:
                return first()
            return self.prompt.prompt(PROMPT, bottom_toolbar=self.toolbar)
        except KeyboardInterrupt:
            if self.signalled or self._confirm_leave():
                self._leave = True
        except EOFError:
            self._leave = True
        return None

    def handle(self, line: str) -> None:
        """Act on one submitted line, inside the error boundary (``_guarded``); when it
        left the session file it was in (a compaction, /resume, /fork, /new), an
        "always" said to a tool is forgotten."""
        writer = self.session.writer
        before = writer.path if writer is not None else None
        self._guarded(lambda: self._act(line))
        writer = self.session.writer
        if before is not None and (writer.path if writer is not None else None) != before:
            self.approvals.forget_always()

    def _act(self, line: str) -> None:
        parsed = commands.parse(line)
        if isinstance(parsed, commands.Text):
            self.session.send(parsed.text)
        elif isinstance(parsed, commands.Unknown):
            hint = f"Did you mean {parsed.suggestion}?" if parsed.suggestion else "Type /help."
            raise ChatloopError(f"Unknown command /{parsed.typed}", hint)
        else:
            parsed.spec.run(self, parsed.arg)

    def _guarded(self, act: Callable[[], object]) -> None:
        """Run ``act``. The one error boundary: whatever fails becomes one line and a
        hint, and the chat goes on. What the person types meanwhile is not echoed into
        a reply (``typing_held``): it waits for the next prompt, which shows it."""
        try:
            with typing_held():
                act()
        except ChatloopError as exc:
            render.error(self.console, exc)
        except KeyboardInterrupt:
            if not self.signalled:
                render.note(self.console, "Cancelled.")
        except OSError as exc:
            where = f" ({exc.filename})" if exc.filename else ""
            render.error(
                self.console,
                ChatloopError(
                    f"{exc.strerror or exc}{where}",
                    "Check the disk and the sessions directory; the chat goes on.",
                ),
            )
        except Exception as exc:  # a bug must not cost the person their session
            if os.environ.get("CHATLOOP_DEBUG"):
                self.console.print_exception()
            render.error(
                self.console,
                ChatloopError(
                    f"Internal error: {type(exc).__name__}: {exc}",
                    "This is a bug in chatloop; the session file is intact. CHATLOOP_DEBUG=1 shows "
                    "the details.",
                ),
            )

    def finish(self) -> None:
        """Summarize and finalize the session, and show anything that could not be saved."""
        closed = self.session.close()
        if closed.unsaved:
            render.note(
                self.console,
                f"{len(closed.unsaved)} message(s) could not be saved; here they are, to copy:",
                "yellow",
            )
            for message in closed.unsaved:
                render.note(self.console, f"[{message.role}] {message.text}", "")

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        """SIGTERM or SIGHUP: cut whatever runs as Ctrl-C would (a reply in progress is
        kept, marked interrupted), then leave with a summary built from the transcript.
        Further signals are ignored so that nothing cuts the saving short."""
        for sig in _LEAVE_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        if not self.signalled:
            self.signalled = signum
            self.session.leaving = True
            raise KeyboardInterrupt

    # ------------------------------------------------------------------ Shell
    def now(self) -> datetime:
        return self.session.clock()

    def leave(self) -> None:
        self._leave = True

    # ------------------------------------------------------------------ Host
    def notice(self, text: str, tone: Tone = "info") -> None:
        render.note(self.console, text, TONES[tone])

    def refresh(self) -> None:
        """The toolbar is drawn again (from any thread: prompt_toolkit's invalidate is)."""
        app = self.prompt.app
        if app.is_running:
            app.invalidate()

    def ask(self, question: str, default: bool) -> bool:
        """A yes/no question; Enter takes ``default``; Ctrl-C, Ctrl-D or a signal mean no;
        a line that is no answer means no and is kept, to be handled next."""
        if self.signalled:
            return False
        answer = self._answer(question, "[Y/n] " if default else "[y/N] ", YES + NO)
        return default if answer == "" else answer in YES

    def _starting(self, label: str) -> AbstractContextManager[object]:
        """Slow start-up work in the chat (an agent's MCP servers): a spinner, no trace."""
        return render.spinner(self.console, label, trace=False)

    def _warn(self, line: str) -> None:
        """A line from the machinery (an MCP server, a tool's approval), as text."""
        render.note(self.console, line, "yellow")

    def approve(self, tool: str, arguments: str) -> Answer:
        """Whether a tool may act (``chat.approval``): the call shown as text, then
        once (y), always for this session file (a) or no (n, Enter, Ctrl-C; another
        line is no too, and is sent next). As every question (``_answer``), it takes
        only a key pressed once it is shown: a "yes" typed while the reply streamed
        is the person's next message, never this answer."""
        if self.signalled:
            return "no"
        shown = arguments if len(arguments) <= 300 else arguments[:299] + "…"
        word = self._answer(
            f"Run the tool {tool}({shown})?",
            "[y/a/N] (y: once, a: always in this session) ",
            YES + ALWAYS + NO,
        )
        answer: Answer = "always" if word in ALWAYS else "once" if word in YES else "no"
        render.note(self.console, f"{tool}: {_DECIDED[answer]}")  # (note: shown as text)
        return answer

    def _answer(self, question: str, choices: str, answers: tuple[str, ...]) -> str | None:
        """``question`` (shown as text) and its ``choices`` on one line, and the answer
        typed after them: one of ``answers`` (lower case), "" (Enter) or None (Ctrl-C,
        Ctrl-D). THE rule of every question: only what is typed once it is drawn
        answers it. Keys typed before (unread: while a reply streamed, or after the
        line the last prompt took) are kept, in order, for the next prompt, as
        typed; a line typed at it that is none of ``answers`` is kept, to be sent
        next, and counts as "no"."""
        self._hold()
        unread = typed_unread(self.prompt.input)
        if unread:
            self._typed_ahead.append(unread)
            render.note(
                self.console,
                "What you typed before this question waits for your next prompt; "
                "only a key pressed now answers it.",
                "yellow",
            )
        try:
            typed = self.prompt.prompt([("bold", f"{visible(question)} "), ("", choices)])
        except (KeyboardInterrupt, EOFError):
            return None
        word = typed.strip().lower()
        if word in answers or not word:
            return word
        self._typed_ahead.append(typed)
        render.note(
            self.console,
            "That is not a yes or no: taken as no; your line is handled next.",
            "yellow",
        )
        return "no"

    def reply_view(self, acknowledgment: bool = False) -> ReplyView:
        # the reply that follows an acknowledgment is labelled too: the two differ only
        # in style, which a plain or colourless terminal does not show
        acked = self._acknowledgment is not None and self._acknowledgment.said
        view = render.StreamView(
            self.console,
            self.session.agent.name,
            acknowledgment,
            "Its answer to your message:" if acked else "",
            self._ticker,
        )
        self._acknowledgment = view if acknowledgment else None
        self._view = view
        return view

    def working(self, label: str, trace: bool = True) -> AbstractContextManager[Progress]:
        self._hold()  # (one live display at a time: the work's spinner replaces the wait)
        return render.spinner(self.console, label, trace)

    def _hold(self) -> None:
        """No wait for the model is shown (a view not closed by an error included)."""
        if self._view is not None:
            self._view.hold()

    def pick(self, rows: list[SessionRow], lookup: Lookup | None = None) -> Picked | None:
        from chatloop.ui.picker import pick

        self._hold()
        return pick(rows, self.now(), lookup, input=self.input, output=self.output)

    # ------------------------------------------------------------------ screen
    def _confirm_leave(self) -> bool:
        """After Ctrl-C at an empty prompt: leave? Ctrl-C or Ctrl-D again mean yes."""
        answer = self._answer("Leave chatloop?", "[y/N] ", YES + NO)
        return answer is None or answer in YES

    def toolbar(self) -> StyleAndTextTuples:
        """The bottom toolbar: agent, model, session, tokens and the window's meter."""
        session = self.session
        status, totals = session.describe(), session.totals
        waiting = f"continues {status.continues}" if status.phase == "waiting" else ""
        return render.toolbar(
            {
                "agent": session.agent.name,
                "model": render.model_label(session.backend.model),
                "session": status.session_id or waiting,
                "queries": totals.queries,
                "tokens": totals.tokens,  # the conversation's, as the exit line and listings
                "estimated": totals.estimated,
                "chain_tokens": status.chain_tokens,  # with the overhead, as a chain counts
                "used": totals.last_call,
                "window": session.window() if status.started else None,
                "unsaved": session.unsaved,
                "prepared": status.prepared,
            },
            _columns(),
        )

    def banner(self) -> None:
        """What is talked to, and how to get help and leave."""
        backend = self.session.backend
        render.note(
            self.console,
            f"chatloop · {self.session.agent.name} · {render.model_label(backend.model)} "
            f"({backend.kind}) · /help for commands, Ctrl-D to leave",
        )
        for said in self.notes:
            render.note(self.console, said, "yellow")
        if backend.kind == "embedded":
            render.note(self.console, EMBEDDED_NOTE, "yellow")
        elif not self.busy and self.session.window() is None:  # (asked once, kept)
            render.note(
                self.console,
                f"The server does not say its context window: chatloop plans with "
                f"{DEFAULT_WINDOW:,} tokens. Set context_window to the server's (e.g. "
                "CHATLOOP_CONTEXT_WINDOW=2048); `chatloop doctor` says more.",
                "yellow",
            )


_DECIDED = {"once": "allowed once", "always": "allowed for this session", "no": "not run"}


@contextmanager
def typing_held() -> Iterator[None]:
    """While it lasts, the terminal does not echo what is typed (a reply streaming
    would have it printed in its middle); the keys wait in the terminal's buffer for
    the next prompt. The terminal's settings are put back whatever happens (Ctrl-C
    still interrupts: only echo is off). Nothing changes when stdin is no terminal."""
    try:
        import termios

        fd = sys.stdin.fileno()
        before = termios.tcgetattr(fd) if os.isatty(fd) else None
    except (ImportError, OSError, ValueError, AttributeError):
        before = None
    if before is None:
        yield
        return
    quiet = list(before)
    quiet[3] &= ~termios.ECHO  # the local modes: echo off, the rest as it was
    try:
        termios.tcsetattr(fd, termios.TCSANOW, quiet)
    except termios.error:
        yield
        return
    try:
        yield
    finally:
        with suppress(termios.error):
            termios.tcsetattr(fd, termios.TCSANOW, before)
