"""Resume at the speed of a fresh start: the time from exec to the prompt for
``chatloop -c`` (continue the last session) against ``chatloop`` (a new one), in a
pseudo-terminal, against the real llama_cpp.server, runs interleaved A B A B.

A new session draws its prompt before it has loaded (chatloop.ui.start), so
its time to the banner (everything loaded, the server checked) is timed too: a
resume is ready to chat when its prompt is drawn.

Also checks, on every resume: the parent's last exchange is on screen before the
prompt, and leaving at once adds no session to the listing. Prints the medians,
the ratio and whether the target (at most 1.2x) is met.

    python -m bench.resume                 # 7 pairs
    python -m bench.resume --runs 3        # fewer
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pexpect

from bench.llama import llama_server
from bench.stream import leave
from bench.timing import CHATLOOP


def prompt_time(
    url: str, env: dict[str, str], cwd: Path, *extra: str, ready: str | None = None
) -> tuple[float, str, float]:
    """Seconds from exec to ``you>``, what was on screen by then, and (with ``ready``)
    the seconds until that text too (a new session's banner: everything loaded, the
    server checked); leaves with Ctrl-D."""
    started = time.perf_counter()
    child = pexpect.spawn(
        CHATLOOP,
        ["--base-url", url, *extra],
        env=env,
        cwd=str(cwd),
        encoding="utf-8",
        timeout=120,
        dimensions=(40, 200),
    )
    child.delaybeforesend = 0
    seen = []
    while child.expect_exact(["you>", "\x1b[6n"]) == 1:
        seen.append(child.before)
        child.send("\x1b[1;1R")
    took = time.perf_counter() - started
    seen.append(child.before)
    loaded = took
    if ready is not None:
        while child.expect_exact([ready, "\x1b[6n"]) == 1:
            child.send("\x1b[1;1R")
        loaded = time.perf_counter() - started
    leave(child)
    child.close()
    return took, "".join(seen), loaded


def listed(env: dict[str, str], cwd: Path) -> int:
    out = subprocess.run(
        [CHATLOOP, "sessions", "--limit", "100"],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return sum(1 for line in out.splitlines() if line[:4].strip().isdigit())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="pairs of runs (default 7)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, llama_server(2048) as url:
        home, cwd = Path(tmp) / "home", Path(tmp) / "project"
        cwd.mkdir()
        env = {
            **os.environ,
            "CHATLOOP_HOME": str(home),
            "TERM": "xterm",
            "CHATLOOP_CONFIG": "",
            "XDG_CONFIG_HOME": tmp,
            "CHATLOOP_MAX_TOKENS": "16",
        }
        child = pexpect.spawn(
            CHATLOOP,
            ["--base-url", url],
            env=env,
            cwd=str(cwd),
            encoding="utf-8",
            timeout=300,
            dimensions=(40, 200),
        )
        while child.expect_exact(["you>", "\x1b[6n"]) == 1:
            child.send("\x1b[1;1R")
        child.sendline("The harbour log for RESUME-BENCH says the tide was high at 04:30.")
        while child.expect_exact(["you>", "\x1b[6n"]) == 1:
            child.send("\x1b[1;1R")
        child.sendeof()
        child.expect(pexpect.EOF, timeout=600)
        before = listed(env, cwd)
        fresh: list[float] = []
        fresh_ready: list[float] = []  # until the new session's banner: ready to chat
        resumed: list[float] = []
        problems: list[str] = []
        prompt_time(url, env, cwd)  # warm the page cache and the server once
        for _ in range(args.runs):
            drawn, _, ready = prompt_time(url, env, cwd, ready="/help for commands")
            fresh.append(drawn)
            fresh_ready.append(ready)
            took, screen, _ = prompt_time(url, env, cwd, "-c")
            resumed.append(took)
            if "RESUME-BENCH" not in screen:
                problems.append("the parent's last exchange was not on screen before the prompt")
        after = listed(env, cwd)
        if after != before:
            problems.append(f"leaving at once changed the listing: {before} → {after} sessions")
    a, b = statistics.median(fresh), statistics.median(resumed)
    c = statistics.median(fresh_ready)
    ratio = statistics.median(r / f for r, f in zip(resumed, fresh, strict=True))
    like = statistics.median(r / f for r, f in zip(resumed, fresh_ready, strict=True))
    print(
        f"prompt drawn, new session     median {a * 1000:,.0f} ms  "
        f"({', '.join(f'{t * 1000:.0f}' for t in fresh)})"
    )
    print(
        f"banner shown, new session     median {c * 1000:,.0f} ms  "
        f"({', '.join(f'{t * 1000:.0f}' for t in fresh_ready)})"
    )
    print(
        f"prompt ready, chatloop -c     median {b * 1000:,.0f} ms  "
        f"({', '.join(f'{t * 1000:.0f}' for t in resumed)})"
    )
    print(
        f"-c ÷ new session's prompt {ratio:.2f}x (target <= 1.2x: "
        f"{'met' if ratio <= 1.2 else 'MISSED'}); -c ÷ new session's banner (both ready to "
        f"chat) {like:.2f}x; sessions listed {before} before and {after} after {args.runs} "
        "resumes left at once"
    )
    for problem in dict.fromkeys(problems):
        print(f"problem: {problem}")
    return 0 if ratio <= 1.2 and not problems else 1


if __name__ == "__main__":
    sys.exit(main())
