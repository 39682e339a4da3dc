"""Chains on a small window: replay a scripted chat through ChatSession at default settings.

    python bench/chain.py                  60 messages, the real 2,048-token server
    python bench/chain.py --messages 20    a shorter run
    python bench/chain.py --base-url URL --window N    another server

Starts ``llama_cpp.server`` (Gemma 3 270M, ``--n_ctx`` = the window) unless
``--base-url`` is given, then sends the messages through ``ChatSession`` with
every setting at its default except ``context_window`` (llama-cpp-python's
server does not report its window, so it is given, as a person would). The
questions chatloop asks (``Compact now?``) are answered with Enter (yes).

Each message carries a unique fact token (``FACT-007``). Reported, from the
files and the server's own usage counts:

- messages per compaction (each finished file's own messages: questions and
  replies, not what it carried; and its questions);
- compaction time: median and max (summary calls, new file, acknowledgment);
- restoration prompt + acknowledgment, as a share of the window and of the
  parent's tokens (server counts: the acknowledgment's prompt + output), and
  with the exchanges the child carries word for word (their estimate added);
- requests whose prompt (server count) plus their max_tokens passed the window;
- fact recall: the share of the fact tokens typed in session k that are still
  in the restoration prompt of session k+1, k+3 and k+6.

Targets (issues 14 and 32): restoration + acknowledgment <= 25% of the window,
with the carried exchanges <= 35%, >= 8 messages of its own in every file, 0
requests over the window, 0 messages lost. The exit status is 0 when they are
all met (``tests/test_e2e_chain.py`` runs it, marked slow).
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from llama import llama_server

from chatloop.backends.base import Event, UsageEvent, estimate_tokens
from chatloop.backends.openai_compat import OpenAICompatBackend
from chatloop.chat.agent import bundled_agents, load_agent
from chatloop.chat.session import ChatSession
from chatloop.config import Settings
from chatloop.format import Message, Session, parse_markdown
from chatloop.store.store import Store

FACT = re.compile(r"FACT-\d{3}")
TOPICS = (
    "the lighthouse",
    "a herb garden",
    "the old bridge",
    "river boats",
    "winter bread",
    "the tide tables",
    "a bicycle repair",
    "the library move",
)


def typed(count: int) -> list[str]:
    """About 40 words each, each with its own fact token."""
    return [
        f"Note {i} about {TOPICS[i % len(TOPICS)]}: remember FACT-{i:03d} exactly. The keeper "
        f"wrote in notes-{i}.txt that the tide at 0{i % 10}:30 was high, the wind came from "
        "the west, and the boats waited in the harbour for the light to return."
        for i in range(count)
    ]


@dataclass
class Call:
    kind: str  # turn | summary | notes | ack
    max_tokens: int
    prompt: int = 0
    output: int = 0
    seconds: float = 0.0


@dataclass
class Counting:
    """The real backend, with each call's max_tokens and the server's usage kept."""

    inner: OpenAICompatBackend
    calls: list[Call] = field(default_factory=list)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def stream(self, messages: Sequence[dict[str, Any]], **kw: Any) -> Iterator[Event]:
        last = str(messages[-1].get("content") or "")
        kind = (
            "summary"
            if "progressive summary" in last
            else "notes"
            if "Write short notes" in last
            else "ack"
            if "We are continuing an earlier conversation" in last
            else "title"
            if "Write a title of at most" in last
            else "turn"
        )
        call = Call(kind, int((kw.get("options") or {}).get("max_tokens") or 0))
        self.calls.append(call)
        started = time.monotonic()
        for event in self.inner.stream(messages, **kw):
            if isinstance(event, UsageEvent):
                call.prompt, call.output = event.input, event.output
            yield event
        call.seconds = time.monotonic() - started


class Host:
    """No terminal: notices are counted, questions take their default."""

    def __init__(self) -> None:
        self.notices: list[str] = []

    def notice(self, text: str, tone: str = "info") -> None:
        self.notices.append(text)

    def refresh(self) -> None:
        return

    def ask(self, question: str, default: bool) -> bool:
        return default

    def reply_view(self, acknowledgment: bool = False) -> Any:
        class View:
            def on_event(self, event: Event) -> None: ...
            def tool_results(self, message: Message) -> None: ...
            def close(self, interrupted: bool, saved: bool) -> None: ...

        return View()

    @contextmanager
    def working(self, label: str, trace: bool = True) -> Iterator[Callable[[str], None]]:
        yield lambda step: None

    def pick(self, rows: list[Any], lookup: Any = None) -> Any:
        return None


class TimedSession(ChatSession):
    """ChatSession that records how long each compaction took."""

    compactions: list[float]

    def compact(self, unanswered: str | None = None, instructions: str = "") -> None:
        started = time.monotonic()
        try:
            super().compact(unanswered, instructions)
        finally:
            self.compactions.append(time.monotonic() - started)


def run(url: str, window: int, count: int) -> int:
    home = Path(tempfile.mkdtemp(prefix="chatloop-chain-bench-"))
    (home / "project").mkdir()
    store = Store(home / "home", cwd=home / "project")
    backend = Counting(OpenAICompatBackend(url))
    # every other setting at its default, but the summary at the end is written before
    # the run reads the files (not by a background worker)
    settings = Settings(context_window=window, summaries="wait")
    agent = load_agent(bundled_agents() / "simple_sally.py")
    session = TimedSession(agent, backend, store, settings, Host())
    session.compactions = []
    messages = typed(count)
    started = time.monotonic()
    for i, text in enumerate(messages, 1):
        session.send(text)
        print(
            f"\r  message {i}/{count} · {len(session.compactions)} compactions · "
            f"{time.monotonic() - started:.0f} s",
            end="",
            file=sys.stderr,
            flush=True,
        )
    session.close()
    print(file=sys.stderr)
    wall = time.monotonic() - started
    chain = sorted(
        (parse_markdown(Path(e.path).read_bytes()).session for e in store.session_files()),
        key=lambda s: (s.meta.created, s.meta.id),
    )
    return report(chain, backend.calls, session.compactions, messages, window, wall)


def report(
    chain: list[Session],
    calls: list[Call],
    compactions: list[float],
    messages: list[str],
    window: int,
    wall: float,
) -> int:
    said = [m.text for s in chain for m in s.messages if m.is_query]
    lost = len(messages) - len([t for t in messages if said.count(t) == 1])
    linked = all(c.meta.parent_id == p.meta.id for p, c in itertools.pairwise(chain))
    per_file = [s.meta.queries for s in chain]
    own = [sum(not m.restore and m.role != "summary" for m in s.messages) for s in chain]
    overheads = []
    openings = []  # restoration + acknowledgment + the carried exchanges, of the window
    for parent, child in itertools.pairwise(chain):
        ack = next((m for m in child.messages if m.restore and m.role == "assistant"), None)
        if ack is not None and ack.usage is not None:
            parent_tokens = parent.meta.tokens_in + parent.meta.tokens_out
            overheads.append((ack.usage.total / window, ack.usage.total / max(1, parent_tokens)))
            carried = sum(4 + estimate_tokens(m.text) for m in child.messages if m.copy)
            openings.append((ack.usage.total + carried) / window)
    over = [c for c in calls if c.prompt and c.prompt + c.max_tokens > window]
    facts_of = [
        set(FACT.findall(" ".join(m.text for m in s.messages if m.is_query))) for s in chain
    ]
    restored = [
        set(FACT.findall(s.messages[0].text)) if s.messages and s.messages[0].restore else set()
        for s in chain
    ]

    def recall(step: int) -> str:
        pairs = [(facts_of[k], restored[k + step]) for k in range(len(chain) - step) if facts_of[k]]
        if not pairs:
            return "n/a (chain too short)"
        kept = sum(len(f & r) for f, r in pairs)
        total = sum(len(f) for f, _ in pairs)
        return f"{kept / total:.0%} ({kept}/{total} over {len(pairs)} sessions)"

    full = per_file[:-1] or per_file
    print(
        f"chain of {len(chain)} files, {len(messages)} messages, window {window:,}, "
        f"{wall:.0f} s wall"
    )
    print(f"  messages lost or doubled       {lost}   (target 0)")
    closed = linked and all(s.meta.status == "closed" for s in chain)
    print(f"  every file linked, closed      {closed}")
    own_full = own[:-1] or own
    print(f"  messages per compaction        {own_full} min {min(own_full)}   (target >= 8)")
    print(f"  questions per compaction       {full} min {min(full)}")
    if compactions:
        print(
            f"  compaction time                median {statistics.median(compactions):.1f} s, "
            f"max {max(compactions):.1f} s, {sum(compactions) / wall:.0%} of the wall time"
        )
    if overheads:
        worst = max(o[0] for o in overheads)
        print(
            f"  restoration + acknowledgment   max {worst:.1%} of the window (target <= 25%), "
            f"median {statistics.median(o[1] for o in overheads):.0%} of the parent's tokens"
        )
        print(
            f"  ... with the carried exchanges max {max(openings):.1%} of the window "
            "(target <= 35%)"
        )
    kinds = {
        k: sum(c.kind == k for c in calls) for k in ("turn", "summary", "notes", "ack", "title")
    }
    print(f"  requests                       {len(calls)} {kinds}")
    print(
        f"  over the window                {len(over)}   (prompt by the server's count + "
        "max_tokens; target 0)"
    )
    for c in over[:5]:
        print(f"    {c.kind}: prompt {c.prompt:,} + max_tokens {c.max_tokens:,}")
    print(f"  fact recall k+1                {recall(1)}")
    print(f"  fact recall k+3                {recall(3)}")
    print(f"  fact recall k+6                {recall(6)}")
    met = (
        lost == 0
        and linked
        and not over
        and min(own_full) >= 8
        and all(o[0] <= 0.25 for o in overheads)
        and all(o <= 0.35 for o in openings)
    )
    print(f"  targets of issues 14 and 32    {'met' if met else 'MISSED'}")
    return 0 if met else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=60, help="messages to send (60)")
    parser.add_argument("--window", type=int, default=2048, help="context window (2048)")
    parser.add_argument("--base-url", help="an already running OpenAI-compatible server")
    args = parser.parse_args()
    os.environ.pop("CHATLOOP_CONFIG", None)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the server on the way out
    if args.base_url:
        return run(args.base_url, args.window, args.messages)
    with llama_server(args.window) as url:
        return run(url, args.window, args.messages)


if __name__ == "__main__":
    sys.exit(main())
