"""The interactive loop: read a line, run a command or a turn, show it, save it.

Devices are parameters: prompt_toolkit input/output and a rich Console are
passed in, so tests drive whole conversations with ``create_pipe_input()``,
``DummyOutput()`` and ``Console(file=StringIO())``.

Persistence: the person's message is appended (one write + fsync) *before*
the request goes out; every assistant message and tool result is appended as
it happens (``chatloop.turn``). A message that cannot be saved (a full disk)
is kept in memory and written before the next one; nothing is sent while
the person's own message is unsaved.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from prompt_toolkit import PromptSession
from prompt_toolkit.completion import Completer, Completion
from prompt_toolkit.document import Document
from prompt_toolkit.formatted_text import StyleAndTextTuples
from prompt_toolkit.history import FileHistory, InMemoryHistory
from prompt_toolkit.input import Input
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
from prompt_toolkit.output import Output
from rich.console import Console

from chatloop import commands, render
from chatloop.agent import Agent, agent_dirs
from chatloop.backends.base import Backend, ContextOverflow
from chatloop.config import Settings
from chatloop.context import Plan, plan
from chatloop.errors import ChatloopError, StoreError
from chatloop.format import Message, SessionMeta
from chatloop.fsio import FILE_MODE, ensure_dir
from chatloop.repl_chain import ChainMixin
from chatloop.repl_commands import CommandsMixin
from chatloop.session_writer import SessionWriter
from chatloop.store import Store
from chatloop.turn import run_turn

if TYPE_CHECKING:
    from chatloop.index import SessionRow

HISTORY_FILE = "input_history"
EMBEDDED_NOTE = (
    "Using the embedded Gemma 3 270M demo model: a tiny base model whose replies are often "
    "nonsense. For real work start Ollama or LM Studio, or pass --base-url URL --model NAME."
)


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


def agent_names(dirs: list[Path]) -> list[str]:
    """The agent files' stems in ``dirs`` (what ``--agent NAME`` accepts)."""
    names = {
        p.stem for d in dirs if d.is_dir() for p in d.glob("*.py") if not p.stem.startswith("_")
    }
    return sorted(names)


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


@dataclass
class Repl(ChainMixin, CommandsMixin):
    """One interactive chatloop. ``run`` returns the process exit code."""

    agent: Agent
    backend: Backend
    store: Store
    settings: Settings
    console: Console
    input: Input | None = None
    output: Output | None = None
    clock: Callable[[], datetime] = field(default=lambda: datetime.now().astimezone())
    writer: SessionWriter | None = None
    title: str = ""
    assume_yes: bool = False  # --yes: accept the questions a resume may ask
    previous: str | None = None  # the parent's summary, when this session continues one
    prefix: list[Message] = field(default_factory=list)  # --full: the parent's history
    chain_base: int = 0  # tokens of every ancestor
    _unsaved: list[Message] = field(default_factory=list)
    _used: int = 0
    _tokens: int = 0
    _window: int | None = None
    signalled: int = 0  # the signal that asked chatloop to leave, once one has

    def __post_init__(self) -> None:
        history = InMemoryHistory() if self.input is not None else self._file_history()
        names = agent_names(agent_dirs(self.store.cwd, self.store.root))
        self.prompt: PromptSession[str] = PromptSession(
            input=self.input, output=self.output, history=history, key_bindings=key_bindings(),
            completer=_Completer(names), complete_while_typing=False,
        )  # fmt: skip

    # -- the loop
    def run(self, resume: str | None = None, full: bool = False) -> int:
        """Chat until the person leaves. ``resume``: a session to continue first
        (number or id; "" opens the picker). Returns the exit code."""
        self._banner()
        previous = {sig: signal.signal(sig, self._on_signal) for sig in _LEAVE_SIGNALS}
        try:
            if resume is not None:
                try:
                    if not self.resume(resume, full) and not resume:
                        return 0
                except ChatloopError as exc:
                    render.error(self.console, exc)
                    return 1
            while not self.signalled:
                try:
                    line = self.prompt.prompt("you> ", bottom_toolbar=self._toolbar)
                except KeyboardInterrupt:
                    if self.signalled or self._confirm_leave():
                        break
                    continue
                except EOFError:
                    break
                if line.strip() and not self.handle(line):
                    break
        except KeyboardInterrupt:
            if not self.signalled:
                raise
        finally:
            if self.signalled:
                render.note(self.console, "Signal received: saving and leaving.")
            self.finish()  # the handlers stay ours until the file is saved
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return 0

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        """SIGTERM or SIGHUP: cut whatever runs as Ctrl-C would (a reply in progress is
        kept, marked interrupted), then leave with a summary built from the transcript.
        Further signals are ignored so that nothing cuts the saving short."""
        for sig in _LEAVE_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        if not self.signalled:
            self.signalled = signum
            raise KeyboardInterrupt

    def handle(self, line: str) -> bool:
        """Act on one submitted line; False means leave."""
        parsed = commands.parse(line)
        if isinstance(parsed, commands.Text):
            self.send(parsed.text)
            return True
        if isinstance(parsed, commands.Unknown):
            hint = f"Did you mean {parsed.suggestion}?" if parsed.suggestion else "Type /help."
            render.error(self.console, ChatloopError(f"Unknown command /{parsed.typed}", hint))
            return True
        if parsed.name == "exit":
            return False
        handler = getattr(self, f"cmd_{parsed.name}")
        try:
            handler(parsed.arg)
        except ChatloopError as exc:
            render.error(self.console, exc)
        return True

    def send(self, text: str) -> None:
        """One turn: make room if needed, save the message, stream the reply, run tools;
        then compact if the window is past the threshold."""
        try:
            self.before_send(text)
        except ChatloopError as exc:
            render.error(self.console, exc)
            return
        try:
            writer = self._session()
        except ChatloopError as exc:  # no session file can be made: say so, send nothing
            render.error(self.console, exc)
            render.note(self.console, "Not sent: chatloop sends only what it can save first.",
                        "yellow")  # fmt: skip
            return
        if not self._save(Message.create("user", self.clock(), text=text)):
            return
        view = render.StreamView(self.console, self.agent.name)

        def record(message: Message) -> None:
            self._save(message)
            if message.role == "tool":
                view.show_tool_results(message)

        result = run_turn(
            self.agent, self.backend, writer.messages + self._unsaved,
            build_context=self.wire, record=record, clock=self.clock, on_event=view.on_event,
            max_rounds=self.settings.max_tool_rounds, options=self._reply_options(),
        )  # fmt: skip
        partial = any(m.interrupted and (m.text or m.thinking) for m in result.messages)
        view.close(result.interrupted, saved=partial)
        last = next((m.usage for m in reversed(result.messages) if m.usage), None)
        if last is not None:
            self._used = last.total
        if self.signalled:
            return  # leaving: no compaction, no question
        if isinstance(result.error, ContextOverflow) and result.error.window:
            self._window = result.error.window  # the server told us its real window
        if isinstance(result.error, ContextOverflow) and self.settings.auto_compact != "off":
            render.note(self.console, "The server says the context window is full: compacting; "
                        "the new session answers your message.", "yellow")  # fmt: skip
            self.compact(unanswered=text)
        elif result.error is not None:
            render.error(self.console, result.error)
        else:
            self.after_turn()

    def finish(self) -> None:
        """Summarize and finalize the session file, and say where it is."""
        self.close_session()

    # -- what is sent
    def plan(self, extra: list[Message] | None = None) -> Plan:
        """What the next call would send: the --full prefix, this session, ``extra``."""
        messages = [*self.prefix, *(self.writer.messages if self.writer else []),
                    *self._unsaved, *(extra or [])]  # fmt: skip
        return plan(self.agent.system_prompt, messages, window=self.window(),
                    tools=self.agent.tool_specs() if self.agent.tools else None,
                    reserve=self._reply_options().get("max_tokens"))  # fmt: skip

    def wire(self, messages: Sequence[Message]) -> list[dict[str, Any]]:
        return plan(self.agent.system_prompt, [*self.prefix, *messages], window=self.window(),
                    tools=self.agent.tool_specs() if self.agent.tools else None,
                    reserve=self._reply_options().get("max_tokens")).wire  # fmt: skip

    def _reply_options(self) -> dict[str, Any]:
        if self.settings.max_tokens:
            return {"max_tokens": self.settings.max_tokens}
        return (
            {"max_tokens": int(self.agent.options.get("max_tokens") or 0)}
            if self.agent.options.get("max_tokens")
            else {}
        )

    def window(self) -> int | None:
        if self._window is None:
            try:
                self._window = self.settings.context_window or self.backend.context_window() or 0
            except ChatloopError:
                self._window = 0
        return self._window or None

    # -- internals
    def _session(self) -> SessionWriter:
        if self.writer is None:
            self._adopt(self.store.create(self._meta()))
        assert self.writer is not None
        return self.writer

    def _adopt(self, writer: SessionWriter) -> None:
        """Make ``writer`` the current session (a new one, or a child after compaction)."""
        self.writer = writer
        self._tokens = sum(m.usage.total for m in writer.messages if m.usage)
        self._used = 0

    def _meta(self) -> SessionMeta:
        if self.writer is not None:
            return self.writer.meta
        now = self.clock()
        return SessionMeta(
            id="", created=now, updated=now, title=self.title, agent=self.agent.name,
            agent_name=Path(self.agent.path).stem, model=self.backend.model,
            backend_url=self.backend.base_url,
            git_branch=_git_branch(self.store.cwd),
        )  # fmt: skip

    def _save(self, message: Message) -> bool:
        """Append (after anything still unsaved); on failure keep it in memory and say so."""
        self._unsaved.append(message)
        try:
            self._flush()
        except StoreError as exc:
            render.error(self.console, exc)
            return False
        return True

    def _flush(self) -> None:
        writer = self._session()
        while self._unsaved:
            writer.append(self._unsaved[0])
            usage = self._unsaved.pop(0).usage
            self._tokens += usage.total if usage else 0

    def _toolbar(self) -> StyleAndTextTuples:
        writer = self.writer
        return render.toolbar(
            {
                "agent": self.agent.name,
                "model": render.model_label(self.backend.model),
                "session": writer.meta.id if writer else "",
                "queries": writer.query_count if writer else 0,
                "tokens": self._tokens,
                "chain_tokens": self.chain_base + self._tokens if self.chain_base else 0,
                "used": self._used,
                "window": self._window,
            }
        )

    def _banner(self) -> None:
        model = render.model_label(self.backend.model)
        render.note(
            self.console,
            f"chatloop · {self.agent.name} · {model} ({self.backend.kind}) · "
            "/help for commands, Ctrl-D to leave",
        )
        if self.backend.kind == "embedded":
            render.note(self.console, EMBEDDED_NOTE, "yellow")

    def _confirm_leave(self) -> bool:
        try:
            answer = self.prompt.prompt("Leave chatloop? [y/N] ")
        except (KeyboardInterrupt, EOFError):
            return True
        return answer.strip().lower() in ("y", "yes")

    def _ask(self, question: str, default: bool) -> bool:
        """A yes/no question; Enter takes ``default``, Ctrl-C or Ctrl-D mean no."""
        render.note(self.console, question, "bold")
        try:
            answer = self.prompt.prompt("[Y/n] " if default else "[y/N] ").strip().lower()
        except (KeyboardInterrupt, EOFError):
            return False
        return default if not answer else answer in ("y", "yes")

    def pick(self, rows: list[SessionRow]) -> SessionRow | None:
        from chatloop.picker import pick

        return pick(rows, self.clock(), input=self.input, output=self.output)

    def _file_history(self) -> FileHistory:
        ensure_dir(self.store.project_dir)
        path = self.store.project_dir / HISTORY_FILE
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, FILE_MODE))
        return FileHistory(str(path))


_LEAVE_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _git_branch(cwd: Path) -> str | None:
    """The current branch from .git/HEAD (no subprocess), or None."""
    for folder in (cwd, *cwd.parents):
        head = folder / ".git" / "HEAD"
        if head.is_file():
            text = head.read_text(encoding="utf-8", errors="replace").strip()
            return text.removeprefix("ref: refs/heads/") if text.startswith("ref:") else None
    return None
