"""A scripted in-process backend for the chain tests (the issue asks for one).

It speaks the Backend protocol: each ``stream`` call takes the next scripted
reply (text, or an exception to raise), records what was sent, and reports
usage as the estimate of what was sent, so token accounting can be checked.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from chatloop.backends.base import (
    Cancel,
    Cancelled,
    ChatMessage,
    Event,
    Finish,
    TextDelta,
    UsageEvent,
    estimate_prompt,
    estimate_tokens,
)

Reply = str | BaseException | Callable[[Sequence[ChatMessage]], str]


class Capped(str):
    """A scripted reply that its ``max_tokens`` cut short: its stream finishes with
    ``length`` instead of ``stop``."""


class FakeBackend:
    kind = "fake"
    base_url = "fake://local"

    def __init__(
        self,
        *replies: Reply,
        default: Reply = "Noted.",
        window: int | None = None,
        delay: float = 0.0,
    ) -> None:
        self.model = "fake-model"
        self.replies = list(replies)
        self.default = default
        self.window = window
        self.delay = delay
        self.calls: list[dict[str, Any]] = []

    def stream(
        self,
        messages: Sequence[ChatMessage],
        *,
        tools: Sequence[dict[str, Any]] | None = None,
        options: dict[str, Any] | None = None,
        cancel: Cancel | None = None,
    ) -> Iterator[Event]:
        self.calls.append({"messages": list(messages), "tools": tools, "options": options or {}})
        reply = self.replies.pop(0) if self.replies else self.default
        if isinstance(reply, BaseException):
            raise reply
        text = reply(messages) if callable(reply) else reply
        for word in text.split(" "):
            if self.delay:
                time.sleep(self.delay)
            if cancel is not None and cancel.is_set:
                raise Cancelled("cancelled")
            yield TextDelta(word + " ")
        yield UsageEvent(estimate_prompt(messages), estimate_tokens(text))
        yield Finish("length" if isinstance(reply, Capped) else "stop")

    def models(self) -> list[str]:
        return [self.model]

    def context_window(self) -> int | None:
        return self.window

    def count_tokens(self, text: str) -> int | None:
        return None

    def chat_overhead(self) -> tuple[int, int] | None:
        return None

    def close(self) -> None:
        pass

    def prompts(self) -> list[str]:
        """The last user message of every call, in order."""
        return [str(call["messages"][-1]["content"]) for call in self.calls]


STRUCTURED = """**Background Context:** Initial session.

**Current Session Summary:**

**Topics Discussed:**
- Watering schedule for basil in pots/basil.md

**Decisions Made:**
- Water every 2 days, 250 ml each

**Pending:**
- Check drainage"""
