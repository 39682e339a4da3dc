"""A scripted ``Host`` for driving ``ChatSession`` without a terminal.

It records every notice, question and streamed event, answers questions
from a script (then with the question's default), and picks the first
session offered (or none, if told so).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chatloop.backends.base import Event, TextDelta
from chatloop.chat.agent import load_agent
from chatloop.chat.host import Lookup, Picked, Tone
from chatloop.chat.session import ChatSession
from chatloop.config import Settings
from chatloop.format import Message, Session
from chatloop.store.store import Store
from tests.conftest import Clock

if TYPE_CHECKING:
    from chatloop.store.rows import SessionRow

AGENTS = Path(__file__).resolve().parent.parent / "agents"
# The settings of in-process tests: the defaults, but titles from the first request, so a
# FakeBackend's scripted replies each go where the test means (one per stream call).
# Nothing prepared in the background either (it would take a scripted reply meant for a turn).
# (the model acknowledges restorations here, as it always did before ``written``: the
# tests that script acknowledgments keep checking that path; test_nowait.py the default)
TEST_SETTINGS = Settings(
    titles="first", summaries="wait", prepare_compaction="off", acknowledgment="model"
)


@dataclass
class View:
    host: ScriptedHost
    text: list[str] = field(default_factory=list)

    def on_event(self, event: Event) -> None:
        if isinstance(event, TextDelta):
            self.text.append(event.text)

    def tool_results(self, message: Message) -> None:
        self.host.tool_results.append(message)

    def close(self, interrupted: bool, saved: bool) -> None:
        self.host.replies.append(("".join(self.text), interrupted, saved))


@dataclass
class ScriptedHost:
    answers: list[bool] = field(default_factory=list)
    pick_none: bool = False
    pick_fork: bool = False  # the scripted person forks what they pick
    picked_from: list[SessionRow] = field(default_factory=list)
    notices: list[tuple[str, Tone]] = field(default_factory=list)
    questions: list[str] = field(default_factory=list)
    replies: list[tuple[str, bool, bool]] = field(default_factory=list)
    tool_results: list[Message] = field(default_factory=list)
    work: list[str] = field(default_factory=list)
    refreshed: threading.Event = field(default_factory=threading.Event)  # a toolbar redraw

    def notice(self, text: str, tone: Tone = "info") -> None:
        self.notices.append((text, tone))

    def refresh(self) -> None:
        self.refreshed.set()

    def ask(self, question: str, default: bool) -> bool:
        self.questions.append(question)
        return self.answers.pop(0) if self.answers else default

    def reply_view(self, acknowledgment: bool = False) -> View:
        return View(self)

    @contextmanager
    def working(self, label: str, trace: bool = True) -> Iterator[Callable[[str], None]]:
        self.work.append(label)
        yield lambda step: self.work.append(f"{label} ({step})")

    def pick(self, rows: list[SessionRow], lookup: Lookup | None = None) -> Picked | None:
        self.picked_from = list(rows)
        if self.pick_none or not rows:
            return None
        return Picked(rows[0], self.pick_fork)

    def said(self, words: str) -> bool:
        """True if any notice contains ``words``."""
        return any(words in text for text, _ in self.notices)


def chat(
    store: Store,
    backend: Any,
    *,
    agent: str = "simple_sally.py",
    settings: Settings | None = None,
    answers: list[bool] | None = None,
    agent_named: bool = False,
    **changes: Any,
) -> tuple[ChatSession, ScriptedHost]:
    """A ChatSession over ``store`` and ``backend`` with a scripted host; ``changes``
    are Settings fields (``context_window=900``). Without ``settings``, titles come
    from the first request (``TEST_SETTINGS``), so no scripted reply goes to a title
    request; ``titles="model"`` asks for one."""
    host = ScriptedHost(answers=list(answers or []))
    settings = (settings or TEST_SETTINGS)._replace(**changes)
    session = ChatSession(
        load_agent(AGENTS / agent),
        backend,
        store,
        settings,
        host,
        clock=Clock(),
        agent_named=agent_named,
    )
    return session, host


def continue_file(session: ChatSession, path: Path | str, fork: bool = False) -> None:
    """Continue (``fork``: branch) the session file at ``path`` as ``chatloop -r ID``
    does: located through the index, then ``ChatSession.continue_from``."""
    from chatloop.chat import continuation
    from chatloop.store.index import Index

    with Index(session.store) as index:
        index.sync(all_projects=True)
        row = index.find(Path(path).stem)
    located = continuation.locate(session.store, row)
    session.continue_from(located, continuation.Kind.of(fork=fork))


def files(store: Store) -> list[Session]:
    """Every session of the project, in the order they were last written (each drive
    restarts the test clock, so file times tell the order)."""
    entries = sorted(store.session_files(), key=lambda e: e.stat().st_mtime_ns)
    return [store.read(Path(e.path)).session for e in entries]
