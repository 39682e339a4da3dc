"""What the REPL's parts share: the state ``Repl`` holds and the methods it provides.

``CommandsMixin`` (chatloop.repl_commands) and ``ChainMixin``
(chatloop.repl_chain) build on this; ``Repl`` (chatloop.repl) fills it in.
Declaring it once keeps the two mixins from each restating it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from rich.console import Console

from chatloop.agent import Agent
from chatloop.backends.base import Backend
from chatloop.config import Settings
from chatloop.context import Plan
from chatloop.format import Message, SessionMeta
from chatloop.session_writer import SessionWriter
from chatloop.store import Store

if TYPE_CHECKING:
    from chatloop.index import SessionRow


class ReplBase:
    agent: Agent
    backend: Backend
    store: Store
    settings: Settings
    console: Console
    clock: Callable[[], datetime]
    writer: SessionWriter | None
    title: str
    previous: str | None
    prefix: list[Message]
    chain_base: int
    assume_yes: bool
    _used: int
    _tokens: int
    signalled: int

    def plan(self, extra: list[Message] | None = None) -> Plan:
        """What the next call would send (``extra`` appended)."""
        raise NotImplementedError

    def window(self) -> int | None:
        raise NotImplementedError

    def pick(self, rows: list[SessionRow]) -> SessionRow | None:
        raise NotImplementedError

    def _meta(self) -> SessionMeta:
        raise NotImplementedError

    def _flush(self) -> None:
        raise NotImplementedError

    def _ask(self, question: str, default: bool) -> bool:
        raise NotImplementedError

    def _adopt(self, writer: SessionWriter) -> None:
        raise NotImplementedError

    def _reply_options(self) -> dict[str, Any]:
        raise NotImplementedError
