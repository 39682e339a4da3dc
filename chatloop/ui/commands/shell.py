"""What a command's handler is given: the ``Shell`` (the REPL, seen by a handler) and
the ``Handler`` type every row of the command table runs."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Protocol

from rich.console import Console

from chatloop.chat.approval import Approvals
from chatloop.chat.session import ChatSession


class Shell(Protocol):
    """What a handler may use: the session, the screen, the clock, and leaving."""

    session: ChatSession
    console: Console
    approvals: Approvals  # who decides whether a tool acts (chat.approval)
    closers: list[Callable[[], None]]  # run when the chat has ended (MCP servers)

    def now(self) -> datetime: ...

    def leave(self) -> None: ...


Handler = Callable[[Shell, str], None]
