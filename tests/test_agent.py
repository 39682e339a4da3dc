"""Agents from files, tool schemas, and the tool-call loop (against MockTransport)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from chatloop.backends.openai_compat import OpenAICompatBackend
from chatloop.chat.agent import find_agent_file, load_agent, tool_from_function
from chatloop.chat.context import to_wire
from chatloop.chat.turn import complete, run_turn
from chatloop.errors import UsageError
from chatloop.format import Message, ToolCall
from tests.conftest import T0, Clock

AGENTS = Path(__file__).resolve().parent.parent / "agents"


def sse_body(*deltas: dict[str, object], reason: str = "stop") -> bytes:
    events = [{"choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
    events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]})
    return ("".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n").encode()


def tool_call(call_id: str, name: str, arguments: str) -> dict[str, object]:
    return {
        "tool_calls": [
            {
                "index": 0,
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": arguments},
            }
        ]
    }


class Script:
    """A fake server that answers each request with the next scripted body."""

    def __init__(self, *bodies: bytes | int) -> None:
        self.bodies = list(bodies)
        self.requests: list[dict[str, object]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if "tokenize" in request.url.path:  # no tokenizer here
            return httpx.Response(404)
        self.requests.append(json.loads(request.content))
        body = self.bodies.pop(0)
        if isinstance(body, int):
            return httpx.Response(body, json={"error": "boom"})
        return httpx.Response(200, content=body)

    def backend(self) -> OpenAICompatBackend:
        client = httpx.Client(transport=httpx.MockTransport(self))
        return OpenAICompatBackend("http://fake/v1", "fake-model", client=client, retries=0)


def test_sample_agents_load_by_name_and_path() -> None:
    sally = load_agent(find_agent_file("Simple Sally", [AGENTS]))
    assert sally.name == "Simple Sally" and sally.tools == () and "Sally" in sally.system_prompt
    fiona = load_agent(find_agent_file(str(AGENTS / "file_fiona.py"), []))
    assert [t.name for t in fiona.tools] == ["list_dir", "read_file", "current_time"]
    read = fiona.tools[1].spec()["function"]
    assert read["parameters"]["required"] == ["path"]
    assert read["parameters"]["properties"]["max_lines"]["type"] == "integer"
    assert (
        "relative to the working directory"
        in read["parameters"]["properties"]["path"]["description"]
    )


def test_unknown_and_broken_agents_are_usage_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as info:
        find_agent_file("nobody", [AGENTS])
    assert "simple_sally" in info.value.hint
    broken = tmp_path / "broken.py"
    broken.write_text("NAME = 'x'\nraise RuntimeError('oops')\n")
    with pytest.raises(UsageError, match="oops"):
        load_agent(broken)
    promptless = tmp_path / "promptless.py"
    promptless.write_text("NAME = 'x'\n")
    with pytest.raises(UsageError, match="SYSTEM_PROMPT"):
        load_agent(promptless)


def test_schema_from_type_hints() -> None:
    def search(
        query: str, limit: int = 5, exact: bool | None = None, tags: list[str] | None = None
    ) -> str:
        """Search the notes.

        Args:
            query: words to look for
        """
        return query

    tool = tool_from_function(search)
    assert tool.description == "Search the notes."
    props = tool.parameters["properties"]
    assert props["query"] == {"type": "string", "description": "words to look for"}
    assert props["limit"] == {"type": "integer"} and props["exact"] == {"type": "boolean"}
    assert props["tags"] == {"type": "array", "items": {"type": "string"}}
    assert tool.parameters["required"] == ["query"]


def run(script: Script, agent_file: str, text: str, **kwargs: object):  # type: ignore[no-untyped-def]
    agent = load_agent(AGENTS / agent_file)
    recorded: list[Message] = []
    history = [Message.create("user", T0, text=text)]
    result = run_turn(
        agent,
        script.backend(),
        history,
        build_context=lambda msgs: to_wire(agent.system_prompt, msgs),
        record=recorded.append,
        clock=Clock(),
        **kwargs,
    )
    return result, recorded


def test_tool_loop_runs_tools_and_records_everything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("buy seeds\n")
    script = Script(
        sse_body(tool_call("c1", "read_file", '{"path": "notes.txt"}'), reason="tool_calls"),
        sse_body(tool_call("c2", "read_file", '{"path": "missing.txt"}'), reason="tool_calls"),
        sse_body({"content": "You need seeds."}),
    )
    result, recorded = run(script, "file_fiona.py", "What is in notes.txt?")
    assert [m.role for m in recorded] == ["assistant", "tool", "assistant", "tool", "assistant"]
    assert recorded == result.messages
    first, second = recorded[1].tool_results[0], recorded[3].tool_results[0]
    assert first.content == "buy seeds" and not first.is_error
    assert second.is_error and "FileNotFoundError" in second.content
    assert result.reply == "You need seeds." and result.error is None
    sent = script.requests[1]["messages"]
    assert sent[0]["role"] == "system"  # type: ignore[index]
    assert sent[-1] == {
        "role": "tool",
        "tool_call_id": "c1",
        "name": "read_file",  # type: ignore[index]
        "content": "buy seeds",
    }
    assert all(r["tools"] for r in script.requests)


def test_rounds_are_capped_and_the_last_call_has_no_tools(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    loop = sse_body(tool_call("c", "current_time", "{}"), reason="tool_calls")
    script = Script(loop, loop, sse_body({"content": "done"}))
    result, _ = run(script, "file_fiona.py", "time?", max_rounds=2)
    assert "tools" in script.requests[1] and "tools" not in script.requests[2]
    assert result.reply == "done"


def test_server_failure_mid_turn_keeps_the_partial_reply() -> None:
    partial = b'data: {"choices":[{"index":0,"delta":{"content":"Half an ans"}}]}\n\n'
    script = Script(partial)
    result, recorded = run(script, "simple_sally.py", "hello")
    assert result.error is not None and "ended before" in result.error.message
    assert recorded[-1].text == "Half an ans" and recorded[-1].interrupted
    failing = Script(500)
    result, recorded = run(failing, "simple_sally.py", "hello")
    assert result.error is not None
    # nothing arrived: the failed exchange is still marked in the file
    [mark] = recorded
    assert (mark.role, mark.text, mark.interrupted, mark.stop_reason) == (
        "assistant",
        "",
        True,
        "error",
    )


def test_a_tool_name_the_agent_lacks_is_an_error_result() -> None:
    fiona = load_agent(AGENTS / "file_fiona.py")
    result = fiona.run_tool(ToolCall("x", "rm_rf", "{}"))
    assert result.is_error and "list_dir" in result.content
    bad_args = fiona.run_tool(ToolCall("y", "read_file", "not json"))
    assert bad_args.is_error


def test_complete_is_outside_history_and_without_tools() -> None:
    script = Script(sse_body({"content": "summary"}))
    reply = complete(script.backend(), "Summarize", system="You summarize.")
    text, usage = reply.text, reply.usage
    assert text == "summary" and usage is not None and usage.estimated
    body = script.requests[0]
    assert "tools" not in body
    assert body["messages"] == [
        {"role": "system", "content": "You summarize."},
        {"role": "user", "content": "Summarize"},
    ]


def test_a_python_agents_options_go_through_the_same_check(tmp_path: Path) -> None:
    path = tmp_path / "pushy.py"
    path.write_text(
        'NAME = "Pushy"\nSYSTEM_PROMPT = "Be brief."\n'
        "OPTIONS = {'messages': [], 'tools': [], 'temperature': float('inf'),\n"
        "           'max_tokens': 0, 'top_k': 40.0, 'repeat_penalty': 1.1, 'seed': True,\n"
        "           'presence_penalty': 3, 'stop': 'END', 'min_p': '0.1'}\n"
    )
    agent = load_agent(path)
    assert agent.options == {"top_k": 40, "repeat_penalty": 1.1, "stop": "END"}
    assert isinstance(agent.options["top_k"], int)
    notes = "\n".join(agent.notes)
    for key in ("messages", "tools", "temperature", "max_tokens", "seed", "presence_penalty"):
        assert f"pushy.py: option '{key}'" in notes
    assert "option 'min_p' is '0.1', not a number from 0 to 1; ignored" in notes
    assert len(agent.notes) == 7  # one line each
    path.write_text('SYSTEM_PROMPT = "x"\nOPTIONS = 5\n')
    assert load_agent(path).notes == (
        "pushy.py: the options are not a mapping of names to values; ignored",
    )
    assert load_agent(AGENTS / "simple_sally.py").options == {
        "temperature": 0.7,
        "max_tokens": 512,
    }
