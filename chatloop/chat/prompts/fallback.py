"""The fallback summary: one built from the transcript alone, when the model cannot
write one (it failed twice, was cut short, or chatloop is leaving). No I/O.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from chatloop.chat.prompts.texts import (
    HEADINGS,
    NONE,
    assemble,
    clip,
    condense,
    one_line,
    section,
)
from chatloop.format import Message


def fallback_summary(
    messages: Sequence[Message], previous: str | None, goal: str | None = None
) -> str:
    """A summary built from the transcript alone: the chain's goal (``goal``, else as
    ``fallback_parts`` finds it), the last exchanges, tools used and files mentioned."""
    parts = fallback_parts(messages, previous, goal)
    return assemble(
        condense(previous),
        topics=parts["topics"],
        decisions=[*settled(previous), *parts["decisions"]] or [NONE[2:]],
        pending=parts["pending"],
        narrative="(Built from the transcript without the model.)",
    )


GOAL = "Goal (first request): "
LAST_ANSWER = "Last answer: "


def stated_goal(summary: str | None) -> str | None:
    """The chain's goal as a summary's Topics state it (``GOAL``), if they do."""
    topics = section(summary or "", HEADINGS[2])
    return next((t[len(GOAL) :] for t in topics if t.startswith(GOAL)), None)


def fallback_parts(
    messages: Sequence[Message], previous: str | None = None, goal: str | None = None
) -> dict[str, list[str]]:
    """The sections chatloop fills itself: the chain's goal (``goal``: the ledger's;
    else as ``previous`` states it; else the first request here), the last requests
    (the goal's own left out), tools and files; the last answer; what is
    unanswered. The last answer is a topic: the sections chatloop fills never hold a
    decision (only the parent summary's, carried)."""
    queries = [m for m in messages if m.is_query and not m.copy and m.text.strip()]
    replies = [m for m in messages if m.role == "assistant" and not m.restore and m.text.strip()]
    topics: list[str] = []
    goal = goal or stated_goal(previous) or (one_line(queries[0].text) if queries else None)
    if goal is not None:
        topics.append(f"{GOAL}{clip(one_line(goal), 160)}")
        start = one_line(goal)[:60].rstrip(" …")
        queries = [q for q in queries if not one_line(q.text).startswith(start)]
    if queries:
        topics += [clip(one_line(q.text), 100) for q in queries[-6:]]
    tools = sorted({c.name for m in messages for c in m.tool_calls})
    if tools:
        topics.append("Tools used: " + ", ".join(tools))
    files = _files(messages)
    if files:
        topics.append("Files mentioned: " + ", ".join(files[:12]))
    if replies:  # what was said, not decided: a decision is one the person states as one
        topics.append(f"{LAST_ANSWER}{clip(one_line(replies[-1].text), 200)}")
    decisions: list[str] = []
    pending: list[str] = []
    last_user = max((i for i, m in enumerate(messages) if m.is_query), default=-1)
    answered = any(
        m.role == "assistant" and m.text.strip() and not m.interrupted
        for m in messages[last_user + 1 :]
    )
    if last_user >= 0 and not answered:
        pending.append(f"Unanswered: {clip(one_line(messages[last_user].text), 160)}")
    elif queries:
        pending.append("Continue from the last exchange.")
    # what the person typed after the last query that could not be sent (a chat that
    # never started, a message too long): still to be asked, so still pending
    unsent = [m for m in messages[last_user + 1 :] if m.role == "user" and m.unsent]
    pending += [f"Not sent: {clip(one_line(m.text), 160)}" for m in unsent[-3:] if m.text.strip()]
    return {"topics": topics, "decisions": decisions, "pending": pending}


_FILE_RE = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w-]+\.[A-Za-z][A-Za-z0-9]{0,5})(?![\w/])")


def _files(messages: Sequence[Message]) -> list[str]:
    seen: dict[str, None] = {}
    for m in messages:
        if m.restore or m.role == "summary":
            continue
        bits = [m.text, *(c.arguments for c in m.tool_calls)]
        for bit in bits:
            for name in _FILE_RE.findall(bit):
                if not re.fullmatch(r"[\d.]+", name) and not name.startswith("e.g"):
                    seen.setdefault(name, None)
    return list(seen)


def settled(previous: str | None) -> list[str]:
    """What the parent's summary settled: carried into a summary chatloop builds itself,
    word for word (it appears in the parent's summary, so nothing is invented)."""
    settled = section(previous, HEADINGS[3]) if previous else []
    # (a summary built by an older chatloop filed its last answer here: not a decision)
    return [item for item in settled if not item.startswith(LAST_ANSWER)][:6]
