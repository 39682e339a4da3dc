"""The person's request goes first (issue 45, "How it is checked"): what a person waits
for when this home's background work holds the model server, against the same with
nothing running, A B A B in one run, on a one-slot server.

Rows:

1. **A new chat right after a one-shot** (its summary worker then waiting or asking)
   against the same home with nothing running (every worker ended first): seconds
   from spawning ``chatloop`` to its ``you>`` prompt drawn, to its banner (the
   server checked), and to the first token of the first message's reply on the
   screen (the person types the message as soon as the prompt is drawn). Two
   variants: ``right after`` (the chat spawned the moment the one-shot ended: its
   worker is starting or waiting for idle) and ``mid-summary`` (spawned once the
   worker's summary request is under way on the server: the person's chat must make
   it yield). Ratios A/B, pair by pair; target <= 1.2x.
2. **The first session's summary lands** once the person stops: in every A run of
   row 1, from the chat's turn end (the prompt back after its reply, the person then
   idle, the chat left open) to the one-shot's summary written (its file's lock let
   go), against ``background_idle`` plus the summary's own duration; the time the
   worker's last request was opened is printed between (the idle wait, then the
   summary). Every file of the home is then read: a summary marked as the model's
   whose text is not the scripted server's whole summary is **saved cut** (0
   expected).
3. **Enter to the first token on screen** in a chat against a minimal loop (a
   ``python`` script in the same kind of pseudo-terminal: ``input()``, one
   ``httpx.Client`` kept open, a streamed POST, each content delta printed), turns
   interleaved, both against the same scripted server answering at once; the CPU
   of each process per turn (``/proc/PID/stat``) and the requests chatloop makes
   per turn (the server's log). Target <= 2x.

The scripted server has one slot and QUEUES, as Ollama does: one chat request at a
time, in arrival order; a queued request whose client closed its connection is
dropped, and so is a running one (its generation stops: Ollama, llama.cpp and vLLM
stop when the client goes). A summary request streams the summary over
``--summary-seconds`` (30 by default); anything else is answered at once. The
model list answers at once, busy or not (as Ollama's does). With ``--real URL``
rows 1 and 2 are measured against that server too (``llama_cpp.server``, one slot:
it cuts the running request when another arrives), chatloop given a 2,048-token
window and replies of at most 48 tokens, as a person following the README would.

Each series uses one home (and one project folder) for all its runs, A and B alike,
after one untimed chat that measures the server (``probes.json``): the contenders
differ only in what runs beside them. ``background_idle`` is set small
(``--background-idle``, 3 s) so the worker asks again soon after the person stops.

    python -m bench.person                          # 3 pairs, 30 s summaries, scripted
    python -m bench.person --real http://127.0.0.1:8799/v1   # and the real server
    python -m bench.person --quick                  # CI: 1 pair, 2 s summaries, 1 variant
    python -m bench.person --real URL --real-only --variant mid-summary --keep /tmp/homes
"""

from __future__ import annotations

import argparse
import compileall
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from bench.person_server import QUESTION, Log, queueing_server
from bench.person_term import (
    Term,
    banner,
    connected,
    environment,
    holder,
    prompt_drawn,
    reply_begun,
    saved_cut,
    settle,
    turn_ended,
)
from bench.person_turns import Turns, turns
from bench.timing import CHATLOOP
from chatloop.store.fsio import is_locked

HERE = Path(__file__).resolve().parent


# -- row 1 and 2


@dataclass
class Run:
    """One run of row 1: seconds from spawn to the prompt, the banner, the first token;
    and for an A run, row 2: the chat's turn end to the first session's summary
    landed, and to the worker's last request opened (None when not seen)."""

    prompt: float
    banner: float
    first: float
    landed: float | None = None
    asked: float | None = None


@dataclass
class Series:
    """Everything one (server, variant) series measured."""

    variant: str
    a: list[Run] = field(default_factory=list)
    b: list[Run] = field(default_factory=list)
    cut: int = 0
    model: int = 0
    fallback: int = 0
    files: int = 0


def chat_run(
    args: list[str], env: dict[str, str], cwd: Path, first_session: Path | None, port: int
) -> Run:
    """A new chat: spawn, the prompt drawn (the question typed at once), the banner, the
    reply's first token, the turn's end; with ``first_session``, then idle with the chat
    open until that session's summary is written (row 2); then Ctrl-D."""
    term = Term(CHATLOOP, args, env, str(cwd))
    t_prompt = term.until(prompt_drawn)
    term.child.sendline(QUESTION)
    t_banner = term.until(banner)
    t_first = term.until(reply_begun(QUESTION))
    t_end = term.until(turn_ended(1))
    run = Run(t_prompt - term.spawned, t_banner - term.spawned, t_first - term.spawned)
    if first_session is not None:
        pid = holder(first_session)
        opened, was = None, False
        while is_locked(first_session):
            now = pid is not None and connected(pid, port)
            if now and not was:
                opened = time.monotonic()
            was = now
            time.sleep(0.05)  # polling the file's lock and the worker's sockets
        run.landed = time.monotonic() - t_end
        run.asked = opened - t_end if opened is not None else None
    term.leave()
    return run


def one_shot(args: list[str], env: dict[str, str], cwd: Path) -> Path:
    """``chatloop ARGS "question"`` to its end; returns the session it wrote."""
    before = set(env_home(env).rglob("*.md"))
    subprocess.run(
        [CHATLOOP, *args, QUESTION],
        env=env,
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=True,
        timeout=600,
    )
    (made,) = set(env_home(env).rglob("*.md")) - before
    return made


def env_home(env: dict[str, str]) -> Path:
    """The home ``env`` names."""
    return Path(env["CHATLOOP_HOME"])


def asking(log: Log | None, session: Path, port: int, before: int) -> Callable[[], bool]:
    """True once the worker of ``session`` has its summary request under way: the
    scripted server's log says a summary started (more than ``before`` had); against
    a real server, the worker has held a connection to it for 0.3 s."""
    if log is not None:
        return lambda: log.count("started", "summary") > before
    since: list[float] = []

    def seen() -> bool:
        pid = holder(session)
        if pid is None or not connected(pid, port):
            since.clear()
            return False
        since.append(time.monotonic())
        return since[-1] - since[0] >= 0.3

    return seen


def series(
    url: str,
    log: Log | None,
    variant: str,
    pairs: int,
    idle: float,
    summary_seconds: float,
    keep: str = "",
) -> Series:
    """Row 1 (and 2) for one variant, ``pairs`` pairs A B, in one home; with ``keep``
    (``--keep DIR``), the home is copied there at the end, to read what was saved."""
    real = log is None
    port = urlsplit(url).port or 80
    args = ["--base-url", url] + ([] if real else ["--model", "bench"])
    found = Series(variant)
    with tempfile.TemporaryDirectory() as tmp:
        home, cwd = Path(tmp, "home"), Path(tmp, "project")
        cwd.mkdir()
        env = environment(home, idle, real)
        chat_run(args, env, cwd, None, port)  # untimed: measures the server, warms up
        settle(home)
        for _ in range(pairs):
            before = log.count("started", "summary") if log is not None else 0
            first = one_shot(args, env, cwd)
            if variant == "mid-summary":
                check = asking(log, first, port, before)
                deadline = time.monotonic() + idle + summary_seconds + 60
                while not check():
                    if time.monotonic() > deadline or not is_locked(first):
                        raise RuntimeError("the worker's summary request was never seen")
                    time.sleep(0.02)  # polling the server's log or the worker's sockets
            found.a.append(chat_run(args, env, cwd, first, port))
            settle(home)
            found.b.append(chat_run(args, env, cwd, None, port))
            settle(home)
        found.cut, found.model, found.fallback = saved_cut(home, real)
        found.files = len(list(home.rglob("*.md")))
        if keep:
            shutil.copytree(home, Path(keep, f"{'real' if real else 'scripted'}-{variant}"))
    return found


# -- the whole


@dataclass
class Row:
    """One printed row: what, chatloop's figure, the baseline's, ratio, target, met."""

    what: str
    ours: str
    baseline: str
    ratio: float | None
    target: str
    met: bool | None


def ratio(a: list[float], b: list[float]) -> float:
    """The median of the pair-by-pair ratios a/b."""
    return statistics.median(x / y for x, y in zip(a, b, strict=True))


def series_rows(found: Series, where: str, idle: float, summary_seconds: float | None) -> list[Row]:
    """Rows 1 and 2 of one series."""
    rows = []
    median = statistics.median
    for label, attribute in (
        ("prompt drawn", "prompt"),
        ("banner", "banner"),
        ("first token", "first"),
    ):
        a = [float(getattr(r, attribute)) for r in found.a]
        b = [float(getattr(r, attribute)) for r in found.b]
        r = ratio(a, b)
        target = "(reported)" if label == "prompt drawn" else "<= 1.2x"
        rows.append(
            Row(
                f"new chat {found.variant} a one-shot: spawn to {label} ({where})",
                f"{median(a):.2f} s",
                f"nothing running {median(b):.2f} s",
                r,
                target,
                None if label == "prompt drawn" else r <= 1.2,
            )
        )
    landed = [r.landed for r in found.a if r.landed is not None]
    asked = [r.asked for r in found.a if r.asked is not None]
    asked_note = f"; its request opened {median(asked):.2f} s after" if asked else ""
    if summary_seconds is not None:
        bound = idle + summary_seconds
        rows.append(
            Row(
                f"first session's summary lands after the turn end ({where}, {found.variant})",
                f"{median(landed):.2f} s (max {max(landed):.2f}{asked_note})",
                f"idle {idle:g} s + summary {summary_seconds:g} s = {bound:g} s",
                median(landed) / bound,
                "<= idle + summary (+1 s polls)",
                max(landed) <= bound + 1.0,
            )
        )
    else:
        rows.append(
            Row(
                f"first session's summary lands after the turn end ({where}, {found.variant})",
                f"{median(landed):.2f} s (max {max(landed):.2f}{asked_note})",
                f"idle {idle:g} s + the model's summary",
                None,
                "(reported)",
                None,
            )
        )
    rows.append(
        Row(
            f"summaries saved cut ({where}, {found.variant}; every file: {found.files})",
            str(found.cut),
            f"model's {found.model}, fallbacks {found.fallback}",
            None,
            "0",
            found.cut == 0,
        )
    )
    return rows


def turn_rows(found: Turns) -> list[Row]:
    """Row 3."""
    median = statistics.median
    r = ratio(found.ours, found.loop)
    return [
        Row(
            f"Enter to first token on screen ({len(found.ours)} turns, scripted server)",
            f"{median(found.ours) * 1000:.1f} ms",
            f"minimal httpx loop {median(found.loop) * 1000:.1f} ms",
            r,
            "<= 2x",
            r <= 2,
        ),
        Row(
            "  of which Enter to the request at the server",
            f"{median(found.ours_sent) * 1000:.1f} ms",
            f"minimal httpx loop {median(found.loop_sent) * 1000:.1f} ms",
            ratio(found.ours_sent, found.loop_sent),
            "(reported)",
            None,
        ),
        Row(
            "  CPU per turn (/proc/PID/stat, 10 ms ticks)",
            f"{found.ours_cpu * 1000:.1f} ms",
            f"minimal httpx loop {found.loop_cpu * 1000:.1f} ms",
            found.ours_cpu / found.loop_cpu if found.loop_cpu else None,
            "(reported)",
            None,
        ),
        Row(
            "  requests per turn (scripted server's log)",
            f"{median(found.requests):g} (max {max(found.requests)})",
            "minimal httpx loop 1",
            None,
            "(reported)",
            None,
        ),
    ]


def measure(
    pairs: int,
    summary_seconds: float,
    idle: float,
    turn_count: int,
    variants: tuple[str, ...] = ("right after", "mid-summary"),
    real: str | None = None,
    show: bool = True,
    scripted: bool = True,
    keep: str = "",
) -> list[Row]:
    """Every row: rows 1 and 2 for each variant on the scripted server (and the real one
    when ``real`` is its URL), then row 3; each printed as it comes with ``show``;
    without ``scripted``, only the real server's rows; ``keep``: see ``series``."""
    compileall.compile_dir(str(HERE.parent / "chatloop"), quiet=1)
    rows: list[Row] = []
    with queueing_server(summary_seconds) as (url, log):
        for variant in variants if scripted else ():
            found = series(url, log, variant, pairs, idle, summary_seconds, keep)
            rows += series_rows(found, "scripted", idle, summary_seconds)
            if show:
                print_rows(rows[-5:])
    if real:
        for variant in variants:
            found = series(real, None, variant, pairs, idle, 0.0, keep)
            rows += series_rows(found, "llama_cpp.server", idle, None)
            if show:
                print_rows(rows[-5:])
    if not scripted:
        return rows
    rows += turn_rows(turns(turn_count))
    if show:
        print_rows(rows[-4:])
    return rows


def print_rows(rows: list[Row]) -> None:
    """The rows as a markdown table's lines, as they come."""
    for row in rows:
        shown = f"{row.ratio:.2f}x" if row.ratio is not None else ""
        met = "n/a" if row.met is None else "yes" if row.met else "NO"
        print(
            f"| {row.what} | {row.ours} | {row.baseline} | {shown} | {row.target} | {met} |",
            flush=True,
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--summary-seconds", type=float, default=30.0)
    parser.add_argument("--background-idle", type=float, default=3.0)
    parser.add_argument("--turns", type=int, default=15)
    parser.add_argument("--real", metavar="URL", help="also a real server (rows 1 and 2)")
    parser.add_argument("--real-only", action="store_true", help="only the real server's rows")
    parser.add_argument(
        "--variant", choices=("right after", "mid-summary"), help="only this variant of rows 1-2"
    )
    parser.add_argument("--keep", metavar="DIR", default="", help="copy each series' home here")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="CI: 1 pair, 2 s summaries, 1 s idle, the mid-summary variant, 5 turns",
    )
    args = parser.parse_args()
    variants: tuple[str, ...] = ("right after", "mid-summary")
    if args.variant:
        variants = (args.variant,)
    if args.quick:
        args.pairs, args.summary_seconds, args.background_idle, args.turns = 1, 2.0, 1.0, 5
        variants = ("mid-summary",)
    started = time.monotonic()
    print(
        f"load average {os.getloadavg()[0]:.2f}; {args.pairs} pair(s), summaries "
        f"{args.summary_seconds:g} s, background_idle {args.background_idle:g} s",
        flush=True,
    )
    print("| row | chatloop | baseline (same run) | ratio | target | met |")
    print("| --- | --- | --- | --- | --- | --- |", flush=True)
    measure(
        args.pairs,
        args.summary_seconds,
        args.background_idle,
        args.turns,
        variants,
        args.real,
        scripted=not args.real_only,
        keep=args.keep,
    )
    print(
        f"load average {os.getloadavg()[0]:.2f} at the end; "
        f"{time.monotonic() - started:.0f} s in all",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
