"""bench/person.py's scripted one-slot server that queues, as Ollama does: one chat
request at a time, in arrival order; a queued request whose client closed its
connection is dropped, and so is a running one. A summary request streams the
summary over ``summary_seconds``; anything else is answered at once; the model list
answers at once, busy or not. Its ``Log`` says what it did, in order."""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

QUESTION = "Tell me about Pemba."
FIRST = "Mangroves"  # the scripted reply's first token: what the screen is watched for
REPLY = f"{FIRST} line the channel between Pemba and the mainland, and cloves grow inland."
SUMMARY = """**Background Context:** Initial session.

**Current Session Summary:**
A question about Pemba and its mangroves, answered in one line.

**Topics Discussed:**
- Pemba
- mangroves and cloves

**Decisions Made:**
- None.

**Pending:**
- Nothing left open; kittiwake."""
SUMMARY_LINES = [line for line in SUMMARY.splitlines() if line.strip()]


@dataclass
class Log:
    """What the scripted server did, in order: ``(monotonic time, event, kind)``, event
    ``queued``, ``started`` (it has the slot), ``served`` or ``closed`` (its client went
    first), kind ``summary``, ``stream`` (a person's reply) or ``call`` (anything else
    posted: a probe, a title)."""

    events: list[tuple[float, str, str]] = field(default_factory=list)
    changed: threading.Condition = field(default_factory=threading.Condition)

    def note(self, event: str, kind: str) -> None:
        with self.changed:
            self.events.append((time.monotonic(), event, kind))
            self.changed.notify_all()

    def count(self, event: str, kind: str | None = None) -> int:
        with self.changed:
            return sum(1 for _, e, k in self.events if e == event and kind in (None, k))

    def wait_for(self, check: Callable[[], bool], seconds: float) -> bool:
        with self.changed:
            return self.changed.wait_for(check, seconds)


def _gone(connection: socket.socket) -> bool:
    """True when the client closed its side (its request was read whole: anything
    readable now is the connection's end)."""
    readable, _, _ = select.select([connection], [], [], 0)
    if not readable:
        return False
    try:
        return connection.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


@contextmanager
def queueing_server(summary_seconds: float) -> Iterator[tuple[str, Log]]:
    """The scripted one-slot server (see the module doc); yields its base URL and log."""
    log = Log()
    slot = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            return

        def setup(self) -> None:
            super().setup()
            self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def _send(self, status: int, body: bytes, kind: str) -> None:
            self.send_response(status)
            self.send_header("content-type", kind)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # the model list: answered at once, busy or not
            listed = {"object": "list", "data": [{"id": "bench", "object": "model"}]}
            self._send(200, json.dumps(listed).encode(), "application/json")

        def do_POST(self) -> None:
            request = json.loads(self.rfile.read(int(self.headers["content-length"])))
            if not self.path.endswith("/chat/completions"):  # no tokenizer, as Ollama's /v1
                self._send(404, b'{"detail": "Not Found"}', "application/json")
                return
            summary = "progressive summary" in json.dumps(request["messages"][-1])
            summary = summary and request.get("max_tokens") != 1  # (a piece read ahead: short)
            kind = "summary" if summary else "stream" if request.get("stream") else "call"
            log.note("queued", kind)
            while not slot.acquire(timeout=0.01):
                if _gone(self.connection):
                    log.note("closed", kind)
                    self.close_connection = True
                    return
            try:
                log.note("started", kind)
                if self._answer(request, summary):
                    log.note("served", kind)
                else:
                    log.note("closed", kind)
                    self.close_connection = True
            finally:
                slot.release()

        def _answer(self, request: dict[str, object], summary: bool) -> bool:
            """Send the reply; False when the client went first (generation stopped)."""
            text = SUMMARY if summary else REPLY
            if not request.get("stream"):
                body = {
                    "choices": [{"index": 0, "message": {"content": text}}],
                    "usage": {"prompt_tokens": 40, "completion_tokens": 12},
                }
                try:
                    self._send(200, json.dumps(body).encode(), "application/json")
                except OSError:
                    return False
                return True
            pieces = [text[i : i + 12] for i in range(0, len(text), 12)] if summary else [text]
            pace = summary_seconds / len(pieces) if summary else 0.0
            try:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                for piece in pieces:
                    if pace:
                        deadline = time.monotonic() + pace
                        while (left := deadline - time.monotonic()) > 0:
                            if _gone(self.connection):
                                return False
                            time.sleep(min(left, 0.02))
                    if _gone(self.connection):
                        return False
                    delta = {"choices": [{"index": 0, "delta": {"content": piece}}]}
                    self._chunk(f"data: {json.dumps(delta)}\n\n")
                end = {
                    "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 40, "completion_tokens": len(pieces) * 3},
                }
                self._chunk(f"data: {json.dumps(end)}\n\ndata: [DONE]\n\n")
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except OSError:
                return False
            return True

        def _chunk(self, text: str) -> None:
            data = text.encode()
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

    class Server(ThreadingHTTPServer):
        daemon_threads = True

        def handle_error(self, request: object, client_address: object) -> None:
            return  # a client that went away: the log says what mattered

    server = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", log
    finally:
        server.shutdown()
        server.server_close()
