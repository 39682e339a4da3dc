"""The sessions the benches write: small closed sessions as chatloop closes them
(``make_sessions``, for the listing, the appends and the compaction ratio) and the
search corpus (``write_sessions``: a Zipf-like vocabulary of made-up words, or the
project's own prose, with one common and one rare word)."""

from __future__ import annotations

import dataclasses
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

from chatloop.chat import prompts
from chatloop.format import Message, Session, SessionMeta, Usage, render_markdown, reseal
from chatloop.store.store import Store

TZ = UTC
TEXT = (
    "The tide tables for the harbour say high water at 06:30 and 18:45; the keeper "
    "logs the wind, the swell and the boats that leave before dawn. "
) * 3


def message(role: str, i: int, at: datetime) -> Message:
    if role == "user":
        return Message.create("user", at, text=f"question {i}: {TEXT[:250]}")
    return Message.create("assistant", at, text=TEXT[:500], usage=Usage(300, 120), duration=1.2)


def session(queries: int, idx: int, word: str | None = None) -> Session:
    at = datetime(2026, 1, 1, tzinfo=TZ) + timedelta(minutes=idx)
    messages = []
    for i in range(queries):
        messages.append(message("user", i, at))
        messages.append(message("assistant", i, at))
    if word:
        messages[0] = Message.create("user", at, text=f"{word} {messages[0].text}")
    messages.append(Message.create("summary", at, text=prompts.fallback_summary(messages, None)))
    meta = SessionMeta(
        id=f"{at:%Y%m%d-%H%M%S}-{idx:08x}",
        created=at,
        updated=at,
        agent="Bench",
        status="closed",
        queries=queries,
        summary_key=messages[-1].key,  # (its offset is set by ``closed``)
        summary_at=0,
    )
    return Session(meta, tuple(messages))


def closed(session: Session) -> bytes:
    """``session`` as chatloop's finalize leaves a file: the summary's pointer in the
    front matter set to where its frame is (``reseal`` sets it)."""
    return reseal(render_markdown(session))[0]


def make_sessions(
    store: Store, count: int, queries: int, word: str, every: int, continued: int = 0
) -> int:
    """Write ``count`` sessions closed with a summary, as chatloop closes them; every
    ``every``-th contains ``word``; with ``continued``, every ``continued``-th continues
    the session before it (as a compaction or a resume links them). Returns bytes."""
    store.project_dir.mkdir(parents=True, exist_ok=True)
    total = 0
    template = closed(session(queries, 0))
    marked = closed(session(queries, 0, word))
    old_id = session(queries, 0).meta.id.encode()
    stand_in = session(0, 1 << 20).meta.id  # a parent id of the same length, replaced
    plain = session(queries, 0)
    child = closed(
        dataclasses.replace(plain, meta=dataclasses.replace(plain.meta, parent_id=stand_in))
    )
    for i in range(count):
        data = marked if i % every == 0 else template
        if continued and i % every and i % continued == 0:
            parent = session(0, i - 1).meta.id.encode()
            data = child.replace(stand_in.encode(), parent)
        new_id = session(0, i).meta.id.encode()
        data = data.replace(old_id, new_id)
        (store.project_dir / f"{new_id.decode()}.md").write_bytes(data)
        total += len(data)
    return total


# --------------------------------------------------------------------------- search corpus

COMMON, RARE = "harbourmaster", "zebracornqq"
FILLER = [
    "the",
    "and",
    "of",
    "to",
    "a",
    "in",
    "is",
    "that",
    "it",
    "for",
    "on",
    "with",
    "as",
    "was",
    "at",
    "by",
    "this",
    "be",
    "from",
    "or",
    "have",
    "not",
    "are",
    "but",
    "an",
    "they",
    "which",
    "one",
    "you",
    "were",
    "all",
    "we",
    "can",
    "her",
    "has",
    "there",
    "been",
    "if",
    "more",
    "when",
    "will",
    "would",
    "who",
    "so",
    "no",
]


def vocabulary(rng: random.Random) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    return ["".join(rng.choice(letters) for _ in range(rng.randint(4, 10))) for _ in range(20000)]


def texts(rng: random.Random, words: list[str], count: int) -> list[str]:
    """``count`` message texts of 80-400 words: filler and Zipf-weighted vocabulary."""
    weights = [1 / (rank + 1) for rank in range(len(words))]
    out = []
    for _ in range(count):
        n = rng.randint(80, 400)
        picked = rng.choices(words, weights, k=n)
        out.append(" ".join(w if rng.random() < 0.6 else rng.choice(FILLER) for w in picked))
    return out


def prose(rng: random.Random, count: int) -> list[str]:
    """``count`` message texts of real English: runs of sentences from this project's
    documentation (docs/, README.md), for the index size of natural text."""
    root = Path(__file__).resolve().parent.parent
    sentences = [
        s.strip()
        for p in [root / "README.md", *sorted((root / "docs").glob("*.md"))]
        for s in p.read_text(encoding="utf-8").replace("\n", " ").split(". ")
        if len(s.split()) > 3
    ]
    out = []
    for _ in range(count):
        start = rng.randrange(len(sentences))
        out.append(". ".join(sentences[start : start + rng.randint(3, 15)]))
    return out


SUMMARY = (  # every session's summary: the words of neither search
    "## Background Context\nA bench session.\n\n## Topics Discussed\n- words\n\n"
    "## Decisions Made\n- none\n\n## Pending\n- none"
)


def write_sessions(folder: Path, count: int, rng: random.Random, natural: bool = False) -> int:
    """``count`` sessions closed with their summary, as chatloop's finalize leaves
    them (the summary's pointer in the front matter); returns their bytes."""
    pool = prose(rng, 400) if natural else texts(rng, vocabulary(rng), 400)
    folder.mkdir(parents=True)
    total = 0
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for i in range(count):
        at = start + timedelta(minutes=i)
        messages = []
        for q in range(rng.randint(20, 45)):
            user = rng.choice(pool)[:600]
            if q == 3 and rng.random() < 0.8:
                user = f"{user} {COMMON}"
            if q == 5 and i % 100 == 0:
                user = f"{user} {RARE}"
            messages.append(Message.create("user", at, text=user))
            messages.append(
                Message.create(
                    "assistant", at, text=rng.choice(pool), usage=Usage(300, 120), duration=1.0
                )
            )
        queries = len(messages) // 2
        messages.append(Message.create("summary", at, text=SUMMARY))
        meta = SessionMeta(
            id=f"{at:%Y%m%d-%H%M%S}-{i:08x}",
            created=at,
            updated=at,
            agent="Bench",
            status="closed",
            queries=queries,
            summary_key=messages[-1].key,  # its offset set by reseal, as finalize does
            summary_at=0,
        )
        data = reseal(render_markdown(Session(meta, tuple(messages))))[0]
        (folder / f"{meta.id}.md").write_bytes(data)
        total += len(data)
    return total
