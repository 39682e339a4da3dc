"""The REPL's informational commands: /help /sessions /info /context /rename /export
/copy /clear. They read the session; none of them talks to the model.

``Repl`` (chatloop.repl) mixes this in; the state and methods it relies on are
declared once in ``chatloop.repl_base``.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path

from chatloop import commands, render
from chatloop.backends.base import estimate_tokens
from chatloop.errors import ChatloopError
from chatloop.fsio import FILE_MODE
from chatloop.listing import visible
from chatloop.repl_base import ReplBase


class CommandsMixin(ReplBase):
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
            ("model", f"{render.model_label(self.backend.model)} via {self.backend.kind} "
                      f"{self.backend.base_url}"),
            ("context window", f"{window:,} tokens" if window else "unknown"),
            ("queries", str(self.writer.query_count if self.writer else 0)),
            ("tokens", self._token_line()),
        ]  # fmt: skip
        if meta.parent_id:
            facts.append(("continues", f"{meta.parent_id} ({meta.parent_file})"))
            facts.append(("chain tokens", f"{self.chain_base + self._tokens:,} "
                                          "(this session and every ancestor)"))  # fmt: skip
        width = max(len(k) for k, _ in facts)
        text = "\n".join(f"  {k:<{width}}  {v}" for k, v in facts)
        self.console.print(visible(text), highlight=False, markup=False)

    def cmd_context(self, arg: str) -> None:
        plan = self.plan()
        rows = [
            (str(m["role"]), estimate_tokens(str(m.get("content") or "")) + 4,
             str(m.get("content") or m.get("tool_calls") or ""))
            for m in plan.wire
        ]  # fmt: skip
        self.console.print(render.context_table(rows, plan.budget.window, plan.tokens))
        b = plan.budget
        lines = [
            f"budget: window {b.window:,} − system {b.system:,} − tools {b.tools:,} − "
            f"reply reserve {b.reserve:,} = {b.available:,} for messages "
            f"({plan.messages_tokens:,} used)"
        ]
        if plan.pruned:
            lines.append(f"{plan.pruned} older tool results are left out of the call "
                         "(they stay in the transcript)")  # fmt: skip
        if not plan.fits:
            lines.append("the history no longer fits: the next message compacts first")
        render.note(self.console, "\n".join(lines))

    def cmd_rename(self, arg: str) -> None:
        from chatloop.format.front_matter import MAX_TITLE_CHARS

        if not arg:
            raise ChatloopError("Give the new title", "For example: /rename Balcony garden plan")
        title = arg[:MAX_TITLE_CHARS]
        if self.writer is not None:
            self.writer.update_meta(title=title)  # before self.title: a refusal changes nothing
        self.title = title
        if len(arg) > MAX_TITLE_CHARS:
            render.note(self.console, f"Title cut to {MAX_TITLE_CHARS} characters (of {len(arg)}).")
        render.note(self.console, f"Title: {title}")

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

    def _token_line(self) -> str:
        if self.writer is None:
            return "0"
        used = [m.usage for m in self.writer.messages
                if m.usage is not None and m.role == "assistant" and not m.restore]  # fmt: skip
        tin = sum(u.input for u in used)
        tout = sum(u.output for u in used)
        mark = "~" if any(u.estimated for u in used) else ""
        restore = sum(m.usage.total for m in self.writer.messages if m.usage and m.restore)
        extra = f", restoration {restore:,}" if restore else ""
        return f"{mark}{tin + tout:,} (in {tin:,}, out {tout:,}{extra})"
