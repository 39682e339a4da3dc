"""Golden files: every sample parses cleanly and re-renders byte for byte."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from chatloop.transcript import parse_markdown, render_markdown

SAMPLES = Path(__file__).resolve().parent.parent / "sample_conversations"
GOLDEN = sorted(SAMPLES.glob("*.md"))


def test_there_are_samples_of_every_kind() -> None:
    names = " ".join(p.name for p in GOLDEN)
    for kind in (
        "plain-chat",
        "tool-session",
        "chain-1",
        "chain-2",
        "chain-3",
        "resumed",
        "interrupted",
    ):
        assert kind in names


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.name)
def test_sample_round_trips_byte_for_byte(path: Path) -> None:
    data = path.read_bytes()
    result = parse_markdown(data)
    assert result.problems == ()
    assert result.session.messages
    assert render_markdown(result.session) == data


def test_chain_is_linked_parent_to_child() -> None:
    chain = [parse_markdown(p.read_bytes()).session for p in sorted(SAMPLES.glob("03-chain-*"))]
    assert chain[0].meta.parent_id is None
    for parent, child in itertools.pairwise(chain):
        assert child.meta.parent_id == parent.meta.id
        assert child.meta.parent_file and child.meta.parent_file.endswith(f"{parent.meta.id}.md")
        restore = [m for m in child.messages if m.restore]
        assert [m.role for m in restore] == ["user", "assistant"]
        assert parent.summary is not None and parent.summary.text in restore[0].text
        assert child.meta.restoration_tokens == restore[1].usage.total  # type: ignore[union-attr]


def test_tool_session_keeps_calls_results_and_thinking() -> None:
    session = parse_markdown((SAMPLES / "02-tool-session.md").read_bytes()).session
    calls = [c for m in session.messages for c in m.tool_calls]
    results = [r for m in session.messages for r in m.tool_results]
    assert (
        [c.id for c in calls] == [r.call_id for r in results] == ["call_01", "call_02", "call_03"]
    )
    assert [r.is_error for r in results] == [False, False, True]
    assert session.messages[1].thinking[0].text.startswith("The user wants")


def test_interrupted_sample_is_marked() -> None:
    session = parse_markdown((SAMPLES / "05-interrupted.md").read_bytes()).session
    assert session.meta.status == "interrupted" and session.summary is None
    assert session.messages[-1].interrupted


def test_legacy_file_reads_into_the_same_values() -> None:
    path = next((SAMPLES / "legacy").glob("*.md"))
    result = parse_markdown(path.read_bytes())
    assert result.legacy
    session = result.session
    assert session.meta.id == "Simple_Sally_20250614_101500"
    assert session.meta.agent == "Simple Sally"
    assert session.meta.agent_path == "/home/ana/agents/simple_sally/agent.py"
    assert [m.role for m in session.messages] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "summary",
    ]
    assert session.messages[2].text == "And mint?"
    assert session.messages[1].usage is not None and session.messages[1].usage.output == 124
    assert session.messages[3].duration == 1.9
    assert session.summary is not None and "Mint gets a pot" in session.summary.text
    assert session.query_count == 2
