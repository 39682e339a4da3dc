"""Chains on a small window: replay a scripted chat through ChatSession at default settings.

    python -m bench.chain                  60 messages, the real 2,048-token server
    python -m bench.chain --summarizer competent    summaries by a scripted extractive
                                           summarizer, replies by the real model
    python -m bench.chain --scripted --messages 24  no model at all (CI's quick run)
    python -m bench.chain --base-url URL --window N    another server

Starts ``llama_cpp.server`` (Gemma 3 270M, ``--n_ctx`` = the window) unless
``--base-url`` or ``--scripted`` is given, then sends the messages through
``ChatSession`` with every setting at its default except ``context_window``
(llama-cpp-python's server does not report its window, so it is given, as a person
would). The questions chatloop asks (``Compact now?``) are answered with Enter (yes).

The script (issue 33): messages of about 42 words; eight of them state a fact with an
id, a number and a path (``FACT-003 the pump runs at 41 rpm per config/pumps/p3.yaml.``),
two state a decision (``We decided to ...``), two facts are ``/pin``ned. Summaries
are the real model's, or (``--summarizer competent``) a scripted extractive
summarizer's: it copies every sentence of the transcript (and of the previous
summary) that holds a fact id or a decision into the structure the request asks
for, and stops at the request's ``max_tokens`` as a model does. Reported, from the
files and the server's own usage counts:

- messages per compaction (each finished file's own messages: questions and
  replies, not what it carried; and its questions);
- compaction time: median and max (summary calls, new file, acknowledgment);
- restoration prompt + acknowledgment (the acknowledgment's request and reply, by
  the server's count, less the system prompt, by the server's tokenizer), and with
  the exchanges the child carries word for word (by the server's tokenizer, with the
  template's share a message, as chatloop counts them), as a share of the window and
  of the parent's last context (the prompt of its last reply, by the server's count);
- requests whose prompt (server count) plus their max_tokens passed the window;
- recall at k+1, k+3 and k+6: the share of the facts (id, number and path together),
  decisions and pins stated in session k that session k+1, k+3 and k+6 begin with
  (its restoration prompt, and the questions it carries word for word); and the
  ledger's entries that a restoration prompt said it did not carry (left out, not
  silently lost).

Targets (issues 14, 32 and 33): restoration + acknowledgment <= 25% of the window,
with the carried exchanges <= 35%, >= 8 messages of its own in every file, 0
requests over the window, 0 messages lost. The exit status is 0 when they are all
met (``tests/test_e2e_chain.py`` runs it, marked slow; ``python -m bench.run --quick`` runs
a short ``--scripted`` chain).
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

from bench.llama import llama_server
from chatloop.backends.base import (
    Event,
    Finish,
    TextDelta,
    UsageEvent,
    estimate_prompt,
    estimate_tokens,
)
from chatloop.backends.openai_compat import OpenAICompatBackend
from chatloop.chat import prompts
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
FILLER = (
    "The keeper wrote that the tide was high, the wind came from the west, and the "
    "boats waited in the harbour for the light to return before the long night."
)


@dataclass(frozen=True)
class Stated:
    """Something the script states, and what a restoration prompt must hold to carry it
    (every part: an id alone, its value cut off, is not the fact)."""

    kind: str  # fact | decision | pin
    at: int  # the message (0-based) that states it
    text: str
    parts: tuple[str, ...]


def script(count: int) -> tuple[list[str], list[Stated]]:
    """The messages (about 42 words each) and what they state: a fact with an id, a
    number and a path in eight of them, a decision in two, a pin in two (pinned as
    they are sent), spread over the run whatever its length."""
    stated: list[Stated] = []
    slots = [round((i + 0.5) * count / 12) for i in range(12)]
    for n, at in enumerate(slots):
        if n in (4, 9):
            name = ("river-ferry", "oak-beams")[n == 9]
            text = f"We decided to use the {name} plan for phase {n + 2}."
            stated.append(Stated("decision", at, text, (name, f"phase {n + 2}")))
        elif n in (2, 7):
            value, path = 300 + n, f"docs/pins/pin-{n}.md"
            text = f"PIN-{n:03d} the budget is {value} EUR as in {path}."
            stated.append(Stated("pin", at, text, (f"PIN-{n:03d}", f"{value} EUR", path)))
        else:
            value, path = 40 + n, f"config/pumps/p{n}.yaml"
            text = f"FACT-{n:03d} the pump runs at {value} rpm per {path}."
            stated.append(Stated("fact", at, text, (f"FACT-{n:03d}", f"{value} rpm", path)))
    by_message = {s.at: s.text for s in stated if s.at < count}
    messages = [
        f"Note {i} about {TOPICS[i % len(TOPICS)]}. "
        + (by_message[i] + " " if i in by_message else "")
        + FILLER
        for i in range(count)
    ]
    return messages, [s for s in stated if s.at < count]


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

    inner: Any  # a backend
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


DECISION = re.compile(r"\bWe decided\b", re.IGNORECASE)
STATES = re.compile(r"(?:FACT|PIN)-\d{3}")


def extract(request: str, max_tokens: int) -> tuple[str, bool]:
    """A competent summarizer's answer to a summary (or notes) request: every sentence
    of the request's transcript and previous summary that holds a fact or pin id or a
    decision, copied into the structure the request asks for; cut at ``max_tokens``
    (estimated) as a model's reply is. Returns the text and whether it was cut."""
    source = request.split("Reply with the summary only.")[-1]
    source = source.split("Reply with the notes only.")[-1]
    sentences = re.split(r"(?<=[.!?])\s+|\n+", source)
    facts: list[str] = []
    decisions: list[str] = []
    for sentence in sentences:
        bare = sentence.strip().removeprefix("- ").removeprefix("User: ").strip()
        for found in re.finditer(r"((?:FACT|PIN)-\d{3}.*?\.|We decided.*?\.)(?=\s|$)", bare):
            item = found.group(1)
            target = decisions if DECISION.search(item) else facts
            if item not in target:
                target.append(item)
    text = (  # (in the order the request asks for: what was settled first)
        "**Decisions Made:**\n"
        + ("\n".join(f"- {d}" for d in decisions) or "- None.")
        + "\n\n**Pending:**\n- None.\n\n**Topics Discussed:**\n"
        + ("\n".join(f"- {f}" for f in facts) or "- None.")
        + "\n\n**Background Context:** Notes about the harbour, kept with their facts."
    )
    words: list[str] = []
    for word in text.split(" "):
        if estimate_tokens(" ".join([*words, word])) > max_tokens:
            return " ".join(words), True
        words.append(word)
    return text, False


@dataclass
class Competent:
    """``inner`` for replies; summary and notes requests answered by ``extract``."""

    inner: Any

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def stream(self, messages: Sequence[dict[str, Any]], **kw: Any) -> Iterator[Event]:
        last = str(messages[-1].get("content") or "")
        if "progressive summary" not in last and "Write short notes" not in last:
            yield from self.inner.stream(messages, **kw)
            return
        request = "\n".join(str(m.get("content") or "") for m in messages)
        limit = int((kw.get("options") or {}).get("max_tokens") or 700)
        text, cut = extract(request, limit)
        yield TextDelta(text)
        yield UsageEvent(estimate_prompt(list(messages)), estimate_tokens(text))
        yield Finish("length" if cut else "stop")


class Scripted:
    """No model: every reply is a short sentence, with usage estimated as sent (the
    chain's machinery runs as against a server: budgets, compactions, files)."""

    kind = "scripted"
    base_url = "scripted://bench"
    model = "scripted"

    def stream(self, messages: Sequence[dict[str, Any]], **kw: Any) -> Iterator[Event]:
        text = "The harbour notes are kept; the light returned at dawn."
        yield TextDelta(text)
        yield UsageEvent(estimate_prompt(list(messages)), estimate_tokens(text))
        yield Finish("stop")

    def models(self) -> list[str]:
        return [self.model]

    def context_window(self) -> int | None:
        return None

    def count_tokens(self, text: str) -> int | None:
        return None

    def chat_overhead(self) -> tuple[int, int] | None:
        return None

    def close(self) -> None:
        return


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


@dataclass
class Figures:
    """What a run measured (``report`` prints them; ``bench.figures.chain`` makes rows)."""

    files: int
    lost: int
    over: int
    own_min: int
    opening_max: float  # restoration + acknowledgment + carried, of the window
    overhead_max: float  # restoration + acknowledgment, of the window
    recall: dict[str, dict[int, tuple[int, int]]]  # kind -> step -> (kept, total)
    not_carried: int
    silent: int
    met: bool


def play(
    session: ChatSession, messages: Sequence[str], stated: Sequence[Stated], say: Callable[[], str]
) -> None:
    """Send the script's ``messages`` through ``session``, each pin pinned as it is sent,
    with a progress line on stderr (``say``: what it adds)."""
    pins = {s.at: s.text for s in stated if s.kind == "pin"}
    started = time.monotonic()
    for i, text in enumerate(messages):
        if i in pins:
            session.pin(pins[i])
        session.send(text)
        print(
            f"\r  message {i + 1}/{len(messages)} · {say()} · {time.monotonic() - started:.0f} s",
            end="",
            file=sys.stderr,
            flush=True,
        )
    print(file=sys.stderr)


def run(url: str | None, window: int, count: int, summarizer: str) -> Figures:
    """Replay ``count`` messages of the script against the server at ``url`` (None: no
    model, ``Scripted``), summaries by the model or by ``extract`` (``summarizer``:
    ``model`` or ``competent``); report and return the figures."""
    home = Path(tempfile.mkdtemp(prefix="chatloop-chain-bench-"))
    (home / "project").mkdir()
    store = Store(home / "home", cwd=home / "project")
    inner: Any = Scripted() if url is None else OpenAICompatBackend(url)
    backend = Counting(Competent(inner) if summarizer == "competent" else inner)
    # every other setting at its default, but the summary at the end is written before
    # the run reads the files (not by a background worker)
    settings = Settings(context_window=window, summaries="wait")
    agent = load_agent(bundled_agents() / "simple_sally.py")
    session = TimedSession(agent, backend, store, settings, Host())
    session.compactions = []
    messages, stated = script(count)
    started = time.monotonic()
    play(session, messages, stated, lambda: f"{len(session.compactions)} compactions")
    session.close()
    wall = time.monotonic() - started
    sessions = [parse_markdown(Path(e.path).read_bytes()).session for e in store.session_files()]
    chain = _in_order(sessions)
    what = f"{summarizer} summaries, {'scripted replies' if url is None else url}"
    per_message = ((None if url is None else inner.chat_overhead()) or (4, 0))[0]

    def tokens(text: str) -> int:  # (the server's tokenizer, as chatloop's plan uses it)
        exact = None if url is None else inner.count_tokens(text)
        return per_message + (estimate_tokens(text) if exact is None else exact)

    system = tokens(agent.system_prompt)
    return report(
        chain,
        backend.calls,
        session.compactions,
        messages,
        stated,
        window,
        wall,
        what,
        system,
        tokens,
    )


def _in_order(sessions: list[Session]) -> list[Session]:
    """The chain root first, then each child (by its parent link, not by time: a
    scripted run makes several files a second); files outside the chain last."""
    children = {s.meta.parent_id: s for s in sessions if s.meta.parent_id}
    chain = [s for s in sessions if not s.meta.parent_id][:1]
    while chain and chain[-1].meta.id in children:
        chain.append(children[chain[-1].meta.id])
    return chain + [s for s in sessions if s not in chain]


def _last_context(session: Session) -> int:
    """The prompt of the session's last reply, by the server's count (0: none known)."""
    for m in reversed(session.messages):
        if m.role == "assistant" and not m.restore and m.usage is not None:
            return m.usage.input
    return 0


def report(
    chain: list[Session],
    calls: list[Call],
    compactions: list[float],
    messages: list[str],
    stated: list[Stated],
    window: int,
    wall: float,
    what: str,
    system: int,
    count: Callable[[str], int],
) -> Figures:
    """Print the figures of a run and return them. ``system``: the tokens of the agent's
    system prompt, which every request's count holds and no opening is; ``count``: a
    message's tokens with its template (the server's own count where it has one, as
    chatloop counts them)."""
    said = [m.text for s in chain for m in s.messages if m.is_query]
    lost = len(messages) - len([t for t in messages if said.count(t) == 1])
    linked = all(c.meta.parent_id == p.meta.id for p, c in itertools.pairwise(chain))
    per_file = [s.meta.queries for s in chain]
    own = [sum(not m.restore and m.role != "summary" for m in s.messages) for s in chain]
    overheads = []  # (of the window, of the parent's last context)
    openings = []  # restoration + acknowledgment + the carried exchanges
    for parent, child in itertools.pairwise(chain):
        ack = next((m for m in child.messages if m.restore and m.role == "assistant"), None)
        prompt = next((m for m in child.messages if prompts.is_restoration(m)), None)
        if prompt is not None:
            last = _last_context(parent)
            if ack is not None and ack.usage is not None:  # the model's: its request's count
                spent = ack.usage.total - system  # the restoration prompt and the acknowledgment
            else:  # chatloop's own acknowledgment (the default): no request, so counted here
                spent = count(prompt.text) + (count(ack.text) if ack is not None else 0)
            overheads.append((spent / window, spent / max(1, last)))
            carried = sum(count(m.text) for m in child.messages if m.copy)
            opening = spent + carried
            openings.append((opening / window, opening / max(1, last)))
    over = [c for c in calls if c.prompt and c.prompt + c.max_tokens > window]
    # the file each message went to: the first that holds it as a query
    file_of = {
        t: k for k, s in enumerate(chain) for m in s.messages if m.is_query for t in [m.text]
    }
    # what each child begins with: its restoration prompt and the questions it carries
    restored = [
        "\n".join(m.text for m in s.messages if m.restore and m.role == "user")
        if s.messages and s.messages[0].restore
        else ""
        for s in chain
    ]
    not_carried = sum(
        int(found.group(1))
        for text in restored
        if (found := re.search(r"\((\d+) more of their statements", text))
    )
    # a statement of an earlier file that a child begins without, and does not count
    # among the entries it says it did not carry, is dropped silently
    silent = 0
    for k in range(1, len(chain)):
        told = re.search(r"\((\d+) more of their statements", restored[k])
        earlier = [s for s in stated if s.kind != "pin" and file_of.get(messages[s.at], k) < k]
        missing = sum(not all(part in restored[k] for part in s.parts) for s in earlier)
        silent += max(0, missing - (int(told.group(1)) if told else 0))
    recall: dict[str, dict[int, tuple[int, int]]] = {}
    for kind in ("fact", "decision", "pin"):
        recall[kind] = {}
        for step in (1, 3, 6):
            kept = total = 0
            for item in (s for s in stated if s.kind == kind):
                home = file_of.get(messages[item.at])
                if home is None or home + step >= len(chain):
                    continue
                total += 1
                kept += all(part in restored[home + step] for part in item.parts)
            recall[kind][step] = (kept, total)

    def shown(kind: str, step: int) -> str:
        kept, total = recall[kind][step]
        return f"{kept / total:.0%} ({kept}/{total})" if total else "n/a"

    full = per_file[:-1] or per_file
    print(
        f"chain of {len(chain)} files, {len(messages)} messages, window {window:,}, "
        f"{what}, {wall:.0f} s wall"
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
        print(
            f"  restoration + acknowledgment   max {max(o[0] for o in overheads):.1%} of the "
            f"window (target <= 25%), max {max(o[1] for o in overheads):.0%} of the parent's "
            "last context"
        )
        print(
            f"  ... with the carried exchanges max {max(o[0] for o in openings):.1%} of the "
            f"window (target <= 35%), max {max(o[1] for o in openings):.0%} of the parent's "
            "last context"
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
    for kind, label in (("fact", "facts"), ("decision", "decisions"), ("pin", "pins")):
        print(
            f"  recall of {label:10}           k+1 {shown(kind, 1)}, k+3 {shown(kind, 3)}, "
            f"k+6 {shown(kind, 6)}"
        )
    print(f"  ledger entries said not carried {not_carried}; dropped silently {silent}")
    met = (
        lost == 0
        and linked
        and not over
        and min(own_full) >= 8
        and all(o[0] <= 0.25 for o in overheads)
        and all(o[0] <= 0.35 for o in openings)
    )
    print(f"  targets of issues 14 and 32    {'met' if met else 'MISSED'}")
    return Figures(
        len(chain),
        lost,
        len(over),
        min(own_full),
        max((o[0] for o in openings), default=0.0),
        max((o[0] for o in overheads), default=0.0),
        recall,
        not_carried,
        silent,
        met,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=60, help="messages to send (60)")
    parser.add_argument("--window", type=int, default=2048, help="context window (2048)")
    parser.add_argument("--base-url", help="an already running OpenAI-compatible server")
    parser.add_argument(
        "--summarizer",
        choices=("model", "competent"),
        default="model",
        help="who writes the summaries: the model, or a scripted extractive summarizer",
    )
    parser.add_argument(
        "--scripted", action="store_true", help="no model: scripted replies (implies competent)"
    )
    args = parser.parse_args()
    os.environ.pop("CHATLOOP_CONFIG", None)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the server on the way out
    if args.scripted:
        return 0 if run(None, args.window, args.messages, "competent").met else 1
    if args.base_url:
        return 0 if run(args.base_url, args.window, args.messages, args.summarizer).met else 1
    with llama_server(args.window) as url:
        return 0 if run(url, args.window, args.messages, args.summarizer).met else 1


if __name__ == "__main__":
    sys.exit(main())
