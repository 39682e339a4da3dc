"""Issue 33, item 2 (and parts of item 5): a summary reply that is cut at its cap or
mis-shaped is repaired, never flattened: the sections the model wrote keep their
content under their own headings, missing ones are filled, a cut reply keeps every
complete line, and no section ever holds another heading."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from chatloop.backends.base import ChatMessage
from chatloop.chat import chain, prompts
from chatloop.format import Message
from tests.conftest import T0
from tests.fakes import Capped, FakeBackend

FACTS = [
    "FACT-001 the staging database is db-stage-02 on port 5433",
    "FACT-002 the deploy key lives in ops/keys/deploy.pem",
    "FACT-003 the nightly job runs at 02:30 from cron/nightly.sh",
]
TRANSCRIPT = [Message.create("user", T0, text=f"Please remember: {fact}.") for fact in FACTS] + [
    Message.create("user", T0, text="We decided to keep the budget at 12,500 EUR."),
    Message.create("assistant", T0, text="Noted: the budget stays at 12,500 EUR."),
]
REPLY = """**Background Context:** Initial session.

**Current Session Summary:**
The user set up the staging facts.

**Topics Discussed:**
- FACT-001 the staging database is db-stage-02 on port 5433
- FACT-002 the deploy key lives in ops/keys/deploy.pem
- FACT-003 the nightly job runs at 02:30 from cron/nightly.sh

**Decisions Made:**
- Keep the budget at 12,500 EUR

**Pending:**
- None."""


def _well_formed(summary: str) -> None:
    """Every heading exactly once, in order, each at the start of its own line."""
    assert prompts.shape(summary), summary
    for heading in prompts.HEADINGS:
        assert summary.count(heading) == 1, summary
        (line,) = [row for row in summary.splitlines() if heading in row]
        assert line.startswith(heading), summary


def test_a_reply_cut_anywhere_keeps_each_complete_line_and_every_heading_once() -> None:
    for cut in range(1, len(REPLY)):
        part = REPLY[:cut]
        repaired = prompts.repair(part, None, TRANSCRIPT, cut=True)
        _well_formed(repaired)
        lines = part.splitlines()
        complete = lines if part.endswith("\n") else lines[:-1]  # the last may end mid-word
        for line in complete:
            opened = prompts.heading_of(line)  # (a heading's own words are in it anyway)
            content = opened[1] if opened else line.removeprefix("- ").strip()
            if content and content != "None.":
                assert content in repaired, (cut, content)


def test_headings_in_other_forms_keep_their_content_in_their_own_section() -> None:
    reply = """Here is the summary.

## Topics Discussed
* FACT-002 the deploy key lives in ops/keys/deploy.pem

Decisions Made:
1. Keep the budget at 12,500 EUR

**Pending**
- check cron/nightly.sh"""
    repaired = prompts.repair(reply, None, TRANSCRIPT, cut=False)
    _well_formed(repaired)
    sections = {h: prompts.section(repaired, h) for h in prompts.HEADINGS[2:]}
    assert sections[prompts.HEADINGS[2]] == ["FACT-002 the deploy key lives in ops/keys/deploy.pem"]
    assert sections[prompts.HEADINGS[3]] == ["Keep the budget at 12,500 EUR"]
    assert sections[prompts.HEADINGS[4]] == ["check cron/nightly.sh"]
    assert "Here is the summary." in repaired  # before the first heading: the narrative


def test_a_heading_inside_a_line_never_nests_a_section() -> None:
    reply = (
        "**Background Context:** Initial session. **Background Context:** again "
        "**Decisions Made:** - keep the budget at 12,500 EUR"
    )
    repaired = prompts.repair(reply, None, TRANSCRIPT, cut=False)
    _well_formed(repaired)


def test_missing_sections_are_filled_and_invented_identifiers_dropped() -> None:
    previous = REPLY
    reply = "**Topics Discussed:**\n- FACT-009 the backup host is bk-77 (invented)\n- the budget"
    repaired = prompts.repair(reply, previous, TRANSCRIPT, cut=False)
    _well_formed(repaired)
    assert "FACT-009" not in repaired and "bk-77" not in repaired
    assert "- the budget" in repaired
    assert "Keep the budget at 12,500 EUR" in repaired  # the parent's decision, carried


def _summarize(backend: FakeBackend, **options: object) -> chain.SummaryOutcome:
    return chain.summarize(backend, TRANSCRIPT, previous=None, window=2048, **options)  # type: ignore[arg-type]


def test_a_summary_cut_at_its_cap_is_repaired_not_flattened() -> None:
    cut = Capped(REPLY[: REPLY.index("- Keep the budget") + 10])
    outcome = _summarize(FakeBackend(cut))
    _well_formed(outcome.text)
    for fact in FACTS:
        assert fact in outcome.text
    assert "Keep the bu" not in outcome.text  # the line the cap cut is left out
    assert not outcome.fallback


def test_compact_text_reaches_every_notes_request_and_an_echo_is_no_summary() -> None:
    long = [
        Message.create("user", T0, text=f"note {n}: " + "the tide tables of the harbour " * 40)
        for n in range(12)
    ]
    asked: list[str] = []

    def reply(messages: Sequence[ChatMessage]) -> str:
        asked.append(str(messages[-1]["content"]))
        return REPLY

    chain.summarize(
        FakeBackend(default=reply),
        long,
        previous=None,
        window=1024,
        instructions="keep FACT-003",
    )
    notes = [a for a in asked if a.startswith("This is part")]
    asked_to = "The user asks this summary to: keep FACT-003"
    assert len(notes) >= 2 and all(asked_to in a for a in notes)
    echo = "Part 2: " + prompts.notes_prompt("text", 2, 2)
    assert prompts.echoes_template(echo)


@pytest.mark.parametrize("words", [60, 144, 375])
def test_the_request_states_the_words_its_cap_allows(words: int) -> None:
    assert f"stay under {words} words" in prompts.summary_prompt("t", None, words=words)
    assert f"stay under {words} words" in prompts.summary_in_chat(False, words=words)


def test_fit_lets_the_prose_and_the_topics_go_before_the_decisions() -> None:
    summary = prompts.assemble(
        "Initial session.",
        topics=[f"topic number {n} about the harbour walls and stones" for n in range(6)],
        decisions=[f"DEC-{n} keep the pump at {40 + n} rpm" for n in range(4)],
        pending=["check the drainage on the east side"],
        narrative="The model wrote a long paragraph about many things " * 4,
    )
    fitted = prompts.fit(summary, 70)
    _well_formed(fitted)
    assert len(fitted.split()) <= 70
    assert "The model wrote" not in fitted  # the prose went first, whole
    for n in range(4):
        assert f"DEC-{n} keep the pump at {40 + n} rpm" in fitted  # decisions stay
    assert "topic number 0" in fitted and "topic number 5" not in fitted


def test_a_line_is_shortened_at_word_boundaries_with_its_names_kept() -> None:
    line = (
        "- keep the long explanation of why the deploy goes through the old gateway "
        "and then config/gateway/main.yaml with port 8443 and host gw-02"
    )
    summary = prompts.assemble("Initial session.", topics=[], decisions=[line[2:]], pending=[])
    fitted = prompts.fit(summary, len(summary.split()) - 8)
    assert len(fitted.split()) <= len(summary.split()) - 8
    for name in ("config/gateway/main.yaml", "8443", "gw-02"):
        assert name in fitted
    (decision,) = prompts.section(fitted, prompts.HEADINGS[3])
    assert decision.endswith("…") and set(decision.split()) <= set(line.split()) | {"…"}


def test_fit_keeps_every_heading_down_to_a_budget_of_the_headings_alone() -> None:
    import random

    rng = random.Random(11)
    headings = sum(len(h.split()) for h in prompts.HEADINGS)
    for _ in range(300):

        def some(n: int) -> list[str]:
            return [
                " ".join(
                    rng.choice(["word", "FACT-7", "a/b.py", "12,500", "the"])
                    for _ in range(rng.randint(1, 30))
                )
                for _ in range(rng.randint(0, n))
            ]

        summary = prompts.assemble(
            " ".join(some(1)) or "Initial session.",
            topics=some(6),
            decisions=some(4),
            pending=some(3),
            narrative="\n".join(some(4)),
        )
        budget = rng.randint(headings + 1, 200)
        fitted = prompts.fit(summary, budget)
        assert len(fitted.split()) <= budget, (budget, fitted)
        _well_formed(fitted)


ASKED_ORDER = """**Decisions Made:**
- Keep the budget at 12,500 EUR

**Pending:**
- Check FACT-003's cron/nightly.sh

**Topics Discussed:**
- FACT-001 the staging database is db-stage-02 on port 5433
- FACT-002 the deploy key lives in ops/keys/deploy.pem

**Background Context:** Initial session."""


def test_the_request_asks_what_must_survive_a_cut_first_and_the_reply_is_put_in_order() -> None:
    """Item 1: Decisions Made before Pending before Topics before the background, in
    the request; a reply in that order is stored in the summary's own order, word for
    word; one cut at its cap after its Decisions still holds them."""
    for request in (prompts.summary_prompt("t", None), prompts.summary_in_chat(False)):
        at = [request.index(h) for h in (prompts.HEADINGS[i] for i in (3, 4, 2, 0))]
        assert at == sorted(at), request
    outcome = _summarize(FakeBackend(ASKED_ORDER))
    _well_formed(outcome.text)
    assert prompts.arrange(ASKED_ORDER) == outcome.text.split("\n\n**Ledger")[0]
    for line in ASKED_ORDER.splitlines():
        assert line.strip() in outcome.text  # every line, word for word
    cut = Capped(ASKED_ORDER[: ASKED_ORDER.index("- FACT-001") + 12])
    repaired = _summarize(FakeBackend(cut))
    _well_formed(repaired.text)
    decisions = repaired.text.split(prompts.HEADINGS[3])[1].split(prompts.HEADINGS[4])[0]
    assert "Keep the budget at 12,500 EUR" in decisions
    assert not any(line.endswith("the stag") for line in repaired.text.splitlines())
