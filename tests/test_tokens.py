"""Token counts: the server's own where it has a tokenizer, else estimates that reported
usage corrects (chatloop.chat.tokens). The server tests use the real llama_cpp.server."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import httpx
import pytest

from chatloop.backends.base import estimate_tokens
from chatloop.backends.openai_compat import OpenAICompatBackend
from chatloop.chat.context import plan
from chatloop.chat.tokens import PER_MESSAGE, PER_PROMPT, TokenCount
from chatloop.format import Message
from chatloop.store.store import Store
from tests.fakes import FakeBackend
from tests.hosts import chat
from tests.repl_driver import drive

AT = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)

CONVERSATIONS = [
    [{"role": "user", "content": "FACT-001: the budget is 12,500.50 EUR, path /srv/a_b/c.txt"}],
    [
        {"role": "system", "content": "You are Sally, a helpful assistant. Be brief."},
        {"role": "user", "content": "Tell me about the lighthouse keeper's log. " * 12},
        {"role": "assistant", "content": "The log says the tide was high at 04:30 and 16:45."},
        {"role": "user", "content": "Héllo wörld, 日本語のテキスト, emoji 🚢 and code `x = f(y)`."},
    ],
    [
        {
            "role": "user" if i % 2 == 0 else "assistant",
            "content": f"Message {i}: the boats waited in the harbour; notes-{i}.txt says "
            f"the wind at {i:02d}:15 came from the west over the old stone bridge.",
        }
        for i in range(24)
    ],
]


class Words:
    """A tokenizer stand-in that counts words and remembers how often it was asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def __call__(self, text: str) -> int | None:
        self.asked.append(text)
        return len(text.split())


def test_each_distinct_text_is_counted_once() -> None:
    words = Words()
    count = TokenCount(words, lambda: (3, 2))
    messages = [
        {"role": "user", "content": "one two three"},
        {"role": "assistant", "content": "four five"},
    ]
    assert count.prompt(messages) == (3 + 3) + (2 + 3) + 2
    assert count.prompt(messages) == 13
    assert sorted(words.asked) == ["four five", "one two three"]
    assert count.exact and count.mark == ""


def test_a_tokenizer_that_stops_answering_turns_into_the_marked_estimate() -> None:
    answers: list[int | None] = [4, None]
    count = TokenCount(lambda text: answers.pop(0) if answers else None)
    assert count.text("alpha beta gamma delta") == 4
    assert count.text("a text the server no longer counts") == estimate_tokens(
        "a text the server no longer counts"
    )
    assert not count.exact and count.mark == "~"
    assert count.overhead() == (PER_MESSAGE, PER_PROMPT)  # the safe guess


def test_reported_usage_corrects_the_template_overhead_of_exact_counts() -> None:
    count = TokenCount(Words(), lambda: None)
    messages = [{"role": "user", "content": "a b c d"}, {"role": "assistant", "content": "e f"}]
    assert count.overhead() == (PER_MESSAGE, PER_PROMPT)
    count.learn(messages, reported=6 + 2 * 4 + PER_PROMPT)  # the server adds 4 a message
    assert count.overhead() == (4, PER_PROMPT)
    assert count.prompt(messages) == 6 + 8 + PER_PROMPT


def test_reported_usage_scales_estimates_within_bounds() -> None:
    count = TokenCount()  # no tokenizer (Ollama): estimates
    text = "x" * 400  # 100 estimated tokens
    messages = [{"role": "user", "content": text}]
    reported = 150 + PER_MESSAGE + PER_PROMPT  # the server counted 1.5x the estimate
    for _ in range(8):
        count.learn(messages, reported)
    # within 3%: a scale is taken only when it moves by SCALE_STEP (2%), so counts
    # made under it stay valid while it settles
    assert count.text(text) == pytest.approx(150, rel=0.03)
    settled = count.basis
    count.learn(messages, reported)
    assert count.basis == settled
    assert not count.exact
    count.learn(messages, 10**9)  # absurd reports cannot blow the budget up
    assert count.scale <= 3.0
    count.learn(messages, 1)
    assert count.scale >= 0.5


def test_context_marks_estimates(store: Store) -> None:
    _, shown = drive(store, FakeBackend(window=4096), "hello\r/context\r/exit\r")
    assert "~ estimated" in shown and "next call: 3 messages, ~" in shown


# ------------------------------------------------------------------ the real server


@pytest.mark.e2e
def test_the_servers_tokenizer_is_found_and_counts_text_exactly(llama_server: str) -> None:
    backend = OpenAICompatBackend(llama_server)
    root = llama_server.removesuffix("/v1")
    for text in ("hello", "FACT-001 at /srv/x_y.txt: 12,500.50 EUR", "日本語 🚢 " * 20):
        tokens = httpx.post(f"{root}/extras/tokenize", json={"input": text}).json()["tokens"]
        # the endpoint adds the BOS token; chatloop counts the text alone
        assert backend.count_tokens(text) == len(tokens) - 1
    backend.close()


@pytest.mark.e2e
def test_prompt_counts_are_within_two_percent_of_the_servers(llama_server: str) -> None:
    """What chatloop plans for a prompt against the prompt_tokens the server reports for
    it (a non-streamed one-token completion); the estimate is shown for comparison."""
    backend = OpenAICompatBackend(llama_server)
    count = TokenCount(backend.count_tokens, backend.chat_overhead)
    misses = []
    for messages in CONVERSATIONS:
        reply = httpx.post(
            f"{llama_server}/chat/completions",
            timeout=120,
            json={"messages": messages, "max_tokens": 1},
        ).json()
        real = reply["usage"]["prompt_tokens"]
        ours = count.prompt(messages)
        misses.append((real, ours, sum(4 + estimate_tokens(m["content"]) for m in messages)))
        assert abs(ours - real) <= max(2, 0.02 * real), misses
    assert count.exact
    backend.close()


@pytest.mark.e2e
def test_a_session_on_the_real_server_plans_with_exact_counts(
    llama_server: str, store: Store
) -> None:
    backend = OpenAICompatBackend(llama_server)
    session, _ = chat(store, backend, max_tokens=8)
    session.send("Count my tokens: FACT-042 lives at /srv/data_42.txt.")
    sent = session.plan()
    assert sent.exact and session.tokens.mark == ""
    _, shown = drive(store, backend, "/context\r/exit\r", settings=session.settings)
    assert "counted by the server's tokenizer" in shown and "~" not in shown
    reply = httpx.post(
        f"{llama_server}/chat/completions",
        timeout=120,
        json={"messages": sent.wire, "max_tokens": 1},
    ).json()
    real = reply["usage"]["prompt_tokens"]
    assert abs(sent.tokens - real) <= max(2, 0.02 * real), (sent.tokens, real)
    backend.close()


def test_plan_uses_the_count_it_is_given() -> None:
    words = Words()
    messages = [Message.create("user", AT, text="one two three four")]
    exact = plan("system words here", messages, window=1000, count=TokenCount(words))
    estimated = plan("system words here", messages, window=1000)
    assert exact.exact and not estimated.exact
    assert exact.messages_tokens == 4 + PER_MESSAGE
    assert estimated.messages_tokens == estimate_tokens("one two three four") + PER_MESSAGE


def test_tool_definitions_reported_with_the_prompt_are_not_taken_for_template() -> None:
    count = TokenCount(Words(), lambda: (5, 5))
    messages = [{"role": "user", "content": "a b c d"} for _ in range(20)]
    tools = 308
    count.learn(messages, reported=20 * (4 + 5) + 5 + tools, tools=tools)
    assert count.overhead() == (5, 5)  # nothing moved: the tools were accounted for


def test_context_rows_add_up_to_the_calls_total(store: Store) -> None:
    """Every token of the total is in a row: the messages, then what the call sends
    besides them (the template's fixed tokens), so no row disagrees with the budget."""
    _, shown = drive(store, FakeBackend(window=4096), "hello\r/context\r/exit\r")
    start = shown.index("#  role")
    table = shown[start : shown.index("next call:", start)]
    row = re.compile(r"^\s*\d*\s+\(?[a-z]+\)?\s+~([\d,]+)\s", re.MULTILINE)
    counts = [int(m.group(1).replace(",", "")) for m in row.finditer(table)]
    total = int(re.search(r"next call: 3 messages, ~([\d,]+) of", shown).group(1).replace(",", ""))
    system = int(re.search(r"− system ~([\d,]+)", shown).group(1).replace(",", ""))
    assert "(template)" in table and len(counts) == 4, table
    assert sum(counts) == total
    assert counts[0] + counts[3] == system  # the system row and the template's make the budget's


@pytest.mark.parametrize("width", [50, 80, 120])
def test_context_in_a_narrow_terminal_cuts_the_content_never_the_numbers(width: int) -> None:
    from rich.console import Console

    from chatloop.ui import render

    rows = [
        ("system", 46, "You are a friendly assistant. " * 5),
        ("user", 13, "hello"),
        ("assistant", 1_234, "x" * 200),
    ]
    console = Console(width=width, record=True, force_terminal=False)
    console.print(render.context_table(rows, 2048, 1_298, "~", [("(template)", 5, "fixed")], width))
    lines = console.export_text().splitlines()
    assert all(len(line) <= width for line in lines)
    for number, (role, tokens, _) in enumerate(rows, 1):
        (line,) = [x for x in lines if x.startswith(f"{number}  {role}")]
        assert f"~{tokens:,}" in line
        assert line.rstrip().endswith("…") or role == "user"  # the long ones are cut
    assert any("(template)" in x and "~5" in x for x in lines)
