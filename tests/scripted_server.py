"""A scripted OpenAI-compatible server on 127.0.0.1, for end-to-end tests of what a
real model cannot be made to do on cue (echo the summary template, for one).

It speaks the two endpoints chatloop uses: ``GET /v1/models`` and
``POST /v1/chat/completions`` (server-sent events when ``stream`` is true,
one JSON body otherwise). ``reply`` maps each request's JSON to the text sent back.
With ``tokenize`` it also has llama.cpp's ``POST /tokenize`` (a token a word).
A reply ``CALL name {arguments}`` is streamed as one tool call. ``seen`` records
every request as ``"GET /v1/models"`` (method and path), to count what is asked.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Reply = Callable[[dict[str, Any]], str]
CALL = "CALL "  # a reply that starts so is streamed as a tool call: "CALL name {json}"


@contextmanager
def scripted_server(
    reply: Reply,
    model: str | Callable[[], str] = "scripted",
    pace: float = 0.0,
    models: Callable[[], bool] | None = None,
    tokenize: Callable[[str], None] | None = None,
    seen: list[str] | None = None,
    template: tuple[int, int] | None = None,
) -> Iterator[str]:
    """Serve ``reply`` on a free port; yields the base URL (``http://127.0.0.1:N/v1``).
    ``model``: the one model ``/v1/models`` lists. ``pace``: seconds between two pieces
    of a streamed reply (a slow model); 0 sends the whole reply at once. ``models``:
    called before ``/v1/models`` answers (it may wait, to hold a check of the server);
    False makes that answer a 503. ``tokenize``: called with each text the server is
    asked to count, before it answers (``None``: the server has no tokenizer).
    ``model`` may be a function: the model served now (a server that changed model).
    ``seen``: each request is appended to it as it arrives. ``template``: the tokens a
    chat template adds (per message, per prompt): each usage then counts the request's
    words with them, as a real server would (``None``: every usage says 10)."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:  # keep test output clean
            return

        def _send(self, status: int, body: bytes, kind: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if seen is not None:
                seen.append(f"GET {self.path}")
            if models is not None and not models():
                self._send(503, b'{"error": "loading"}', "application/json")
                return
            served = model() if callable(model) else model
            listed = {"object": "list", "data": [{"id": served, "object": "model"}]}
            self._send(200, json.dumps(listed).encode(), "application/json")

        def do_POST(self) -> None:
            request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if seen is not None:
                seen.append(f"POST {self.path}")
            if self.path == "/tokenize" and tokenize is not None:
                tokenize(str(request.get("content", "")))
                counted = {"tokens": [1] * len(str(request.get("content", "")).split())}
                self._send(200, json.dumps(counted).encode(), "application/json")
                return
            if not self.path.endswith("/chat/completions"):  # no tokenizer, as on many servers
                self._send(404, b'{"detail": "Not Found"}', "application/json")
                return
            text = reply(request)
            prompt = 10
            if template is not None:
                per, fixed = template
                said = [str(m.get("content") or "") for m in request.get("messages") or ()]
                prompt = sum(len(t.split()) + per for t in said) + fixed
            usage = {"prompt_tokens": prompt, "completion_tokens": 5, "total_tokens": prompt + 5}
            if not request.get("stream"):
                body = {
                    "choices": [
                        {
                            "index": 0,
                            "finish_reason": "stop",
                            "message": {"role": "assistant", "content": text},
                        }
                    ],
                    "usage": usage,
                }
                self._send(200, json.dumps(body).encode(), "application/json")
                return
            if text.startswith(CALL):  # a tool call: CALL name {json arguments}
                name, _, arguments = text[len(CALL) :].partition(" ")
                call = {"index": 0, "id": f"call_{time.monotonic_ns()}", "type": "function"}
                call["function"] = {"name": name, "arguments": arguments}
                chunks: list[dict[str, Any]] = [
                    {"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]}
                ]
                finish = "tool_calls"
            else:
                chunks = [
                    {"choices": [{"index": 0, "delta": {"content": text[i : i + 16]}}]}
                    for i in range(0, len(text), 16)
                ]
                finish = "stop"
            chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
            chunks.append({"choices": [], "usage": usage})
            events = [f"data: {json.dumps(c)}\n\n" for c in chunks] + ["data: [DONE]\n\n"]
            if not pace:
                self._send(200, "".join(events).encode(), "text/event-stream")
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            for event in events:
                try:
                    self.wfile.write(event.encode())
                    self.wfile.flush()
                except OSError:  # the client went away (killed)
                    return
                time.sleep(pace)
            self.close_connection = True

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
