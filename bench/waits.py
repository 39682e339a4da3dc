"""The waits a person has for bookkeeping (issue 32): leaving a chat, a one-shot's end
after its answer, ``/fork`` back to the prompt. Each is timed with the summary
written in the background (``summaries: background``, the default) and with
``summaries: wait`` (how every chatloop before it worked: the same code that
writes the summary, in the chat), runs interleaved A B A B, against a scripted
OpenAI-compatible server whose summary requests take ``--summary-seconds`` (a slow
local model; 30 s by default) and whose other replies come at once.

    python -m bench.waits                       # 3 pairs, 30 s summaries
    python -m bench.waits --pairs 1 --summary-seconds 2    # a quick look
    python -m bench.waits --requests            # what each process asks of the server

Times are wall-clock seconds of the person's wait: Ctrl-D to the shell; the
answer's last word to the end of ``chatloop "q"`` (its pipeline); ``/fork`` to
the prompt. Bytecode is compiled first, for both contenders alike.

``--requests`` prints no times but what one chatloop process asks of a server
besides the person's request (issue 45 items 3 and 6): a one-shot question twice
with the same home, against a scripted server with a tokenizer that counts each
request: the template probes (one-token completions), the tokenizer discovery, the
other counts, the window asked, the streamed completions (the answer and the
summary). The first process measures the server; the second reads
``<home>/probes.json``.

A second table times a **compaction turn** (issue 32 item 3) on a 1,024-token window
with ``auto_compact: on``: Enter on the message whose turn compacts, to the prompt
back, against the median of the turns before it, with ``prepare_compaction: on``
and ``off`` (how chatloop worked before), A B A B. The person reads each reply until
a summary being prepared is ready (a pause as long as a summary takes), as the
issue's target assumes; with ``off`` nothing is prepared, so nobody waits.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pexpect

from bench.stream import wait_prompt
from bench.timing import CHATLOOP
from chatloop.store.fsio import wait_for_lock

HERE = Path(__file__).resolve().parent

ANSWER = "Zanzibar has warm water all year."
LAST = "year."
SUMMARY = """**Background Context:** Initial session.

**Current Session Summary:**
A question about Zanzibar.

**Topics Discussed:**
- Zanzibar

**Decisions Made:**
- None.

**Pending:**
- None."""


def serve(summary_seconds: float) -> tuple[ThreadingHTTPServer, str]:
    """The scripted server: summaries take ``summary_seconds``, anything else is answered
    at once (streamed in pieces, as a model would)."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            return

        def do_GET(self) -> None:
            self._send(json.dumps({"data": [{"id": "bench"}]}).encode(), "application/json")

        def do_POST(self) -> None:
            request = json.loads(self.rfile.read(int(self.headers["content-length"])))
            if not self.path.endswith("/chat/completions"):
                self.send_response(404)
                self.send_header("content-length", "0")
                self.end_headers()
                return
            last = str(request["messages"][-1]["content"])
            text = ANSWER
            # (a one-token piece of a summary's prompt, read ahead, is a short read)
            if "progressive summary" in last and request.get("max_tokens") != 1:
                time.sleep(summary_seconds)  # the slow model this bench is about
                text = SUMMARY
            if not request.get("stream"):
                body = {"choices": [{"index": 0, "message": {"content": text}}]}
                self._send(json.dumps(body).encode(), "application/json")
                return
            pieces = [text[i : i + 8] for i in range(0, len(text), 8)]
            events = [{"choices": [{"index": 0, "delta": {"content": p}}]} for p in pieces]
            events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
            data = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
            self._send(data.encode(), "text/event-stream")

        def _send(self, body: bytes, kind: str) -> None:
            self.send_response(200)
            self.send_header("content-type", kind)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/v1"


def _env(home: str, summaries: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHATLOOP_")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update(
        CHATLOOP_HOME=home,
        CHATLOOP_CONFIG="",
        CHATLOOP_TITLES="first",
        CHATLOOP_SUMMARIES=summaries,
        TERM="xterm",
    )
    return env


def _settle(home: str) -> None:
    """Wait until every worker of ``home`` is done, so one run never slows the next."""
    for path in Path(home).rglob("*.md"):
        wait_for_lock(path)


def _chat(url: str, home: str, summaries: str) -> pexpect.spawn:
    child = pexpect.spawn(
        CHATLOOP,
        ["--base-url", url, "--model", "bench"],
        env=_env(home, summaries),
        encoding="utf-8",
        timeout=600,
        dimensions=(40, 120),
    )
    wait_prompt(child)
    child.sendline("Tell me about Zanzibar.")
    child.expect_exact(LAST)
    wait_prompt(child)
    return child


def exit_wait(url: str, summaries: str) -> float:
    """Ctrl-D after one exchange, to the end of the program."""
    with tempfile.TemporaryDirectory() as home:
        child = _chat(url, home, summaries)
        started = time.monotonic()
        child.sendeof()
        child.expect(pexpect.EOF)
        took = time.monotonic() - started
        child.close()
        _settle(home)
    return took


def branch_wait(command: str, answered: bool = True) -> Callable[[str, str], float]:
    """``command`` (``/fork``, ``/retry``, ``/edit …``) after one exchange: to the prompt
    back (``answered``: once the branch's answer is in; the scripted one comes at once)."""

    def wait(url: str, summaries: str) -> float:
        with tempfile.TemporaryDirectory() as home:
            child = _chat(url, home, summaries)
            started = time.monotonic()
            child.sendline(command)
            child.expect_exact("Fork")
            if answered:
                child.expect_exact(LAST)
            wait_prompt(child)
            took = time.monotonic() - started
            child.sendeof()
            child.expect(pexpect.EOF)
            child.close()
            _settle(home)
        return took

    return wait


def pipe_wait(url: str, summaries: str) -> float:
    """``chatloop "q" | head -1``: from the line ``head`` passed on to the pipeline's end
    (the reader has what it wanted; chatloop must not hold the pipeline)."""
    with tempfile.TemporaryDirectory() as home:
        proc = subprocess.Popen(
            f'"{CHATLOOP}" --base-url {url} --model bench "Tell me about Zanzibar." | head -1',
            shell=True,
            env=_env(home, summaries),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        assert proc.stdout is not None
        proc.stdout.readline()
        started = time.monotonic()
        proc.wait()
        took = time.monotonic() - started
        proc.stdout.close()
        _settle(home)
    return took


def oneshot_wait(url: str, summaries: str) -> float:
    """``chatloop "q"``: from the answer's last word on stdout to the program's end."""
    with tempfile.TemporaryDirectory() as home:
        proc = subprocess.Popen(
            [CHATLOOP, "--base-url", url, "--model", "bench", "Tell me about Zanzibar."],
            env=_env(home, summaries),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        assert proc.stdout is not None
        seen = b""
        while LAST.encode() not in seen:
            piece = os.read(proc.stdout.fileno(), 4096)
            if not piece:
                raise RuntimeError("the one-shot ended before its answer")
            seen += piece
        started = time.monotonic()
        proc.wait()
        took = time.monotonic() - started
        proc.stdout.close()
        _settle(home)
    return took


WAITS: dict[str, Callable[[str, str], float]] = {
    "Ctrl-D to the shell": exit_wait,
    "one-shot: last word to its end": oneshot_wait,
    "/fork to the prompt": branch_wait("/fork", answered=False),
    "/retry to the prompt (answered)": branch_wait("/retry"),
    "/edit to the prompt (answered)": branch_wait("/edit Tell me about Pemba."),
    '`chatloop "q" | head -1`: line to end': pipe_wait,
}


NOTE = "the spice farms and the old stone town by the harbour of Zanzibar " * 4


Until = Callable[[Callable[[str], bool], float], bool]


def _watched(url: str, env: dict[str, str], real: bool) -> tuple[pexpect.spawn, Any, Until]:
    """The chat started in a pty of 160 x 40 read into a pyte screen, and ``until``:
    reads what it draws (answering its cursor-position queries) until ``seen`` is true
    of the screen's text or ``timeout`` seconds pass (False then)."""
    import pyte

    child = pexpect.spawn(
        CHATLOOP,
        ["--base-url", url] + ([] if real else ["--model", "bench"]),
        env=env,
        encoding="utf-8",
        timeout=600,
        dimensions=(40, 160),
    )
    screen = pyte.Screen(160, 40)
    stream = pyte.Stream(screen)

    def until(seen: Callable[[str], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if seen("\n".join(screen.display)):
                return True
            try:
                data = child.read_nonblocking(65536, timeout=0.05)
            except pexpect.TIMEOUT:
                continue
            stream.feed(data)
            if "\x1b[6n" in data:
                child.send(f"\x1b[{screen.cursor.y + 1};{screen.cursor.x + 1}R")
        return False

    return child, screen, until


def compaction_turn(
    url: str, prepare: str, summary_seconds: float, real: bool = False
) -> tuple[float, float, bool]:
    """(the compaction turn's wait, a normal turn's median, whether the prepared summary
    was used), reading the screen (pyte) for the toolbar's word on a summary. ``real``:
    ``url`` is a model server (its own model, a window of 2,048 tokens, given as a
    person would: llama-cpp-python's server does not report it; replies of at most 48
    tokens, as a short answer takes), not the scripted one."""
    with tempfile.TemporaryDirectory() as home:
        before = prepare == "off"  # how chatloop compacted before: the summary made then
        env = {
            **_env(home, "wait" if before else "background"),
            "CHATLOOP_AUTO_COMPACT": "on",
            "CHATLOOP_PREPARE_COMPACTION": prepare,
            "CHATLOOP_ACKNOWLEDGMENT": "model" if before else "written",
        }
        env["CHATLOOP_CONTEXT_WINDOW"] = "2048" if real else "1024"
        if real:
            env["CHATLOOP_MAX_TOKENS"] = "48"
        child, screen, until = _watched(url, env, real)

        until(lambda shown: "new session" in shown, 60)  # the first prompt's toolbar
        normal: list[float] = []
        compacted, used = 0.0, False
        for turn in range(1, 40):
            screen.reset()
            started = time.monotonic()
            child.sendline(f"{turn}. {NOTE}")
            back = f" {turn}q · "  # the toolbar once the prompt is back after this turn

            def returned(shown: str, back: str = back) -> bool:
                return "Continuing session" in shown or back in shown

            until(returned, 600)
            shown = "\n".join(screen.display)
            if "Continuing session" in shown:  # this turn compacted: its prompt is the child's
                until(lambda shown: "you>" in shown.split("Continuing session")[-1], 600)
                compacted = time.monotonic() - started
                used = "Using the summary prepared" in "\n".join(screen.display)
                break
            normal.append(time.monotonic() - started)
            if "preparing the summary" in shown:  # the person reads until it is ready
                until(lambda shown: "summary ready" in shown, summary_seconds * 3 + 30)
        child.sendeof()
        child.expect(pexpect.EOF)
        child.close()
        _settle(home)
    return compacted, statistics.median(normal), used


def nopause_turns(url: str, summaries: str, real: bool = False) -> tuple[float, float, float]:
    """(the compacting turn, the child's first turn, a normal turn's median), each Enter
    to the prompt back, with **no pause** before them (issue 45 item 5): messages are
    sent as soon as the prompt is back, so nothing is ever prepared ahead, and the
    compaction (``auto_compact: on``) makes its summary then: in the chat
    (``summaries: wait``, how chatloop worked before) or behind it (``background``:
    the child begins from the transcript's summary, its acknowledgment written
    without a call; ``wait`` runs with ``acknowledgment: model``, as before).
    ``real``: ``url`` is a model server, at 2,048 tokens."""
    with tempfile.TemporaryDirectory() as home:
        env = {
            **_env(home, summaries),
            "CHATLOOP_AUTO_COMPACT": "on",
            "CHATLOOP_PREPARE_COMPACTION": "on",
            "CHATLOOP_BACKGROUND_IDLE": "15",
            "CHATLOOP_CONTEXT_WINDOW": "2048" if real else "1024",
            # before: the model acknowledged the restoration in a call of its own
            "CHATLOOP_ACKNOWLEDGMENT": "written" if summaries == "background" else "model",
        }
        if real:
            env["CHATLOOP_MAX_TOKENS"] = "48"
        child, screen, until = _watched(url, env, real)

        until(lambda shown: "new session" in shown, 60)  # the first prompt's toolbar
        normal: list[float] = []
        compacting = first = 0.0
        for turn in range(1, 60):
            screen.reset()
            started = time.monotonic()
            child.sendline(f"{turn}. {NOTE}")
            back = f" {turn}q · "  # the toolbar once the prompt is back after this turn

            def returned(shown: str, back: str = back) -> bool:
                return "Continuing session" in shown or back in shown

            until(returned, 600)
            if "Continuing session" in "\n".join(screen.display):  # this turn compacted
                until(lambda shown: "you>" in shown.split("Continuing session")[-1], 600)
                compacting = time.monotonic() - started
                screen.reset()
                started = time.monotonic()
                child.sendline(f"{turn + 1}. {NOTE}")
                until(lambda shown: " 1q · " in shown, 600)  # the child's first turn
                first = time.monotonic() - started
                break
            normal.append(time.monotonic() - started)
        child.sendeof()
        child.expect(pexpect.EOF)
        child.close()
        _settle(home)
    return compacting, first, statistics.median(normal)


def nopause_figures(
    pairs: int, summary_seconds: float, real_url: str | None = None
) -> list[tuple[str, float, float]]:
    """(what, median with ``summaries: background``, median with ``wait``), A B A B,
    each as a ratio to that run's normal turn; against ``real_url`` when given."""
    server, url = serve(summary_seconds)
    url = real_url or url
    ratios: dict[str, dict[str, list[float]]] = {
        "background": {"compacting": [], "first": [], "normal": []},
        "wait": {"compacting": [], "first": [], "normal": []},
    }
    try:
        for _ in range(pairs):
            for summaries in ("background", "wait"):
                compacting, first, normal = nopause_turns(url, summaries, real_url is not None)
                got = ratios[summaries]
                got["compacting"].append(compacting / normal)
                got["first"].append(first / normal)
                got["normal"].append(normal)
    finally:
        server.shutdown()
        server.server_close()
    median = statistics.median
    new, old = ratios["background"], ratios["wait"]
    return [
        ("compacting turn / a normal turn", median(new["compacting"]), median(old["compacting"])),
        ("child's first turn / a normal turn", median(new["first"]), median(old["first"])),
        ("a normal turn (s)", median(new["normal"]), median(old["normal"])),
    ]


def compaction_figures(
    pairs: int, summary_seconds: float, real_url: str | None = None
) -> list[tuple[str, float, float]]:
    """(what, median with prepare_compaction on, median with off), A B A B; against the
    model server at ``real_url`` when given, else the scripted one."""
    server, url = serve(summary_seconds)
    url = real_url or url
    turns: dict[str, list[float]] = {"on": [], "off": []}
    normal: dict[str, list[float]] = {"on": [], "off": []}
    used = []
    try:
        for _ in range(pairs):
            for prepare in ("on", "off"):
                compacted, usual, prepared = compaction_turn(
                    url, prepare, summary_seconds, real_url is not None
                )
                turns[prepare].append(compacted)
                normal[prepare].append(usual)
                if prepare == "on":
                    used.append(prepared)
    finally:
        server.shutdown()
        server.server_close()
    print(f"  the prepared summary was used in {sum(used)} of {len(used)} runs")
    median = statistics.median
    return [
        ("compaction turn: Enter to prompt", median(turns["on"]), median(turns["off"])),
        ("a normal turn: Enter to prompt", median(normal["on"]), median(normal["off"])),
    ]


def measure(pairs: int, summary_seconds: float) -> list[tuple[str, float, float]]:
    """(what, median seconds with the background worker, median with ``wait``)."""
    compileall.compile_dir(str(HERE.parent / "chatloop"), quiet=1)
    server, url = serve(summary_seconds)
    rows = []
    try:
        for what, wait in WAITS.items():
            times: dict[str, list[float]] = {"background": [], "wait": []}
            for _ in range(pairs):  # A B A B
                for summaries in ("background", "wait"):
                    times[summaries].append(wait(url, summaries))
            rows.append(
                (what, statistics.median(times["background"]), statistics.median(times["wait"]))
            )
    finally:
        server.shutdown()
        server.server_close()
    return rows


def requests_rows() -> list[tuple[str, int, int]]:
    """What the first and the second one-shot (same home) ask of a scripted server."""
    from collections import Counter

    from tests.scripted_server import scripted_server

    runs: list[Counter[str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        home, project = Path(tmp, "home"), Path(tmp, "project")
        project.mkdir()
        asked: Counter[str] = Counter()
        seen: list[str] = []

        def reply(request: dict[str, object]) -> str:
            if request.get("max_tokens") == 1 and not request.get("stream"):
                asked["template probes (1-token completions)"] += 1
            elif request.get("stream"):
                asked["streamed completions"] += 1
            return SUMMARY if "progressive summary" in json.dumps(request) else ANSWER

        def tokenize(text: str) -> None:
            found = "tokenizer discovery" if text in ("", "a b") else "other token counts"
            asked[found] += 1

        with scripted_server(reply, seen=seen, tokenize=tokenize, template=(3, 2)) as url:
            for question in ("Tell me about Zanzibar", "And about Pemba?"):
                asked.clear()
                seen.clear()
                subprocess.run(
                    [CHATLOOP, "--base-url", url, question],
                    cwd=project,
                    env=_env(str(home), "wait"),
                    capture_output=True,
                    timeout=300,
                    check=True,
                )
                asked["window asked (GET /props)"] = seen.count("GET /props")
                asked["model list (GET /v1/models)"] = seen.count("GET /v1/models")
                runs.append(Counter(asked))
    first, second = runs
    return [(what, first[what], second[what]) for what in sorted(set(first) | set(second))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--summary-seconds", type=float, default=30.0)
    parser.add_argument(
        "--compaction-server",
        metavar="URL",
        help="time only the compaction rows, against this model server "
        "(e.g. llama_cpp.server --n_ctx 2048 at http://127.0.0.1:8765/v1)",
    )
    parser.add_argument(
        "--no-pause",
        action="store_true",
        help="only the compaction with no pause before it (issue 45 item 5): the compacting "
        "turn and the child's first, as ratios to a normal turn, background against wait "
        "(with --compaction-server: against that model server)",
    )
    parser.add_argument(
        "--requests",
        action="store_true",
        help="count what the first and second process ask of a server (no times)",
    )
    args = parser.parse_args()
    if args.requests:
        print(f"{'requests of one one-shot':38} {'first':>6} {'second':>7}")
        for what, first, second in requests_rows():
            print(f"{what:38} {first:6} {second:7}")
        return
    if args.no_pause:
        compileall.compile_dir(str(HERE.parent / "chatloop"), quiet=1)
        rows = nopause_figures(args.pairs, args.summary_seconds, args.compaction_server)
        where = (
            args.compaction_server or f"the scripted server ({args.summary_seconds:g} s summaries)"
        )
        print(f"no pause before the compaction, against {where}; medians of {args.pairs} pair(s)")
        print(f"{'':36} {'background':>11} {'wait (before)':>14}")
        for what, new, old in rows:
            unit = "s" if what.endswith("(s)") else "x"
            print(f"{what:36} {new:10.2f}{unit} {old:13.2f}{unit}")
        return
    if args.compaction_server:
        compileall.compile_dir(str(HERE.parent / "chatloop"), quiet=1)
        rows = compaction_figures(args.pairs, 120.0, args.compaction_server)
        print(f"compaction against {args.compaction_server}; medians of {args.pairs} pair(s)")
        for what, on, off in rows:
            print(f"{what:34} {on:10.2f}s {off:13.2f}s {on / off:7.3f}")
        return
    rows = measure(args.pairs, args.summary_seconds)
    print(f"summary requests take {args.summary_seconds:g} s; medians of {args.pairs} pair(s)")
    print(f"{'wait':34} {'background':>11} {'wait (before)':>14} {'ratio':>7}")
    for what, background, waited in rows:
        print(f"{what:34} {background:10.2f}s {waited:13.2f}s {background / waited:7.3f}")
    rows = compaction_figures(args.pairs, args.summary_seconds)
    print(
        f"{'compaction (1,024-token window)':34} {'prepared':>11} {'off (before)':>14} {'ratio':>7}"
    )
    for what, on, off in rows:
        print(f"{what:34} {on:10.2f}s {off:13.2f}s {on / off:7.3f}")


if __name__ == "__main__":
    main()
