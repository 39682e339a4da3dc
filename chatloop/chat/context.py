"""What is sent to the model on each call, built from the transcript, within a budget.

The transcript keeps everything; this module decides what the model sees:
the agent's system prompt and the session's messages as OpenAI-shaped chat
messages (summary frames are for people and for restoration prompts, so they
are never sent as messages).

The budget is the context window minus the system prompt, the tool
definitions and a reserve for the reply. ``plan`` sends the full history when
it fits; otherwise it replaces older tool results with a short note, in the
*sent* copy only, oldest first; if that is still too much, the plan says it
does not fit and the caller compacts (``chatloop.chat.chain``). Token counts
come from ``chatloop.chat.tokens``: the server's tokenizer when it has one
(planned with a 2% margin for the template), else estimates corrected by
reported usage (planned with a 10% margin).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from chatloop.backends.base import ChatMessage
from chatloop.chat.tokens import TokenCount
from chatloop.config import (
    ACK_FLOOR,
    ACK_SHARE,
    CARRY_SHARE,
    CHILD_PERCENT,
    DEFAULT_REPLY_RESERVE,
    DEFAULT_SUMMARY_MAX_TOKENS,
    DEFAULT_WINDOW,
    PROSE_FLOOR,
    REPLY_FLOOR,
    REPLY_SHARE,
    RESTORE_SHARE,
    SUMMARY_FLOOR,
    SUMMARY_SHARE,
)
from chatloop.format import Message

SAFETY = 1.1  # estimates are rough: plan as if messages were 10% longer
EXACT_SAFETY = 1.02  # the server's own counts: only the template's share may be off
PRUNED = "[tool result of {chars:,} characters left out to save context; it is in the transcript]"

__all__ = [
    "Budget",
    "Plan",
    "Sent",
    "ack_cap",
    "ledger_room",
    "plan",
    "reply_cap",
    "restoration_budget",
    "summary_cap",
    "to_wire",
    "tool_costs",
    "with_recalled",
]


def reply_cap(window: int | None, setting: int = 0, agent: int = 0) -> int:
    """The most tokens one reply may take: ``setting`` (max_tokens) when the person set
    it; else the agent's cap, but at most a 1/REPLY_SHARE of the window (never below
    REPLY_FLOOR), so that a small window holds several exchanges."""
    if setting:
        return setting
    share = max(REPLY_FLOOR, (window or DEFAULT_WINDOW) // REPLY_SHARE)
    return min(agent, share) if agent else share


def summary_cap(window: int | None, setting: int = 0) -> int:
    """The most tokens a summary may take: ``setting`` (summary_max_tokens) when set;
    else a 1/SUMMARY_SHARE of the window, between SUMMARY_FLOOR and the default cap."""
    if setting:
        return setting
    share = (window or DEFAULT_WINDOW) // SUMMARY_SHARE
    return max(SUMMARY_FLOOR, min(DEFAULT_SUMMARY_MAX_TOKENS, share))


def carry_budget(window: int | None, opening: int) -> int:
    """The tokens a child may spend on its parent's last exchanges, carried word for
    word: window // CARRY_SHARE, and no more than keeps what it begins with (``opening``:
    the restoration prompt and the acknowledgment's cap) and them within CHILD_PERCENT of
    the window."""
    size = window or DEFAULT_WINDOW
    return max(0, min(size // CARRY_SHARE, size * CHILD_PERCENT // 100 - opening))


def ledger_room(window: int | None, summary_setting: int, frame: int, ack: int) -> int:
    """The tokens of a restoration prompt that the pins and the ledger (``chat.ledger``)
    may take: what a restoration may take with its acknowledgment (window //
    RESTORE_SHARE) less its own words (``frame`` tokens), the acknowledgment's cap
    (``ack``) and PROSE_FLOOR, which the summary's prose keeps; never less than the
    summary's cap (``summary_cap``) less PROSE_FLOOR. The prose gets what they leave
    of the summary's cap: what the person stated gives way last."""
    share = restoration_budget(window, ack) - frame - PROSE_FLOOR
    return max(0, summary_cap(window, summary_setting) - PROSE_FLOOR, share)


def restoration_budget(window: int | None, ack: int) -> int:
    """The most tokens a restoration prompt takes (a message it must answer aside): what
    window // RESTORE_SHARE leaves beside its acknowledgment's cap (``ack``)."""
    return (window or DEFAULT_WINDOW) // RESTORE_SHARE - ack


def ack_cap(window: int | None, reply: int) -> int:
    """The most tokens the acknowledgment of a restoration prompt may take: short, a
    1/ACK_SHARE of the window (never below ACK_FLOOR), and never more than a reply."""
    return min(reply, max(ACK_FLOOR, (window or DEFAULT_WINDOW) // ACK_SHARE))


@dataclass(frozen=True)
class Budget:
    """Token accounting for one call. ``available`` is what messages may use."""

    window: int
    system: int
    tools: int
    reserve: int

    @property
    def available(self) -> int:
        return max(0, self.window - self.system - self.tools - self.reserve)


@dataclass(frozen=True)
class Plan:
    """The messages of the next call and what they cost."""

    wire: list[ChatMessage]
    budget: Budget
    messages_tokens: int  # the messages after the system prompt
    pruned: int  # tool results left out of the sent copy
    exact: bool = False  # counted by the server's tokenizer (else estimated)
    content: int | None = None  # the wire's own tokens (system prompt too; no template)

    @property
    def margin(self) -> float:
        return EXACT_SAFETY if self.exact else SAFETY

    @property
    def tokens(self) -> int:
        """Everything the call sends: system prompt, tool definitions and messages."""
        return self.budget.system + self.budget.tools + self.messages_tokens

    @property
    def fits(self) -> bool:
        return self.messages_tokens * self.margin <= self.budget.available

    @property
    def crowded_by_tools(self) -> bool:
        """The messages do not fit, and would without the tool definitions: the tools
        are what leaves them no room."""
        room = dataclasses.replace(self.budget, tools=0).available
        return (
            not self.fits and self.budget.tools > 0 and self.messages_tokens * self.margin <= room
        )

    @property
    def share(self) -> float:
        """How full the window is with this call's prompt (0.0 to 1.0 and beyond)."""
        return self.tokens / self.budget.window if self.budget.window else 0.0


class Sent:
    """The wire form and token counts of a conversation's messages, kept from one plan
    to the next, so that a plan converts and counts only the messages it has not seen
    (a long conversation costs each turn about what a short one does).

    Messages are recognised by identity, in order: where the list given differs from
    the one seen (a message replaced, removed, or a different list), what follows is
    converted again. Counts are kept without the template's overhead and only under
    the ``TokenCount.basis`` they were made with."""

    def __init__(self) -> None:
        self._seen: list[Message] = []
        self._wire: list[ChatMessage] = []
        self._ends: list[int] = []  # len(_wire) after each message seen
        self._content: list[int] = []  # content tokens up to and with each message seen
        self._basis: tuple[bool, float] | None = None

    def body(self, messages: Sequence[Message], count: TokenCount) -> tuple[list[ChatMessage], int]:
        """The chat messages for ``messages`` (a new list: the caller may replace items)
        and their content tokens (``TokenCount.content``, summed)."""
        if self._basis != count.basis:
            self._forget(0)
            self._basis = count.basis
        same, seen = 0, self._seen
        limit = min(len(seen), len(messages))
        while same < limit and seen[same] is messages[same]:
            same += 1
        self._forget(same)
        for message in messages[same:]:
            items = to_wire("", (message,))
            self._wire.extend(items)
            self._ends.append(len(self._wire))
            before = self._content[-1] if self._content else 0
            self._content.append(before + sum(count.content(item) for item in items))
            seen.append(message)
        return list(self._wire), (self._content[-1] if self._content else 0)

    def _forget(self, keep: int) -> None:
        """Keep what was made for the first ``keep`` messages only."""
        if keep < len(self._seen):
            del self._seen[keep:], self._ends[keep:], self._content[keep:]
            del self._wire[self._ends[-1] if self._ends else 0 :]


def plan(
    system_prompt: str,
    messages: Sequence[Message],
    *,
    window: int | None,
    tools: Sequence[dict[str, Any]] | None = None,
    reserve: int | None = None,
    count: TokenCount | None = None,
    sent: Sent | None = None,
) -> Plan:
    """The next call's messages: full history if it fits, else with old tool results pruned.

    Tool results after the last message the person typed are never pruned
    (the model is working with them right now). ``count``: how tokens are counted
    (default: estimates). ``sent``: what earlier plans of this conversation made,
    reused (the same plan, made faster).
    """
    count = count or TokenCount()
    messages = with_recalled(messages)
    system = [{"role": "system", "content": system_prompt}] if system_prompt else []
    budget = Budget(
        window=window or DEFAULT_WINDOW,
        system=count.messages(system) + count.overhead()[1],
        tools=count.text(json.dumps(list(tools))) if tools else 0,
        reserve=reserve or DEFAULT_REPLY_RESERVE,
    )
    per = count.overhead()[0]
    if sent is not None:
        body, own = sent.body(messages, count)
        used = own + per * len(body)
    else:
        body = to_wire("", messages)
        used = count.messages(body)
    margin = EXACT_SAFETY if count.exact else SAFETY
    pruned = 0
    if used * margin > budget.available:
        last_query = max((i for i, m in enumerate(body) if m["role"] == "user"), default=0)
        for i, item in enumerate(body[:last_query]):
            content = str(item.get("content") or "")
            if item["role"] != "tool" or content.startswith("[tool result of"):
                continue
            note = PRUNED.format(chars=len(content))
            used -= count.text(content) - count.text(note)
            body[i] = {**item, "content": note}
            pruned += 1
            if used * margin <= budget.available:
                break
    own = sum(count.content(item) for item in system) + used - per * len(body)
    return Plan(
        wire=[*system, *body],
        budget=budget,
        messages_tokens=used,
        pruned=pruned,
        exact=count.exact,
        content=own,
    )


def tool_costs(
    tools: Iterable[tuple[str, dict[str, Any]]], count: TokenCount | None = None
) -> list[tuple[str, int, int]]:
    """What the tool definitions of each source take: ``tools`` are (source, the
    definition as sent) pairs; the answer is (source, its tools, their tokens), the
    largest first, counted as ``plan`` counts them all (``count``; default estimates)."""
    count = count or TokenCount()
    grouped: dict[str, list[dict[str, Any]]] = {}
    for source, definition in tools:
        grouped.setdefault(source, []).append(definition)
    costs = [(source, len(d), count.text(json.dumps(d))) for source, d in grouped.items()]
    return sorted(costs, key=lambda cost: -cost[2])


def with_recalled(messages: Sequence[Message]) -> Sequence[Message]:
    """``messages`` as a request sends them: what recall brought back for the last
    message sent as the person's (``Message.recalled``, written just after it: a query,
    or the restoration prompt that carries a query the full window could not take) goes
    in front of that message's text, in one user message (a chat template may refuse
    two in a row), in the sent copy only. What was recalled for an earlier one is not
    sent again (``to_wire`` leaves every recalled message out): recall serves the query
    it was made for."""
    last = max(
        (i for i, m in enumerate(messages) if m.role == "user" and not (m.unsent or m.recalled)),
        default=-1,
    )
    if last < 0 or last + 1 >= len(messages) or not messages[last + 1].recalled:
        return messages
    query = messages[last]
    merged = query._replace(text=f"{messages[last + 1].text}\n\n{query.text}")
    return [*messages[:last], merged, *messages[last + 1 :]]


def to_wire(system_prompt: str, messages: Iterable[Message]) -> list[ChatMessage]:
    """Chat messages for ``messages``, after the system prompt (if any); a message the
    person typed that was never sent (``Message.unsent``) is none of them, nor what
    recall brought back (``Message.recalled``: ``with_recalled`` sends it)."""
    out: list[ChatMessage] = [{"role": "system", "content": system_prompt}] if system_prompt else []
    for m in messages:
        if m.unsent or m.recalled:
            continue
        if m.role == "user":
            out.append({"role": "user", "content": m.text})
        elif m.role == "assistant":
            item: ChatMessage = {"role": "assistant", "content": m.text}
            if m.tool_calls:
                item["tool_calls"] = [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments},
                    }
                    for c in m.tool_calls
                ]
            out.append(item)
        elif m.role == "tool":
            out.extend(
                {"role": "tool", "tool_call_id": r.call_id, "name": r.name, "content": r.content}
                for r in m.tool_results
            )
    return out
