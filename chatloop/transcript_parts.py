"""The body of one frame: readable decoration around exact content. No I/O.

A frame body is ``lead + parts + footer``:

- *lead*: a section heading (``## Query 3 (14:30:45)``) for user messages;
- *parts*: in **simple** mode (a message with text only) the text between a
  fixed prefix (``**You:** ``, ``**Simple Sally:** ``, summary markers) and
  suffix; in **marked** mode (thinking, tool calls or tool results present)
  each part follows a marker line ``<!-- KEY kind {json} -->``;
- *footer*: ``*Time: 3.2s | Tokens: 345 (in: 123, out: 222)*`` when the
  message has a duration, usage or was interrupted.

Decoration is derived from the message's metadata, so the parser strips it by
shape (anchored patterns) and trusts only the metadata and the content. This
module is the single place that knows both directions.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from chatloop.transcript import Message

SUMMARY_START = "<!-- SESSION_SUMMARY_START -->"
SUMMARY_END = "<!-- SESSION_SUMMARY_END -->"
RESTORE_OPEN = "<details><summary>Restoration prompt</summary>\n\n"
DETAILS_CLOSE = "\n\n</details>"
THINK_OPEN = "<details><summary>Thinking</summary>\n\n"

_LEAD_RE = re.compile(r"## (?:Query \d+|Session Restored) \([^)\n]*\)\n\n")
_SPEAKER_RE = re.compile(r"\*\*[^\n]*?:\*\* ")
_FOOTER_RE = re.compile(r"\n\n\*[^\n]*\*\Z")
_CALL_HEAD_RE = re.compile(r"\*\*Tool call:\*\* `[^\n]*`\n\n(`{3,})json\n")
_RESULT_HEAD_RE = re.compile(
    r"<details><summary>(?:Result of|Error from) `[^\n]*`</summary>\n\n(`{3,})\n"
)


@dataclass(frozen=True)
class Decor:
    """What decoration needs beyond the message: the agent's name, the query number."""

    agent: str
    query: int


def display_name(text: str) -> str:
    """A name as shown in headings and labels: one line, no emphasis, backticks or
    angle brackets, so it can neither break the markdown nor look like a marker."""
    return " ".join(text.translate(_DISPLAY_DROP).replace("`", "'").split())


_DISPLAY_DROP = str.maketrans("", "", "*<>")


def _fence(content: str) -> str:
    longest = max((len(run) for run in re.findall(r"`+", content)), default=0)
    return "`" * max(3, longest + 1)


def compact_json(value: dict[str, Any]) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e")


def lead(message: Message, decor: Decor) -> str:
    if message.role != "user":
        return ""
    clock = message.at.strftime("%H:%M:%S")
    title = "Session Restored" if message.restore else f"Query {decor.query}"
    return f"## {title} ({clock})\n\n"


def text_affixes(message: Message, decor: Decor) -> tuple[str, str]:
    """The fixed prefix and suffix around a message's text."""
    if message.role == "user":
        return (RESTORE_OPEN, DETAILS_CLOSE) if message.restore else ("**You:** ", "")
    if message.role == "assistant":
        return f"**{display_name(decor.agent) or 'Assistant'}:** ", ""
    if message.role == "summary":
        return SUMMARY_START + "\n", "\n" + SUMMARY_END
    return "", ""


def footer(message: Message) -> str:
    bits: list[str] = []
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


def _marked(message: Message) -> bool:
    return bool(message.thinking or message.tool_calls or message.tool_results)


def join_parts(message: Message, decor: Decor) -> str:
    """Render a frame body (between the open line and the close line)."""
    prefix, suffix = text_affixes(message, decor)
    if not _marked(message):
        return lead(message, decor) + prefix + message.text + suffix + footer(message)
    key = message.key
    parts: list[str] = []
    for t in message.thinking:
        meta = f" {compact_json({'sig': t.signature})}" if t.signature is not None else ""
        parts.append(f"<!-- {key} thinking{meta} -->\n{THINK_OPEN}{t.text}{DETAILS_CLOSE}")
    if message.text:
        parts.append(f"<!-- {key} text -->\n{prefix}{message.text}{suffix}")
    for c in message.tool_calls:
        fence = _fence(c.arguments)
        head = f"**Tool call:** `{display_name(c.name)}`\n\n{fence}json\n"
        meta = compact_json({"id": c.id, "name": c.name})
        parts.append(f"<!-- {key} call {meta} -->\n{head}{c.arguments}\n{fence}")
    for r in message.tool_results:
        fence = _fence(r.content)
        label = "Error from" if r.is_error else "Result of"
        info: dict[str, Any] = {"id": r.call_id, "name": r.name}
        if r.is_error:
            info["error"] = True
        head = f"<details><summary>{label} `{display_name(r.name)}`</summary>\n\n{fence}\n"
        parts.append(
            f"<!-- {key} result {compact_json(info)} -->\n{head}{r.content}\n{fence}{DETAILS_CLOSE}"
        )
    return lead(message, decor) + "\n".join(parts) + footer(message)


def body_parts(draft: Message, body: str, decor: Decor, notes: list[str]) -> dict[str, Any]:
    """Parse a frame body back into the content fields of ``draft``.

    Decoration is stripped by shape; where a person edited it away, the
    content is kept as found and a note is added.
    """
    if footer(draft):
        match = _FOOTER_RE.search(body)
        if match:
            body = body[: match.start()]
        else:
            notes.append("footer line missing; content kept")
    marker = f"<!-- {draft.key} "
    if marker not in body:
        return {"text": _strip_text(draft, body, notes)}
    first = body.index(marker)
    pieces = ("\n" + body[first:]).split("\n" + marker)[1:]
    fields: dict[str, Any] = {"text": "", "thinking": [], "tool_calls": [], "tool_results": []}
    from chatloop.transcript import Thinking, ToolCall, ToolResult

    for piece in pieces:
        header, sep, content = piece.partition(" -->\n")
        if not sep:
            header, content = piece.removesuffix(" -->"), ""
        kind, _, raw_meta = header.partition(" ")
        info = json.loads(raw_meta) if raw_meta else {}
        if kind == "text":
            fields["text"] = _strip_text(draft, content, notes, with_lead=False)
        elif kind == "thinking":
            text = _strip(content, THINK_OPEN, DETAILS_CLOSE, notes, "thinking")
            fields["thinking"].append(Thinking(text, info.get("sig")))
        elif kind == "call":
            args = _strip_fenced(content, _CALL_HEAD_RE, "", notes, "tool call")
            fields["tool_calls"].append(ToolCall(str(info["id"]), str(info["name"]), args))
        elif kind == "result":
            out = _strip_fenced(content, _RESULT_HEAD_RE, DETAILS_CLOSE, notes, "tool result")
            fields["tool_results"].append(
                ToolResult(str(info["id"]), str(info["name"]), out, bool(info.get("error")))
            )
        else:
            raise ValueError(f"unknown part kind {kind!r}")
    return {k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()}


def _strip_text(draft: Message, body: str, notes: list[str], *, with_lead: bool = True) -> str:
    if with_lead and draft.role == "user":
        match = _LEAD_RE.match(body)
        if match:
            body = body[match.end() :]
        else:
            notes.append("section heading missing; content kept")
    prefix, suffix = text_affixes(draft, Decor(agent="", query=0))
    if draft.role == "assistant":
        match = _SPEAKER_RE.match(body)
        if match:
            return body[match.end() :]
        notes.append("speaker label missing; content kept")
        return body
    return _strip(body, prefix, suffix, notes, "text")


def _strip(content: str, prefix: str, suffix: str, notes: list[str], what: str) -> str:
    if (
        content.startswith(prefix)
        and content.endswith(suffix)
        and (len(content) >= len(prefix) + len(suffix))
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


def message_meta(m: Message) -> dict[str, Any]:
    """The JSON metadata of a frame's open line (only what is set)."""
    meta: dict[str, Any] = {"at": m.at.isoformat()}
    optional: dict[str, Any] = {
        "model": m.model,
        "stop": m.stop_reason,
        "secs": m.duration,
    }
    meta.update({k: v for k, v in optional.items() if v is not None})
    if m.usage is not None:
        usage: dict[str, Any] = {"in": m.usage.input, "out": m.usage.output}
        if m.usage.estimated:
            usage["est"] = True
        meta["usage"] = usage
    for flag in ("interrupted", "restore", "fallback"):
        if getattr(m, flag):
            meta[flag] = True
    return meta


def build_message(
    role: str, key: str, meta: dict[str, Any], body: str, agent: str, notes: list[str]
) -> Message:
    """The message a frame holds, from its open-line metadata and its body.

    Raises ValueError, TypeError or KeyError for metadata that cannot be read.
    """
    from chatloop.transcript import Message, Usage

    usage_raw = meta.get("usage")
    usage = None
    if isinstance(usage_raw, dict):
        usage = Usage(int(usage_raw["in"]), int(usage_raw["out"]), bool(usage_raw.get("est")))
    secs = meta.get("secs")
    draft = Message(
        role=role,  # type: ignore[arg-type]
        at=datetime.fromisoformat(str(meta["at"])),
        key=key,
        model=_opt_str(meta.get("model")),
        stop_reason=_opt_str(meta.get("stop")),
        usage=usage,
        duration=float(secs) if isinstance(secs, int | float) else None,
        interrupted=bool(meta.get("interrupted")),
        restore=bool(meta.get("restore")),
        fallback=bool(meta.get("fallback")),
    )
    return replace(draft, **body_parts(draft, body, Decor(agent=agent, query=0), notes))


def _opt_str(value: object) -> str | None:
    return None if value is None else str(value)
