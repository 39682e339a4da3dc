"""Issue 45, items 1, 2 and 4: on a server the person uses, the person goes first
(``chat.sharing``). The summary worker of a chat that ended yields its request the
moment the person's process marks the server, redoes the summary whole once the
person is idle, and at most one worker of a home asks a server at a time.

The server here is a one-slot server that queues, as Ollama does: it answers one
chat request at a time, the others wait for the slot in arrival order, and a
request whose client closed its connection (while queued, or while its prompt is
"being read") is dropped. A summary request can be held in its slot, sending
nothing, as a long prompt being read holds it. Everything asserted is what the
server recorded, in order; nothing is timed (the waits are on events, with long
deadlines for a busy machine)."""

from __future__ import annotations

import fcntl
import json
import os
import select
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pexpect
import pytest

from chatloop.chat import sharing
from chatloop.format import Session, parse_markdown
from chatloop.store.fsio import wait_for_lock
from tests.fakes import STRUCTURED
from tests.pty_driver import chatloop_bin, environment

pytestmark = pytest.mark.e2e

HOLD_AT_MOST = 30.0  # a held summary answers after this even if never let go (old code)


class OneSlot:
    """The server's state and its log of what happened, in order: ``(event, what)``
    with event ``queued``, ``started`` (it has the slot), ``served`` (answered whole)
    or ``closed`` (its client went away first), and ``what`` the request's last
    user text (a summary: ``summary of <the first question it summarizes>``)."""

    def __init__(self) -> None:
        self.log: list[tuple[str, str]] = []
        self.changed = threading.Condition()
        self.slot = threading.Lock()
        self.hold = threading.Event()  # set: a summary request keeps the slot until cleared
        self.person_seconds = 0.0  # how long the model takes over a person's reply
        self.hold_once = False  # a held summary whose client goes clears ``hold``
        self.in_flight = 0  # summary requests arrived and not yet served or closed
        self.most_in_flight = 0

    def note(self, event: str, what: str) -> None:
        with self.changed:
            self.log.append((event, what))
            self.changed.notify_all()

    def wait_for(self, check: Callable[[list[tuple[str, str]]], bool], seconds: float = 90) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: check(self.log), seconds), self.log

    def count(self, event: str, what: str) -> int:
        with self.changed:
            return self.log.count((event, what))


def _what(request: dict[str, object]) -> str:
    messages = request.get("messages")
    assert isinstance(messages, list)
    last = str(messages[-1]["content"])
    if "progressive summary" not in last:
        return last
    for question in ("How often should I water basil?", "And in winter?"):
        if question in last:
            return f"summary of {question}"
    return "summary of " + next(
        (line for line in last.splitlines() if "Question " in line), "something"
    )


def _gone(connection: socket.socket) -> bool:
    """True when the client closed its side (the request was read whole: anything
    readable now is the end of the connection)."""
    readable, _, _ = select.select([connection], [], [], 0)
    if not readable:
        return False
    try:
        return connection.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


@contextmanager
def one_slot_server() -> Iterator[tuple[str, OneSlot]]:
    state = OneSlot()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            return

        def _send(self, status: int, body: bytes, kind: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            listed = {"object": "list", "data": [{"id": "scripted", "object": "model"}]}
            self._send(200, json.dumps(listed).encode(), "application/json")

        def do_POST(self) -> None:
            request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if not self.path.endswith("/chat/completions"):  # no tokenizer
                self._send(404, b'{"detail": "Not Found"}', "application/json")
                return
            what = _what(request)
            if what.startswith("summary of ") and request.get("max_tokens") == 1:
                what = f"read ahead: {what}"  # (a piece of a worker's prompt: short, not held)
            summary = what.startswith("summary of ")
            if summary:
                with state.changed:
                    state.in_flight += 1
                    state.most_in_flight = max(state.most_in_flight, state.in_flight)
            try:
                self._answer(request, what, summary)
            finally:
                if summary:
                    with state.changed:
                        state.in_flight -= 1

        def _answer(self, request: dict[str, object], what: str, summary: bool) -> None:
            state.note("queued", what)
            while not state.slot.acquire(timeout=0.02):
                if _gone(self.connection):
                    state.note("closed", what)
                    self.close_connection = True
                    return
            try:
                state.note("started", what)
                if summary and state.hold.is_set():  # a long prompt being read: no byte
                    waited = 0.0
                    while state.hold.is_set():
                        threading.Event().wait(0.02)
                        waited += 0.02
                        if _gone(self.connection):
                            if state.hold_once:
                                state.hold.clear()
                            state.note("closed", what)
                            self.close_connection = True
                            return
                        if waited >= HOLD_AT_MOST:
                            break
                if not summary and state.person_seconds:  # a slow model (the server's pace)
                    threading.Event().wait(state.person_seconds)
                text = STRUCTURED if summary else f"Reply to: {what}"
                chunks = [{"choices": [{"index": 0, "delta": {"content": text}}]}]
                chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
                usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
                chunks.append({"choices": [], "usage": usage})
                events = [f"data: {json.dumps(c)}\n\n" for c in chunks] + ["data: [DONE]\n\n"]
                try:
                    self._send(200, "".join(events).encode(), "text/event-stream")
                except OSError:
                    state.note("closed", what)
                    return
                state.note("served", what)
            finally:
                state.slot.release()

    class Server(ThreadingHTTPServer):
        daemon_threads = True

        def handle_error(self, request: object, client_address: object) -> None:
            return  # (a client that went away: the log says what mattered)

    server = Server(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", state
    finally:
        state.hold.clear()
        server.shutdown()
        server.server_close()


def _env(home: Path, **settings: str) -> dict[str, str]:
    env = {**environment(home, 16), "CHATLOOP_SUMMARIES": "background"}
    env.update({f"CHATLOOP_{k.upper()}": v for k, v in settings.items()})
    return env


def _one_shot(
    url: str, home: Path, cwd: Path, question: str, **settings: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [chatloop_bin(), "--base-url", url, question],
        cwd=cwd,
        env=_env(home, **settings),
        capture_output=True,
        text=True,
        timeout=120,
    )


def _read(path: Path) -> Session:
    return parse_markdown(path.read_bytes()).session


def _sessions(home: Path) -> list[Path]:
    return sorted(home.rglob("*.md"))


def _the_one_asking(home: Path, question: str) -> Path:
    (found,) = [  # (a continuation carries its parent's messages: not it)
        p
        for p in _sessions(home)
        if not _read(p).meta.parent_id and any(m.text == question for m in _read(p).messages)
    ]
    return found


def _a_summary_held_then_a_one_shot(
    url: str, state: OneSlot, home: Path, project: Path
) -> subprocess.CompletedProcess[str]:
    """A one-shot that ends, its worker's summary held in the server's slot (a long
    prompt being read), then a second one-shot at once. Returns the second's result."""
    state.hold.set()
    first = _one_shot(url, home, project, "How often should I water basil?")
    assert first.returncode == 0, first.stderr
    state.wait_for(lambda log: ("started", "summary of How often should I water basil?") in log)
    second = _one_shot(url, home, project, "And in winter?")
    state.hold.clear()  # (the summaries held are answered now, and any asked later)
    return second


def test_the_persons_one_shot_goes_first_and_the_summary_connection_is_closed(
    chatloop_home: Path, project: Path
) -> None:
    """The worker's summary holds the one slot; a one-shot asked then is answered
    without waiting for it: the worker closed its request's connection (the server
    saw it go) before the person's request had the slot."""
    with one_slot_server() as (url, state):
        second = _a_summary_held_then_a_one_shot(url, state, chatloop_home, project)
        assert second.returncode == 0, second.stderr
        assert second.stdout.strip() == "Reply to: And in winter?"
        log = list(state.log)
        for path in _sessions(chatloop_home):
            wait_for_lock(path)
    summary = "summary of How often should I water basil?"
    first_summary = log.index(("started", summary))
    closed = log.index(("closed", summary))
    served = log.index(("served", "And in winter?"))
    assert first_summary < closed < served, log
    assert ("served", summary) not in log[:served]  # never answered before the person


def test_a_yielded_summary_is_written_later_whole(chatloop_home: Path, project: Path) -> None:
    """The summary that yielded is asked again once the person is idle, and the file
    gets the model's whole summary (never a cut one); both sessions end summarized."""
    with one_slot_server() as (url, state):
        second = _a_summary_held_then_a_one_shot(url, state, chatloop_home, project)
        assert second.returncode == 0, second.stderr
        paths = _sessions(chatloop_home)
        for path in paths:
            wait_for_lock(path)
        summary = "summary of How often should I water basil?"
        assert state.count("closed", summary) >= 1 and state.count("served", summary) == 1
        log = list(state.log)
    assert log.index(("served", "And in winter?")) < log.index(("served", summary))
    assert len(paths) == 2
    for path in paths:
        session = _read(path)
        assert session.meta.status == "closed" and session.meta.summary == "model", path
        assert session.summary is not None
        assert "Water every 2 days, 250 ml each" in session.summary.text  # the whole reply
        assert "Check drainage" in session.summary.text


def test_no_summary_is_asked_in_the_middle_of_a_reply_longer_than_the_idle_time(
    chatloop_home: Path, project: Path
) -> None:
    """The person's reply takes 2 s (a slow model), ten times ``background_idle``: the
    worker of the previous one-shot, which yielded to it, does not ask again while it
    runs (a mark alone is one moment; the turn holds the mark until it ends), and asks
    after."""
    with one_slot_server() as (url, state):
        state.hold.set()
        state.hold_once = True  # (held until the worker yields; answered at once after)
        first = _one_shot(url, chatloop_home, project, "How often should I water basil?")
        assert first.returncode == 0, first.stderr
        state.wait_for(lambda log: ("started", "summary of How often should I water basil?") in log)
        state.person_seconds = 2.0
        second = _one_shot(url, chatloop_home, project, "And in winter?")
        assert second.returncode == 0, second.stderr
        for path in _sessions(chatloop_home):
            wait_for_lock(path)
        log = list(state.log)
    during = log[log.index(("queued", "And in winter?")) : log.index(("served", "And in winter?"))]
    # asked meanwhile: none (the held one's connection may close in that time: it is the
    # worker yielding to the start-up mark, which it sees within POLL_SECONDS, on a busy
    # machine after the person's request is queued)
    asked = [e for e in during if e[0] != "closed" and e[1].startswith("summary of ")]
    assert not asked, log
    for path in _sessions(chatloop_home):
        assert _read(path).meta.summary == "model", path


def test_a_message_typed_in_a_chat_stops_the_summary_being_written(
    chatloop_home: Path, project: Path
) -> None:
    """The REPL: after a one-shot's hand-off, a chat is opened (its start marks the
    home, its check the server: the summary yields to each), the person says nothing
    for a moment (the worker asks again, held), then types: the turn's mark closes the
    summary's connection, and the reply comes first."""
    from tests.pty_driver import ready, spawn, wait

    summary = "summary of How often should I water basil?"
    with one_slot_server() as (url, state):
        state.hold.set()
        first = _one_shot(url, chatloop_home, project, "How often should I water basil?")
        assert first.returncode == 0, first.stderr
        state.wait_for(lambda log: log.count(("started", summary)) == 1)
        child = spawn(url, chatloop_home, project, 16, summaries="background")
        state.wait_for(lambda log: log.count(("closed", summary)) >= 1)  # the start's marks
        state.wait_for(  # asked again once the person was idle: a try under way, held
            lambda log: log.count(("started", summary)) > log.count(("closed", summary))
        )
        child.sendline("And in winter?")
        wait(child, ready(1))
        state.wait_for(lambda log: ("served", "And in winter?") in log)
        log = list(state.log)
        state.hold.clear()
        child.sendeof()
        child.expect(pexpect.EOF)
        child.close()
        for path in _sessions(chatloop_home):
            wait_for_lock(path)
    served = log.index(("served", "And in winter?"))
    tries = [i for i, e in enumerate(log[:served]) if e == ("started", summary)]
    closes = [i for i, e in enumerate(log[:served]) if e == ("closed", summary)]
    assert len(tries) >= 2 and closes[0] < tries[-1], log  # yielded at the start, asked again
    assert any(tries[-1] < i < served for i in closes), log  # that try yielded to the turn
    parent = _read(_the_one_asking(chatloop_home, "How often should I water basil?"))
    assert parent.meta.status == "closed" and parent.meta.summary == "model"


def test_ten_one_shots_leave_one_worker_asking_at_a_time_and_every_session_summarized(
    chatloop_home: Path, project: Path
) -> None:
    """Ten one-shots in a row, every summary held while they run: no one-shot's request
    waits for a summary to be answered, the server never has more than one summary
    request in hand (arrived and not yet answered or closed), and at the end every
    session carries the model's summary."""
    with one_slot_server() as (url, state):
        state.hold.set()
        for n in range(10):
            question = f"Question {n}: how tall is basil?"
            done = _one_shot(url, chatloop_home, project, question)
            assert done.returncode == 0, done.stderr
            assert done.stdout.strip() == f"Reply to: {question}"
            log = list(state.log)
            waited = log[log.index(("queued", question)) : log.index(("served", question))]
            assert not [e for e in waited if e[0] == "served"], log  # nothing went first
        state.hold.clear()
        paths = _sessions(chatloop_home)
        for path in paths:
            wait_for_lock(path)
        most = state.most_in_flight
    assert most <= 1, state.log
    assert len(paths) == 10
    for path in paths:
        session = _read(path)
        assert session.meta.status == "closed" and session.meta.summary == "model", path


def test_a_worker_that_never_gets_its_turn_writes_the_fallback_at_its_bound(
    chatloop_home: Path, project: Path
) -> None:
    """Another worker holds the server's turn and never lets go (a stuck worker: the
    test holds its lock): this worker waits ``summary_worker_patience`` seconds (2
    here), then writes the summary built from the transcript and ends; the model is
    never asked for it."""
    with one_slot_server() as (url, state):
        turn = chatloop_home / ".sharing" / f"{sharing.key('openai', url)}.turn"
        turn.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(turn, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            done = _one_shot(
                url,
                chatloop_home,
                project,
                "How often should I water basil?",
                summary_worker_patience="2",
            )
            assert done.returncode == 0, done.stderr
            (path,) = _sessions(chatloop_home)
            ended = threading.Thread(target=wait_for_lock, args=(path,), daemon=True)
            ended.start()
            ended.join(90)
            assert not ended.is_alive(), "the worker still waits for its turn"
        finally:
            os.close(fd)
        asked = [e for e in state.log if e[1].startswith("summary of ")]
    session = _read(path)
    assert session.meta.status == "closed" and session.meta.summary == "fallback"
    assert session.summary is not None and "water basil" in session.summary.text
    assert asked == []  # the model was never asked


def test_continue_after_a_one_shot_steps_back_and_gets_the_summary_being_written(
    chatloop_home: Path, project: Path
) -> None:
    """`-c` right after a one-shot marks the server at its start-up check, then waits
    for the very summary the worker writes: it steps back (its mark counts as idle), so
    the worker asks now, not ``background_idle`` (100 s here) later, and the
    continuation starts from the model's summary (past ``summary_wait``, 60 s here, it
    would start from one built from the transcript)."""
    summary = "summary of How often should I water basil?"
    with one_slot_server() as (url, state):
        first = _one_shot(
            url, chatloop_home, project, "How often should I water basil?", background_idle="100"
        )
        assert first.returncode == 0, first.stderr
        again = subprocess.run(
            [chatloop_bin(), "--base-url", url, "-c", "And in winter?"],
            cwd=project,
            env=_env(chatloop_home, summary_wait="60"),  # (its own worker: 0.2 s idle)
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert again.returncode == 0, again.stderr
        assert "still being written" not in again.stderr
        for path in _sessions(chatloop_home):
            wait_for_lock(path)
        log = list(state.log)
    assert log.index(("served", summary)) < log.index(("served", "And in winter?")), log
    (child,) = [s for s in map(_read, _sessions(chatloop_home)) if s.meta.parent_id]
    parent = _read(_the_one_asking(chatloop_home, "How often should I water basil?"))
    assert parent.meta.summary == "model"
    assert child.messages[0].restore and "pots/basil.md" in child.messages[0].text  # (model's)


@pytest.mark.parametrize("pooled_first", [False, True])
def test_a_cancel_closes_a_request_the_server_has_not_begun_to_answer(pooled_first: bool) -> None:
    """The backend part of yielding: a streaming request held by the server before its
    first byte (a prompt being read) is ended by ``Cancel.set`` from another thread:
    its connection is closed (the server sees it go), and the stream raises
    ``Cancelled``, not a server failure. With a client that keeps no connection (the
    worker's), a bookkeeping request made first changes nothing."""
    from chatloop.backends.base import Cancel, Cancelled, Timeouts
    from chatloop.backends.http import new_client
    from chatloop.backends.openai_compat import OpenAICompatBackend

    with one_slot_server() as (url, state):
        backend = OpenAICompatBackend(
            url, "scripted", client=new_client(Timeouts(), url, keep_alive=False)
        )
        if pooled_first:
            assert backend.models() == ["scripted"]
        state.hold.set()
        cancel = Cancel()
        raised: list[BaseException] = []
        prompt = [{"role": "user", "content": "Write the progressive summary: And in winter?"}]

        def ask() -> None:
            try:
                list(backend.stream(prompt, cancel=cancel))
            except BaseException as exc:
                raised.append(exc)

        asking = threading.Thread(target=ask, daemon=True)
        asking.start()
        state.wait_for(lambda log: ("started", "summary of And in winter?") in log)
        cancel.set()
        state.wait_for(lambda log: ("closed", "summary of And in winter?") in log)
        asking.join(60)
        assert not asking.is_alive()
        backend.close()
    assert len(raised) == 1 and isinstance(raised[0], Cancelled), raised


def test_a_server_is_known_by_its_origin_and_the_embedded_model_by_one_name() -> None:
    """Ollama's own API and its ``/v1`` are one server with one slot: one key."""
    assert sharing.key("ollama", "http://127.0.0.1:11434") == sharing.key(
        "openai", "http://127.0.0.1:11434/v1/"
    )
    assert sharing.key("openai", "http://127.0.0.1:8080/v1") != sharing.key(
        "openai", "http://127.0.0.1:1234/v1"
    )
    assert sharing.key("embedded", "embedded:/models/a.gguf") == "embedded"


def test_a_request_that_ends_as_the_person_marks_the_server_counts_as_yielded(
    chatloop_home: Path,
) -> None:
    """llama.cpp's server cuts the running request the moment the person's arrives, so
    the worker's summary can end before its watch next looks at the mark: the person's
    mark newer than ``since`` still counts as a yield (the summary is asked again,
    whole, later; never written from the transcript because of the person)."""
    from chatloop.backends.base import Cancel
    from tests.fakes import FakeBackend

    backend = FakeBackend()
    backend.base_url = "http://127.0.0.1:9/v1"
    shared = sharing.Shared(chatloop_home, backend, idle=0.0)
    since = shared.last_use()
    cancel = Cancel()
    with shared.watch(since, cancel) as seen:
        sharing.use(chatloop_home, backend)  # the person's request; the stream ends at once
    assert seen.yielded.is_set()
    quiet = Cancel()
    with shared.watch(shared.last_use(), quiet) as alone:
        pass  # nobody came
    assert not alone.yielded.is_set()


def test_a_chat_starting_in_the_home_is_a_mark_before_its_server_is_chosen(
    chatloop_home: Path,
) -> None:
    """``arrive`` (the CLI's first step) marks the home: a worker's request under way
    yields to it as to its own server's mark, and idle is counted from it; a person who
    then waits for that worker (``step_back``) takes it back with the server's mark."""
    from chatloop.backends.base import Cancel
    from tests.fakes import FakeBackend

    backend = FakeBackend()
    backend.base_url = "http://127.0.0.1:9/v1"
    shared = sharing.Shared(chatloop_home, backend, idle=60.0)
    since = shared.last_use()
    cancel, stopped = Cancel(), threading.Event()
    cancel.on_set(stopped.set)  # (as a request's connection is closed)
    with shared.watch(since, cancel) as seen:
        sharing.arrive(chatloop_home)  # a chat starting, its server not known yet
        assert stopped.wait(5.0), "the worker's request was not stopped"
    assert seen.yielded.is_set() and shared.marked_since(since)
    assert shared.wait_idle(time.monotonic() + 0.3) is None  # idle counted from the arrival
    sharing.step_back(chatloop_home, backend)
    assert shared.last_use() == 0
    assert shared.wait_idle(time.monotonic() + 0.3) == 0  # the worker goes now
