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

    python bench/person.py                          # 3 pairs, 30 s summaries, scripted
    python bench/person.py --real http://127.0.0.1:8799/v1   # and the real server
    python bench/person.py --quick                  # CI: 1 pair, 2 s summaries, 1 variant
    python bench/person.py --real URL --real-only --variant mid-summary --keep /tmp/homes
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import select
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import pexpect
import pyte

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from stream import CHATLOOP, cpu_seconds  # noqa: E402  (bench/stream.py)

from chatloop.format import parse_markdown  # noqa: E402
from chatloop.store.fsio import is_locked, lock_path, wait_for_lock  # noqa: E402

QUESTION = "Tell me about Pemba."
FIRST = "Mangroves"  # the scripted reply's first token: what the screen is watched for
REPLY = f"{FIRST} line the channel between Pemba and the mainland, and cloves grow inland."
SUMMARY = """**Background Context:** Initial session.

**Current Session Summary:**
A question about Pemba and its mangroves, answered in one line.

**Topics Discussed:**
- Pemba
- mangroves and cloves

**Decisions Made:**
- None.

**Pending:**
- Nothing left open; kittiwake."""
SUMMARY_LINES = [line for line in SUMMARY.splitlines() if line.strip()]
ROWS, COLUMNS = 60, 120
KEEP = ""  # --keep DIR: each series' home is copied there at its end


# -- the scripted one-slot server that queues


@dataclass
class Log:
    """What the scripted server did, in order: ``(monotonic time, event, kind)``, event
    ``queued``, ``started`` (it has the slot), ``served`` or ``closed`` (its client went
    first), kind ``summary``, ``stream`` (a person's reply) or ``call`` (anything else
    posted: a probe, a title)."""

    events: list[tuple[float, str, str]] = field(default_factory=list)
    changed: threading.Condition = field(default_factory=threading.Condition)

    def note(self, event: str, kind: str) -> None:
        with self.changed:
            self.events.append((time.monotonic(), event, kind))
            self.changed.notify_all()

    def count(self, event: str, kind: str | None = None) -> int:
        with self.changed:
            return sum(1 for _, e, k in self.events if e == event and kind in (None, k))

    def wait_for(self, check: Callable[[], bool], seconds: float) -> bool:
        with self.changed:
            return self.changed.wait_for(check, seconds)


def _gone(connection: socket.socket) -> bool:
    """True when the client closed its side (its request was read whole: anything
    readable now is the connection's end)."""
    readable, _, _ = select.select([connection], [], [], 0)
    if not readable:
        return False
    try:
        return connection.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


@contextmanager
def queueing_server(summary_seconds: float) -> Iterator[tuple[str, Log]]:
    """The scripted one-slot server (see the module doc); yields its base URL and log."""
    log = Log()
    slot = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            return

        def setup(self) -> None:
            super().setup()
            self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def _send(self, status: int, body: bytes, kind: str) -> None:
            self.send_response(status)
            self.send_header("content-type", kind)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # the model list: answered at once, busy or not
            listed = {"object": "list", "data": [{"id": "bench", "object": "model"}]}
            self._send(200, json.dumps(listed).encode(), "application/json")

        def do_POST(self) -> None:
            request = json.loads(self.rfile.read(int(self.headers["content-length"])))
            if not self.path.endswith("/chat/completions"):  # no tokenizer, as Ollama's /v1
                self._send(404, b'{"detail": "Not Found"}', "application/json")
                return
            summary = "progressive summary" in json.dumps(request["messages"][-1])
            kind = "summary" if summary else "stream" if request.get("stream") else "call"
            log.note("queued", kind)
            while not slot.acquire(timeout=0.01):
                if _gone(self.connection):
                    log.note("closed", kind)
                    self.close_connection = True
                    return
            try:
                log.note("started", kind)
                if self._answer(request, summary):
                    log.note("served", kind)
                else:
                    log.note("closed", kind)
                    self.close_connection = True
            finally:
                slot.release()

        def _answer(self, request: dict[str, object], summary: bool) -> bool:
            """Send the reply; False when the client went first (generation stopped)."""
            text = SUMMARY if summary else REPLY
            if not request.get("stream"):
                body = {
                    "choices": [{"index": 0, "message": {"content": text}}],
                    "usage": {"prompt_tokens": 40, "completion_tokens": 12},
                }
                try:
                    self._send(200, json.dumps(body).encode(), "application/json")
                except OSError:
                    return False
                return True
            pieces = [text[i : i + 12] for i in range(0, len(text), 12)] if summary else [text]
            pace = summary_seconds / len(pieces) if summary else 0.0
            try:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                for piece in pieces:
                    if pace:
                        deadline = time.monotonic() + pace
                        while (left := deadline - time.monotonic()) > 0:
                            if _gone(self.connection):
                                return False
                            time.sleep(min(left, 0.02))
                    if _gone(self.connection):
                        return False
                    delta = {"choices": [{"index": 0, "delta": {"content": piece}}]}
                    self._chunk(f"data: {json.dumps(delta)}\n\n")
                end = {
                    "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 40, "completion_tokens": len(pieces) * 3},
                }
                self._chunk(f"data: {json.dumps(end)}\n\ndata: [DONE]\n\n")
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except OSError:
                return False
            return True

        def _chunk(self, text: str) -> None:
            data = text.encode()
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

    class Server(ThreadingHTTPServer):
        daemon_threads = True

        def handle_error(self, request: object, client_address: object) -> None:
            return  # a client that went away: the log says what mattered

    server = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", log
    finally:
        server.shutdown()
        server.server_close()


# -- a pseudo-terminal read as a screen


class Term:
    """A child in a pseudo-terminal and the screen it draws (pyte); cursor-position
    requests answered as a terminal does."""

    def __init__(self, command: str, args: list[str], env: dict[str, str], cwd: str) -> None:
        self.spawned = time.monotonic()
        self.child = pexpect.spawn(
            command,
            args,
            env=env,
            cwd=cwd,
            encoding="utf-8",
            timeout=600,
            dimensions=(ROWS, COLUMNS),
        )
        self.child.delaybeforesend = 0
        self.screen = pyte.Screen(COLUMNS, ROWS)
        self.stream = pyte.Stream(self.screen)

    def until(self, seen: Callable[[pyte.Screen], bool], timeout: float = 600) -> float:
        """Read until ``seen(screen)``; returns the monotonic time it was first true."""
        deadline = time.monotonic() + timeout
        while not seen(self.screen):
            if time.monotonic() > deadline:
                shown = "\n".join(line.rstrip() for line in self.screen.display).strip()
                raise TimeoutError(f"not on the screen after {timeout:g} s:\n{shown}")
            try:
                data = self.child.read_nonblocking(65536, timeout=0.5)
            except pexpect.TIMEOUT:
                continue
            self.stream.feed(data)
            if "\x1b[6n" in data:
                cursor = self.screen.cursor
                self.child.send(f"\x1b[{cursor.y + 1};{cursor.x + 1}R")
        return time.monotonic()

    def leave(self) -> None:
        """Ctrl-D (again after a quiet moment: one sent as the prompt sets up can be
        lost) and wait for the end."""
        for _ in range(10):
            self.child.sendeof()
            if self.child.expect([pexpect.EOF, pexpect.TIMEOUT], timeout=5) == 0:
                break
        self.child.close()


def prompt_drawn(screen: pyte.Screen) -> bool:
    """``you>`` at the start of a line."""
    return any(line.startswith("you>") for line in screen.display)


def banner(screen: pyte.Screen) -> bool:
    """chatloop's banner: the agent, the backend and the server checked."""
    return any("chatloop · " in line for line in screen.display)


def reply_begun(question: str) -> Callable[[pyte.Screen], bool]:
    """True once a line below ``question``'s shows text of a reply: in the terminal's
    default colour, not chatloop's own (the banner, its notes, the toolbar, a prompt)."""

    def seen(screen: pyte.Screen) -> bool:
        rows = screen.display
        asked = next((i for i, line in enumerate(rows) if question in line), None)
        if asked is None:
            return False
        for y in range(asked + 1, ROWS):
            text = rows[y].strip()
            if not text or text.startswith(("you>", "(starting")) or "chatloop · " in text:
                continue
            x = len(rows[y]) - len(rows[y].lstrip())
            char = screen.buffer[y][x]
            if char.fg == "default" and not char.reverse:
                return True
        return False

    return seen


def turn_ended(queries: int) -> Callable[[pyte.Screen], bool]:
    """The toolbar once the prompt is back after ``queries`` messages."""
    return lambda screen: any(f" {queries}q · " in line for line in screen.display)


# -- the home, its workers, its files


def environment(home: Path, idle: float, real: bool) -> dict[str, str]:
    """chatloop's environment: defaults but the home, no config file, the window a
    person states (2,048), ``background_idle``; short replies from the real model."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHATLOOP_")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update(
        CHATLOOP_HOME=str(home),
        CHATLOOP_CONFIG="",
        CHATLOOP_CONTEXT_WINDOW="2048",
        CHATLOOP_BACKGROUND_IDLE=f"{idle:g}",
        TERM="xterm",
    )
    if real:
        env["CHATLOOP_MAX_TOKENS"] = "48"
    return env


def settle(home: Path) -> None:
    """Wait until every worker of ``home`` is done (every session's lock let go)."""
    for path in home.rglob("*.md"):
        wait_for_lock(path)


def holder(path: Path) -> int | None:
    """The pid named in ``path``'s lock file (its summary worker, after a hand-off)."""
    try:
        words = lock_path(path).read_text().split()
    except OSError:
        return None
    return int(words[0]) if words and words[0].isdigit() else None


def connected(pid: int, port: int) -> bool:
    """True while process ``pid`` has a TCP connection established to ``port`` on this
    machine (its request under way)."""
    try:
        inodes = {
            os.readlink(f"/proc/{pid}/fd/{fd}")[8:-1]
            for fd in os.listdir(f"/proc/{pid}/fd")
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:[")
        }
    except OSError:
        return False
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            remote, state, inode = fields[2], fields[3], fields[9]
            if state == "01" and int(remote.rsplit(":", 1)[1], 16) == port and inode in inodes:
                return True
    return False


def saved_cut(home: Path, real: bool) -> tuple[int, int, int]:
    """(summaries saved cut, the model's summaries, fallbacks) over every file of
    ``home``. Cut: marked as the model's, yet not the scripted summary whole (every
    line of it); against a real model, a summary without its last heading."""
    cut = model = fallback = 0
    for path in home.rglob("*.md"):
        session = parse_markdown(path.read_bytes()).session
        said = session.meta.summary
        text = session.summary.text if session.summary is not None else ""
        if said == "fallback":
            fallback += 1
        if said != "model":
            continue
        model += 1
        whole = "Pending" in text if real else all(line in text for line in SUMMARY_LINES)
        cut += not whole
    return cut, model, fallback


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
) -> Series:
    """Row 1 (and 2) for one variant, ``pairs`` pairs A B, in one home."""
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
        if KEEP:  # (--keep: the homes, to read what was saved)
            shutil.copytree(home, Path(KEEP, f"{'real' if real else 'scripted'}-{variant}"))
    return found


# -- row 3

LOOP = '''"""A minimal chat loop: one httpx.Client kept open, a streamed POST a turn."""
import json
import sys

import httpx

url, model = sys.argv[1], sys.argv[2]
client = httpx.Client(timeout=None)
messages = []
while True:
    try:
        line = input("you> ")
    except EOFError:
        break
    messages.append({"role": "user", "content": line})
    said = []
    body = {"model": model, "messages": messages, "stream": True}
    with client.stream("POST", url + "/chat/completions", json=body) as reply:
        for raw in reply.iter_lines():
            if not raw.startswith("data: ") or raw == "data: [DONE]":
                continue
            choices = json.loads(raw[6:]).get("choices") or [{}]
            piece = choices[0].get("delta", {}).get("content")
            if piece:
                said.append(piece)
                sys.stdout.write(piece)
                sys.stdout.flush()
    print()
    messages.append({"role": "assistant", "content": "".join(said)})
'''


@dataclass
class Turns:
    """Row 3: Enter to the first token on screen (s) and CPU per turn (s), each side."""

    ours: list[float] = field(default_factory=list)
    loop: list[float] = field(default_factory=list)
    ours_cpu: float = 0.0
    loop_cpu: float = 0.0
    requests: list[int] = field(default_factory=list)
    ours_sent: list[float] = field(default_factory=list)  # Enter to the request at the server
    loop_sent: list[float] = field(default_factory=list)


def enter_to_token(
    term: Term, text: str, back: Callable[[pyte.Screen], bool], log: Log | None = None
) -> tuple[float, float]:
    """Seconds from sending ``text`` to its reply's first token on the screen (then on
    to the prompt back, ``back``), and from sending it to its request at the scripted
    server (``log``'s first ``queued`` after it; 0 without ``log``)."""
    term.screen.reset()
    before = len(log.events) if log is not None else 0
    started = time.monotonic()
    term.child.sendline(text)
    seen = term.until(lambda screen: any(FIRST in line for line in screen.display))
    term.until(back)
    arrived = started
    if log is not None:
        arrived = next(t for t, e, _ in log.events[before:] if e == "queued")
    return seen - started, arrived - started


def turns(count: int) -> Turns:
    """``count`` turns of a chat and of the minimal loop, interleaved, after one untimed
    turn each (the chat's first turn asks for a title), against the scripted server."""
    found = Turns()
    with queueing_server(1.0) as (url, log), tempfile.TemporaryDirectory() as tmp:
        home, cwd = Path(tmp, "home"), Path(tmp, "project")
        cwd.mkdir()
        script = Path(tmp, "person_loop.py")
        script.write_text(LOOP)
        compileall.compile_file(str(script), quiet=1)
        env = environment(home, 0.5, False)  # (no session ends before the last turn)
        chat = Term(CHATLOOP, ["--base-url", url, "--model", "bench"], env, str(cwd))
        chat.until(prompt_drawn)
        chat.until(banner)
        code = f"import sys; sys.path.insert(0, {tmp!r}); import person_loop"
        loop = Term(sys.executable, ["-c", code, url, "bench"], env, str(cwd))
        loop.until(prompt_drawn)
        prompt_back = prompt_drawn
        enter_to_token(chat, "message 0", turn_ended(1))
        enter_to_token(loop, "message 0", prompt_back)
        ours_cpu = loop_cpu = 0.0
        for n in range(1, count + 1):
            asked = len(log.events)
            cpu = cpu_seconds(chat.child.pid)
            seen, sent = enter_to_token(chat, f"message {n}", turn_ended(n + 1), log)
            ours_cpu += cpu_seconds(chat.child.pid) - cpu
            found.ours.append(seen)
            found.ours_sent.append(sent)
            found.requests.append(sum(1 for _, e, _ in log.events[asked:] if e == "queued"))
            cpu = cpu_seconds(loop.child.pid)
            seen, sent = enter_to_token(loop, f"message {n}", prompt_back, log)
            loop_cpu += cpu_seconds(loop.child.pid) - cpu
            found.loop.append(seen)
            found.loop_sent.append(sent)
        found.ours_cpu, found.loop_cpu = ours_cpu / count, loop_cpu / count
        loop.leave()
        chat.leave()
        settle(home)
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
) -> list[Row]:
    """Every row: rows 1 and 2 for each variant on the scripted server (and the real one
    when ``real`` is its URL), then row 3; each printed as it comes with ``show``;
    without ``scripted``, only the real server's rows."""
    compileall.compile_dir(str(HERE.parent / "chatloop"), quiet=1)
    rows: list[Row] = []
    with queueing_server(summary_seconds) as (url, log):
        for variant in variants if scripted else ():
            found = series(url, log, variant, pairs, idle, summary_seconds)
            rows += series_rows(found, "scripted", idle, summary_seconds)
            if show:
                print_rows(rows[-5:])
    if real:
        for variant in variants:
            found = series(real, None, variant, pairs, idle, 0.0)
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
    global KEEP
    KEEP = args.keep
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
    )
    print(
        f"load average {os.getloadavg()[0]:.2f} at the end; "
        f"{time.monotonic() - started:.0f} s in all",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
