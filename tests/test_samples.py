"""Golden files: every sample, of both formats, parses cleanly and re-renders byte for
byte; format 2 samples hold the same conversations as the format 1 ones."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from chatloop.format import parse_markdown, render_markdown

SAMPLES = Path(__file__).resolve().parent.parent / "sample_conversations"
GOLDEN = sorted(SAMPLES.glob("*.md"))
FORMAT1 = sorted((SAMPLES / "format1").glob("*.md"))


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


@pytest.mark.parametrize("path", GOLDEN + FORMAT1, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_sample_round_trips_byte_for_byte(path: Path) -> None:
    data = path.read_bytes()
    result = parse_markdown(data, path.stem)
    assert result.problems == ()
    assert result.session.messages
    assert result.session.meta.format == (1 if path.parent.name == "format1" else 2)
    assert render_markdown(result.session) == data


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.name)
def test_format_2_samples_say_what_format_1_said(path: Path) -> None:
    new = parse_markdown(path.read_bytes()).session
    old = parse_markdown((SAMPLES / "format1" / path.name).read_bytes()).session
    assert [
        (m.role, m.text, m.tool_calls, m.tool_results, m.usage, m.restore) for m in new.messages
    ] == [(m.role, m.text, m.tool_calls, m.tool_results, m.usage, m.restore) for m in old.messages]


def test_format_2_open_lines_are_short_and_user_text_starts_a_line() -> None:
    for path in GOLDEN:
        lines = path.read_text(encoding="utf-8").splitlines()
        opens = [
            line
            for line in lines
            if (line.startswith("<!-- ") and " user " in line)
            or (" assistant " in line and line.startswith("<!-- "))
        ]
        assert opens and max(map(len, opens)) <= 100, path.name
        assert not any(line.startswith("**You:**") for line in lines)


def test_chain_is_linked_parent_to_child() -> None:
    chain = [parse_markdown(p.read_bytes()).session for p in sorted(SAMPLES.glob("03-chain-*"))]
    assert chain[0].meta.parent_id is None
    for parent, child in itertools.pairwise(chain):
        assert child.meta.parent_id == parent.meta.id
        assert child.meta.parent_file == f"{parent.meta.id}.md"  # relative: portable
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
