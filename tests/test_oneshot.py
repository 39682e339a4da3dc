"""One-shot and piped use of the installed program against the real server:
``chatloop "question"``, ``echo text | chatloop -c "follow-up"``, and the options
people type after a subcommand. The base model's words are nonsense: these check
where the reply goes and what is saved, never the wording."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from chatloop.format import Session, parse_markdown
from tests.pty_driver import chatloop_bin, environment
from tests.scripted_server import scripted_server

pytestmark = pytest.mark.e2e


def once(
    url: str, home: Path, cwd: Path, *args: str, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [chatloop_bin(), "--base-url", url, *args],
        cwd=cwd,
        input=stdin,
        env=environment(home, 12),
        capture_output=True,
        text=True,
        timeout=300,
    )


def sessions(home: Path) -> list[Session]:
    found = [parse_markdown(p.read_bytes()).session for p in home.rglob("*.md")]
    # (times are whole seconds: a quick follow-up can start in its parent's second)
    return sorted(found, key=lambda s: (s.meta.created, s.meta.parent_id is not None))


def answer(session: Session) -> str:
    """The text of the last reply that is not an acknowledgment, as printed: without the
    blank lines before its first words (the file keeps them)."""
    reply = [m for m in session.messages if m.role == "assistant" and not m.restore][-1]
    return reply.text.lstrip("\r\n")


def test_a_question_on_the_command_line_is_answered_once_and_saved(
    llama_server: str, chatloop_home: Path, project: Path
) -> None:
    done = once(llama_server, chatloop_home, project, "The capital of France is")
    assert done.returncode == 0, done.stderr
    (session,) = sessions(chatloop_home)
    assert [m.text for m in session.messages if m.is_query] == ["The capital of France is"]
    assert session.meta.status == "closed" and session.summary is not None
    assert done.stdout.rstrip("\n") == answer(session).rstrip("\n")  # the reply alone
    assert "Saved session" in done.stderr and "Traceback" not in done.stderr


def test_piped_text_continues_the_last_session_and_only_the_answer_is_printed(
    llama_server: str, chatloop_home: Path, project: Path
) -> None:
    first = once(llama_server, chatloop_home, project, "Once upon a time")
    assert first.returncode == 0, first.stderr
    follow = once(
        llama_server, chatloop_home, project, "-c", "Go on:", stdin="the keeper lit the lamp\n"
    )
    assert follow.returncode == 0, follow.stderr
    parent, child = sessions(chatloop_home)
    assert child.meta.parent_id == parent.meta.id
    assert [m.text for m in child.messages if m.is_query] == ["Go on:\n\nthe keeper lit the lamp"]
    assert child.messages[0].restore  # the restoration prompt, written with the question
    assert follow.stdout.rstrip("\n") == answer(child).rstrip("\n")  # not the acknowledgment


def test_an_empty_pipe_is_a_clear_usage_error(
    llama_server: str, chatloop_home: Path, project: Path
) -> None:
    done = once(llama_server, chatloop_home, project, stdin="")
    assert done.returncode == 2 and "Nothing to send" in done.stderr
    assert "Traceback" not in done.stderr and sessions(chatloop_home) == []


def test_options_after_a_subcommand_and_unquoted_search_words(
    chatloop_home: Path, project: Path, tmp_path: Path
) -> None:
    other = tmp_path / "elsewhere"
    other.mkdir()  # (a home that does not exist is never made by a command that reads)
    env = environment(chatloop_home, 12)
    for args in (
        ["sessions", "--sessions-dir", str(other)],
        ["search", "forty", "cm", "deep", "--sessions-dir", str(other)],
        ["doctor", "--sessions-dir", str(other), "--base-url", "http://127.0.0.1:9/v1"],
    ):
        done = subprocess.run(
            [chatloop_bin(), *args],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert "unrecognized arguments" not in done.stderr and "Traceback" not in done.stderr
        assert done.returncode in (0, 1), (args, done.stderr)
    assert (other / "index.db").exists()  # the option given after the subcommand was used
    assert "127.0.0.1:9" in done.stdout  # doctor checked the server named after it


def test_two_forks_of_one_session_are_siblings_and_leave_it_as_it_was(
    llama_server: str, chatloop_home: Path, project: Path
) -> None:
    first = once(llama_server, chatloop_home, project, "Once upon a time")
    assert first.returncode == 0, first.stderr
    (root,) = sessions(chatloop_home)
    path = next(chatloop_home.rglob(f"{root.meta.id}.md"))
    untouched = path.read_bytes()
    left = once(llama_server, chatloop_home, project, "-r", "1", "--fork", "Go left:")
    right = once(llama_server, chatloop_home, project, "-r", root.meta.id, "--fork", "Go right:")
    assert left.returncode == 0 and right.returncode == 0, (left.stderr, right.stderr)
    assert path.read_bytes() == untouched  # the forked session stays as it is
    _, *forks = sessions(chatloop_home)
    for fork, question in zip(forks, ("Go left:", "Go right:"), strict=True):
        assert fork.meta.parent_id == root.meta.id and fork.meta.extra["forked_at"] == 1
        carried = [m.text for m in fork.messages if m.restore]
        assert carried[0] == "Once upon a time"  # the history, copied, then the new question
        assert [m.text for m in fork.messages if m.is_query] == [question]
    env = environment(chatloop_home, 12)
    drawn = subprocess.run(
        [chatloop_bin(), "tree", root.meta.id],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    tree = drawn.splitlines()
    assert tree[0].startswith(root.meta.id)
    assert tree[1].startswith("├─ ") and tree[2].startswith("└─ ")
    assert all("fork after query 1" in line for line in tree[1:])
    listed = subprocess.run(
        [chatloop_bin(), "sessions"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert listed.count("[fork after query 1]") == 2


def test_continue_without_flags_goes_back_to_the_sessions_own_server(
    llama_server: str, chatloop_home: Path, project: Path
) -> None:
    """The first session named its server (a port auto-detection does not probe); `-c`
    with no --base-url reaches that server again, not another one or the embedded model."""
    first = once(llama_server, chatloop_home, project, "Once upon a time")
    assert first.returncode == 0, first.stderr
    follow = subprocess.run(
        [chatloop_bin(), "-c", "Go on:"],
        cwd=project,
        text=True,
        env={**environment(chatloop_home, 12), "CHATLOOP_BACKEND": "auto"},
        capture_output=True,
        timeout=300,
    )
    assert follow.returncode == 0, follow.stderr
    assert "does not answer" not in follow.stderr and "Traceback" not in follow.stderr
    parent, child = sessions(chatloop_home)
    assert child.meta.parent_id == parent.meta.id
    assert child.meta.backend_url == parent.meta.backend_url == llama_server.rstrip("/")
    assert child.meta.model == parent.meta.model


@pytest.mark.parametrize(
    ("url", "tried"),
    [
        ("http://127.0.0.1:8765/v1", ["openai http://127.0.0.1:8765/v1"]),
        ("http://127.0.0.1:8765/v1/", ["openai http://127.0.0.1:8765/v1"]),
        (
            "http://localhost:11434",
            ["ollama http://localhost:11434", "openai http://localhost:11434/v1"],
        ),
        ("http://[::1]:8080/v1", ["openai http://[::1]:8080/v1"]),
        ("http://127.evil.example/v1", []),
        ("https://example.com/v1", []),
        ("http://10.0.0.1:8080/v1", []),
        ("embedded:/models/x.gguf", []),
        ("http://[broken/v1", []),
        ("http://127.0.0.1:abc/v1", []),
        ("http://127.0.0.1:8799/admin/run?cmd=", []),
        ("http://127.0.0.1:8799/v1?x=1", []),
        ("http://127.0.0.1:8799/v1#x", []),
        ("http://user@127.0.0.1:8799/v1", []),
        ("http://127.0.0.1@evil.example/", []),
        ("http://127.0.0.1:8765\x1b/v1", []),
        ("ftp://127.0.0.1/v1", []),
    ],
)
def test_only_a_plain_server_url_of_this_machine_is_reused_because_a_file_names_it(
    url: str, tried: list[str]
) -> None:
    """A session file names its server; what chatloop would try for it is rebuilt from
    a loopback host, a port and at most /v1: the file picks neither host nor path."""
    from chatloop.backends.detect import held_candidates

    assert [f"{c.kind} {c.base_url}" for c in held_candidates(url)] == tried


def test_a_question_answered_by_the_embedded_model_says_so(
    chatloop_home: Path, project: Path
) -> None:
    """No server: the embedded demo model answers, and stderr says it is the demo model
    (stdout keeps the answer alone)."""
    done = subprocess.run(
        [chatloop_bin(), "--backend", "embedded", "The capital of France is"],
        cwd=project,
        env=environment(chatloop_home, 8),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "note: Using the embedded Gemma 3 270M demo model" in done.stderr
    assert "demo model" not in done.stdout


def test_a_one_shot_resume_says_which_agent_answers(
    llama_server: str, chatloop_home: Path, project: Path
) -> None:
    """No banner shows the agent in a one-shot run: continuing with the session's own
    agent (not the configured one), or switching to another with --agent, is said on
    stderr, never done silently. (The agent is in the person's own folder: a project's
    would be refused in a one-shot, tests/test_agent_trust.py.)"""
    agents = chatloop_home / "agents"
    agents.mkdir(parents=True)
    (agents / "pirate_pete.py").write_text('NAME = "Pirate Pete"\nSYSTEM_PROMPT = "Arr."\n')
    first = once(llama_server, chatloop_home, project, "--agent", "pirate_pete", "Ahoy")
    assert first.returncode == 0, first.stderr
    own = once(llama_server, chatloop_home, project, "-c", "Go on")
    assert own.returncode == 0, own.stderr
    assert "continuing with the session's own agent, Pirate Pete" in own.stderr
    switched = once(llama_server, chatloop_home, project, "-c", "--agent", "simple_sally", "And?")
    assert switched.returncode == 0, switched.stderr
    assert "was with Pirate Pete; continuing it with Simple Sally." in switched.stderr
    assert [s.meta.agent for s in sessions(chatloop_home)] == [
        "Pirate Pete",
        "Pirate Pete",
        "Simple Sally",
    ]


def _closed_reader() -> int:
    """The write end of a pipe whose reader has already left (``| head`` done)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    return write_end


def test_blank_lines_before_the_replys_first_words_are_not_printed(
    chatloop_home: Path, project: Path
) -> None:
    """A model that opens with blank lines (the demo model often does): stdout starts with
    the first words, so `| head -1` gets them; the file keeps the reply as it came."""
    text = "\n\nBasil likes warm sun.\n\nPinch the flowers."
    with scripted_server(lambda request: text) as url:
        done = subprocess.run(
            [chatloop_bin(), "--base-url", url, "Tell me about basil"],
            cwd=project,
            env=environment(chatloop_home, 12),
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "Basil likes warm sun.\n\nPinch the flowers.\n"
    (session,) = sessions(chatloop_home)
    assert [m.text for m in session.messages if m.role == "assistant"] == [text]


def test_a_reader_that_leaves_keeps_the_reply_that_came_and_the_session(
    chatloop_home: Path, project: Path
) -> None:
    """``chatloop "…" | head -1``: the reply stops at the first write that fails, and is
    kept in the file marked interrupted, with the text that had come; the session is
    closed as usual. With stderr's reader gone too (``2>&1 | head``), a resume's
    notices are dropped and the continuation is still written."""
    text = "Basil likes warm sun and moist soil; pinch the flowers to keep it leafy."
    with scripted_server(lambda request: text) as url:
        env = environment(chatloop_home, 12)
        out = _closed_reader()
        try:
            done = subprocess.run(
                [chatloop_bin(), "--base-url", url, "Tell me about basil"],
                cwd=project,
                env=env,
                stdout=out,
                stderr=subprocess.PIPE,
                text=True,
                timeout=120,
            )
        finally:
            os.close(out)
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
        (first,) = sessions(chatloop_home)
        reply = [m for m in first.messages if m.role == "assistant"]
        assert [m.text for m in first.messages if m.is_query] == ["Tell me about basil"]
        assert len(reply) == 1 and reply[0].interrupted and reply[0].stop_reason == "cancelled"
        assert reply[0].text and text.startswith(reply[0].text)
        assert first.meta.status == "closed" and first.summary is not None
        assert first.meta.title == "Tell me about basil"  # named at close: no exchange ended well
        out, err = _closed_reader(), _closed_reader()
        try:
            again = subprocess.run(
                [chatloop_bin(), "--base-url", url, "-c", "And mint?"],
                cwd=project,
                env=env,
                stdout=out,
                stderr=err,
                timeout=120,
            )
        finally:
            os.close(out)
            os.close(err)
        assert again.returncode == 0
        parent, child = sessions(chatloop_home)
        assert child.meta.parent_id == parent.meta.id and child.meta.title == parent.meta.title
        assert [m.text for m in child.messages if m.is_query] == ["And mint?"]


def test_a_notice_to_a_stderr_whose_reader_left_does_not_stop_the_question(
    chatloop_home: Path, project: Path, tmp_path: Path
) -> None:
    """``chatloop "…" 2>&1 | head -1``: a warning printed before the question is sent
    (here: an unknown key in the config) finds stderr's reader gone; the question is
    sent, answered and saved all the same."""
    config = tmp_path / "config.yaml"
    config.write_text("no_such_setting: 1\n")
    with scripted_server(lambda request: "Mint spreads fast.") as url:
        env = {**environment(chatloop_home, 12), "CHATLOOP_CONFIG": str(config)}
        err = _closed_reader()
        try:
            done = subprocess.run(
                [chatloop_bin(), "--base-url", url, "And mint?"],
                cwd=project,
                env=env,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                timeout=120,
            )
        finally:
            os.close(err)
    assert done.returncode == 0 and done.stdout.strip() == "Mint spreads fast."
    (session,) = sessions(chatloop_home)
    assert [m.text for m in session.messages if m.is_query] == ["And mint?"]
    assert [m.text for m in session.messages if m.role == "assistant"] == ["Mint spreads fast."]


def test_a_token_count_that_never_ends_holds_no_message_back(
    chatloop_home: Path, project: Path
) -> None:
    """Issue 31: a server whose tokenizer answers its probes and then trickles a count
    that never ends. The question is saved first, the count is given up on at its
    deadline (chatloop estimates from then on), and the reply comes."""
    import json
    import threading
    import time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    stop = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            return

        def _json(self, value: object) -> None:
            body = json.dumps(value).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            self._json({"object": "list", "data": [{"id": "trickle", "object": "model"}]})

        def do_POST(self) -> None:
            request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path == "/tokenize":
                text = request.get("content", "")
                if text in ("", "a b"):  # the probes: a tokenizer that answers
                    self._json({"tokens": list(range(len(text.split())))})
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b'{"tokens": [')
                while not stop.is_set():  # a count that never ends
                    try:
                        self.wfile.write(b"1, ")
                        self.wfile.flush()
                    except OSError:
                        return
                    time.sleep(0.2)
                return
            if not self.path.endswith("/chat/completions"):
                self.send_error(404)
                return
            reply = {"choices": [{"index": 0, "delta": {"content": "Warm sun."}}]}
            done = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
            body = f"data: {json.dumps(reply)}\n\ndata: {json.dumps(done)}\n\ndata: [DONE]\n\n"
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body.encode())

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        done = once(url, chatloop_home, project, "Tell me about basil")  # a hang: 300 s, fails
    finally:
        stop.set()
        server.shutdown()
        server.server_close()
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert done.stdout.strip() == "Warm sun."
    (session,) = sessions(chatloop_home)
    assert [m.text for m in session.messages if m.is_query] == ["Tell me about basil"]


_PRODUCER = """
import sys
total, piece, wrote = int(sys.argv[1]), b"basil and mint\\n" * 4096, 0
try:
    while wrote < total:
        wrote += sys.stdout.buffer.write(piece)
        sys.stdout.buffer.flush()
except BrokenPipeError:
    pass
sys.stderr.write(f"wrote {wrote}")
"""


def test_piped_input_over_the_bound_is_refused_without_reading_the_rest(
    chatloop_home: Path, project: Path
) -> None:
    """Issue 44: four times MAX_PIPED_BYTES piped in is refused once it passes the
    bound, in one line that names it, exit 2, nothing saved and no server asked
    (nothing listens at the URL); the rest is never read, so the writer of the pipe
    is cut off (chatloop read it all before: 400 MB took 2.8 GB)."""
    import sys

    from chatloop.config import MAX_PIPED_BYTES

    total = 4 * MAX_PIPED_BYTES
    producer = subprocess.Popen(
        [sys.executable, "-c", _PRODUCER, str(total)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert producer.stdout is not None
    asking = subprocess.Popen(
        [chatloop_bin(), "--base-url", "http://127.0.0.1:9/v1", "Which needs a pot?"],
        cwd=project,
        stdin=producer.stdout,
        env=environment(chatloop_home, 12),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    producer.stdout.close()  # the pipe's one reader is chatloop
    _, err = asking.communicate(timeout=120)
    _, wrote = producer.communicate(timeout=120)
    assert asking.returncode == 2, err
    error, hint = err.strip().splitlines()
    assert error.startswith("error: Not sent: the piped input is larger than 4 MiB")
    assert f"{MAX_PIPED_BYTES:,} bytes" in error
    assert "chatloop import" in hint and "Traceback" not in err
    assert sessions(chatloop_home) == []
    assert int(wrote.split()[1]) < total  # the rest was never read


def test_piped_input_of_exactly_the_bound_is_not_refused_for_its_size(
    chatloop_home: Path, project: Path
) -> None:
    from chatloop.config import MAX_PIPED_BYTES

    done = subprocess.run(
        [chatloop_bin(), "--base-url", "http://127.0.0.1:9/v1"],
        cwd=project,
        input=b"x" * MAX_PIPED_BYTES,
        env=environment(chatloop_home, 12),
        capture_output=True,
        timeout=120,
    )
    assert b"piped input is larger" not in done.stderr
    assert b"Cannot reach the model server" in done.stderr  # it went on, to the server
