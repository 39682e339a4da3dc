"""Model backends: OpenAI-compatible servers, Ollama's native API, an embedded model.

Import the concrete backends from their modules; this package only names the
shared protocol so that importing it stays cheap.
"""

from __future__ import annotations

from chatloop.backends.base import (
    Backend,
    Cancel,
    Cancelled,
    ChatMessage,
    ContextOverflow,
    Event,
    Finish,
    StreamCut,
    StreamInterrupted,
    TextDelta,
    ThinkingDelta,
    Timeouts,
    ToolCallEvent,
    UsageEvent,
)

__all__ = [
    "Backend",
    "Cancel",
    "Cancelled",
    "ChatMessage",
    "ContextOverflow",
    "Event",
    "Finish",
    "StreamCut",
    "StreamInterrupted",
    "TextDelta",
    "ThinkingDelta",
    "Timeouts",
    "ToolCallEvent",
    "UsageEvent",
]
