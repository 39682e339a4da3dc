"""End to end: the real OpenAI-compatible backend against a real llama_cpp.server,
and one real round trip through the embedded model. The model is a tiny base
model, so these tests check the machinery (streaming, usage, cancel, errors),
never the wording."""

from __future__ import annotations

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
        events = list(backend.stream([{"role": "user", "content": PROMPTS[1]}], options=OPTIONS))
        assert isinstance(events[-1], Finish)
        assert any(isinstance(e, UsageEvent) and e.input > 0 for e in events)
        with pytest.raises(ContextOverflow):
            list(backend.stream([{"role": "user", "content": "word " * 2000}], options=OPTIONS))
    finally:
        backend.close()
