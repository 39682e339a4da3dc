"""Client CPU per turn as a conversation grows: turns 6-25 against turns 491-510.

`chatloop` runs in a pseudo-terminal against bench/stream.py's scripted
OpenAI-compatible server (short replies, no delay), with a window large enough
that nothing is compacted, so every turn sends the whole conversation: what
grows is the client's own work per turn (building the request, counting,
recording). The chatloop process's CPU time (/proc/PID/stat) is read before the
first turn of each window and after its last; the ratio is the late window's
CPU per turn ÷ the early window's. Bytecode is compiled first.

    python -m bench.turns               # 510 turns
    python -m bench.turns --turns 120   # a quick look (turns 6-25 and the last 20)
"""

from __future__ import annotations

import argparse
import compileall
import os
import sys
import tempfile
from pathlib import Path

import pexpect

from bench.stream import Script, leave, serve, wait_prompt
from bench.timing import CHATLOOP, cpu_seconds

WINDOW = 20  # turns per measured window


def measure(turns: int) -> tuple[float, float]:
    """The chatloop process's CPU seconds per turn at turns 6-25 and at the last 20 of
    ``turns``."""
    script = Script()
    script.tokens = 12
    server, url = serve(script)
    early_at, late_at = 6, turns - WINDOW + 1  # from 6: the first turns load the rest
    cpu: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as home:
        env = {
            **os.environ,
            "CHATLOOP_HOME": home,
            "TERM": "xterm",
            "CHATLOOP_CONFIG": "",
            "CHATLOOP_CONTEXT_WINDOW": "4000000",
            "CHATLOOP_TITLES": "first",
        }
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        child = pexpect.spawn(
            CHATLOOP,
            ["--base-url", url, "--model", "bench"],
            env=env,
            encoding="utf-8",
            timeout=120,
            dimensions=(40, 120),
        )
        child.delaybeforesend = 0
        wait_prompt(child)
        for turn in range(1, turns + 1):
            if turn in (early_at, late_at):
                cpu[f"start {turn}"] = cpu_seconds(child.pid)
            child.sendline(f"question number {turn}: what comes after {turn}?")
            child.expect_exact("w11")
            wait_prompt(child)
            if turn in (early_at + WINDOW - 1, turns):
                cpu[f"end {turn}"] = cpu_seconds(child.pid)
        leave(child)
    server.shutdown()
    early = (cpu[f"end {early_at + WINDOW - 1}"] - cpu[f"start {early_at}"]) / WINDOW
    late = (cpu[f"end {turns}"] - cpu[f"start {late_at}"]) / WINDOW
    return early, late


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=510)
    args = parser.parse_args()
    import chatloop as package

    compileall.compile_dir(str(Path(package.__file__).parent), quiet=1)
    early, late = measure(args.turns)
    ratio = late / early if early else float("nan")
    print(f"load average {os.getloadavg()[0]:.2f}")
    print(
        f"client CPU per turn: {early * 1000:.1f} ms at turns 6-25, {late * 1000:.1f} ms at "
        f"turns {args.turns - WINDOW + 1}-{args.turns} ({ratio:.2f}x; target <= 1.2x: "
        f"{'met' if ratio <= 1.2 else 'MISSED'})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
