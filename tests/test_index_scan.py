"""The index's fast paths agree with the slow, exact ones they stand in for."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chatloop.format import Session, parse_markdown, render_markdown
from chatloop.format import skim as scan
from chatloop.format import skim_of as from_parse
from chatloop.format import yaml_strict as frontmatter_yaml
from chatloop.store.index import Index
from chatloop.store.store import Store
from tests.strategies import examples, sessions, text_st

SAMPLES = Path(__file__).resolve().parent.parent / "sample_conversations"


def _figures(data: bytes) -> tuple[object, ...]:
    fast, slow = scan(data), from_parse(parse_markdown(data))
    return (replace(fast, text=b""), replace(slow, text=b""), fast.text)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sessions())
def test_scan_gives_what_a_full_parse_gives(session: Session) -> None:
    data = render_markdown(session)
    fast, slow, text = _figures(data)
    assert fast == slow
    words = text.decode("utf-8")
    for message in session.messages:
        assert message.key not in words  # no frame or part marker is indexed
        if message.recalled:  # indexed where it was said, never again as new words
            continue
        assert message.text in words
        for result in message.tool_results:
            assert result.content in words


@pytest.mark.parametrize("path", sorted(SAMPLES.rglob("*.md")), ids=lambda p: p.name)
def test_scan_reads_every_sample_like_the_parser(path: Path) -> None:
    fast, slow, text = _figures(path.read_bytes())
    assert fast == slow
    assert text  # every sample has something to search


def test_scan_leaves_out_chatloops_own_markup() -> None:
    data = (SAMPLES / "02-tool-session.md").read_bytes()
    words = scan(data).text.decode()
    for markup in ("<!-- ", "## Query", "*Time:", "Tokens:", "SESSION_SUMMARY"):
        assert markup not in words


def test_scan_of_a_torn_file_counts_the_problem_and_keeps_the_rest() -> None:
    data = (SAMPLES / "01-plain-chat.md").read_bytes()
    torn = data[: data.rindex(b"<!-- /")]
    fast = scan(torn)
    whole = scan(data)
    assert fast.problems == 1
    assert fast.queries <= whole.queries


@settings(max_examples=examples(300), deadline=None)
@given(st.dictionaries(st.sampled_from(["title", "agent", "cwd", "x_note"]), text_st, max_size=4))
def test_simple_front_matter_reads_exactly_what_yaml_reads(values: dict[str, str]) -> None:
    text = frontmatter_yaml.dump({"format": 1, **values, "tokens": {"in": 3, "out": 0}})
    fast = frontmatter_yaml.simple_load(text)
    exact = frontmatter_yaml.load(text, plain=False)
    assert fast is None or fast == exact


@pytest.mark.parametrize(
    "line",
    [
        "a: 010",
        "a: 0x1F",
        "a: 1_000",
        "a: +5",
        "a: -0",
        "a: 2026-01-01",
        "a: no",
        "a: ~",
        "a:",
        "a: 'it''s'",
        "a: 'x' y'",
        "a: x #c",
        "a: x: y",
        "a: x:y",
        "a: &b x",
        "a: *b",
        "a: [1, 2]",
        "a: {b: 1}",
        "a: |",
        "a: >",
        "a: 'multi",
        'a: "q"',
        "a: x ",
        "a: .inf",
        "a: (x) y, z",
        "a: x\u2028y",
        "a: True",
        "A: 1",
        "a: 1\na: 2",
        "a:\n  b: 1\nc: 2",
        "  b: 1",
        "a:\n  b:\n",
        "a: @x",
        "a: %x",
        "a: !x",
        "a: -x",
        "a: ? x",
        "true: 1",
        "false: x",
        "null: 2",
        "a:\n  true: 1",
        "a:\n  null: 1",
    ],
)
def test_simple_front_matter_never_disagrees_with_yaml(line: str) -> None:
    text = line + "\n"
    fast = frontmatter_yaml.simple_load(text)
    try:
        exact = frontmatter_yaml.load(text, plain=False)
    except frontmatter_yaml.FrontMatterError:
        assert fast is None
        return
    assert fast is None or fast == exact


def test_search_takes_punctuated_words_as_separate_words(store: Store) -> None:
    store.project_dir.mkdir(parents=True)
    sample = SAMPLES / "02-tool-session.md"
    (store.project_dir / sample.name).write_bytes(sample.read_bytes())
    with Index(store) as idx:
        idx.sync()
        hits = idx.search("list_dir")
        assert [h.role for h in hits] == ["assistant"]
        assert "[List]" in hits[0].snippet or "[list]" in hits[0].snippet
        assert idx.search("notes/watering-plan.md") and idx.search("--- ???") == []
