"""Ollama's native API: ``/api/chat`` (NDJSON stream), ``/api/tags``, ``/api/show``.

Each line of the stream is a JSON object with a ``message`` delta
(``content``, ``thinking``, ``tool_calls`` with arguments as objects); the
last has ``done: true``, ``done_reason`` and the token counts
``prompt_eval_count`` / ``eval_count``. A stream that ends without that object
was cut by the server, never finished: it raises ``StreamCut``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

import httpx

from chatloop.backends.base import (
    Cancel,
    ChatMessage,
    Event,
    Finish,
    StreamInterrupted,
    TextDelta,
    ThinkingDelta,
    Timeouts,
    ToolCallEvent,
    UsageEvent,
    estimate_prompt,
    estimate_tokens,
)
from chatloop.backends.driver import drive
from chatloop.backends.http import (
    is_overflow,
    new_client,
    overflow,
    request_json,
)
from chatloop.config import DEFAULT_RETRIES
from chatloop.errors import BackendError

# OpenAI-style option names and their Ollama equivalents.
_OPTION_NAMES = {
    "max_tokens": "num_predict",
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "seed": "seed",
    "stop": "stop",
    "num_ctx": "num_ctx",
    "min_p": "min_p",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "repeat_penalty": "repeat_penalty",
}


def to_ollama(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """OpenAI-shaped messages in Ollama's shape (tool arguments as objects)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        item: dict[str, Any] = {"role": m["role"], "content": m.get("content") or ""}
        calls = []
        for call in m.get("tool_calls") or ():
            function = call.get("function", {})
            try:
                arguments = json.loads(function.get("arguments") or "{}")
            except ValueError:
                arguments = {}
            calls.append({"function": {"name": function.get("name", ""), "arguments": arguments}})
        if calls:
            item["tool_calls"] = calls
        if m.get("role") == "tool" and m.get("name"):
            item["tool_name"] = m["name"]
        out.append(item)
    return out


class JsonLines:
    """Ollama's wire format for the stream driver (``driver.Decoder``): one JSON object
    a line, the last marked ``done`` (kept: ``final``, with the counts); a line that
    holds an error raises it."""

    def __init__(self, base_url: str) -> None:
        self._base_url = base_url
        self._text: list[str] = []
        self.calls: list[ToolCallEvent] = []
        self.final: dict[str, Any] | None = None
        self._began = False

    @property
    def began(self) -> bool:
        return self._began

    @property
    def ended(self) -> bool:
        return self.final is not None

    @property
    def whole(self) -> bool:
        return self.final is not None

    @property
    def text(self) -> str:
        """The reply's text so far."""
        return "".join(self._text)

    def items(self, lines: Iterator[str]) -> Iterator[str]:
        return lines

    def feed(self, item: str) -> Iterator[Event]:
        if not item.strip():
            return
        chunk = _load(item, self._base_url)
        if "error" in chunk:
            message = str(chunk["error"])
            if is_overflow(message):
                raise overflow(message)
            raise StreamInterrupted(f"Ollama reported an error: {message}", "")
        delta = chunk.get("message") or {}
        self._began = self._began or any(
            delta.get(k) for k in ("thinking", "content", "tool_calls")
        )
        if delta.get("thinking"):
            yield ThinkingDelta(str(delta["thinking"]))
        if delta.get("content"):
            self._text.append(str(delta["content"]))
            yield TextDelta(str(delta["content"]))
        for call in delta.get("tool_calls") or ():
            function = call.get("function", {})
            arguments = function.get("arguments", {})
            self.calls.append(
                ToolCallEvent(
                    str(call.get("id") or f"call_{len(self.calls)}"),
                    str(function.get("name", "")),
                    arguments if isinstance(arguments, str) else json.dumps(arguments),
                )
            )
        if chunk.get("done"):
            self.final = chunk


class OllamaBackend:
    """A client for Ollama's native API. ``base_url`` is the server root."""

    kind = "ollama"

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:11434",
        model: str = "",
        *,
        client: httpx.Client | None = None,
        timeouts: Timeouts | None = None,
        retries: int = DEFAULT_RETRIES,
        window: int | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeouts = timeouts or Timeouts()
        self.client = client or new_client(self.timeouts, self.base_url)
        self.retries = retries
        self.model = model
        self._window = window

    def close(self) -> None:
        self.client.close()

    def stream(
        self,
        messages: Sequence[ChatMessage],
        *,
        tools: Sequence[dict[str, Any]] | None = None,
        options: dict[str, Any] | None = None,
        cancel: Cancel | None = None,
    ) -> Iterator[Event]:
        body: dict[str, Any] = {
            "model": self.model or self._first_model(),
            "messages": to_ollama(messages),
            "stream": True,
        }
        ollama_options = {
            _OPTION_NAMES[k]: v for k, v in (options or {}).items() if k in _OPTION_NAMES
        }
        if self._window and "num_ctx" not in ollama_options:
            ollama_options["num_ctx"] = self._window
        if ollama_options:
            body["options"] = ollama_options
        if tools:
            body["tools"] = list(tools)
        lines = JsonLines(self.base_url)
        yield from drive(self, "/api/chat", body, lines, cancel)
        final = lines.final or {}
        yield from lines.calls
        if "prompt_eval_count" in final or "eval_count" in final:
            yield UsageEvent(
                int(final.get("prompt_eval_count", 0)), int(final.get("eval_count", 0))
            )
        else:
            yield UsageEvent(estimate_prompt(messages), estimate_tokens(lines.text), True)
        yield Finish(str(final.get("done_reason") or ("tool_calls" if lines.calls else "stop")))

    def models(self) -> list[str]:
        data = self._request("GET", "/api/tags")
        return [str(m.get("name")) for m in data.get("models") or () if isinstance(m, dict)]

    def context_window(self) -> int | None:
        """Configured, else ``num_ctx`` from the model's parameters, else its trained length."""
        if self._window:
            return self._window
        try:
            data = self._request("POST", "/api/show", {"model": self.model or self._first_model()})
        except BackendError:
            return None
        for line in str(data.get("parameters") or "").splitlines():
            name, _, value = line.partition(" ")
            if name == "num_ctx" and value.strip().isdigit():
                return int(value.strip())
        info = data.get("model_info") or {}
        for key, value in info.items():
            if key.endswith(".context_length") and isinstance(value, int):
                return value
        return None

    def count_tokens(self, text: str) -> int | None:
        """Ollama has no tokenizer endpoint: None (its replies report prompt_eval_count,
        which corrects the estimate)."""
        return None

    def chat_overhead(self) -> tuple[int, int] | None:
        return None

    def _first_model(self) -> str:
        names = self.models()
        if not names:
            raise BackendError(
                f"Ollama at {self.base_url} has no models",
                "Pull one first, e.g. `ollama pull llama3.2`, or name one with --model.",
            )
        self.model = names[0]
        return self.model

    def _request(
        self, method: str, path: str, body: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        url = f"{self.base_url}{path}"
        return request_json(
            self.client, method, url, body=body, base_url=self.base_url, timeouts=self.timeouts
        )


def _load(line: str, base_url: str) -> dict[str, Any]:
    try:
        data = json.loads(line)
    except (ValueError, RecursionError) as exc:
        raise StreamInterrupted(
            f"Ollama at {base_url} sent a malformed line: {line[:80]!r}",
            "Is this an Ollama server? Try --backend openai for OpenAI-compatible servers.",
        ) from exc
    return data if isinstance(data, dict) else {}
