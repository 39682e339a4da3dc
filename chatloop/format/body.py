"""A frame's body: readable decoration around exact content, in both formats.

A body is ``lead + parts + footer``:

- *lead*: a section heading for user messages (``## Query 3 (14:30:45)`` in
  format 1, ``## Query 3`` in format 2, ``Session Restored``/``restored`` for a
  restoration prompt);
- *parts*: in **simple** mode (a message with text only) the text between a
  fixed prefix and suffix (format 1 glues ``**You:** `` to the first line;
  format 2 puts user text on its own line and the speaker's label on a line
  of its own); in **marked** mode (thinking, tool calls or tool results) each
  part follows a marker line ``<!-- KEY kind {json} -->``;
- *footer*: format 1 writes ``*Time: 3.2s | Tokens: 345 (in: 123, out: 222)*``
  (and flags); format 2 has none: time, tokens and flags are in the open line,
  once.

Decoration is derived from the message's metadata, so the reader strips it by
shape and trusts only the metadata and the content; where a person edited the
decoration, the content is kept as found with a note. This module is the one
place that knows both directions.
"""

from __future__ import annotations

import json
import re
from typing import Any

from chatloop.format.values import Message, Thinking, ToolCall, ToolResult

SUMMARY_START = "<!-- SESSION_SUMMARY_START -->"
SUMMARY_END = "<!-- SESSION_SUMMARY_END -->"
RESTORE_OPEN = "<details><summary>Restoration prompt</summary>\n\n"
DETAILS_CLOSE = "\n\n</details>"
THINK_OPEN = "<details><summary>Thinking</summary>\n\n"

__all__ = [
    "DETAILS_CLOSE",
    "RESTORE_OPEN",
    "SUMMARY_END",
    "SUMMARY_START",
    "THINK_OPEN",
    "Content",
    "compact_json",
    "display_name",
    "plain_text",
    "read_body",
    "render_body",
    "searchable",
]

_LEAD_RE = {
    1: re.compile(r"## (?:Query \d+|Session Restored) \([^)\n]*\)\n\n"),
    2: re.compile(r"## (?:Query \d+|Session restored|Carried over|Recalled)\n"),
}
_SPEAKER_RE = {1: re.compile(r"\*\*[^\n]*?:\*\* "), 2: re.compile(r"### [^\n]*\n")}
_FOOTER_RE = re.compile(r"\n\n\*[^\n]*\*\Z")
_CALL_HEAD_RE = {
    1: re.compile(r"\*\*Tool call:\*\* `[^\n]*`\n\n(`{3,})json\n"),
    2: re.compile(r"(`{3,})json\n"),
}
_RESULT_HEAD_RE = {
    1: re.compile(r"<details><summary>(?:Result of|Error from) `[^\n]*`</summary>\n\n(`{3,})\n"),
    2: re.compile(r"(`{3,})\n"),
}
_DISPLAY_DROP = str.maketrans("", "", "*<>")

Content = tuple[str, tuple[Thinking, ...], tuple[ToolCall, ...], tuple[ToolResult, ...]]


def display_name(text: str) -> str:
    """A name as shown in headings and labels: one line, no emphasis, backticks or
    angle brackets, so it can neither break the markdown nor look like a marker."""
    return " ".join(text.translate(_DISPLAY_DROP).replace("`", "'").split())


def compact_json(value: dict[str, Any]) -> str:
    """JSON on one line with ``<`` and ``>`` escaped, so it can never close a comment."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e")


def _fence(content: str) -> str:
    longest = max((len(run) for run in re.findall(r"`+", content)), default=0)
    return "`" * max(3, longest + 1)


# ----------------------------------------------------------------------------- render


def _lead(message: Message, query: int, version: int) -> str:
    if message.role != "user":
        return ""
    if version == 1:
        title = "Session Restored" if message.restore else f"Query {query}"
        return f"## {title} ({message.at.strftime('%H:%M:%S')})\n\n"
    if message.restore:  # a copy of what was said before, or what a session brought in
        if message.recalled:
            return "## Recalled\n"
        return "## Carried over\n" if message.copy else "## Session restored\n"
    return f"## Query {query}\n"


def _affixes(role: str, restore: bool, agent: str, version: int) -> tuple[str, str]:
    """The fixed prefix and suffix around a message's text."""
    if role == "user":
        if version == 1:
            return (RESTORE_OPEN, DETAILS_CLOSE) if restore else ("**You:** ", "")
        return "", ""
    if role == "assistant":
        name = display_name(agent) or "Assistant"
        return (f"**{name}:** ", "") if version == 1 else (f"### {name}\n", "")
    if role == "summary":
        return SUMMARY_START + "\n", "\n" + SUMMARY_END
    return "", ""


def _footer(message: Message, version: int) -> str:
    bits: list[str] = []
    if version == 1:
        if message.duration is not None:
            bits.append(f"Time: {message.duration:.1f}s")
        if message.usage is not None:
            u = message.usage
            mark = "~" if u.estimated else ""
            bits.append(f"Tokens: {mark}{u.total:,} (in: {u.input:,}, out: {u.output:,})")
        if message.interrupted:
            bits.append("interrupted")
        if message.fallback:
            bits.append("fallback summary")
        return f"\n\n*{' | '.join(bits)}*" if bits else ""
    return ""  # format 2: every fact is in the open line, once


def has_footer(
    version: int, duration: bool, usage: bool, interrupted: bool, fallback: bool
) -> bool:
    """Whether a body in ``version`` ends with a footer line, from the metadata."""
    return version == 1 and (duration or usage or interrupted or fallback)


def render_body(message: Message, agent: str, query: int, version: int) -> str:
    """A frame body (between the open line and the close line). ``query`` is the
    number of queries up to and including this message (for the heading only)."""
    prefix, suffix = _affixes(message.role, message.restore, agent, version)
    lead = _lead(message, query, version)
    footer = _footer(message, version)
    if not (message.thinking or message.tool_calls or message.tool_results):
        return lead + prefix + message.text + suffix + footer
    key = message.key
    parts: list[str] = []
    for t in message.thinking:
        meta = f" {compact_json({'sig': t.signature})}" if t.signature is not None else ""
        parts.append(f"<!-- {key} thinking{meta} -->\n{THINK_OPEN}{t.text}{DETAILS_CLOSE}")
    if message.text:
        parts.append(f"<!-- {key} text -->\n{prefix}{message.text}{suffix}")
    for c in message.tool_calls:
        fence = _fence(c.arguments)
        head = f"**Tool call:** `{display_name(c.name)}`\n\n" if version == 1 else ""
        meta = compact_json({"id": c.id, "name": c.name})
        parts.append(f"<!-- {key} call {meta} -->\n{head}{fence}json\n{c.arguments}\n{fence}")
    for r in message.tool_results:
        fence = _fence(r.content)
        info: dict[str, Any] = {"id": r.call_id, "name": r.name}
        if r.is_error:
            info["error"] = True
        if r.approved is not None:
            info["approved"] = r.approved
        if version == 1:
            label = "Error from" if r.is_error else "Result of"
            head = f"<details><summary>{label} `{display_name(r.name)}`</summary>\n\n{fence}\n"
            tail = f"\n{fence}{DETAILS_CLOSE}"
        else:
            head, tail = f"{fence}\n", f"\n{fence}"
        parts.append(f"<!-- {key} result {compact_json(info)} -->\n{head}{r.content}{tail}")
    return lead + "\n".join(parts) + footer


# ----------------------------------------------------------------------------- read


def read_body(
    role: str, key: str, restore: bool, footer: bool, body: str, version: int, notes: list[str]
) -> Content:
    """The content of a frame body: text, thinking, tool calls, tool results.

    ``footer`` says whether the metadata implies a footer line. Decoration is
    stripped by shape; where a person edited it away, the content is kept as
    found and a note is added. Raises ValueError for a part marker that
    cannot be read.
    """
    if footer:
        match = _FOOTER_RE.search(body)
        if match:
            body = body[: match.start()]
        else:
            notes.append("footer line missing; content kept")
    marker = f"<!-- {key} "
    if "<" not in body or marker not in body:  # (a search for one character is fastest)
        return _strip_text(role, restore, body, version, notes, True), (), (), ()
    first = body.index(marker)
    pieces = ("\n" + body[first:]).split("\n" + marker)[1:]
    text = ""
    thinking: list[Thinking] = []
    calls: list[ToolCall] = []
    results: list[ToolResult] = []
    for piece in pieces:
        header, sep, content = piece.partition(" -->\n")
        if not sep:
            header, content = piece.removesuffix(" -->"), ""
        kind, _, raw_meta = header.partition(" ")
        info = json.loads(raw_meta) if raw_meta else {}
        if not isinstance(info, dict):
            raise ValueError(f"unreadable {kind} part")
        if kind == "text":
            text = _strip_text(role, restore, content, version, notes, False)
        elif kind == "thinking":
            sig = info.get("sig")
            thought = _strip(content, THINK_OPEN, DETAILS_CLOSE, notes, "thinking")
            thinking.append(Thinking(thought, None if sig is None else str(sig)))
        elif kind == "call":
            args = _strip_fenced(content, _CALL_HEAD_RE[version], "", notes, "tool call")
            calls.append(ToolCall(str(info["id"]), str(info["name"]), args))
        elif kind == "result":
            tail = DETAILS_CLOSE if version == 1 else ""
            out = _strip_fenced(content, _RESULT_HEAD_RE[version], tail, notes, "tool result")
            approved = info.get("approved")
            results.append(
                ToolResult(
                    str(info["id"]),
                    str(info["name"]),
                    out,
                    bool(info.get("error")),
                    None if approved is None else str(approved),
                )
            )
        else:
            raise ValueError(f"unknown part kind {kind!r}")
    return text, tuple(thinking), tuple(calls), tuple(results)


_PLAIN_LEAD = {"user": _LEAD_RE[2], "assistant": _SPEAKER_RE[2]}


def plain_text(role: str, key: str, body: str) -> str | None:
    """The text of a format 2 body that holds only text, decorated as chatloop writes
    it (a question's heading, a reply's speaker line); None for any other body.
    When it is a string, it is what ``read_body`` returns as the text of that body
    (with no thinking, calls or results, and no note)."""
    lead = _PLAIN_LEAD[role].match(body)
    if lead is None or ("<" in body and f"<!-- {key} " in body):  # (memchr first)
        return None
    return body[lead.end() :]


def _strip_text(
    role: str, restore: bool, body: str, version: int, notes: list[str], with_lead: bool
) -> str:
    if with_lead and role == "user":
        match = _LEAD_RE[version].match(body)
        if match:
            body = body[match.end() :]
        else:
            notes.append("section heading missing; content kept")
    if role == "assistant":
        match = _SPEAKER_RE[version].match(body)
        if match:
            return body[match.end() :]
        notes.append("speaker label missing; content kept")
        return body
    if role == "tool" or (role == "user" and version >= 2):  # no prefix or suffix
        return body
    prefix, suffix = _affixes(role, restore, "", version)
    return _strip(body, prefix, suffix, notes, "text")


def _strip(content: str, prefix: str, suffix: str, notes: list[str], what: str) -> str:
    if (
        content.startswith(prefix)
        and content.endswith(suffix)
        and len(content) >= len(prefix) + len(suffix)
    ):
        return content[len(prefix) : len(content) - len(suffix)]
    notes.append(f"{what} decoration changed; content kept as found")
    return content


def _strip_fenced(
    content: str, head_re: re.Pattern[str], tail: str, notes: list[str], what: str
) -> str:
    match = head_re.match(content)
    if match:
        closing = "\n" + match.group(1) + tail
        if content.endswith(closing) and len(content) - len(closing) >= match.end():
            return content[match.end() : len(content) - len(closing)]
    notes.append(f"{what} decoration changed; content kept as found")
    return content


# ----------------------------------------------------------------------------- search

_SUMMARY_START_B = SUMMARY_START.encode() + b"\n"
_SUMMARY_END_B = b"\n" + SUMMARY_END.encode()
_LEAD_MAX = 64  # "## Session Restored (23:59:59)" and a blank line fit


def searchable(role: str, key: bytes, body: bytes, footer: bool, version: int) -> bytes:
    """A body's words without the markup chatloop adds: the user heading, the
    footer, the summary markers and part markers (speaker labels stay: matching
    them is what a person expects). Cheap: no decoding, no message built."""
    start, end = 0, len(body)
    if role == "user" and body[:1] == b"#":
        end_of_lead = b"\n\n" if version == 1 else b"\n"
        lead = body.find(end_of_lead, 0, _LEAD_MAX)
        start = 0 if lead < 0 else lead + len(end_of_lead)
    if footer:
        cut = body.rfind(b"\n\n*", start)
        end = end if cut < 0 else cut
    if role == "summary":
        if body.startswith(_SUMMARY_START_B, start):
            start += len(_SUMMARY_START_B)
        if body.endswith(_SUMMARY_END_B, start, end):
            end -= len(_SUMMARY_END_B)
    words = body[start:end]
    if b"<!-- " + key in words:  # part markers go; a tool call's name stays searchable
        words = re.sub(rb"<!-- " + key + rb" (\w+)([^\n]*)-->\n?", _part_words, words)
    return words


def _part_words(match: re.Match[bytes]) -> bytes:
    if match.group(1) != b"call":
        return b""
    try:
        info = json.loads(match.group(2))
        return str(info["name"]).encode() + b"\n" if isinstance(info, dict) else b""
    except (ValueError, KeyError, RecursionError):  # (JSON nested too deep: damage)
        return b""
