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

import base64
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import FrameType

from prompt_toolkit import PromptSession
from prompt_toolkit.completion import Completer, Completion
from prompt_toolkit.document import Document
from prompt_toolkit.history import FileHistory, InMemoryHistory
from prompt_toolkit.input import Input
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
from prompt_toolkit.output import Output
from rich.console import Console

from chatloop import commands, render
from chatloop.agent import Agent
from chatloop.backends.base import Backend, estimate_tokens
from chatloop.config import Settings
from chatloop.context import to_wire
from chatloop.errors import ChatloopError, StoreError
from chatloop.fsio import FILE_MODE, ensure_dir
from chatloop.session_writer import SessionWriter
from chatloop.store import Store
from chatloop.transcript import Message, SessionMeta
from chatloop.turn import run_turn

HISTORY_FILE = "input_history"
EMBEDDED_NOTE = (
    "Using the embedded Gemma 3 270M demo model: a tiny base model whose replies are often "
    "nonsense. For real work start Ollama or LM Studio, or pass --base-url URL --model NAME."
)


class _CommandCompleter(Completer):
    def get_completions(self, document: Document, complete_event: object):  # type: ignore[no-untyped-def]
        text = document.text_before_cursor
        if text.startswith("/") and " " not in text:
            for word in commands.completions():
                if word.startswith(text):
                    yield Completion(word, start_position=-len(text))


def key_bindings() -> KeyBindings:
    """Enter sends; Esc+Enter or a trailing backslash starts a new line instead."""
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

    return keys


@dataclass
class Repl:
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
    _unsaved: list[Message] = field(default_factory=list)
    _used: int = 0
    _window: int | None = None

    def __post_init__(self) -> None:
        history = InMemoryHistory() if self.input is not None else self._file_history()
        self.prompt: PromptSession[str] = PromptSession(
            input=self.input, output=self.output, history=history, key_bindings=key_bindings(),
            completer=_CommandCompleter(), complete_while_typing=False,
        )  # fmt: skip

    # -- the loop
    def run(self) -> int:
        self._banner()
        previous = {sig: signal.signal(sig, _leave) for sig in (signal.SIGTERM, signal.SIGHUP)}
        try:
            while True:
                try:
                    line = self.prompt.prompt("you> ", bottom_toolbar=self._toolbar)
                except KeyboardInterrupt:
                    if self._confirm_leave():
                        break
                    continue
                except EOFError:
                    break
                if line.strip() and not self.handle(line):
                    break
        except SystemExit:
            render.note(self.console, "Signal received: saving and leaving.")
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.finish()
        return 0

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
        """One turn: save the message, then stream the reply and run tools."""
        writer = self._session()
        if not self._save(Message.create("user", self.clock(), text=text)):
            return
        view = render.StreamView(self.console, self.agent.name)

        def record(message: Message) -> None:
            self._save(message)
            if message.role == "tool":
                view.show_tool_results(message)

        options = {"max_tokens": self.settings.max_tokens} if self.settings.max_tokens else {}
        result = run_turn(
            self.agent, self.backend, writer.messages + self._unsaved,
            build_context=self.wire, record=record, clock=self.clock, on_event=view.on_event,
            max_rounds=self.settings.max_tool_rounds, options=options,
        )  # fmt: skip
        view.close(result.interrupted)
        if result.error is not None:
            render.error(self.console, result.error)
        last = next((m.usage for m in reversed(result.messages) if m.usage), None)
        if last is not None:
            self._used = last.total

    def finish(self) -> None:
        """Finalize the session file (status closed, totals) and say where it is."""
        writer = self.writer
        if writer is None:
            return
        try:
            self._flush()
            meta = writer.finalize()
            render.note(
                self.console,
                f"Saved session {meta.id}: {meta.queries} queries, "
                f"{meta.tokens_in + meta.tokens_out:,} tokens → {writer.path}",
                "green",
            )
        except ChatloopError as exc:
            render.error(self.console, exc)
        finally:
            writer.close()
            self.writer = None

    # -- what is sent
    def wire(self, messages: list[Message] | tuple[Message, ...]) -> list[dict[str, object]]:
        return to_wire(self.agent.system_prompt, messages)

    def window(self) -> int | None:
        if self._window is None:
            try:
                self._window = self.settings.context_window or self.backend.context_window() or 0
            except ChatloopError:
                self._window = 0
        return self._window or None

    # -- commands
    def cmd_help(self, arg: str) -> None:
        lines = [f"  {spec.usage:<18} {spec.help}" for spec in commands.SPECS]
        lines += [
            "",
            "  Enter sends · Esc+Enter or a trailing \\ adds a line · Ctrl-C stops a reply",
            "  Ctrl-D leaves · a line starting with // sends a literal /",
        ]
        self.console.print("\n".join(lines), highlight=False, markup=False)

    def cmd_sessions(self, arg: str) -> None:
        from chatloop.index import Index

        with Index(self.store) as index:
            index.sync(all_projects=False)
            rows = index.list_sessions(limit=20)
        if rows:
            self.console.print(render.sessions_table(rows, self.clock()))
        else:
            render.note(self.console, "No sessions yet in this directory.")

    def cmd_info(self, arg: str) -> None:
        meta = self._meta()
        window = self.window()
        facts = [
            ("session", meta.id or "(not started: send a message)"),
            ("file", str(self.writer.path) if self.writer else "-"),
            ("agent", f"{self.agent.name} ({self.agent.path})"),
            (
                "model",
                f"{self.backend.model or '?'} via {self.backend.kind} {self.backend.base_url}",
            ),
            ("context window", f"{window:,} tokens" if window else "unknown"),
            ("queries", str(self.writer.query_count if self.writer else 0)),
            ("tokens", self._token_line()),
        ]
        if meta.parent_id:
            facts.append(("continues", meta.parent_id))
        width = max(len(k) for k, _ in facts)
        self.console.print("\n".join(f"  {k:<{width}}  {v}" for k, v in facts), highlight=False)

    def cmd_context(self, arg: str) -> None:
        messages = self.writer.messages if self.writer else []
        wire = self.wire(messages)
        rows = [(str(m["role"]), estimate_tokens(str(m.get("content") or "")) + 4,
                 str(m.get("content") or m.get("tool_calls") or "")) for m in wire]  # fmt: skip
        total = sum(r[1] for r in rows)
        self.console.print(render.context_table(rows, self.window(), total))
        if self.agent.tools:
            render.note(self.console, f"plus {len(self.agent.tools)} tool definitions")

    def cmd_rename(self, arg: str) -> None:
        if not arg:
            raise ChatloopError("Give the new title", "For example: /rename Balcony garden plan")
        self.title = arg
        if self.writer is not None:
            self.writer.update_meta(title=arg)
        render.note(self.console, f"Title: {arg}")

    def cmd_export(self, arg: str) -> None:
        if self.writer is None:
            raise ChatloopError("Nothing to export yet", "Send a message first.")
        target = Path(arg or f"{self.writer.meta.id}.md").expanduser()
        try:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        except FileExistsError:
            raise ChatloopError(f"{target} already exists", "Choose another file name.") from None
        except OSError as exc:
            raise ChatloopError(f"Cannot write {target}: {exc.strerror}", "") from exc
        with os.fdopen(fd, "wb") as handle:
            handle.write(self.writer.path.read_bytes())
        render.note(self.console, f"Exported to {target}")

    def cmd_copy(self, arg: str) -> None:
        replies = [
            m.text
            for m in (self.writer.messages if self.writer else [])
            if m.role == "assistant" and m.text
        ]
        if not replies:
            raise ChatloopError("No reply to copy yet", "")
        payload = base64.b64encode(replies[-1].encode()).decode()
        self.console.file.write(f"\x1b]52;c;{payload}\x07")
        render.note(self.console, "Copied the last reply (through your terminal's clipboard).")

    def cmd_clear(self, arg: str) -> None:
        self.console.clear()

    def cmd_compact(self, arg: str) -> None:
        raise ChatloopError(
            "/compact is not available in this version yet",
            "Summary chains are being built; your session is saved as it goes.",
        )

    def cmd_resume(self, arg: str) -> None:
        raise ChatloopError("/resume is not available in this version yet",
                            "`chatloop show N` prints a past session meanwhile.")  # fmt: skip

    # -- internals
    def _session(self) -> SessionWriter:
        if self.writer is None:
            self.writer = self.store.create(self._meta())
        return self.writer

    def _meta(self) -> SessionMeta:
        if self.writer is not None:
            return self.writer.meta
        now = self.clock()
        return SessionMeta(
            id="", created=now, updated=now, title=self.title, agent=self.agent.name,
            agent_path=self.agent.path, model=self.backend.model, backend_url=self.backend.base_url,
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
            self._unsaved.pop(0)

    def _token_line(self) -> str:
        if self.writer is None:
            return "0"
        used = [m.usage for m in self.writer.messages if m.usage and m.role == "assistant"]
        tin, tout = sum(u.input for u in used), sum(u.output for u in used)
        mark = "~" if any(u.estimated for u in used) else ""
        return f"{mark}{tin + tout:,} (in {tin:,}, out {tout:,})"

    def _toolbar(self) -> list[tuple[str, str]]:
        writer = self.writer
        tokens = sum(m.usage.total for m in writer.messages if m.usage) if writer else 0
        return render.toolbar(
            {
                "agent": self.agent.name,
                "model": model_label(self.backend.model),
                "session": writer.meta.id if writer else "",
                "queries": writer.query_count if writer else 0,
                "tokens": tokens,
                "used": self._used,
                "window": self._window,
            }
        )

    def _banner(self) -> None:
        model = model_label(self.backend.model)
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

    def _file_history(self) -> FileHistory:
        ensure_dir(self.store.project_dir)
        path = self.store.project_dir / HISTORY_FILE
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, FILE_MODE))
        return FileHistory(str(path))


def model_label(model: str) -> str:
    """A model name as shown: a file path (llama.cpp servers report one) becomes its name."""
    return Path(model).name if "/" in model else (model or "?")


def _leave(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def _git_branch(cwd: Path) -> str | None:
    """The current branch from .git/HEAD (no subprocess), or None."""
    for folder in (cwd, *cwd.parents):
        head = folder / ".git" / "HEAD"
        if head.is_file():
            text = head.read_text(encoding="utf-8", errors="replace").strip()
            return text.removeprefix("ref: refs/heads/") if text.startswith("ref:") else None
    return None
