"""End to end: the real OpenAI-compatible backend against a real llama_cpp.server,
and one real round trip through the embedded model. The model is a tiny base
model, so these tests check the machinery (streaming, usage, cancel, errors),
never the wording."""

from __future__ import annotations

from pathlib import Path

import pytest

from chatloop.backends.base import (
    Cancel,
    Cancelled,
    ContextOverflow,
    Finish,
    TextDelta,
    UsageEvent,
)
from chatloop.backends.detect import BackendChoice, Candidate, make_backend
from chatloop.backends.openai_compat import OpenAICompatBackend
from tests.conftest import E2E_WINDOW, model_path

pytestmark = pytest.mark.e2e
PROMPTS = ["Once upon a time, in a small village,", "The capital of France is", "1, 2, 3, 4,"]
OPTIONS = {"max_tokens": 16, "temperature": 0.8, "seed": 7}


def first_talkative(backend: OpenAICompatBackend) -> list[object]:
    """The events of the first prompt that makes the base model say several tokens."""
    for prompt in PROMPTS:
        events = list(backend.stream([{"role": "user", "content": prompt}], options=OPTIONS))
        if sum(isinstance(e, TextDelta) for e in events) >= 2:
            return events
    pytest.fail("the model produced fewer than two text chunks for every prompt")


def test_text_arrives_incrementally_with_usage(llama_server: str) -> None:
    backend = OpenAICompatBackend(llama_server)
    events = first_talkative(backend)
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert len(deltas) >= 2 and all(d.text for d in deltas)
    usage = next(e for e in events if isinstance(e, UsageEvent))
    assert usage.input > 0 and usage.output > 0
    assert isinstance(events[-1], Finish)
    assert backend.model  # discovered from /v1/models


def test_cancellation_mid_stream(llama_server: str) -> None:
    backend = OpenAICompatBackend(llama_server)
    cancel = Cancel()
    seen = []
    with pytest.raises(Cancelled):
        for event in backend.stream(
            [{"role": "user", "content": PROMPTS[0]}],
            options={"max_tokens": 200, "temperature": 0.8, "seed": 1},
            cancel=cancel,
        ):
            seen.append(event)
            cancel.set()
    assert len(seen) == 1


def test_over_long_prompt_is_a_clear_context_overflow(llama_server: str) -> None:
    backend = OpenAICompatBackend(llama_server)
    huge = [{"role": "user", "content": "word " * (E2E_WINDOW * 2)}]
    with pytest.raises(ContextOverflow) as info:
        list(backend.stream(huge, options={"max_tokens": 8}))
    assert info.value.window == E2E_WINDOW
    assert "/compact" in info.value.hint


def test_detection_finds_a_listening_server(llama_server: str) -> None:
    candidates = (Candidate("llama.cpp server", "openai", llama_server, "/models"),)
    backend = make_backend(BackendChoice(), candidates=candidates)
    assert backend.kind == "openai" and backend.base_url == llama_server


def test_embedded_model_round_trip() -> None:
    from chatloop.backends.embedded import EmbeddedBackend

    backend = EmbeddedBackend(model_path(), window=512)
    try:
        assert backend.context_window() == 512
        assert backend._loaded is None  # loaded by the first call that needs it, not before
        events = list(backend.stream([{"role": "user", "content": PROMPTS[1]}], options=OPTIONS))
        assert isinstance(events[-1], Finish)
        assert any(isinstance(e, UsageEvent) and e.input > 0 for e in events)
        with pytest.raises(ContextOverflow):
            list(backend.stream([{"role": "user", "content": "word " * 2000}], options=OPTIONS))
    finally:
        backend.close()


def client_ports(server_port: int) -> set[int]:
    """Local ports of the established TCP connections to ``server_port`` on this machine
    (from /proc/net/tcp: what the kernel sees, not what httpx says)."""
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text(encoding="ascii").splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, remote, state = fields[1], fields[2], fields[3]
            if state == "01" and int(remote.rsplit(":", 1)[1], 16) == server_port:
                ports.add(int(local.rsplit(":", 1)[1], 16))
    return ports


def test_ten_turns_use_one_connection(llama_server: str) -> None:
    """The stream is read to its end after ``[DONE]``, so httpx keeps the connection for
    the next turn: ten turns against the keep-alive server, one TCP connection."""
    from urllib.parse import urlsplit

    port = urlsplit(llama_server).port
    assert port is not None
    others = client_ports(port)  # connections other tests' clients still keep open
    backend = OpenAICompatBackend(llama_server)
    backend.models()  # name the model first (its own request, on the same connection)
    seen: set[int] = set()
    for turn in range(10):
        events = list(
            backend.stream(
                [{"role": "user", "content": f"Count to {turn}:"}], options={"max_tokens": 4}
            )
        )
        assert isinstance(events[-1], Finish)
        seen |= client_ports(port) - others
    backend.close()
    assert len(seen) == 1, seen
