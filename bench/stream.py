"""Streaming as the person sees it: how long after the server sends a reply's first
token its text is on the terminal, and the client's CPU per token at the start and at
the end of a long reply.

A scripted OpenAI-compatible server (in this process) streams replies, noting the
wall-clock time it writes each token; `chatloop` runs in a pseudo-terminal and the
bench notes when the first token's text appears on the screen. For CPU, a
4,000-token reply is sent at a steady pace and the chatloop process's CPU time
(/proc/PID/stat, in 10 ms ticks: hence windows of 1,200 tokens) is read at tokens
200 and 1,400 and at tokens 2,600 and 3,800.

    python -m bench.stream            # 7 replies for latency, one long reply for CPU
    python -m bench.stream --runs 3
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pexpect

from bench.timing import CHATLOOP, cpu_seconds

FIRST = "Zanzibar"  # the first token of every reply: what the bench waits to see
Marks = dict[int, Callable[[], None]]


class Script:
    """What the server sends next: ``tokens`` words, ``pace`` seconds apart; ``marks``
    are called as the token of that index is written; ``sent_first`` is noted."""

    def __init__(self) -> None:
        self.tokens = 5
        self.pace = 0.0
        self.marks: Marks = {}
        self.sent_first = 0.0


def serve(script: Script) -> tuple[ThreadingHTTPServer, str]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            return

        def setup(self) -> None:
            super().setup()  # as real servers (uvicorn, llama.cpp) do: no Nagle delay
            self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def do_GET(self) -> None:
            body = json.dumps({"data": [{"id": "bench"}]}).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            request = json.loads(self.rfile.read(int(self.headers["content-length"])))
            if not self.path.endswith("/chat/completions") or not request.get("stream"):
                self.send_response(404)
                self.send_header("content-length", "0")
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            summary = "progressive summary" in json.dumps(request["messages"][-1])
            count = 3 if summary else script.tokens
            for i in range(count):
                word = FIRST if i == 0 else f"w{i}"
                chunk = {"choices": [{"index": 0, "delta": {"content": word + " "}}]}
                self._chunk(f"data: {json.dumps(chunk)}\n\n")
                if i == 0 and not summary:
                    script.sent_first = time.time()
                if not summary and i in script.marks:
                    script.marks[i]()
                if script.pace:
                    time.sleep(script.pace)
            # the prompt counted as a tokenizer might: about a token for three characters
            # (more than chatloop's four-character estimate, so its scale is learned)
            prompt = sum(4 + len(str(m.get("content") or "")) // 3 for m in request["messages"])
            end = {
                "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": prompt, "completion_tokens": count},
            }
            self._chunk(f"data: {json.dumps(end)}\n\ndata: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

        def _chunk(self, text: str) -> None:
            data = text.encode()
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

    class Server(ThreadingHTTPServer):
        def handle_error(self, request: Any, client_address: Any) -> None:
            # a client that left before the end of its stream (chatloop's Ctrl-C, the
            # summary worker yielding) is what the bench does on purpose, not a fault
            if not isinstance(sys.exc_info()[1], ConnectionError):
                super().handle_error(request, client_address)

    server = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/v1"


def wait_prompt(child: pexpect.spawn) -> None:
    while child.expect_exact(["you>", "\x1b[6n"]) == 1:
        child.send("\x1b[1;1R")


def leave(child: pexpect.spawn) -> None:
    """Ctrl-D at the prompt, and wait for the end (the summary is written first). A
    Ctrl-D sent the moment ``you>`` shows can be lost while the prompt sets up its
    input; it is sent again after a few quiet seconds."""
    for _ in range(5):
        child.sendeof()
        if child.expect([pexpect.EOF, pexpect.TIMEOUT], timeout=10) == 0:
            return
        if "Generating session summary" in (child.before or ""):
            child.expect(pexpect.EOF, timeout=300)
            return
    raise RuntimeError("chatloop did not leave after Ctrl-D")


def measure(runs: int) -> tuple[list[float], float, float]:
    """``runs`` delays (ms) from a reply's first token sent to its text on the screen,
    and the client's CPU per token (µs) at tokens 200-1,400 and 2,600-3,800 of a
    4,000-token reply."""
    script = Script()
    server, url = serve(script)
    with tempfile.TemporaryDirectory() as home:
        env = {
            **os.environ,
            "CHATLOOP_HOME": home,
            "TERM": "xterm",
            "CHATLOOP_CONFIG": "",
            "CHATLOOP_CONTEXT_WINDOW": "100000",
        }
        child = pexpect.spawn(
            CHATLOOP,
            ["--base-url", url],
            env=env,
            encoding="utf-8",
            timeout=120,
            dimensions=(40, 120),
        )
        child.delaybeforesend = 0
        wait_prompt(child)
        delays = []
        for n in range(runs):
            script.tokens, script.pace = 20, 0.002
            child.sendline(f"message {n}")
            child.expect_exact(FIRST)
            delays.append((time.time() - script.sent_first) * 1000)
            wait_prompt(child)
        samples: dict[int, float] = {}
        marks = (200, 1400, 2600, 3800)

        def sample(i: int) -> Callable[[], None]:
            return lambda: samples.__setitem__(i, cpu_seconds(child.pid))

        script.marks = {i: sample(i) for i in marks}
        script.tokens, script.pace = 4000, 0.003
        child.sendline("a long one")
        wait_prompt(child)
        leave(child)
    server.shutdown()
    start = (samples[1400] - samples[200]) / 1200 * 1e6
    end = (samples[3800] - samples[2600]) / 1200 * 1e6
    return delays, start, end


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    delays, start, end = measure(args.runs)
    median = statistics.median(delays)
    print(
        f"first text on screen after the first token: median {median:.1f} ms "
        f"({', '.join(f'{d:.1f}' for d in delays)}); target <= 10 ms: "
        f"{'met' if median <= 10 else 'MISSED'}"
    )
    print(
        f"client CPU per token: {start:.0f} µs at tokens 200-1,400, {end:.0f} µs at "
        f"2,600-3,800 ({end / start if start else float('nan'):.2f}x; target: no growth)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
