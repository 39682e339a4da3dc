"""What every backend speaks: chat messages in, a stream of events out.

Messages are OpenAI-shaped dicts with *string* content (some servers reject
list-of-parts content for system and assistant messages)::

    {"role": "system" | "user" | "assistant" | "tool", "content": str,
     "tool_calls": [{"id", "type": "function", "function": {"name", "arguments"}}],
     "tool_call_id": str}

``Backend.stream`` yields, in order: any number of ``TextDelta`` and
``ThinkingDelta``; then the complete ``ToolCall`` events; then one ``UsageEvent``
(from the server, or estimated and marked so); then one ``Finish``. It raises
``BackendError`` (or a subclass) for anything that goes wrong, after the
events it already yielded, and ``Cancelled`` (not a ``BackendError``: nothing
went wrong) when its ``Cancel`` is set. A stream the server ends without saying
why the model stopped (no finish reason) is never complete: it raises
``StreamCut`` instead of a ``Finish``, as a dropped connection raises
``StreamInterrupted``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from chatloop.config import DEFAULT_CONNECT_TIMEOUT, DEFAULT_READ_TIMEOUT
from chatloop.errors import BackendError, ChatloopError

ChatMessage = dict[str, Any]


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class ThinkingDelta:
    text: str


@dataclass(frozen=True)
class ToolCallEvent:
    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class UsageEvent:
    input: int
    output: int
    estimated: bool = False


@dataclass(frozen=True)
class Finish:
    reason: str


Event = TextDelta | ThinkingDelta | ToolCallEvent | UsageEvent | Finish


class ContextOverflow(BackendError):
    """The prompt does not fit the model's context window."""

    def __init__(self, message: str, hint: str = "", window: int | None = None) -> None:
        super().__init__(message, hint)
        self.window = window


class StreamInterrupted(BackendError):
    """The stream ended or broke before the model finished."""


class StreamCut(StreamInterrupted):
    """The server ended the stream in good order but without its finish reason: it cut
    the reply (llama-cpp-python ends a stream with ``[DONE]`` alone when another request
    arrives; an Ollama stream whose last object lacks ``done``). What came is a part,
    never the whole, and a stream that brought nothing is an empty reply, not a
    complete one.

    A caller should not ask again at once for what was cut: on a one-slot server the
    request that took its place is being answered, and a new one would cut it in turn."""


# The hint of a broken stream; the turn says NOTHING_CAME instead when no part of the
# reply had come (then there was nothing to keep).
PARTIAL_KEPT = "The partial reply was kept; send again to retry."
NOTHING_CAME = "No part of the reply had come, so there was nothing to keep; send again."


class Cancelled(ChatloopError):
    """A generation stopped on purpose: the person's Ctrl-C, a time bound, or the
    reader of the output leaving. Not a ``BackendError`` (the server did not fail),
    so ``except BackendError`` never takes a cancellation for a failure."""


@dataclass
class Cancel:
    """A flag a stream checks between chunks; ``set`` stops it promptly.

    Checking between chunks is not enough for a request the server has not begun to
    answer (a prompt still being read sends nothing for as long as that takes): a
    backend also registers, with ``on_set``, how to close the request's connection,
    and ``set`` runs that at once, from whatever thread sets it. The reading thread
    then sees its connection end and raises ``Cancelled``.

    ``when``: a condition that sets it, looked at on each ``is_set`` (so a caller that
    checks before each request never sends one once the condition holds, whatever
    else watches it: a summary worker's, the person's mark on the server)."""

    when: Callable[[], bool] | None = None
    _event: threading.Event = field(default_factory=threading.Event)
    _stops: list[Callable[[], None]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def set(self) -> None:
        with self._lock:
            self._event.set()
            stops, self._stops = self._stops, []
        for stop in stops:
            stop()

    @property
    def is_set(self) -> bool:
        if not self._event.is_set() and self.when is not None and self.when():
            self.set()
        return self._event.is_set()

    def on_set(self, stop: Callable[[], None]) -> Callable[[], None]:
        """Run ``stop`` when this is set (now, when it is already). Returns what
        withdraws it (a request that ended needs no closing). ``stop`` must not raise."""
        with self._lock:
            if not self._event.is_set():
                self._stops.append(stop)
                return lambda: self._withdraw(stop)
        stop()
        return lambda: None

    def _withdraw(self, stop: Callable[[], None]) -> None:
        with self._lock:
            if stop in self._stops:
                self._stops.remove(stop)


@dataclass(frozen=True)
class Timeouts:
    connect: float = DEFAULT_CONNECT_TIMEOUT
    read: float = DEFAULT_READ_TIMEOUT


class Backend(Protocol):
    """A model server (or an in-process model) that chats."""

    kind: str
    base_url: str
    model: str

    def stream(
        self,
        messages: Sequence[ChatMessage],
        *,
        tools: Sequence[dict[str, Any]] | None = None,
        options: dict[str, Any] | None = None,
        cancel: Cancel | None = None,
    ) -> Iterator[Event]: ...

    def models(self) -> list[str]: ...

    def context_window(self) -> int | None: ...

    def count_tokens(self, text: str) -> int | None:
        """``text``'s length in the model's own tokens (no special tokens added), or None
        when the server has no tokenizer to ask. Callers cache: one request per call."""
        ...

    def chat_overhead(self) -> tuple[int, int] | None:
        """What the server's chat template adds to a prompt, in tokens: (per message, once
        per prompt), measured with the server's own counts; None when it cannot say."""
        ...

    def close(self) -> None: ...


def estimate_tokens(text: str) -> int:
    """A rough token count (about four characters per token) for when the server is silent."""
    return max(1, (len(text) + 3) // 4) if text else 0


def estimate_prompt(messages: Sequence[ChatMessage]) -> int:
    total = 0
    for m in messages:
        total += 4 + estimate_tokens(str(m.get("content") or ""))
        for call in m.get("tool_calls") or ():
            total += estimate_tokens(str(call.get("function", {}).get("arguments", "")))
    return total
