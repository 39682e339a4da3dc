"""What is sent to the model on each call, built from the transcript.

The transcript keeps everything; this module decides what the model sees:
the agent's system prompt and the session's messages as OpenAI-shaped
chat messages (summaries are for people and for restoration prompts, so they
are not sent as messages).
"""

from __future__ import annotations

from collections.abc import Iterable

from chatloop.backends.base import ChatMessage
from chatloop.transcript import Message


def to_wire(system_prompt: str, messages: Iterable[Message]) -> list[ChatMessage]:
    """Chat messages for ``messages``, after the system prompt (if any)."""
    out: list[ChatMessage] = [{"role": "system", "content": system_prompt}] if system_prompt else []
    for m in messages:
        if m.role == "user":
            out.append({"role": "user", "content": m.text})
        elif m.role == "assistant":
            item: ChatMessage = {"role": "assistant", "content": m.text}
            if m.tool_calls:
                item["tool_calls"] = [
                    {"id": c.id, "type": "function",
                     "function": {"name": c.name, "arguments": c.arguments}}
                    for c in m.tool_calls
                ]  # fmt: skip
            out.append(item)
        elif m.role == "tool":
            out.extend(
                {"role": "tool", "tool_call_id": r.call_id, "name": r.name, "content": r.content}
                for r in m.tool_results
            )
    return out
