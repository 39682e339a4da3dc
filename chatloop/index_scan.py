"""What the index needs from session files, read without a full parse.

A full parse builds every message and checks every frame's checksum; the
index needs much less: the front matter, how many queries, when the last
record was written, the last query (the preview), whether a summary exists,
and the words to search. ``scan`` gets those by walking the frames the way
the parser does (a frame ends only at ``/chatloop:KEY`` for its own key, so
content can't fool it) and slicing their bodies out, which costs a fraction
of a parse. Only the last query's frame is read in full.

Legacy files and files without front matter go through the full parser:
they are rare and small. ``scan`` works on bytes; ``scan_files`` reads many
files (in a worker process when asked), and ``hit_in`` reads one file to show
where a search word occurs.

The searchable text is every frame's body without the markup chatloop adds
around it: frame and part markers, section headings, footers and summary
markers, so searching "tokens" or "query" finds what was said, not layout.
Speaker labels stay (``You``, the agent's name): they cost a pass per frame
to remove, and matching them is what a person would expect anyway.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from chatloop.config import DEFAULT_PREVIEW_CHARS
from chatloop.fsio import read_bytes
from chatloop.session_meta import SessionMeta, parse_front_matter
from chatloop.transcript import (
    _OPEN_RE,
    Message,
    ParseResult,
    _looks_legacy,
    _read_frame,
    _Torn,
    parse_markdown,
)
from chatloop.transcript_parts import SUMMARY_END, SUMMARY_START

_SNIPPET_CHARS = 60  # of context each side of a search hit
_LEAD_MAX = 64  # "## Session Restored (23:59:59)" and a blank line fit
_HAS_FOOTER = re.compile(rb'"(?:secs|usage|interrupted|fallback)"')  # open-line keys
_SUMMARY_START = SUMMARY_START.encode() + b"\n"
_SUMMARY_END = b"\n" + SUMMARY_END.encode()


@dataclass(frozen=True)
class Scanned:
    """One file as the index stores it. ``updated`` is the later of the front
    matter's and the last record's time; ``problems`` counts what the scan saw
    (front matter trouble, frames without an end); checksums are not verified."""

    meta: SessionMeta
    queries: int
    updated: datetime
    preview: str
    has_summary: bool
    legacy: bool
    problems: int
    text: bytes  # valid UTF-8


def scan(data: bytes) -> Scanned:
    """Read what the index needs from a session file's bytes; never raises for damage."""
    if not data.startswith(b"---") or _looks_legacy(data):
        return from_parse(parse_markdown(data), text=None)
    notes: list[tuple[str, str]] = []
    meta, start = parse_front_matter(data, notes)
    problems = len(notes)
    queries = 0
    has_summary = False
    last_query = -1
    last_meta = b""
    bodies: list[bytes] = []
    end = start
    find = data.find
    # This loop runs once per frame of every file: keep it lean.
    for match in _OPEN_RE.finditer(data, start):
        if match.start() < end:
            continue  # a marker inside the previous frame's content
        key, role, info = match.groups()
        close = find(b"\n<!-- /chatloop:" + key + b" ", match.end())
        if close < 0:
            problems += 1
            end = match.end()
            continue
        body_from = match.end()
        end = close
        if role == b"user":
            if b'"restore":true' not in info:
                queries += 1
                last_query = match.start()
            if data[body_from] == 35:  # "#": skip "## Query N (time)" and a blank line
                lead = find(b")\n\n", body_from, body_from + _LEAD_MAX)
                body_from = body_from if lead < 0 else lead + 3
        elif role == b"summary":
            has_summary = True
        if _HAS_FOOTER.search(info):  # "*Time: … | Tokens: …*" ends the body
            footer = data.rfind(b"\n\n*", body_from, close)
            close = close if footer < 0 else footer
        if role == b"summary":  # the markers around the text, not inside it
            if data.startswith(_SUMMARY_START, body_from):
                body_from += len(_SUMMARY_START)
            if data.endswith(_SUMMARY_END, body_from, close):
                close -= len(_SUMMARY_END)
        body = data[body_from:close]
        if b"<!-- " + key in body:  # part markers of a message with tools or thinking
            body = re.sub(rb"<!-- " + key + rb" [^\n]*-->\n?", b"", body)
        bodies.append(body)
        last_meta = info
    updated = max(meta.updated, _time_of(last_meta) or meta.updated)
    preview = ""
    if last_query >= 0:
        outcome = _read_frame(data, last_query, meta.agent)
        if not isinstance(outcome, _Torn) and outcome.message is not None:
            preview = outcome.message.text
    text = _utf8(b"\n".join(bodies))
    return Scanned(meta, queries, updated, _one_line(preview), has_summary, False, problems, text)


def scan_file(path: str) -> tuple[str, Scanned | None]:
    """Scan one file; None if it vanished or cannot be read (the next sync retries)."""
    try:
        return path, scan(read_bytes(Path(path)))
    except OSError:
        return path, None


def scan_files(paths: list[str], parallel: bool) -> Iterator[tuple[str, Scanned | None]]:
    """Scanned files, in order: by worker processes when ``parallel`` (and there is
    a core to spare), else here."""
    workers = min((os.cpu_count() or 1) - 1, 4)  # this process inserts meanwhile
    if not parallel or workers < 1:
        yield from map(scan_file, paths)
        return
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else None)
    with context.Pool(workers) as pool:
        yield from pool.imap(scan_file, paths, chunksize=16)


def hit_in(path: Path, word: str) -> tuple[str, str]:
    """The role of the message where ``word`` first occurs as a whole word, and a
    one-line snippet of that message around it, the word in [brackets]; ("", "") if
    the file no longer holds it."""
    try:
        data = read_bytes(path)
    except OSError:
        return "", ""
    text = data.decode("utf-8", "replace")
    pattern = re.compile(r"(?<![^\W_])" + re.escape(word) + r"(?![^\W_])", re.IGNORECASE)
    for found in pattern.finditer(text):
        opening = text.rfind("<!-- chatloop:", 0, found.start())
        if opening < 0:
            continue
        outcome = _read_frame(data, len(text[:opening].encode()), "")
        if isinstance(outcome, _Torn) or outcome.message is None:
            continue
        said = " ".join(words_of(outcome.message).split())
        inside = pattern.search(said)
        if inside is None:
            continue  # the word was in the frame's markup, not its content
        before = said[max(0, inside.start() - _SNIPPET_CHARS) : inside.start()]
        after = said[inside.end() : inside.end() + _SNIPPET_CHARS]
        lead = tail = ""
        if inside.start() > _SNIPPET_CHARS:  # cut: start and end on whole words
            lead, before = "…", before.partition(" ")[2]
        if inside.end() + _SNIPPET_CHARS < len(said):
            tail, after = "…", after.rpartition(" ")[0]
        return outcome.message.role, f"{lead}{before}[{inside.group()}]{after}{tail}"
    return "", ""


def from_parse(result: ParseResult, text: bytes | None = b"") -> Scanned:
    """The same figures from a full parse (legacy files; tests compare the two).
    With ``text=None`` the searchable text is built from the messages."""
    session = result.session
    messages = session.messages
    updated = max(session.meta.updated, messages[-1].at) if messages else session.meta.updated
    preview = next((m.text for m in reversed(messages) if m.is_query), "")
    if text is None:
        text = "\n".join(words_of(m) for m in messages).encode()
    return Scanned(
        session.meta, session.query_count, updated, _one_line(preview),
        session.summary is not None, result.legacy, len(result.problems), text,
    )  # fmt: skip


def _utf8(data: bytes) -> bytes:
    """``data`` if it is valid UTF-8, else with the bad bytes replaced."""
    try:
        data.decode("utf-8")
        return data
    except UnicodeDecodeError:
        return data.decode("utf-8", "replace").encode("utf-8")


def words_of(message: Message) -> str:
    """Everything a message says: text, thinking, tool calls and tool results."""
    bits = [message.text, *(t.text for t in message.thinking)]
    bits += [f"{c.name} {c.arguments}" for c in message.tool_calls]
    bits += [r.content for r in message.tool_results]
    return "\n".join(b for b in bits if b)


def _time_of(info: bytes) -> datetime | None:
    try:
        value = json.loads(info)
        return datetime.fromisoformat(str(value["at"]))
    except (ValueError, TypeError, KeyError):
        return None


def _one_line(text: str) -> str:
    return " ".join(text.split())[:DEFAULT_PREVIEW_CHARS]
