"""Reader for the legacy markdown format chatloop descends from. Lossy by design.

Those files have no front matter: bold key lines (``**Session ID:**``,
``**Date:**``, ``**Agent:**``, ``**Agent Path:**``, ``**Total Queries:**``,
``**Resumed From:**``), then ``## Query N (HH:MM:SS)`` sections with
``**You:**`` and ``**{Agent}:**`` paragraphs, a ``*Time: ... | Tokens: ...*``
line, ``---`` rules, and the same SESSION_SUMMARY markers. We read them into
the same values so they can be listed, searched and resumed. We write one thing
into them, and only into the copy ``chatloop import`` made: a summary chatloop
made for a session that had none, in the seed's own markers (``with_summary``),
so that it is made once.

Only markers in the file's own structure count. A ``## Session Restored``
section is the restore block only as the first section of a file that says
``**Resumed From:**`` (where the seed tool wrote it); one anywhere else was
pasted into a message and stays that message's text. The seed tool appended the
summary at the very end, after a ``---`` rule. So the summary is the block
whose end marker is the file's last non-blank line and whose start marker is a
line of its own preceded by a ``---`` line; markers quoted inside a query or a
reply are followed by more of the conversation, stay content, and hide no
query.
"""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import datetime, time

from chatloop.format.body import SUMMARY_END, SUMMARY_START
from chatloop.format.values import Message, ParseResult, Problem, Session, SessionMeta, Usage

__all__ = ["glance_legacy", "looks_legacy", "parse_legacy", "with_summary"]

_KEY_RE = re.compile(
    r"^\*\*(Session ID|Date|Agent|Agent Path|Total Queries|Resumed From):\*\* ?(.*)$", re.MULTILINE
)
_SECTION_RE = re.compile(
    r"^## (Query \d+|Session Restored) \((\d{1,2}:\d{2}:\d{2})\)[ \t]*$", re.MULTILINE
)
_FOOTER_RE = re.compile(
    r"^\*Time: ([\d.]+)s(?: \| Tokens: [\d,]+ \(in: ([\d,]+), out: ([\d,]+)\))?\*\s*$", re.MULTILINE
)


def parse_legacy(data: bytes) -> ParseResult:
    """Parse a legacy file; problems note that it is legacy and anything skipped."""
    text = data.decode("utf-8", errors="replace").replace("\r\n", "\n")
    problems = [Problem("legacy", 0, "legacy format: read without tool calls or exact metadata")]
    keys = {m.group(1): m.group(2).strip() for m in _KEY_RE.finditer(text.split("\n## ", 1)[0])}
    created = _parse_date(keys.get("Date", ""))
    agent = keys.get("Agent", "")
    summary_text = None
    found = _structural_summary(text)
    if found is not None:
        s_start, s_end = found
        summary_text = text[s_start + len(SUMMARY_START) : s_end].strip("\n")
        text = text[:s_start]
    resumed = bool(keys.get("Resumed From"))
    sections = [
        match
        for i, match in enumerate(_SECTION_RE.finditer(text))
        if match.group(1) != "Session Restored" or (i == 0 and resumed)
    ]
    messages: list[Message] = []
    for i, match in enumerate(sections):
        chunk = text[match.end() : sections[i + 1].start() if i + 1 < len(sections) else len(text)]
        at = datetime.combine(
            created.date(), time.fromisoformat(match.group(2).zfill(8)), created.tzinfo
        )
        restore = match.group(1) == "Session Restored"
        messages.extend(_section_messages(chunk.strip("\n"), agent, at, restore))
    if summary_text is not None:
        messages.append(Message.create("summary", created, text=summary_text))
    queries = sum(1 for m in messages if m.is_query)
    first = next((m.text for m in messages if m.is_query), "")
    meta = SessionMeta(
        id=keys.get("Session ID", ""),
        created=created,
        updated=max([created, *(m.at for m in messages)]),
        title=_title(first),
        agent=agent,
        agent_path=keys.get("Agent Path", ""),
        parent_id=keys.get("Resumed From") or None,
        status="closed" if summary_text is not None else "interrupted",
        queries=queries,
        tokens_in=sum(m.usage.input for m in messages if m.usage),
        tokens_out=sum(m.usage.output for m in messages if m.usage),
        summary="legacy" if summary_text is not None else None,
        format=1,
    )
    return ParseResult(Session(meta, tuple(messages)), tuple(problems), len(data), legacy=True)


def glance_legacy(head: bytes, tail: bytes) -> ParseResult | None:
    """What a listing needs of a legacy file from its first bytes (``head``) and its
    last (``tail``; empty when ``head`` is the whole file): its keys, its title (the
    first question, from the sections the head holds whole) and whether its summary
    ends it (its status), as ``parse_legacy`` of the whole file says them. The
    counts and the last activity, which every section decides, are not read: the
    meta's queries and tokens are 0 and its ``updated`` its ``created`` (the caller
    marks them not yet known). None when the head and tail cannot say (a head without
    the first question's first line, a summary longer than the tail): the file is then
    read whole."""
    if not looks_legacy(head):
        return None
    if not tail:
        return parse_legacy(head)
    text = head.decode("utf-8", errors="replace").replace("\r\n", "\n")
    text = text[: text.rfind("\n") + 1]  # whole lines only: the head cuts the last
    found = parse_legacy(text.encode("utf-8", "surrogateescape"))
    meta = found.session.meta
    # the title is the first question's first line: said once that line is whole here
    # (non-empty), or the question's section is (another one follows it)
    if not meta.queries or not (meta.title or len(_SECTION_RE.findall(text)) >= 2):
        return None
    end = tail.decode("utf-8", errors="replace").replace("\r\n", "\n")
    if not end.strip():
        return None
    closed = end.rstrip().endswith(SUMMARY_END)
    if closed and _structural_summary(end) is None:
        return None  # (a summary that begins before the tail, or a quoted marker)
    meta = replace(
        meta,
        status="closed" if closed else "interrupted",
        summary="legacy" if closed else None,
        updated=meta.created,
        queries=0,
        tokens_in=0,
        tokens_out=0,
    )
    return ParseResult(Session(meta, ()), found.problems, 0, legacy=True)


def with_summary(data: bytes, text: str) -> bytes:
    """``data`` (a legacy file without a summary) with ``text`` as its summary, in the
    seed's own markers after a ``---`` rule at the end, as the seed wrote it; a line of
    ``text`` that is a marker is indented (it stays text). Raises ValueError when the
    file has a summary already or is not of the legacy format."""
    if not looks_legacy(data):
        raise ValueError("not a file of the legacy format")
    if _structural_summary(data.decode("utf-8", errors="replace").replace("\r\n", "\n")):
        raise ValueError("the file has a summary already")
    lines = [
        f" {ln}" if ln.strip() in (SUMMARY_START, SUMMARY_END) else ln for ln in text.split("\n")
    ]
    block = "\n".join([SUMMARY_START, *lines, SUMMARY_END]).encode("utf-8", "surrogateescape")
    return data.rstrip() + b"\n\n---\n\n" + block + b"\n"


def looks_legacy(data: bytes) -> bool:
    """True for a file of the legacy format (a heading, then bold key lines)."""
    head = data[:4096]
    return head.startswith(b"# ") and b"**Session ID:**" in head


def _structural_summary(text: str) -> tuple[int, int] | None:
    """Offsets of the summary's start and end markers when they are the file's own
    structure (see the module doc), else None."""
    body = text.rstrip()
    if not body.endswith(SUMMARY_END) or not body[: -len(SUMMARY_END)].endswith("\n"):
        return None
    end = len(body) - len(SUMMARY_END)
    start = body.rfind("\n" + SUMMARY_START + "\n", 0, end)
    if start < 0:
        return None
    before = body[:start].rstrip()
    if not (before.endswith("\n---") or before == "---"):
        return None
    return start + 1, end


def _section_messages(chunk: str, agent: str, at: datetime, restore: bool) -> list[Message]:
    chunk = re.sub(r"\n-{3,}\s*\Z", "", chunk.rstrip()).rstrip()
    duration = usage = None
    footers = list(_FOOTER_RE.finditer(chunk))
    if footers:
        footer = footers[-1]
        duration = float(footer.group(1))
        if footer.group(2):
            usage = Usage(
                int(footer.group(2).replace(",", "")), int(footer.group(3).replace(",", ""))
            )
        chunk = chunk[: footer.start()].rstrip()
    # the agent's label: followed by its reply, or by nothing when the reply was empty
    label = re.compile(r"(?:\A|\n)\*\*" + re.escape(agent) + r":\*\*(?=[ \n]|\Z)")
    found = label.search(chunk) if agent else None
    if found is None:
        user_text, reply = chunk, ""
    else:
        user_text, reply = chunk[: found.start()], chunk[found.end() :]
    reply = reply.strip()
    user_text = user_text.strip()
    out: list[Message] = []
    if user_text:
        text = user_text.removeprefix("**You:**").strip()
        out.append(Message.create("user", at, text=text, restore=restore))
    if reply or usage or found is not None:
        out.append(
            Message.create(
                "assistant", at, text=reply, usage=usage, duration=duration, restore=restore
            )
        )
    return out


TITLE_CHARS = 80


def _title(query: str) -> str:
    """A legacy session's title (the seed wrote none): its first question's first
    line, cut at a word to TITLE_CHARS with an ellipsis."""
    line = " ".join(next((ln for ln in query.splitlines() if ln.strip()), "").split())
    if len(line) <= TITLE_CHARS:
        return line
    return line[: TITLE_CHARS - 1].rsplit(" ", 1)[0] + "…"


def _parse_date(value: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        parsed = datetime(1970, 1, 1)
    return parsed if parsed.tzinfo else parsed.astimezone()
