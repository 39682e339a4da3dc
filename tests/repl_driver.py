"""The REPL in process, as its tests drive it: scripted keys through a pipe, a
scripted HTTP server (``httpx.MockTransport``), a rich console on a StringIO."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import httpx
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output.plain_text import PlainTextOutput
from rich.console import Console

from chatloop.backends.openai_compat import OpenAICompatBackend
from chatloop.chat.agent import load_agent
from chatloop.config import Settings
from chatloop.store.store import Store
from chatloop.ui.repl import Repl
from tests.conftest import Clock
from tests.hosts import TEST_SETTINGS

AGENTS = Path(__file__).resolve().parent.parent / "agents"


def reply_body(text: str) -> bytes:
    words = re.findall(r"\S+\s*", text)
    chunks = [{"choices": [{"index": 0, "delta": {"content": w}}]} for w in words]
    chunks.append(
        {
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 20, "completion_tokens": 5},
        }
    )
    return ("".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n").encode()


def fake_server(requests: list[dict[str, object]]) -> OpenAICompatBackend:
    def handler(request: httpx.Request) -> httpx.Response:
        if "tokenize" in request.url.path:  # no tokenizer here
            return httpx.Response(404)
        requests.append(json.loads(request.content))
        return httpx.Response(200, content=reply_body(f"Reply number {len(requests)} here"))

    client = httpx.Client(transport=httpx.MockTransport(handler))
    return OpenAICompatBackend("http://fake/v1", "fake-model", client=client)


def drive(
    store: Store,
    backend: object,
    lines: str,
    agent: str = "simple_sally.py",
    settings: Settings | None = None,
    run_args: dict[str, object] | None = None,
    agent_named: bool = False,
    code: int = 0,
    width: int = 240,
) -> tuple[Repl, str]:
    """Run a whole REPL on scripted input, its console ``width`` wide; returns it and
    everything it printed (what its prompts drew last)."""
    out, prompts = io.StringIO(), io.StringIO()
    with create_pipe_input() as pipe:
        pipe.send_text(lines)
        repl = Repl(
            load_agent(AGENTS / agent),
            backend,
            store,
            settings or TEST_SETTINGS,  # type: ignore[arg-type]
            Console(file=out, width=width),
            input=pipe,
            output=PlainTextOutput(prompts),
            clock=Clock(),
            agent_named=agent_named,
        )
        assert repl.run(**(run_args or {})) == code  # type: ignore[arg-type]
    return repl, out.getvalue() + "\n[prompts]\n" + prompts.getvalue()


def only_session(store: Store) -> Path:
    (path,) = [Path(e.path) for e in store.session_files()]
    return path
