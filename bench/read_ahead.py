"""What a person's request waits behind a summary worker on llama-cpp-python (issue 45).

llama-cpp-python reads a prompt without looking up: a request that arrives while
another's prompt is being read waits until that prompt is read, however the other
was cancelled. A summary worker of a long session sends a prompt of about a
thousand tokens; the person who starts a turn then waits for all of it. The worker
therefore reads its prompt in pieces first (``chain.summarize``'s ``read_ahead``,
``sharing.READ_AHEAD_TOKENS``), looking at the person's mark before each.

Each trial: the worker's summary of a long transcript starts (``chain.summarize``
with the worker's ``Cancel``, which the person's arrival sets, as the mark does); a
moment later (``--after``) the person sends a short streamed request (a prompt of
its own, never cached) and the time to its first token is measured. Contenders, run
interleaved W P B W P B: **W** the prompt sent whole (``read_ahead=0``, as before),
**P** read in pieces (the worker's setting; ``--pieces`` compares sizes), **B** the
person's request with nothing running. Ratios against B, medians of the trials.

    python -m bench.read_ahead                 # starts its own server (2,048 tokens)
    python -m bench.read_ahead --real URL      # a server already running (.../v1)
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from contextlib import AbstractContextManager, nullcontext, suppress
from datetime import UTC, datetime

import httpx

from bench.corpus import message
from bench.llama import llama_server
from chatloop.backends.base import Cancel, Cancelled, estimate_tokens
from chatloop.backends.openai_compat import OpenAICompatBackend
from chatloop.chat import chain, prompts
from chatloop.chat.sharing import READ_AHEAD_TOKENS
from chatloop.errors import ChatloopError
from chatloop.format import Message

WINDOW = 2048


def transcript(exchanges: int) -> list[Message]:
    """A session of ``exchanges`` question/answer pairs (the corpus's messages)."""
    at = datetime(2026, 1, 1, tzinfo=UTC)
    return [message(role, n, at) for n in range(exchanges) for role in ("user", "assistant")]


def person_waits(url: str, nonce: int) -> float:
    """Seconds from sending a short streamed request (its own text: never cached) to
    its first content chunk."""
    body = {
        "messages": [{"role": "user", "content": f"Note {nonce}: name one colour."}],
        "max_tokens": 4,
        "stream": True,
    }
    start = time.perf_counter()
    with (
        httpx.Client(timeout=600) as client,
        client.stream("POST", f"{url}/chat/completions", json=body) as reply,
    ):
        for line in reply.iter_lines():
            if line.startswith("data: ") and '"content"' in line:
                return time.perf_counter() - start
    return time.perf_counter() - start


def trial(
    url: str, messages: list[Message], read_ahead: int | None, after: float, nonce: int
) -> float:
    """One trial: the person's wait with a worker (``read_ahead``: its pieces; None: no
    worker) whose summary began ``after`` seconds before the person came."""
    if read_ahead is None:
        return person_waits(url, nonce)
    came = threading.Event()
    backend = OpenAICompatBackend(url, window=WINDOW)

    def work() -> None:
        with suppress(Cancelled, ChatloopError):
            chain.summarize(
                backend,
                messages,
                previous=None,
                window=WINDOW,
                max_tokens=256,
                count=estimate_tokens,
                cancel=Cancel(when=came.is_set),
                read_ahead=read_ahead,
            )

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    time.sleep(after)  # (the person's arrival: the moment is the bench's, not a wait on an event)
    came.set()
    waited = person_waits(url, nonce)
    worker.join(timeout=600)
    backend.close()
    return waited


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--real", metavar="URL", help="a running server's .../v1 URL")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--exchanges", type=int, default=5, help="the session's length")
    parser.add_argument("--after", type=float, default=1.0, help="seconds before the person")
    parser.add_argument(
        "--pieces",
        type=int,
        nargs="+",
        default=[READ_AHEAD_TOKENS],
        help="the pieces' sizes (tokens) to compare; the worker's is the default",
    )
    args = parser.parse_args()
    messages = transcript(args.exchanges)
    prompt = prompts.summary_prompt("\n".join(prompts.transcript_lines(messages)), None)
    serving: AbstractContextManager[str]
    serving = nullcontext(args.real) if args.real else llama_server(WINDOW)
    with serving as url:
        person_waits(url, -1)  # (the model loaded and warm)
        contenders: list[tuple[str, int | None]] = [("W", 0)]
        contenders += [(f"P{size}", size) for size in args.pieces] + [("B", None)]
        times: dict[str, list[float]] = {name: [] for name, _ in contenders}
        print(
            f"load {os.getloadavg()[0]:.2f}; the worker's prompt about "
            f"{estimate_tokens(prompt)} tokens; the person {args.after:g} s after the worker"
        )
        nonce = 0
        for _ in range(args.pairs):
            for name, read_ahead in contenders:
                nonce += 1
                waited = trial(url, messages, read_ahead, args.after, nonce)
                times[name].append(waited)
                print(f"  {name}: {waited:.2f} s", flush=True)
        base = statistics.median(times["B"])
        print("| row | median | baseline (nothing running) | ratio |")
        print("| --- | --- | --- | --- |")
        labels = [("W", "prompt sent whole")]
        labels += [(f"P{size}", f"prompt read in pieces of {size} tokens") for size in args.pieces]
        for name, label in labels:
            median = statistics.median(times[name])
            print(
                f"| the person's first token behind a worker's summary, {label} "
                f"| {median:.2f} s | {base:.2f} s | {median / base:.2f}x |"
            )
        print(f"load {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
