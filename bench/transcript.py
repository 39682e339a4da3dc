"""One big realistic transcript, closed with its summary located in the front matter:
the show, export, reindex, search and resume figures on one big file."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from pathlib import Path

from bench.corpus import TEXT, TZ
from chatloop.format import (
    Message,
    SessionMeta,
    ToolCall,
    ToolResult,
    Usage,
    render_frame,
    render_header,
)
from chatloop.store.store import Store


def transcript_message(i: int, at: datetime, word: str = "") -> list[Message]:
    """One exchange of a realistic transcript: a question, sometimes a tool call and
    its result, and a reply; a few hundred to a few thousand bytes each. ``word``,
    if given, is planted in the question."""
    words = TEXT.split()
    size = 200 + (i * 7919) % 2800  # 200..3000 characters, varied

    def prose(n: int, salt: int) -> str:
        out, k, length = [], salt, 0
        while length < n:
            out.append(words[k % len(words)])
            k += 3
            if k % 11 == 0:
                out[-1] += ".\n\n" if k % 5 == 0 else "."
            length += len(out[-1]) + 1
        return " ".join(out)

    at = at + timedelta(seconds=i // 2)  # 200 MB stays within one day
    planted = f"{word} " if word else ""
    found = [Message.create("user", at, text=f"question {i}: {planted}{prose(size // 3, i)}")]
    if i % 4 == 1:
        call = ToolCall(f"call_{i}", "read_file", f'{{"path": "notes/log-{i}.md"}}')
        found.append(
            Message.create(
                "assistant",
                at,
                tool_calls=(call,),
                model="qwen2.5:7b",
                usage=Usage(900, 30),
                duration=0.4,
            )
        )
        body = f"# log {i}\n\n" + prose(size, i + 1) + "\n```\nwind 12 kn NW\n```"
        found.append(
            Message.create("tool", at, tool_results=(ToolResult(f"call_{i}", "read_file", body),))
        )
    found.append(
        Message.create(
            "assistant",
            at,
            text=prose(size, i + 2),
            model="qwen2.5:7b",
            stop_reason="stop",
            usage=Usage(1200 + i % 500, size // 4),
            duration=2.5,
        )
    )
    return found


def big_transcript(store: Store, megabytes: float, word: str = "") -> tuple[Path, int]:
    """A closed format-2 session of about ``megabytes`` MB in ``store``, ending with a
    summary frame whose key and offset are in the front matter (``summary_key``,
    ``summary_at``), written frame by frame. ``word`` is planted once, in the question
    about two thirds of the way in; returns the path and where (bytes from the start
    of the file) that question begins."""
    writer = store.create(
        SessionMeta(
            id="",
            created=datetime(2026, 11, 1, tzinfo=TZ),
            updated=datetime(2026, 11, 1, tzinfo=TZ),
            agent="Bench",
            title="Harbour log",
            model="qwen2.5:7b",
        )
    )
    path, meta = writer.path, writer.meta
    writer.close()
    at = meta.created
    frames: list[bytes] = []
    size = queries = i = 0
    planted_at = -1
    while size < megabytes * 1_000_000:
        plant = word if planted_at < 0 and size >= megabytes * 1_000_000 * 2 / 3 else ""
        if plant:
            planted_at = size
        for m in transcript_message(i, at, plant):
            queries += m.is_query
            frames.append(render_frame(m, meta, queries))
            size += len(frames[-1])
        i += 1
    summary = Message.create("summary", at, text=f"The keeper logged {queries} days of tides.")
    summary_at = size + 1  # from the body's start to the frame: a record opens with a blank line
    frames.append(render_frame(summary, meta, queries))
    meta = dataclasses.replace(
        meta,
        status="closed",
        queries=queries,
        summary="model",
        summary_key=summary.key,
        summary_at=summary_at,
        updated=at + timedelta(seconds=i // 2),
    )
    header = render_header(meta)
    with path.open("wb") as out:
        out.write(header)
        out.writelines(frames)
    return path, planted_at + len(header) if planted_at >= 0 else -1
