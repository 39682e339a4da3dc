"""The interactive loop: read a line, run a command or send it, show what happens.

The REPL decides nothing about the conversation: ``ChatSession``
(chatloop.chat.session) does, and this module is its ``Host`` (notices,
questions, the streaming view, the spinner, the picker) and the person's
keyboard. Each line goes through one error boundary (``handle``): no command,
save error, server error or bug ends the chat; each becomes one line and a hint.

Devices are parameters: prompt_toolkit input/output and a rich Console are
passed in, so tests drive whole conversations with ``create_pipe_input()``,
``DummyOutput()`` and ``Console(file=StringIO())``.

Questions never eat messages: a line typed while a question waits that is
not an answer (``y``, ``n``, empty) counts as *no* and is sent next.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from contextlib import AbstractContextManager, suppress
from datetime import datetime
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from prompt_toolkit import PromptSession
from prompt_toolkit.completion import Completer, Completion
from prompt_toolkit.document import Document
from prompt_toolkit.formatted_text import StyleAndTextTuples
from prompt_toolkit.history import FileHistory, InMemoryHistory
from prompt_toolkit.input import Input
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
from prompt_toolkit.output import Output
from rich.console import Console

from chatloop.backends.base import Backend
from chatloop.chat.agent import Agent, agent_dirs, agent_names
from chatloop.chat.host import Lookup, Picked, Progress, ReplyView, Tone
from chatloop.chat.session import ChatSession
from chatloop.config import Settings
from chatloop.errors import ChatloopError
from chatloop.store.fsio import FILE_MODE, ensure_dir
from chatloop.store.store import Store
from chatloop.ui import commands, render

if TYPE_CHECKING:
    from chatloop.store.index import SessionRow

HISTORY_FILE = "input_history"
EMBEDDED_NOTE = (
    "Using the embedded Gemma 3 270M demo model: a tiny base model whose replies are often "
    "nonsense (it loads with your first message, about 2 s). For real work start Ollama or "
    "LM Studio, or pass --base-url URL --model NAME."
)
TONES: dict[Tone, str] = {"info": "dim", "warn": "yellow", "ok": "green", "restored": "cyan"}
YES, NO = ("y", "yes"), ("n", "no")
_LEAVE_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class _History(FileHistory):
    """The prompt's history file. A line it cannot store (a full disk, a read-only
    home) is only not remembered: the chat goes on."""

    def store_string(self, string: str) -> None:
        with suppress(OSError):
            super().store_string(string)


class _Completer(Completer):
    """Commands after a leading ``/``; agent names in the agent folders when a word
    starts with ``@`` (their file stems, as ``--agent`` takes them)."""

    def __init__(self, agents: list[str]) -> None:
        self.agents = agents

    def get_completions(self, document: Document, complete_event: object):  # type: ignore[no-untyped-def]
        text = document.text_before_cursor
        if text.startswith("/") and " " not in text:
            for word in commands.completions():
                if word.startswith(text):
                    yield Completion(word, start_position=-len(text))
            return
        word = document.get_word_before_cursor(WORD=True)
        if word.startswith("@"):
            for name in self.agents:
                if name.startswith(word[1:]):
                    yield Completion(name, start_position=-len(word) + 1)


def key_bindings() -> KeyBindings:
    """Enter sends; Esc+Enter or a trailing backslash starts a new line instead; Ctrl-C
    clears a line that has text."""
    keys = KeyBindings()

    @keys.add("enter")
    def _enter(event: KeyPressEvent) -> None:
        buffer = event.current_buffer
        if buffer.text.endswith("\\"):
            buffer.delete_before_cursor(1)
            buffer.insert_text("\n")
        else:
            buffer.validate_and_handle()

    @keys.add("escape", "enter")
    def _newline(event: KeyPressEvent) -> None:
        event.current_buffer.insert_text("\n")

    @keys.add("c-c")
    def _interrupt(event: KeyPressEvent) -> None:
        """As in a shell: Ctrl-C with text on the line clears the line; on an empty
        line it interrupts (the loop then asks before leaving)."""
        buffer = event.current_buffer
        if buffer.text:
            buffer.reset()
        else:
            event.app.exit(exception=KeyboardInterrupt())

    return keys


class Repl:
    """One interactive chatloop: the ``Host`` of a ``ChatSession`` and the ``Shell`` its
    commands run in. ``run`` returns the process exit code."""

    def __init__(
        self, agent: Agent, backend: Backend, store: Store, settings: Settings,
        console: Console | None = None, *, input: Input | None = None,
        output: Output | None = None,
        clock: Callable[[], datetime] | None = None, assume_yes: bool = False,
    ) -> None:  # fmt: skip
        self.console = console or Console()  # the terminal, unless a test passes one
        self.input, self.output = input, output
        self.session = ChatSession(agent, backend, store, settings, host=self,
                                   assume_yes=assume_yes)  # fmt: skip
        if clock is not None:
            self.session.clock = clock
        self.signalled = 0  # the signal that asked chatloop to leave, once one has
        self._leave = False
        self._typed_ahead: list[str] = []  # lines typed while a question waited
        history = InMemoryHistory() if input is not None else self._file_history(store)
        names = agent_names(agent_dirs(store.cwd, store.root))
        self.prompt: PromptSession[str] = PromptSession(
            input=input, output=output, history=history, key_bindings=key_bindings(),
            completer=_Completer(names), complete_while_typing=False,
        )  # fmt: skip

    # ------------------------------------------------------------------ the loop
    def run(self, resume: Path | str | None = None, full: bool = False,
            fork: bool = False) -> int:  # fmt: skip
        """Chat until the person leaves. ``resume``: the file of a session to continue
        (``fork``: to branch) first, or "" to pick one. Returns the exit code."""
        self._banner()
        previous = {sig: signal.signal(sig, self._on_signal) for sig in _LEAVE_SIGNALS}
        try:
            if resume is not None:
                try:
                    done = self._resume_first(resume, full, fork)
                except ChatloopError as exc:
                    render.error(self.console, exc)
                    return 1
                if not done and resume == "":  # the picker was left without a choice
                    return 0
            while not self._leave and not self.signalled:
                line = self._next_line()
                if line is not None and line.strip():
                    self.handle(line)
        finally:
            if self.signalled:
                render.note(self.console, "Signal received: saving and leaving.")
            self.finish()  # the handlers stay ours until the file is saved
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return 0

    def _resume_first(self, resume: Path | str, full: bool, fork: bool = False) -> bool:
        """Resume (or fork) before the first prompt; False when the person declined (the
        chat then starts fresh). Raises ChatloopError when the session cannot be resumed."""
        if isinstance(resume, Path):
            return self.session.fork_path(resume) if fork else self.session.resume_path(
                resume, full)  # fmt: skip
        return self.session.resume(resume, full, fork)

    def _next_line(self) -> str | None:
        """A line typed ahead while a question waited, else the next from the prompt
        (None after Ctrl-C at an empty prompt, or when the person leaves)."""
        if self._typed_ahead:
            return self._typed_ahead.pop(0)
        try:
            return self.prompt.prompt("you> ", bottom_toolbar=self._toolbar)
        except KeyboardInterrupt:
            if self.signalled or self._confirm_leave():
                self._leave = True
        except EOFError:
            self._leave = True
        return None

    def handle(self, line: str) -> None:
        """Act on one submitted line. The one error boundary: whatever fails becomes
        one line and a hint, and the chat goes on."""
        try:
            parsed = commands.parse(line)
            if isinstance(parsed, commands.Text):
                self.session.send(parsed.text)
            elif isinstance(parsed, commands.Unknown):
                hint = f"Did you mean {parsed.suggestion}?" if parsed.suggestion else "Type /help."
                raise ChatloopError(f"Unknown command /{parsed.typed}", hint)
            else:
                parsed.spec.run(self, parsed.arg)
        except ChatloopError as exc:
            render.error(self.console, exc)
        except KeyboardInterrupt:
            if not self.signalled:
                render.note(self.console, "Cancelled.")
        except OSError as exc:
            where = f" ({exc.filename})" if exc.filename else ""
            render.error(self.console, ChatloopError(
                f"{exc.strerror or exc}{where}",
                "Check the disk and the sessions directory; the chat goes on.",
            ))  # fmt: skip
        except Exception as exc:  # a bug must not cost the person their session
            if os.environ.get("CHATLOOP_DEBUG"):
                self.console.print_exception()
            render.error(self.console, ChatloopError(
                f"Internal error: {type(exc).__name__}: {exc}",
                "This is a bug in chatloop; the session file is intact. CHATLOOP_DEBUG=1 shows "
                "the details.",
            ))  # fmt: skip

    def finish(self) -> None:
        """Summarize and finalize the session, and show anything that could not be saved."""
        closed = self.session.close()
        if closed.unsaved:
            render.note(self.console, f"{len(closed.unsaved)} message(s) could not be saved; "
                        "here they are, to copy:", "yellow")  # fmt: skip
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

    def ask(self, question: str, default: bool) -> bool:
        """A yes/no question; Enter takes ``default``; Ctrl-C, Ctrl-D or a signal mean no;
        a line that is no answer means no and is kept, to be handled next."""
        if self.signalled:
            return False
        render.note(self.console, question, "bold")
        answer = self._answer("[Y/n] " if default else "[y/N] ")
        return default if answer == "" else bool(answer)

    def _answer(self, prompt: str) -> bool | str | None:
        """True (yes), False (no), "" (Enter) or None (Ctrl-C/Ctrl-D)."""
        try:
            typed = self.prompt.prompt(prompt)
        except (KeyboardInterrupt, EOFError):
            return None
        word = typed.strip().lower()
        if word in YES or word in NO or not word:
            return word in YES if word else ""
        self._typed_ahead.append(typed)
        render.note(self.console, "That is not a yes or no: taken as no; your line is handled "
                    "next.", "yellow")  # fmt: skip
        return False

    def reply_view(self, acknowledgment: bool = False) -> ReplyView:
        return render.StreamView(self.console, self.session.agent.name)

    def working(self, label: str, trace: bool = True) -> AbstractContextManager[Progress]:
        return render.spinner(self.console, label, trace)

    def pick(self, rows: list[SessionRow], lookup: Lookup | None = None) -> Picked | None:
        from chatloop.ui.picker import pick

        return pick(rows, self.now(), lookup, input=self.input, output=self.output)

    # ------------------------------------------------------------------ screen
    def _confirm_leave(self) -> bool:
        """After Ctrl-C at an empty prompt: leave? Ctrl-C or Ctrl-D again mean yes."""
        render.note(self.console, "Leave chatloop?", "bold")
        answer = self._answer("[y/N] ")
        return answer is None or answer is True

    def _toolbar(self) -> StyleAndTextTuples:
        session = self.session
        writer, totals = session.writer, session.totals
        tokens = totals.tokens + totals.restoration
        return render.toolbar(
            {
                "agent": session.agent.name,
                "model": render.model_label(session.backend.model),
                "session": writer.meta.id if writer else (
                    f"continues {session.pending.parent.meta.id}" if session.pending else ""),
                "queries": totals.queries,
                "tokens": tokens,
                "chain_tokens": session.chain_base + tokens if session.chain_base else 0,
                "used": totals.last_call,
                "window": session.window() if writer else None,
                "unsaved": session.unsaved,
            }
        )

    def _banner(self) -> None:
        backend = self.session.backend
        render.note(
            self.console,
            f"chatloop · {self.session.agent.name} · {render.model_label(backend.model)} "
            f"({backend.kind}) · /help for commands, Ctrl-D to leave",
        )
        if backend.kind == "embedded":
            render.note(self.console, EMBEDDED_NOTE, "yellow")

    @staticmethod
    def _file_history(store: Store) -> _History:
        ensure_dir(store.project_dir)
        path = store.project_dir / HISTORY_FILE
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, FILE_MODE))
        return _History(str(path))
