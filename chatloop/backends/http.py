"""HTTP plumbing shared by the server backends: retries, error translation, SSE.

Every httpx exception and every error status becomes a ``BackendError`` here,
with a one-line message and a hint. Only failures that happen *before* the
first byte of a reply are retried (connection refused, 429, 5xx), with
exponential backoff.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx

from chatloop.backends.base import (
    NOTHING_CAME,
    PARTIAL_KEPT,
    Cancel,
    Cancelled,
    ContextOverflow,
    StreamCut,
    StreamInterrupted,
    Timeouts,
)
from chatloop.errors import BackendError, ChatloopError, Unreachable

RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})
BACKOFF_SECONDS = 0.5
_OVERFLOW_RE = re.compile(
    r"context[_ ](length|window|size)|n_ctx|maximum context|too many tokens|prompt is too long"
    r"|exceeds? (the )?(available )?context",
    re.IGNORECASE,
)
_WINDOW_RE = re.compile(
    r"(?:maximum context length is|context window of|context length of|n_ctx\W{0,4})\s*(\d+)",
    re.IGNORECASE,
)


def new_client(timeouts: Timeouts, base_url: str = "", keep_alive: bool = True) -> httpx.Client:
    """A client with chatloop's timeouts: short to connect, patient between chunks.

    For a plain ``http://`` server no TLS is ever spoken, so the client does not
    load a certificate bundle (about 30 ms at start-up); ``https://`` verifies as
    usual. ``keep_alive`` False: every request has a connection of its own, so that
    a ``Cancel`` can close a request the server has not begun to answer
    (``open_stream``; a connection taken from the pool is known to the request only
    once its answer begins). The summary worker asks so: it must be able to stop a
    request still in prompt processing the moment the person needs the server."""
    plain = base_url.startswith("http://")
    return httpx.Client(
        timeout=httpx.Timeout(timeouts.read, connect=timeouts.connect),
        headers={"user-agent": "chatloop"},
        verify=not plain,
        limits=httpx.Limits(max_connections=100, max_keepalive_connections=20 if keep_alive else 0),
    )


def shut(stream: object) -> None:
    """Shut the socket under an httpcore network stream down, from any thread: a read
    blocked on it (in another thread) ends at once, which closing the socket alone does
    not do. Nothing happens for a stream without a socket (a test's transport)."""
    get = getattr(stream, "get_extra_info", None)
    raw = get("socket") if callable(get) else None
    if isinstance(raw, socket.socket):
        with contextlib.suppress(OSError):
            raw.shutdown(socket.SHUT_RDWR)


DRAIN_LIMIT = 1 << 16  # characters read after the end of a reply so the connection is reused
DRAIN_SECONDS = 0.25  # how long the end of the body may take to come after the last event


def finish_body(rest: Iterator[str], response: httpx.Response) -> None:
    """Read what follows the last event (``rest``: the same line iterator the events
    came from; normally just the end of the chunked body, already there) so httpx
    puts the connection back in its pool for the next turn.

    The reply is complete already, so this never waits long: the rest is read in a
    helper thread for at most DRAIN_SECONDS (httpx applies its read timeout per
    response, not per read, so it cannot be shortened here); a server that is slower
    than that, or keeps sending past DRAIN_LIMIT characters, has its connection shut
    down (which ends the helper's read at once) and closed instead of reused."""
    ended = threading.Event()

    def drain() -> None:
        read = 0
        try:
            for line in rest:
                read += len(line) + 1
                if read > DRAIN_LIMIT:
                    break
        except (httpx.HTTPError, httpx.StreamError, OSError):
            return  # the reply is whole already; httpx closes this connection, not reused
        finally:
            ended.set()

    threading.Thread(target=drain, name="chatloop-drain", daemon=True).start()
    if ended.wait(DRAIN_SECONDS):
        return
    shut(response.extensions.get("network_stream"))
    ended.wait(DRAIN_SECONDS)


def server_message(response: httpx.Response) -> str:
    """The error text a server put in its body, whatever its shape."""
    try:
        body = response.read().decode("utf-8", "replace")
    except httpx.HTTPError:
        return response.reason_phrase
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return " ".join(body.split())[:300] or response.reason_phrase
    if isinstance(data, dict):
        error = data.get("error", data.get("detail", data.get("message")))
        if isinstance(error, dict):
            error = error.get("message", error)
        if error is not None:
            return " ".join(str(error).split())[:300]
    return " ".join(body.split())[:300]


def error_for_status(response: httpx.Response, base_url: str) -> BackendError:
    text = server_message(response)
    status = response.status_code
    if is_overflow(text):
        return overflow(text)
    if status == 404:
        return BackendError(
            f"The server at {base_url} answered 404: {text}",
            "Check --base-url and --model (`chatloop doctor` lists what the server offers).",
        )
    if status in (401, 403):
        return BackendError(
            f"The server at {base_url} refused the request ({status}): {text}",
            "Set the API key the server expects (CHATLOOP_API_KEY).",
        )
    if status == 429:
        return BackendError(
            f"The server at {base_url} is busy (429): {text}", "Wait a moment and send again."
        )
    return BackendError(
        f"The server at {base_url} answered {status}: {text}",
        "Check the server's log, then send again (Up recalls your message).",
    )


def is_overflow(text: str) -> bool:
    """True when a server's error text says the prompt does not fit the context."""
    return bool(_OVERFLOW_RE.search(text))


def overflow(text: str) -> ContextOverflow:
    match = _WINDOW_RE.search(text)
    window = int(match.group(1)) if match else None
    return ContextOverflow(
        f"The conversation no longer fits the model's context window: {text}",
        "Run /compact to continue in a new session from a summary, or raise the server's "
        "context size.",
        window,
    )


def translate(exc: httpx.HTTPError, base_url: str, timeouts: Timeouts) -> BackendError:
    """Turn an httpx exception into a BackendError a person can act on."""
    if isinstance(exc, httpx.ConnectTimeout | httpx.ConnectError):
        return Unreachable(
            f"Cannot reach the model server at {base_url} ({type(exc).__name__})",
            "Is it running? Start it, or point chatloop elsewhere with --base-url "
            "(`chatloop doctor` checks the usual ports).",
        )
    if isinstance(exc, httpx.ReadTimeout):
        return StreamInterrupted(
            f"The model server at {base_url} sent nothing for {timeouts.read:.0f}s",
            "It may be overloaded or stuck; raise read_timeout in the config, or try again.",
        )
    if isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError):
        return StreamInterrupted(
            f"The connection to {base_url} broke mid-reply ({exc})",
            PARTIAL_KEPT,
        )
    return BackendError(f"Request to {base_url} failed: {exc}", "Check the server and try again.")


def failure(
    exc: httpx.HTTPError, base_url: str, timeouts: Timeouts, cancel: Cancel | None
) -> ChatloopError:
    """What an httpx failure of a streaming request means: ``Cancelled`` when its
    ``cancel`` is set (the connection was closed on purpose: ``open_stream``), else
    the server's failure (``translate``)."""
    if cancel is not None and cancel.is_set:
        return Cancelled("Cancelled", "")
    return translate(exc, base_url, timeouts)


def cut(base_url: str, started: bool) -> StreamCut:
    """The error of a stream the server ended without its finish reason (``started``:
    some of the reply had come): the reply was cut, or, when nothing came, it is empty;
    either way never a complete reply."""
    if started:
        return StreamCut(
            f"The server at {base_url} cut the reply: its stream ended before the model "
            "finished (no finish reason)",
            PARTIAL_KEPT,
        )
    return StreamCut(
        f"The server at {base_url} sent an empty reply: its stream ended with no text "
        "and no finish reason",
        NOTHING_CAME,
    )


class _Closing:
    """The connections of one request, each shut down (``shut``) when its ``cancel`` is
    set, until ``withdraw`` (the request is over)."""

    def __init__(self, cancel: Cancel | None) -> None:
        self.cancel = cancel
        self._undo: list[Callable[[], None]] = []

    def trace(self, event: str, info: dict[str, Any]) -> None:
        """httpx's ``trace`` extension: a new connection's stream, as it is made."""
        if event == "connection.connect_tcp.complete":
            self.add(info.get("return_value"))

    def add(self, stream: object) -> None:
        if self.cancel is not None and stream is not None:
            self._undo.append(self.cancel.on_set(functools.partial(shut, stream)))

    def withdraw(self) -> None:
        for undo in self._undo:
            undo()
        self._undo.clear()


@contextlib.contextmanager
def open_stream(
    client: httpx.Client,
    url: str,
    body: dict[str, Any],
    *,
    base_url: str,
    timeouts: Timeouts,
    retries: int,
    cancel: Cancel | None,
) -> Iterator[httpx.Response]:
    """POST ``body`` and yield a successful streaming response, retrying what is retryable.

    With ``cancel``, setting it closes the request's connection at once, from any
    thread, whether the server has begun to answer or not: a request that is still
    waiting for its first byte (a prompt being read, a request queued behind
    another) learns of a new connection through httpx's ``trace`` extension, and of
    one taken from the pool when its answer begins (a client that keeps no
    connection, ``new_client(keep_alive=False)``, has only new ones). The reading
    thread then raises ``Cancelled``, and the server, seeing the connection gone,
    drops the request."""
    attempt = 0
    while True:
        if cancel is not None and cancel.is_set:
            raise Cancelled("Cancelled", "")
        closing = _Closing(cancel)
        extensions = {"trace": closing.trace} if cancel is not None else None
        try:
            with client.stream("POST", url, json=body, extensions=extensions) as response:
                closing.add(response.extensions.get("network_stream"))
                if response.status_code < 400:
                    yield response
                    return
                error = error_for_status(response, base_url)
                retry = response.status_code in RETRYABLE_STATUS
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            if cancel is not None and cancel.is_set:
                raise Cancelled("Cancelled", "") from exc
            error, retry = translate(exc, base_url, timeouts), True
        except httpx.HTTPError as exc:
            raise failure(exc, base_url, timeouts, cancel) from exc
        finally:
            closing.withdraw()
        if not retry or attempt >= retries or isinstance(error, ContextOverflow):
            raise error
        attempt += 1
        time.sleep(BACKOFF_SECONDS * 2 ** (attempt - 1))


def request_json(
    client: httpx.Client,
    method: str,
    url: str,
    *,
    base_url: str,
    timeouts: Timeouts,
    body: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A small non-streaming request (model lists, model info) as a JSON object."""
    try:
        response = client.request(method, url, json=body)
    except httpx.HTTPError as exc:
        raise translate(exc, base_url, timeouts) from exc
    if response.status_code >= 400:
        raise error_for_status(response, base_url)
    try:
        data = response.json()
    except ValueError as exc:
        raise BackendError(
            f"{url} did not answer with JSON: {server_message(response)}",
            "Is this the right kind of server? Check --base-url and --backend.",
        ) from exc
    return data if isinstance(data, dict) else {}


ANSWER_LIMIT = 1 << 20  # bytes of a bookkeeping answer (a token count, a probe's usage)


def answer_within(
    client: httpx.Client,
    method: str,
    url: str,
    seconds: float,
    body: dict[str, Any] | None = None,
    statuses: list[int] | None = None,
) -> Any:
    """The JSON of a small bookkeeping request (a token count, a template probe, the
    window), or None when it fails, answers an error status or no JSON, is larger than
    ANSWER_LIMIT, or has not come whole within ``seconds``. The bound is overall, not
    between pieces: a server that trickles an answer that never ends is given up on
    (a read that blocks still ends at ``seconds``), so bookkeeping never holds a
    message back. ``statuses`` gets the answer's status when one came: a refusal
    (404) is then told from a server that did not answer in time."""
    deadline = time.monotonic() + seconds
    try:
        with client.stream(method, url, json=body, timeout=seconds) as response:
            if statuses is not None:
                statuses.append(response.status_code)
            if response.status_code != 200:
                return None
            data = bytearray()
            for piece in response.iter_bytes():
                data += piece
                if len(data) > ANSWER_LIMIT or time.monotonic() > deadline:
                    return None
        return json.loads(data)
    except (httpx.HTTPError, ValueError):
        return None


def iter_sse(lines: Iterator[str]) -> Iterator[str]:
    """The data payloads of a server-sent-event stream (comments and other fields skipped)."""
    data: list[str] = []
    for line in lines:
        if not line:
            if data:
                yield "\n".join(data)
                data = []
            continue
        if line.startswith(":"):
            continue  # keep-alive comment
        name, _, value = line.partition(":")
        if name == "data":
            data.append(value[1:] if value.startswith(" ") else value)
    if data:
        yield "\n".join(data)


def load_chunk(payload: str, base_url: str) -> dict[str, Any]:
    try:
        chunk = json.loads(payload)
    except (ValueError, RecursionError) as exc:
        raise StreamInterrupted(
            f"The server at {base_url} sent a malformed chunk: {payload[:80]!r}",
            "This server may not be OpenAI-compatible; try --backend ollama or check its version.",
        ) from exc
    if not isinstance(chunk, dict):
        raise StreamInterrupted(f"The server at {base_url} sent an unexpected chunk", "")
    return chunk
