"""The sample conversations of each format (sample_conversations/), parsed, counted
and scaled into one big valid file: the parse speed and markup ratio figures."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from chatloop.format import (
    Message,
    Session,
    new_key,
    parse_markdown,
    render_header,
    render_markdown,
)
from chatloop.format.values import content_of

SAMPLES = Path(__file__).resolve().parent.parent / "sample_conversations"


def sample_sessions(version: int) -> list[Session]:
    """The sample conversations of one format (2: sample_conversations/*.md,
    1: sample_conversations/format1/*.md), parsed."""
    folder = SAMPLES if version == 2 else SAMPLES / "format1"
    sessions = []
    for path in sorted(folder.glob("*.md")):
        result = parse_markdown(path.read_bytes(), path.stem)
        assert result.session.meta.format == version, (path, result.session.meta.format)
        sessions.append(result.session)
    return sessions


def content_bytes(s: Session) -> int:
    """What the messages say, in UTF-8 bytes: text, thinking, tool call
    arguments and tool results (sample_conversations/make_format2.py uses it too)."""
    n = 0
    for m in s.messages:
        n += len(m.text.encode())
        n += sum(len(t.text.encode()) for t in m.thinking)
        n += sum(len(c.arguments.encode()) for c in m.tool_calls)
        n += sum(len(r.content.encode()) for r in m.tool_results)
    return n


def fresh(m: Message) -> Message:
    """A copy of a message under a new frame key (keys are unique in a file)."""
    return m._replace(key=new_key(content_of(m)))


def scaled_sample(version: int, megabytes: float) -> bytes:
    """One valid file of the given format: every sample's frames, repeated until
    the file is about ``megabytes`` MB, rendered by ``render_markdown``."""
    sessions = sample_sessions(version)
    frames = [m for s in sessions for m in s.messages]
    meta = dataclasses.replace(sessions[0].meta, summary_key=None, summary_at=None)
    one = len(render_markdown(Session(meta, tuple(frames)))) - len(render_header(meta))
    repeats = max(1, round(megabytes * 1_000_000 / one))
    return render_markdown(Session(meta, tuple(fresh(m) for _ in range(repeats) for m in frames)))
