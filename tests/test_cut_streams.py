"""A stream the server ends without its finish reason is cut, never whole (issue 44,
item 5; promise 27 of RELIABILITY.md).

llama-cpp-python ends a stream it gives up for another request with ``data: [DONE]``
and no ``finish_reason``. These drive the real OpenAI-compatible (and Ollama) backend
over ``httpx.MockTransport``, with bodies scripted request by request, through the
chat reply, the summary, the title, the acknowledgment and the prepared summary.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import httpx
import pytest

from chatloop.backends.base import (
    NOTHING_CAME,
    PARTIAL_KEPT,
    Cancel,
    ChatMessage,
    Event,
    StreamCut,
    TextDelta,
)
from chatloop.backends.ollama import OllamaBackend
from chatloop.backends.openai_compat import OpenAICompatBackend
from chatloop.chat import chain, prompts, titles
from chatloop.chat.agent import load_agent
from chatloop.chat.preparation import Preparation
from chatloop.chat.turn import run_turn
from chatloop.format import Message
from chatloop.store.store import Store
from tests.conftest import E2E_WINDOW, T0, Clock, exchange, new_meta
from tests.fakes import STRUCTURED
from tests.hosts import AGENTS, chat, files

CUT_SUMMARY = "**Background Context:** Initial session.\n\n**Current Session Summary:**\nWe ta"
WAIT = 30.0  # seconds a test waits for a background thread's end (an event, not a sleep)


def _chunk(text: str) -> str:
    delta = {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}
    return f"data: {json.dumps(delta)}\n\n"


def whole(text: str) -> bytes:
    """A complete stream: the text, a finish reason, usage, ``[DONE]``."""
    end = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    usage = {"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 5}}
    tail = f"data: {json.dumps(end)}\n\ndata: {json.dumps(usage)}\n\ndata: [DONE]\n\n"
    return ("".join(_chunk(text[i : i + 8]) for i in range(0, len(text), 8)) + tail).encode()


def cut(text: str = "") -> bytes:
    """What llama-cpp-python sends when another request arrives: the text so far, then
    ``[DONE]`` with no finish reason (``cut()``: ``[DONE]`` alone)."""
    return ("".join(_chunk(text[i : i + 8]) for i in range(0, len(text), 8))).encode() + (
        b"data: [DONE]\n\n"
    )


class Served:
    """An OpenAI-compatible server over MockTransport: each streamed chat request takes
    the next body (then ``default``); every chat request is recorded, a non-streamed
    one (a probe) too. No tokenizer, no window (404), as on many servers."""

    def __init__(self, *bodies: bytes, default: bytes = b"") -> None:
        self.bodies = list(bodies)
        self.default = default or whole(STRUCTURED)
        self.asked: list[dict[str, object]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if not request.url.path.endswith("/chat/completions"):
            return httpx.Response(404, json={"detail": "Not Found"})
        asked = json.loads(request.content)
        self.asked.append(asked)
        if not asked.get("stream"):
            return httpx.Response(200, json={"choices": [], "usage": {}})
        body = self.bodies.pop(0) if self.bodies else self.default
        return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})

    def backend(self) -> OpenAICompatBackend:
        client = httpx.Client(transport=httpx.MockTransport(self))
        return OpenAICompatBackend("http://test/v1", "m", client=client)

    @property
    def streamed(self) -> int:
        return sum(1 for a in self.asked if a.get("stream"))


def talk(n: int) -> list[Message]:
    return [m for i in range(1, n + 1) for m in exchange(i)]


# ---------------------------------------------------------------- the backends


def test_done_without_a_finish_reason_is_a_cut_after_what_came() -> None:
    served = Served(cut("Basil wants six hours"))
    seen = []
    with pytest.raises(StreamCut) as info:
        for event in served.backend().stream([{"role": "user", "content": "basil?"}]):
            seen.append(event)
    assert "".join(e.text for e in seen if isinstance(e, TextDelta)) == "Basil wants six hours"
    assert "cut the reply" in info.value.message and info.value.hint == PARTIAL_KEPT


def test_done_alone_is_an_empty_reply_and_the_busy_server_is_not_probed() -> None:
    served = Served(cut())
    with pytest.raises(StreamCut) as info:
        list(served.backend().stream([{"role": "user", "content": "basil?"}]))
    assert "empty reply" in info.value.message and info.value.hint == NOTHING_CAME
    assert len(served.asked) == 1  # no second request to cut what took the server


def _ollama(lines: list[dict[str, object]]) -> OllamaBackend:
    body = "".join(json.dumps(line) + "\n" for line in lines).encode()

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body)

    return OllamaBackend(
        "http://test", "m", client=httpx.Client(transport=httpx.MockTransport(handler))
    )


def test_an_ollama_stream_without_done_is_a_cut() -> None:
    part = {"message": {"role": "assistant", "content": "Basil wants"}, "done": False}
    with pytest.raises(StreamCut, match="cut the reply"):
        list(_ollama([part]).stream([{"role": "user", "content": "basil?"}]))
    with pytest.raises(StreamCut, match="empty reply"):
        list(_ollama([]).stream([{"role": "user", "content": "basil?"}]))
    whole_reply = [part, {"message": {"content": ""}, "done": True, "done_reason": "stop"}]
    events = list(_ollama(whole_reply).stream([{"role": "user", "content": "basil?"}]))
    assert events[-1].reason == "stop"  # type: ignore[union-attr]


# ---------------------------------------------------------------- the chat


def test_a_reply_the_server_cuts_is_saved_interrupted_and_the_person_told(store: Store) -> None:
    served = Served(cut("Basil wants six hours of sun"), whole("Water at the roots."))
    session, _host = chat(store, served.backend())
    with pytest.raises(StreamCut) as info:
        session.send("How much sun does basil want?")
    assert "cut the reply" in info.value.message and "\n" not in info.value.message
    session.send("And water?")
    session.close()
    (found,) = files(store)
    cut_reply = found.messages[1]
    assert (cut_reply.role, cut_reply.text) == ("assistant", "Basil wants six hours of sun")
    assert cut_reply.interrupted and cut_reply.stop_reason == "error"
    assert not found.messages[3].interrupted  # the next reply came whole


def test_done_alone_is_said_to_be_empty_and_marked_so_in_the_file(store: Store) -> None:
    served = Served(cut())
    session, _host = chat(store, served.backend())
    with pytest.raises(StreamCut, match="empty reply"):
        session.send("How much sun does basil want?")
    session.close()
    (found,) = files(store)
    _user, mark, _summary = found.messages
    assert (mark.role, mark.text, mark.interrupted, mark.stop_reason) == (
        "assistant",
        "",
        True,
        "error",
    )


# ---------------------------------------------------------------- bookkeeping


def test_a_cut_summary_is_never_saved_as_the_models(store: Store) -> None:
    served = Served(whole("Water at the roots."), cut(CUT_SUMMARY))
    session, _host = chat(store, served.backend())
    session.send("How should I water basil?")
    session.close()
    (found,) = files(store)
    summary = found.messages[-1]
    assert summary.role == "summary" and summary.fallback
    assert "We ta" not in summary.text and prompts.shape(summary.text)
    assert served.streamed == 2  # not asked again at once: that would cut who took its place


def test_a_summary_cut_on_its_own_falls_back_and_a_whole_one_is_the_models() -> None:
    outcome = chain.summarize(
        Served(cut(CUT_SUMMARY)).backend(), talk(2), previous=None, window=8192
    )
    assert outcome.fallback and "cut the reply" in (outcome.error or "")
    made = chain.summarize(Served(whole(STRUCTURED)).backend(), talk(2), previous=None, window=8192)
    assert not made.fallback


def test_a_cut_title_is_not_used() -> None:
    title = titles.ask(Served(cut("Basil care")).backend(), "How much sun for basil?", "Six hours.")
    assert title.fallback and title.text == "How much sun for basil?"
    assert "cut the reply" in (title.error or "")


def test_a_cut_acknowledgment_is_not_saved(store: Store) -> None:
    served = Served(
        whole("Water at the roots."),
        whole(STRUCTURED),  # the compaction's summary
        cut("Understood. We were talking ab"),  # the acknowledgment
        whole("Every other morning."),
    )
    session, host = chat(store, served.backend())
    session.send("How should I water basil?")
    session.compact()
    session.send("How often?")
    session.close()
    _parent, child = files(store)
    assert any("No acknowledgment" in text and "cut the reply" in text for text, _ in host.notices)
    said = [(m.role, m.text) for m in child.messages if m.role == "assistant"]
    assert said == [("assistant", "Every other morning.")]
    assert not any("We were talking" in m.text for m in child.messages)


def test_a_cut_prepared_summary_leaves_nothing() -> None:
    backend = Served(cut(CUT_SUMMARY)).backend()
    ended = threading.Event()

    def make(cancel: Cancel) -> chain.SummaryOutcome:
        return chain.summarize(backend, talk(2), previous=None, window=8192, cancel=cancel)

    preparation = Preparation(tuple(talk(2)), make, 0.0, ended.set)
    assert ended.wait(WAIT)
    assert preparation.phase == "none" and preparation.prepared is None


# ---------------------------------------------------------------- the real server


NO_END = {"1": -100.0, "106": -100.0}  # Gemma 3's <eos> and <end_of_turn>: it never stops early


class Watched(OpenAICompatBackend):
    """The real backend, telling when the first text of a reply has come; the model is
    never let end a reply before its cap (``NO_END``), so a reply is long enough to be
    cut whatever the tiny model would have said."""

    def __init__(self, base_url: str) -> None:
        super().__init__(base_url)
        self.first_text = threading.Event()
        self.streams = 0  # replies asked for

    def stream(
        self,
        messages: Sequence[ChatMessage],
        *,
        options: dict[str, Any] | None = None,
        **given: Any,
    ) -> Iterator[Event]:
        options = {**(options or {}), "logit_bias": NO_END}
        self.streams += 1
        for event in super().stream(messages, options=options, **given):
            if isinstance(event, TextDelta):
                self.first_text.set()
            yield event

    def interrupted(self) -> tuple[threading.Thread, list[int]]:
        """A thread (started) that sends another request once a reply has begun, and
        the status it was answered with (once it has been)."""
        answered: list[int] = []

        def arrive() -> None:
            if self.first_text.wait(WAIT):
                ask = {"max_tokens": 1, "messages": [{"role": "user", "content": "Hi"}]}
                url = f"{self.base_url}/chat/completions"
                answered.append(httpx.post(url, json=ask, timeout=WAIT).status_code)

        helper = threading.Thread(target=arrive)
        helper.start()
        return helper, answered


@pytest.mark.e2e
def test_a_reply_the_real_server_cuts_for_another_request_is_saved_interrupted(
    llama_server: str, store: Store
) -> None:
    """llama_cpp.server (interrupt_requests, its default) ends the stream it is sending
    with ``[DONE]`` and no finish reason once another request arrives."""
    backend = Watched(llama_server)
    writer = store.create(new_meta())
    asked = Message.create("user", T0, text="Once upon a time, in a small village,")
    writer.append(asked)
    helper, other = backend.interrupted()
    result = run_turn(
        load_agent(AGENTS / "simple_sally.py"),
        backend,
        [asked],
        build_context=lambda said: [{"role": m.role, "content": m.text} for m in said],
        record=writer.append,
        clock=Clock(),
        options={"max_tokens": 200, "temperature": 0.8, "seed": 1},
    )
    helper.join(WAIT)
    assert other == [200]  # the other request was answered
    assert isinstance(result.error, StreamCut), result.error
    path = writer.path
    writer.close()
    *_, reply = store.read(path).session.messages
    assert reply.role == "assistant" and reply.interrupted and reply.text
    assert reply.stop_reason == "error" and reply.usage is not None and reply.usage.estimated


@pytest.mark.e2e
def test_a_summary_the_real_server_cuts_for_another_request_falls_back(
    llama_server: str,
) -> None:
    backend = Watched(llama_server)
    helper, other = backend.interrupted()
    outcome = chain.summarize(backend, talk(3), previous=None, window=E2E_WINDOW)
    helper.join(WAIT)
    assert other == [200]
    assert outcome.fallback and "cut the reply" in (outcome.error or "")
    assert backend.streams == 1  # not asked again at once
