"""OpenAI-compatible servers: llama.cpp, llama-cpp-python, LM Studio, vLLM, Ollama's /v1.

``POST {base}/chat/completions`` with ``stream: true`` and
``stream_options.include_usage``; the reply is server-sent events of
``chat.completion.chunk`` objects ending in ``data: [DONE]``. Tool-call
deltas are assembled by index; usage comes from the final chunk when the
server sends one, otherwise it is estimated and marked so. A stream that ends
(``[DONE]`` or not) without any chunk's ``finish_reason`` was cut by the
server, never finished: llama-cpp-python ends one so when another request
arrives, and ``[DONE]`` alone is an empty reply. Both raise ``StreamCut``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
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
    answer_within,
    error_for_status,
    is_overflow,
    iter_sse,
    load_chunk,
    new_client,
    overflow,
    request_json,
)
from chatloop.backends.probes import TOKENIZERS, Measured, Probes, probe_key
from chatloop.config import DEFAULT_RETRIES
from chatloop.errors import BackendError

COUNT_CACHE = 4096  # distinct texts whose token counts are remembered
PROBE_SECONDS = 2.0  # a server that has a tokenizer counts two words at once
PROBE_ANSWER = 30.0  # the template probe: a one-token reply, whole, within this


class ChunkDecoder:
    """Turns OpenAI-style streaming chunks into events (shared with the embedded backend)."""

    def __init__(self) -> None:
        self._calls: dict[int, dict[str, str]] = {}
        self._text: list[str] = []
        self.usage: UsageEvent | None = None
        self.finish_reason: str | None = None
        self.began = False  # some of the reply came: text, thinking or a tool call

    def feed(self, chunk: dict[str, Any]) -> Iterator[Event]:
        usage = chunk.get("usage")
        if isinstance(usage, dict) and "prompt_tokens" in usage:
            self.usage = UsageEvent(
                int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
            )
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or choice.get("message") or {}
            thinking = delta.get("reasoning_content") or delta.get("reasoning")
            if thinking:
                self.began = True
                yield ThinkingDelta(str(thinking))
            content = delta.get("content")
            if content:
                self._text.append(str(content))
                self.began = True
                yield TextDelta(str(content))
            for position, call in enumerate(delta.get("tool_calls") or ()):
                self._add_call(call, position)
                self.began = True
            if choice.get("finish_reason"):
                self.finish_reason = str(choice["finish_reason"])

    def _add_call(self, call: dict[str, Any], position: int) -> None:
        index = int(call.get("index", position))
        entry = self._calls.setdefault(index, {"id": "", "name": "", "arguments": ""})
        if call.get("id"):
            entry["id"] = str(call["id"])
        function = call.get("function") or {}
        name = function.get("name")
        if name and name != entry["name"]:
            entry["name"] += str(name)
        arguments = function.get("arguments")
        if isinstance(arguments, dict):
            entry["arguments"] = json.dumps(arguments)
        elif arguments:
            entry["arguments"] += str(arguments)

    @property
    def text(self) -> str:
        """The reply's text so far."""
        return "".join(self._text)

    def finish(
        self, messages: Sequence[ChatMessage], counted: UsageEvent | None = None
    ) -> Iterator[Event]:
        """The closing events: tool calls, usage, finish. Usage is the server's; else
        ``counted`` (by its tokenizer); else estimated and marked so."""
        for index in sorted(self._calls):
            call = self._calls[index]
            yield ToolCallEvent(
                call["id"] or f"call_{index}", call["name"], call["arguments"] or "{}"
            )
        yield (
            self.usage
            or counted
            or UsageEvent(estimate_prompt(messages), estimate_tokens(self.text), estimated=True)
        )
        reason = self.finish_reason or ("tool_calls" if self._calls else "stop")
        yield Finish(reason)


class EventStream:
    """The OpenAI wire format for the stream driver (``driver.Decoder``): server-sent
    events, each a chunk (``ChunkDecoder``) until ``[DONE]``; a chunk that holds an
    error raises it."""

    def __init__(self, base_url: str) -> None:
        self.chunks = ChunkDecoder()
        self._base_url = base_url
        self._done = False

    @property
    def began(self) -> bool:
        return self.chunks.began

    @property
    def ended(self) -> bool:
        return self._done

    @property
    def whole(self) -> bool:
        return self.chunks.finish_reason is not None

    def items(self, lines: Iterator[str]) -> Iterator[str]:
        return iter_sse(lines)

    def feed(self, item: str) -> Iterator[Event]:
        if item.strip() == "[DONE]":
            self._done = True
            return
        chunk = load_chunk(item, self._base_url)
        if "error" in chunk:
            raise _chunk_error(chunk, self._base_url)
        yield from self.chunks.feed(chunk)


class OpenAICompatBackend:
    """A client for one OpenAI-compatible server. ``base_url`` ends in ``/v1``."""

    kind = "openai"

    def __init__(
        self,
        base_url: str,
        model: str = "",
        *,
        client: httpx.Client | None = None,
        timeouts: Timeouts | None = None,
        retries: int = DEFAULT_RETRIES,
        api_key: str | None = None,
        window: int | None = None,
        probes: Probes | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeouts = timeouts or Timeouts()
        self.client = client or new_client(self.timeouts, self.base_url)
        if api_key:
            self.client.headers["authorization"] = f"Bearer {api_key}"
        self.retries = retries
        self._window = window  # configured: never asked
        self.model = model
        # what the server was measured to be (the window, the tokenizer, the template's
        # overhead), for the key it was measured under: kept in ``probes`` (the home's
        # probes.json) when given, so the next process asks nothing of it
        self._probes = probes
        self._measured = Measured()
        self._measured_key: str | None = None
        self._served: tuple[str, ...] | None = None  # what GET /models listed, once asked
        self._gave_up = False  # a count failed or came too late: no more asking
        self._counts: dict[str, int] = {}  # texts counted already

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
        body: dict[str, Any] = {  # (options first: none replaces what makes the request)
            **(options or {}),
            "model": self.model or self._first_model(),
            "messages": list(messages),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if tools:
            body["tools"] = list(tools)
        events = EventStream(self.base_url)
        # (after [DONE] it may answer another: only a stream with neither is asked)
        empty = functools.partial(self._diagnose_empty_stream, body)
        yield from drive(self, "/chat/completions", body, events, cancel, empty)
        decoder = events.chunks
        counted = None if decoder.usage else self._counted_usage(messages, decoder.text)
        yield from decoder.finish(messages, counted)

    def _counted_usage(self, messages: Sequence[ChatMessage], text: str) -> UsageEvent | None:
        """Usage counted with the server's tokenizer, for servers that do not report it
        in a stream (llama-cpp-python): each text and the template's measured overhead."""
        overhead = self.chat_overhead()
        if overhead is None:
            return None
        per, fixed = overhead
        prompt = fixed
        for m in messages:
            parts = [str(m.get("content") or "")]
            parts += [
                str((c.get("function") or {}).get("arguments", ""))
                for c in m.get("tool_calls") or ()
            ]
            for part in parts:
                counted = self.count_tokens(part) if part else 0
                if counted is None:
                    return None
                prompt += counted
            prompt += per
        output = self.count_tokens(text) if text else 0
        return None if output is None else UsageEvent(prompt, output)

    def _diagnose_empty_stream(self, body: dict[str, Any]) -> None:
        """Some servers (llama-cpp-python) answer 200 and close the stream when the prompt
        is too long; the same request without streaming says why."""
        probe = {**body, "stream": False, "max_tokens": 1}
        probe.pop("stream_options", None)
        for _ in range(2):  # the server may have reset the pooled connection: one retry
            try:
                response = self.client.post(f"{self.base_url}/chat/completions", json=probe)
            except httpx.TransportError:
                continue
            if response.status_code >= 400:
                raise error_for_status(response, self.base_url)
            return

    def models(self) -> list[str]:
        data = self._get_json("/models")
        names = [str(m.get("id")) for m in data.get("data") or () if isinstance(m, dict)]
        self._served = tuple(names)
        return names

    def context_window(self) -> int | None:
        """Configured, else what the server says: llama.cpp ``/props``, vLLM ``max_model_len``,
        LM Studio ``max_context_length``; None when the server does not tell. What it
        said is kept (``probes``): asked once per server and model."""
        if self._window:
            return self._window
        kept = self._known().window
        if kept is not None:
            return kept or None
        root = self.base_url.removesuffix("/v1")
        answered = False
        for url in (f"{root}/props", f"{self.base_url}/models"):
            data = answer_within(self.client, "GET", url, self.timeouts.connect)
            answered = answered or isinstance(data, dict)
            window = _find_window(data, self.model)
            if window:
                self._keep(window=window)
                return window
        if answered:  # it answered and said nothing: it will not say next time either
            self._keep(window=0)
        return None

    def count_tokens(self, text: str) -> int | None:
        """The server's own count: llama.cpp and vLLM ``POST /tokenize``, llama-cpp-python
        ``POST /extras/tokenize/count``. Which one answers is found once per server and
        model (kept: ``probes``; none: every call returns None at once); a count that
        fails, or has not come whole within its deadline, ends the asking for this
        backend. A text is counted once (remembered in this process)."""
        known = self._counts.get(text)
        if known is not None:
            return known
        tokenizer = self._tokenizer()
        if not tokenizer:
            return None
        count = self._count(tokenizer, text)[0]
        if count is None:
            self._gave_up = True  # it failed or took too long: never asked again
            return None
        if len(self._counts) >= COUNT_CACHE:
            self._counts.clear()
        self._counts[text] = count = max(0, count - self._known().count_base)
        return count

    def chat_overhead(self) -> tuple[int, int] | None:
        """Measured once per server and model (kept: ``probes``), when the server has a
        tokenizer: two one-token requests (one message, then three) give the
        template's tokens per message and per prompt."""
        overhead = self._known().overhead
        if overhead is None:
            measured, certain = self._measure_overhead()
            overhead = measured or ()
            if certain:
                self._keep(overhead=overhead)
            else:  # not answered in time (a busy server): asked again by the next process
                self._measured = replace(self._measured, overhead=overhead)
        return (overhead[0], overhead[1]) if overhead else None

    def _measure_overhead(self) -> tuple[tuple[int, int] | None, bool]:
        """The overhead, and whether the answer is certain (the server answered: a
        probe that timed out says nothing about the next one)."""
        turns = [("user", "Hello there."), ("assistant", "Hi."), ("user", "How are you?")]
        counts = [self.count_tokens(text) for _, text in turns]
        if any(c is None for c in counts):
            return None, not self._gave_up  # no tokenizer (certain), or it failed
        sizes = []
        for n in (1, 3):
            body = {
                "model": self.model or self._first_model(),
                "max_tokens": 1,
                "messages": [{"role": r, "content": t} for r, t in turns[:n]],
            }
            statuses: list[int] = []
            answer = answer_within(
                self.client,
                "POST",
                f"{self.base_url}/chat/completions",
                PROBE_ANSWER,
                body,
                statuses,
            )
            usage = answer.get("usage") if isinstance(answer, dict) else None
            if not isinstance(usage, dict) or not isinstance(usage.get("prompt_tokens"), int):
                return None, answer is not None or (bool(statuses) and statuses[0] != 200)
            sizes.append(int(usage["prompt_tokens"]))
        one, three = sizes
        per = (three - one - (counts[1] or 0) - (counts[2] or 0)) // 2
        fixed = one - (counts[0] or 0) - per
        if not (0 <= per <= 64 and 0 <= fixed <= 256):
            return None, True
        return (per, fixed), True

    def _tokenizer(self) -> str:
        """The tokenizer's URL ("" for none, or once asking failed), found once per
        server and model."""
        if self._gave_up:
            return ""
        known = self._known()
        if known.tokenizer is None:
            path, base, certain = self._find_tokenizer()
            if certain:
                self._keep(tokenizer=path, count_base=base)
            else:  # no answer in time: none for this process, looked for by the next
                self._gave_up = True
                return ""
            known = self._known()
        if not known.tokenizer:
            return ""
        return self.base_url.removesuffix("/v1") + str(known.tokenizer)

    def _find_tokenizer(self) -> tuple[str, int, bool]:
        """The tokenizer's path ("" for none), the tokens it adds to every text, and
        whether that is certain (every endpoint answered, yes or no)."""
        root = self.base_url.removesuffix("/v1")
        certain = True
        for path in TOKENIZERS:
            empty, answered = self._count(root + path, "", PROBE_SECONDS)
            if empty is not None:
                two, answered = self._count(root + path, "a b", PROBE_SECONDS)
                if (two or 0) > empty:
                    return path, empty, True  # llama-cpp-python counts the BOS it adds
            certain = certain and answered
        return "", 0, certain

    def _known(self) -> Measured:
        """What is known of this server and model: measured by this process, else kept
        in ``probes`` (read once per key: the model may change, ``/model``)."""
        key = self._probe_key()
        if key != self._measured_key:
            self._measured_key = key
            probes = self._probes if self._kept() else None
            self._measured = probes.get(key) if probes is not None else Measured()
        return self._measured

    def _keep(self, **changes: Any) -> None:
        self._measured = replace(self._known(), **changes)
        probes = self._probes if self._kept() else None
        if probes is not None and self._measured_key is not None:
            probes.put(self._measured_key, self._measured)

    def _kept(self) -> bool:
        """Whether measurements are kept: a home was given, and the server said which
        models it serves (without that the key could not tell one model from another)."""
        return self._probes is not None and bool(self._served)

    def _probe_key(self) -> str:
        if self._served is None and self._probes is not None:
            # (asked by a process that did not connect, a summary worker: within a bound,
            # as a busy server may hold even this; unanswered, nothing is kept)
            data = answer_within(
                self.client, "GET", f"{self.base_url}/models", self.timeouts.connect
            )
            listed = data.get("data") if isinstance(data, dict) else None
            entries = listed if isinstance(listed, list) else []
            self._served = tuple(str(m.get("id")) for m in entries if isinstance(m, dict))
        return probe_key(self.kind, self.base_url, self.model, self._served or ())

    def _count(self, url: str, text: str, timeout: float | None = None) -> tuple[int | None, bool]:
        """The count of ``text`` at ``url``, and whether the server answered at all (a
        refusal is an answer; a timeout is not)."""
        body = {
            "content": text,
            "input": text,
            "prompt": text,
            "add_special": False,
            "add_special_tokens": False,
        }
        if self.model:
            body["model"] = self.model
        statuses: list[int] = []
        seconds = timeout or self.timeouts.connect + 5
        data = answer_within(self.client, "POST", url, seconds, body, statuses)
        answered = data is not None or (bool(statuses) and statuses[0] != 200)
        if not isinstance(data, dict):
            return None, answered
        if isinstance(data.get("count"), int):
            return int(data["count"]), True
        tokens = data.get("tokens")
        return (len(tokens) if isinstance(tokens, list) else None), True

    def _first_model(self) -> str:
        names = self.models()
        if not names:
            raise BackendError(
                f"The server at {self.base_url} lists no models",
                "Load a model in the server, or name one with --model.",
            )
        self.model = names[0]
        return self.model

    def _get_json(self, path: str) -> dict[str, Any]:
        return request_json(
            self.client,
            "GET",
            f"{self.base_url}{path}",
            base_url=self.base_url,
            timeouts=self.timeouts,
        )


def _chunk_error(chunk: dict[str, Any], base_url: str) -> BackendError:
    error = chunk.get("error")
    text = error.get("message", str(error)) if isinstance(error, dict) else str(error)
    if is_overflow(text):
        return overflow(text)
    return StreamInterrupted(f"The server at {base_url} reported an error mid-reply: {text}", "")


def _find_window(data: Any, model: str) -> int | None:
    """The context length in a /props or /models answer, for ``model`` if it is listed."""
    if not isinstance(data, dict):
        return None
    settings = data.get("default_generation_settings")
    if isinstance(settings, dict) and settings.get("n_ctx"):
        return int(settings["n_ctx"])
    entries: Iterable[Any] = data.get("data") or ()
    for entry in entries:
        if not isinstance(entry, dict) or (model and entry.get("id") not in (model, None)):
            continue
        found = entry.get("meta")
        meta: dict[str, Any] = found if isinstance(found, dict) else {}
        for key in ("max_model_len", "max_context_length", "context_length", "n_ctx"):
            value = entry.get(key) or meta.get(key)
            if isinstance(value, int) and value > 0:
                return value
    return None
