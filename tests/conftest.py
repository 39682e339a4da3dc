"""Shared fixtures: every test gets its own CHATLOOP_HOME under tmp_path."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from chatloop.store import Store
from chatloop.transcript import Message, SessionMeta, ToolCall, ToolResult, Usage

TZ = timezone(timedelta(hours=1))
T0 = datetime(2026, 11, 21, 14, 30, 45, 123456, tzinfo=TZ)


class Clock:
    """A clock that moves forward one second per call (deterministic order)."""

    def __init__(self, start: datetime = T0) -> None:
        self.now = start

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


@pytest.fixture(autouse=True)
def chatloop_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("CHATLOOP_HOME", str(home))
    return home


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(chatloop_home: Path, tmp_path: Path, clock: Clock) -> Iterator[Store]:
    project = tmp_path / "project"
    project.mkdir()
    yield Store(chatloop_home, cwd=project, clock=clock)


def new_meta(**fields: object) -> SessionMeta:
    base: dict[str, object] = {
        "id": "",
        "created": T0,
        "updated": T0,
        "title": "",
        "agent": "Simple Sally",
        "agent_path": "agents/simple_sally.py",
        "model": "gemma-3-270m",
    }
    base.update(fields)
    return SessionMeta(**base)  # type: ignore[arg-type]


def exchange(n: int, at: datetime = T0) -> list[Message]:
    """A realistic query/answer pair, the answer with a tool call on odd n."""
    out = [Message.create("user", at, text=f"Question number {n}: what is in notes-{n}.txt?")]
    if n % 2:
        call = ToolCall(f"call_{n}", "read_file", f'{{"path": "notes-{n}.txt"}}')
        out.append(Message.create("assistant", at, tool_calls=(call,), usage=Usage(40, 9)))
        result = ToolResult(f"call_{n}", "read_file", f"line one of {n}\nline two")
        out.append(Message.create("tool", at, tool_results=(result,)))
    out.append(
        Message.create(
            "assistant", at, text=f"Answer {n}. " * 20, usage=Usage(120, 45), duration=1.5
        )
    )
    return out
