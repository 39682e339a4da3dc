"""The turn path's decisions, as functions: the request that carries the person's
message to the model (``wire_messages``), whether a message can be sent at all and
the refusal that says why, what a message that cannot be sent leaves in the file,
one answer streamed and recorded as it happens, and what a failed answer or a full
window lead to.

``ChatSession.send`` moves the state (the message held and flushed through the
lifecycle, a compaction when the window is full, a child's beginning); what a turn
decides with the meter, the agent, the settings and the file is here, over
parameters. The single-turn streaming (tools, drafts, a reply cut short) is
``chat.turn``'s; this module calls it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path

from chatloop.backends.base import Backend, ChatMessage, ContextOverflow
from chatloop.chat import sharing
from chatloop.chat.agent import Agent
from chatloop.chat.context import Plan, tool_costs
from chatloop.chat.host import Note, ReplyView
from chatloop.chat.lifecycle import Lifecycle
from chatloop.chat.meter import Meter
from chatloop.chat.state import Closing, Open
from chatloop.chat.tokens import TokenCount
from chatloop.chat.turn import TurnResult, run_turn
from chatloop.config import Settings
from chatloop.errors import ChatloopError, StoreError
from chatloop.format import Message
from chatloop.store.writer import SessionWriter

__all__ = [
    "COMPACTING",
    "answered",
    "kept_unsent",
    "not_sent",
    "overflowed",
    "queued_error",
    "refusal",
    "set_aside",
    "threshold",
    "wire_messages",
]


def wire_messages(
    asked: str, conversation: Sequence[Message], prefix: Sequence[Message], meter: Meter
) -> list[ChatMessage]:
    """THE request for the person's message ``asked``: the wire messages sent to the
    model to answer it (the system prompt, the ``--full`` ``prefix``, then
    ``conversation``, the turn's view of the session ending with ``asked`` and, after a
    tool round, the calls and results that followed), within the budget
    (``Meter.wire``, which remembers it as the call its reply's usage is learnt
    against).

    Every request that answers what a person typed goes through here, and only those:
    each round of a turn (``answered``), and the acknowledgment that answers a message
    a full window sent on to a compaction's child (``ChatSession.begin_child``, where
    ``asked`` is the message its restoration prompt carries). What recall brought back
    for ``asked`` (``ChatSession._recall`` writes it just after it) reaches the wire in
    front of it through the plan (``context.with_recalled``), for this request only."""
    return meter.wire(conversation, prefix)


def refusal(
    alone: Plan, agent: Agent, tokens: TokenCount, auto_compact: str
) -> ChatloopError | None:
    """Why a message cannot be sent (``alone``: its plan without the history), or None:
    the tool definitions leave it no room (naming whose tools take the window), it does
    not fit even alone, or the history does not fit and compaction is off."""
    if alone.crowded_by_tools:
        return crowded(alone, agent, tokens)
    if not alone.fits:
        return ChatloopError(
            f"This message alone (about {alone.messages_tokens:,} tokens) does not fit the "
            f"context window ({alone.budget.available:,} tokens for messages); nothing "
            "was sent",
            "Shorten it (Up recalls it), or use a model with a larger window.",
        )
    if auto_compact == "off":
        return ChatloopError(
            "The conversation no longer fits the context window; the message was not sent",
            "/compact continues in a new session from a summary; then send it again "
            "(Up recalls it).",
        )
    return None


def crowded(alone: Plan, agent: Agent, tokens: TokenCount) -> ChatloopError:
    """The refusal of a message that only the tool definitions leave no room for,
    naming whose tools take the window (``context.tool_costs``: largest first)."""
    costs = tool_costs(((t.server, t.spec()) for t in agent.tools), tokens)
    named = "; ".join(
        f"{'MCP server ' + source if source else 'the agent itself'}: "
        f"{count:,} tools, about {cost:,} tokens"
        for source, count, cost in costs[:3]
    )
    servers = [source for source, _, _ in costs if source]
    hint = (
        f"Remove the MCP server {servers[0]} (the agent's mcp, or mcp_servers in the "
        "config), or use a model with a larger window."
        if servers
        else "Give the agent fewer tools, or use a model with a larger window."
    )
    budget = alone.budget
    return ChatloopError(
        f"The tool definitions take about {budget.tools:,} tokens of the "
        f"{budget.window:,}-token context window and leave no room for messages "
        f"({named}); nothing was sent",
        hint,
    )


def set_aside(writer: SessionWriter | None, message: Message) -> bool:
    """``message``, just saved, cannot be sent: it stays in the file marked as not
    sent (``Message.unsent``: out of the conversation, never a query), so what the
    person typed is never only in their input history. False when it cannot be
    marked (no file, someone changed it, or it cannot be rewritten)."""
    try:
        return writer is not None and writer.set_aside(message)
    except StoreError:
        return False


def kept_unsent(writer: SessionWriter | None, refusal: ChatloopError) -> ChatloopError:
    """``refusal`` of a message ``set_aside`` kept in ``writer``'s file, saying where."""
    name = writer.meta.id if writer is not None else "this session"
    where = f"It is kept in session {name}, marked as not sent. "
    return ChatloopError(refusal.message, where + refusal.hint)


def queued_error(exc: StoreError, queued: int) -> StoreError:
    """``exc`` with a hint that tells the truth about the ``queued`` messages."""
    held = f"{queued} message{'s' if queued != 1 else ''} kept in memory, not yet saved"
    return StoreError(
        exc.message,
        f"{held}: chatloop writes them before anything else "
        "and sends nothing until they are saved.",
    )


# said when a message's history leaves it no room: a compaction's child answers it
COMPACTING: Note = (
    "The context window is full: compacting; the new session answers your message.",
    "warn",
)


def not_sent(exc: StoreError) -> StoreError:
    """``exc``, a compaction's failure to save, as said of the message it was to make
    room for: saved in this session, not sent."""
    return StoreError(
        exc.message,
        "Your message is saved in this session but was not sent: free some disk "
        "space, then send it again (Up recalls it).",
    )


def answered(
    asked: str,
    conversation: Sequence[Message],
    prefix: Sequence[Message],
    *,
    agent: Agent,
    backend: Backend,
    meter: Meter,
    lifecycle: Lifecycle,
    flush: Callable[[], None],
    view: ReplyView,
    settings: Settings,
    home: Path,
    clock: Callable[[], datetime],
) -> tuple[TurnResult, StoreError | None]:
    """The answer to ``asked``, the last of ``conversation``, streamed into ``view``
    (``turn.run_turn``, each request made by ``wire_messages``), with background work
    on the same server yielding meanwhile (``sharing.using``). Each message it makes
    is learnt by ``meter`` and held and written (``flush``) as it happens; the reply
    still streaming is drafted into the open file unless messages are queued (nothing
    goes before them). Returns the turn and the last failure to write, if any (the
    messages then stay queued)."""
    failures: list[StoreError] = []

    def record(message: Message) -> None:
        meter.learn(message)
        lifecycle.hold(message)
        try:
            flush()
        except StoreError as exc:
            failures.append(exc)
        if message.role == "tool":
            view.tool_results(message)

    def draft(reply: Message) -> None:
        state = lifecycle.state
        writer = state.writer if isinstance(state, Open | Closing) else None
        if writer is None or lifecycle.queued:  # nothing goes before what is queued
            return
        with contextlib.suppress(StoreError):  # appended whole at its end, told then
            writer.draft(reply)

    def request(said: Sequence[Message]) -> list[ChatMessage]:
        return wire_messages(asked, said, prefix, meter)

    with sharing.using(home, backend):  # (background work yields)
        result = run_turn(
            agent,
            backend,
            conversation,
            build_context=request,
            record=record,
            clock=clock,
            on_event=view.on_event,
            max_rounds=settings.max_tool_rounds,
            options=meter.reply_options(),
            draft=draft,
        )
    kept = any(m.interrupted and (m.text or m.thinking) for m in result.messages)
    view.close(result.interrupted, saved=kept)
    return result, failures[-1] if failures else None


def overflowed(result: TurnResult, meter: Meter, auto_compact: str) -> Note | None:
    """What a turn's failure leads to: the server said the window is full (the real
    window it told is learnt by ``meter``) and compaction is on: the note that says a
    compaction answers the message; any other failure is raised (BackendError, after
    it was recorded in the file); None when the turn did not fail."""
    error = result.error
    if isinstance(error, ContextOverflow) and error.window:
        meter.told(error.window)  # the server told us its real window
    if isinstance(error, ContextOverflow) and auto_compact != "off":
        return (
            "The server says the context window is full: compacting; the new "
            "session answers your message.",
            "warn",
        )
    if error is not None:
        raise error
    return None


def threshold(used: int, window: int, compact_threshold: float) -> Note | None:
    """The warning of a window past ``compact_threshold`` with ``used`` tokens of
    ``window`` taken (the caller then compacts, asks or hints), or None below it."""
    share = used / window
    if share < compact_threshold:
        return None
    return f"Context {share:.0%} full ({used:,} of {window:,} tokens).", "warn"
