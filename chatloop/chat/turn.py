"""One turn of conversation: stream a reply, run the tools it asks for, repeat.

Every assistant message and every tool result is handed to ``record`` (the
store's append) the moment it exists, so a crash mid-turn loses nothing that
happened; a reply still streaming is handed to ``draft`` (the store's
unfinished last frame) at its first text and then at most once per
``DRAFT_SECONDS``, so a crash loses no more than the last second of it. A
reply cut short by Ctrl-C, a cancel, or a server failure (a dropped connection,
or a stream the server ended without a finish reason: ``StreamCut``) is recorded
too, marked ``interrupted``, with whatever text had arrived; when nothing arrived,
its ``stop_reason`` says why (``cancelled`` or ``error``), so a failed
exchange is visible in the file and in ``show``.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from chatloop.backends.base import (
    NOTHING_CAME,
    PARTIAL_KEPT,
    Backend,
    Cancel,
    Cancelled,
    ChatMessage,
    Event,
    Finish,
    TextDelta,
    ThinkingDelta,
    ToolCallEvent,
    UsageEvent,
    estimate_prompt,
    estimate_tokens,
)
from chatloop.chat.agent import Agent
from chatloop.config import DEFAULT_MAX_TOOL_ROUNDS, DRAFT_SECONDS
from chatloop.errors import BackendError
from chatloop.format import UNFINISHED, Message, Thinking, ToolCall, ToolResult, Usage

Record = Callable[[Message], None]
OnEvent = Callable[[Event], None]
BuildContext = Callable[[Sequence[Message]], list[ChatMessage]]


@dataclass
class TurnResult:
    """What a turn produced. ``error`` is set when the server failed mid-turn."""

    messages: list[Message] = field(default_factory=list)
    interrupted: bool = False
    error: BackendError | None = None

    @property
    def reply(self) -> str:
        return "\n".join(m.text for m in self.messages if m.role == "assistant" and m.text)

    @property
    def usage(self) -> Usage:
        used = [m.usage for m in self.messages if m.usage is not None]
        return Usage(
            sum(u.input for u in used), sum(u.output for u in used), any(u.estimated for u in used)
        )


@dataclass
class _Reply:
    """What one streamed call has delivered so far."""

    text: list[str] = field(default_factory=list)
    thinking: list[str] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)
    usage: Usage | None = None
    finish: str | None = None

    def take(self, event: Event) -> None:
        if isinstance(event, TextDelta):
            self.text.append(event.text)
        elif isinstance(event, ThinkingDelta):
            self.thinking.append(event.text)
        elif isinstance(event, ToolCallEvent):
            self.calls.append(ToolCall(event.id, event.name, event.arguments))
        elif isinstance(event, UsageEvent):
            self.usage = Usage(event.input, event.output, event.estimated)
        elif isinstance(event, Finish):
            self.finish = event.reason

    def unfinished(self, at: datetime, model: str) -> Message:
        """The reply so far, as it stays on disk if chatloop stops now: interrupted,
        stop reason ``unfinished``, no tool calls (they come whole, at the end)."""
        now = self.message(at, model, 0.0, True)
        return now._replace(tool_calls=(), stop_reason=UNFINISHED, usage=None, duration=None)

    def message(self, at: datetime, model: str, seconds: float, interrupted: bool) -> Message:
        thinking = (Thinking("".join(self.thinking)),) if self.thinking else ()
        return Message.create(
            "assistant",
            at,
            text="".join(self.text),
            thinking=thinking,
            tool_calls=tuple(self.calls),
            model=model or None,
            stop_reason=self.finish,
            usage=self.usage,
            duration=round(seconds, 3),
            interrupted=interrupted,
        )


def run_turn(
    agent: Agent,
    backend: Backend,
    history: Sequence[Message],
    *,
    build_context: BuildContext,
    record: Record,
    clock: Callable[[], datetime],
    on_event: OnEvent | None = None,
    cancel: Cancel | None = None,
    max_rounds: int = DEFAULT_MAX_TOOL_ROUNDS,
    options: dict[str, Any] | None = None,
    draft: Record | None = None,
) -> TurnResult:
    """Answer the last message of ``history`` (already recorded), running tools as asked.

    After ``max_rounds`` rounds of tool calls the model is asked once more
    without tools, so the turn always ends in text. ``draft``: given the reply so far
    (``_Reply.unfinished``) at its first text and then when an event comes at least
    ``DRAFT_SECONDS`` after the last draft; its failures are its own to report.
    """
    result = TurnResult()
    rounds = 0
    while True:
        tools = agent.tool_specs() if agent.tools and rounds < max_rounds else None
        reply = _Reply()
        started = time.monotonic()
        began, drafted = clock(), 0.0
        context: list[ChatMessage] = []
        try:  # planning may ask the server to count tokens: Ctrl-C there is a cancel too
            context = build_context([*history, *result.messages])
            events = backend.stream(
                context,
                tools=tools,
                options={**agent.options, **(options or {})},
                cancel=cancel,
            )
            for event in events:
                reply.take(event)
                if on_event is not None:
                    on_event(event)
                now = time.monotonic()
                new = isinstance(event, (TextDelta, ThinkingDelta))
                if draft is not None and new and now - drafted >= DRAFT_SECONDS:
                    draft(reply.unfinished(began, backend.model))
                    drafted = now
        except (KeyboardInterrupt, Cancelled):
            result.interrupted = True
        except BackendError as exc:
            if exc.hint == PARTIAL_KEPT and not (reply.text or reply.thinking or reply.calls):
                exc.hint = NOTHING_CAME  # "kept" only when some of the reply was
            result.error = exc
        interrupted = result.interrupted or result.error is not None
        if interrupted and reply.finish is None:  # say in the file why the reply ended
            reply.finish = "error" if result.error is not None else "cancelled"
        if interrupted and reply.usage is None and context and (reply.text or reply.thinking):
            # cut before the server's count came: the prompt was read and text came back,
            # so the counts are estimated (and marked so) rather than left at nothing
            said = "".join(reply.text) + "".join(reply.thinking)
            reply.usage = Usage(estimate_prompt(context), estimate_tokens(said), True)
        message = reply.message(clock(), backend.model, time.monotonic() - started, interrupted)
        record(message)
        result.messages.append(message)
        if interrupted or not reply.calls:
            return result
        rounds += 1
        results, cancelled = _run_tools(agent, reply.calls)
        tool_message = Message.create("tool", clock(), tool_results=results)
        record(tool_message)
        result.messages.append(tool_message)
        if cancelled:
            result.interrupted = True
            return result


CANCELLED_TOOL = "cancelled by the person (Ctrl-C) before it finished"


def _run_tools(agent: Agent, calls: Sequence[ToolCall]) -> tuple[tuple[ToolResult, ...], bool]:
    """The result of each call in order, and whether Ctrl-C stopped them: the calls it
    stopped are each marked cancelled, so every call the model made has a result."""
    results: list[ToolResult] = []
    for call in calls:
        try:
            results.append(agent.run_tool(call))
        except KeyboardInterrupt:
            break
    cancelled = len(results) < len(calls)
    for call in calls[len(results) :]:
        results.append(ToolResult(call.id, call.name, CANCELLED_TOOL, is_error=True))
    return tuple(results), cancelled


def respond(
    backend: Backend,
    messages: Sequence[ChatMessage],
    *,
    clock: Callable[[], datetime],
    on_event: OnEvent | None = None,
    options: dict[str, Any] | None = None,
    cancel: Cancel | None = None,
) -> Message:
    """One streamed reply to ``messages`` without tools, as an unrecorded assistant message.

    Raises BackendError (or Cancelled) on failure; the caller decides what to keep.
    """
    reply = _Reply()
    started = time.monotonic()
    for event in backend.stream(messages, tools=None, options=options, cancel=cancel):
        reply.take(event)
        if on_event is not None:
            on_event(event)
    return reply.message(clock(), backend.model, time.monotonic() - started, False)


def complete(
    backend: Backend,
    prompt: str,
    *,
    system: str = "",
    options: dict[str, Any] | None = None,
    cancel: Cancel | None = None,
    timeout: float | None = None,
    history: Sequence[ChatMessage] = (),
) -> Message:
    """A one-off completion without tools (for summaries and titles), given up after
    ``timeout`` seconds when one is set (``Cancelled``: the bound is checked as the
    reply streams, between its pieces). ``history``: messages sent before ``prompt``
    (a conversation as the model saw it, its system prompt included), else none.

    Returns the reply (its ``stop_reason`` says whether its cap cut it: ``length``).
    Raises BackendError on failure, Cancelled past ``timeout``; nothing is recorded
    anywhere.
    """
    messages: list[ChatMessage] = [{"role": "system", "content": system}] if system else []
    messages += history
    messages.append({"role": "user", "content": prompt})
    cancel = Cancel() if cancel is None else cancel
    timer = threading.Timer(timeout, cancel.set) if timeout is not None else None
    if timer is not None:
        timer.daemon = True
        timer.start()
    try:
        reply = respond(backend, messages, clock=datetime.now, options=options, cancel=cancel)
    finally:
        if timer is not None:
            timer.cancel()
    return reply


def prime(backend: Backend, messages: Sequence[ChatMessage], cancel: Cancel) -> None:
    """Ask for one token after ``messages``, so that a server that caches one prompt
    holds them again (the next request that begins with them reads only what follows).
    Best effort: a failure or ``cancel`` ends it quietly."""
    with contextlib.suppress(BackendError, Cancelled):
        respond(backend, messages, clock=datetime.now, options={"max_tokens": 1}, cancel=cancel)
