"""/model, /agent and /search in the REPL (in process, over a scripted HTTP server)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from chatloop.backends.openai_compat import OpenAICompatBackend
from chatloop.format import Session, parse_markdown
from chatloop.store.store import Store
from tests.repl_driver import drive, reply_body

MODELS = ["fake-model", "other-model"]


def server(requests: list[dict[str, object]]) -> OpenAICompatBackend:
    """A server with two models; it answers every chat request and records it."""

    def handler(request: httpx.Request) -> httpx.Response:
        if "tokenize" in request.url.path:
            return httpx.Response(404)
        if request.url.path.endswith("/models"):
            return httpx.Response(200, json={"data": [{"id": m} for m in MODELS]})
        requests.append(json.loads(request.content))
        return httpx.Response(200, content=reply_body(f"Reply number {len(requests)} here"))

    client = httpx.Client(transport=httpx.MockTransport(handler))
    return OpenAICompatBackend("http://fake/v1", "fake-model", client=client)


def sessions(store: Store) -> list[Session]:
    found = (parse_markdown(Path(e.path).read_bytes()).session for e in store.session_files())
    return sorted(found, key=lambda s: s.meta.created)


def asked(requests: list[dict[str, object]], text: str) -> dict[str, object]:
    """The chat request whose last message is ``text``."""
    return next(r for r in requests if r["messages"][-1]["content"] == text)  # type: ignore[index]


def test_model_switches_the_next_requests_and_each_reply_records_its_model(
    store: Store,
) -> None:
    requests: list[dict[str, object]] = []
    script = "first\r/model\r/model nope\r/model other-model\rsecond\rexit\r"
    _, shown = drive(store, server(requests), script)
    assert "* fake-model" in shown and "  other-model" in shown
    assert "The server offers no model 'nope'" in shown
    assert "Now with the model other-model" in shown
    assert asked(requests, "first")["model"] == "fake-model"
    assert asked(requests, "second")["model"] == "other-model"
    (session,) = sessions(store)
    assert session.meta.model == "fake-model"  # what the session began with
    replies = [m.model for m in session.messages if m.role == "assistant"]
    assert replies == ["fake-model", "other-model"]
    raw = Path(next(iter(store.session_files())).path).read_text()
    assert '"model":"other-model"' in raw.replace(" ", "")  # in the reply's frame


def test_agent_mid_chat_goes_on_in_a_branch_that_names_the_new_agent(store: Store) -> None:
    requests: list[dict[str, object]] = []
    script = "/agent nobody_here\rhello\r/agent file_fiona\rnext one\rexit\r"
    _, shown = drive(store, server(requests), script)
    assert "error: No agent named 'nobody_here'" in shown
    assert "Now talking with File Fiona" in shown
    first, second = sessions(store)
    assert first.meta.agent == "Simple Sally" and second.meta.agent == "File Fiona"
    assert second.meta.agent_name == "file_fiona"
    assert second.meta.parent_id == first.meta.id and second.meta.extra["forked_at"] == 1
    assert [m.text for m in second.messages if m.is_query] == ["next one"]
    wire = asked(requests, "next one")["messages"]
    assert wire[0]["content"].startswith("You are File Fiona")  # type: ignore[index]
    assert [m["content"] for m in wire if m["role"] == "user"] == ["hello", "next one"]  # type: ignore[index,union-attr]
    assert [t["function"]["name"] for t in asked(requests, "next one")["tools"]]  # type: ignore[index,union-attr]


def test_agent_before_the_first_message_switches_in_place(store: Store) -> None:
    requests: list[dict[str, object]] = []
    _, shown = drive(store, server(requests), "/agent file_fiona\r/agent file_fiona\rhi\rexit\r")
    assert "File Fiona is the agent already" in shown
    (session,) = sessions(store)
    assert session.meta.agent == "File Fiona" and session.meta.parent_id is None


def test_search_in_the_chat_lists_hits_that_resume_takes(store: Store) -> None:
    requests: list[dict[str, object]] = []
    drive(store, server(requests), "zebracorn harbour\rexit\r")
    drive(store, server(requests), "something else\rexit\r")
    _, shown = drive(store, server(requests), "/search\r/search zebracorn\r/resume 2\rexit\r")
    assert "Give the words to look for" in shown
    hit = next(line for line in shown.splitlines() if "zebracorn" in line and "[" in line)
    assert hit.split()[0] == "2"  # the number /resume takes (1 is the later session)
    assert "/resume N or /resume HANDLE" in shown
    assert "Continuing session" in shown
    _, shown = drive(store, server(requests), "/search nothing-of-the-kind\rexit\r")
    assert "No session of this project holds" in shown


def test_model_switches_unchecked_when_the_server_cannot_list_its_models(store: Store) -> None:
    requests: list[dict[str, object]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/models"):
            return httpx.Response(500, text="boom")
        if "tokenize" in request.url.path:
            return httpx.Response(404)
        requests.append(json.loads(request.content))
        return httpx.Response(200, content=reply_body("Fine."))

    client = httpx.Client(transport=httpx.MockTransport(handler))
    backend = OpenAICompatBackend("http://fake/v1", "fake-model", client=client)
    _, shown = drive(store, backend, "/model\r/model other-model\rhello\rexit\r")
    assert "error:" not in shown and "The server did not list its models" in shown
    assert "Not checked" in shown and asked(requests, "hello")["model"] == "other-model"


def test_model_then_compact_names_the_model_in_use_in_the_new_file(store: Store) -> None:
    requests: list[dict[str, object]] = []
    drive(store, server(requests), "first\r/model other-model\r/compact\rsecond\rexit\r")
    parent, child = sessions(store)
    assert parent.meta.model == "fake-model" and child.meta.model == "other-model"


def test_agent_right_after_an_overflow_compaction_carries_the_restoration_and_its_answer(
    store: Store,
) -> None:
    from chatloop.backends.base import ContextOverflow
    from chatloop.chat.agent import load_agent
    from tests.fakes import STRUCTURED, FakeBackend
    from tests.hosts import chat
    from tests.repl_driver import AGENTS

    backend = FakeBackend(
        "A.",
        ContextOverflow("too long", "", window=2048),
        STRUCTURED,
        "Ack, and the answer.",
        STRUCTURED,
        "Fiona here.",
        STRUCTURED,
    )
    session, _ = chat(store, backend)
    session.send("first")
    session.send("second")  # overflows: the child's restoration prompt carries it, answered
    assert session.writer is not None and not any(m.is_query for m in session.writer.messages)
    assert session.use_agent(load_agent(AGENTS / "file_fiona.py")) is True
    session.send("third")
    session.close()
    branch = sessions(store)[-1]
    assert branch.meta.agent == "File Fiona"
    assert [m.text for m in branch.messages if m.is_query] == ["third"]
    carried = [m.text for m in branch.messages if m.restore]
    assert "second" in carried[0] and carried[1] == "Ack, and the answer. "
