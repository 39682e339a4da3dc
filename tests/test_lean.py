"""What a quick command loads: `chatloop sessions` from a fresh index, its output a
pipe, imports no parser (nor YAML), no rich and no dataclasses (9 ms) (issue 15: a
listing as quick as `ls`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from chatloop.errors import UsageError
from chatloop.store.store import Store
from tests.fakes import STRUCTURED, FakeBackend
from tests.hosts import chat

ROOT = Path(__file__).resolve().parent.parent
PROBE = """
import sys
from chatloop.cli import main
code = main(sys.argv[1:])
heavy = sorted(m for m in sys.modules
               if m.startswith(("chatloop.format", "yaml", "frontmatter", "rich", "httpx",
                                "prompt_toolkit", "chatloop.store.index_scan",
                                "dataclasses")))
print("LOADED " + " ".join(heavy), file=sys.stderr)
sys.exit(code)
"""


def loaded(store: Store, *args: str) -> tuple[str, list[str]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CHATLOOP_CONFIG": ""}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        cwd=store.cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    line = next(x for x in done.stderr.splitlines() if x.startswith("LOADED"))
    return done.stdout, line.split()[1:]


def test_a_listing_from_a_fresh_index_loads_no_parser_and_no_rich(store: Store) -> None:
    session, _ = chat(store, FakeBackend(default=STRUCTURED))
    session.send("a question worth listing")
    session.close()
    out, first = loaded(store, "sessions")  # the index is built: the parser loads
    assert "a question worth listing" in out and "chatloop.format" in first
    out, heavy = loaded(store, "sessions")
    assert "a question worth listing" in out and heavy == []
    out, heavy = loaded(store, "sessions", "--json")
    assert json.loads(out)[0]["queries"] == 1 and heavy == []
    Path(next(iter(store.session_files())).path).touch()  # changed: read again
    _, again = loaded(store, "sessions")
    assert "chatloop.format" in again


def test_reading_sessions_chatloop_wrote_loads_no_yaml(store: Store) -> None:
    """Front matter in the shape chatloop writes is read without PyYAML: re-indexing,
    a search with its snippet and show load the format package, never YAML."""
    session, _ = chat(store, FakeBackend(default=STRUCTURED))
    session.send("a question about kestrels")
    session.close()
    for args in (("reindex",), ("search", "kestrels"), ("show", "1")):
        out, heavy = loaded(store, *args)
        assert "chatloop.format" in heavy and not [
            m for m in heavy if m.startswith(("yaml", "frontmatter"))
        ], (args, heavy)
    assert "kestrels" in out


def test_version_loads_no_command_line_module() -> None:
    probe = (
        "import sys; sys.argv = ['chatloop', '--version']\n"
        "from chatloop.__main__ import main\n"
        "code = main()\n"
        "print(code, 'argparse' in sys.modules, 'chatloop.cli' in sys.modules)"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", probe],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    version, verdict = done.stdout.splitlines()
    assert version.startswith("chatloop ") and verdict == "0 False False"
    run = subprocess.run(
        [sys.executable, "-m", "chatloop", "--version"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0 and run.stdout == version + "\n"


def test_a_lone_word_close_to_a_command_is_a_typo_not_a_question(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from chatloop.cli import main, split_prompt

    assert main(["sesions"]) == 2
    err = capsys.readouterr().err
    assert "'sesions' is not a command" in err and "chatloop sessions" in err
    assert "Traceback" not in err

    assert split_prompt(["--", "sesions"]) == ([], "sesions")
    assert split_prompt(["why", "is", "it"]) == ([], "why is it")
    for typo, meant in (
        ("serach", "search"),
        ("docter", "doctor"),
        ("sessons", "sessions"),
        ("shwo", "show"),
        ("tere", "tree"),
    ):  # short: only a swap of two
        with pytest.raises(UsageError, match=typo) as refused:
            split_prompt([typo])
        assert f"chatloop {meant}`" in refused.value.hint
    for word in (
        "research",
        "report",
        "seasons",
        "lessons",
        "snow",
        "three",
        "how?",
        "Show",
        "sessions?",
        "index",
        "resale",
        "hello",
        "tee",
        "trees",
        "shoe",
        "tre",
    ):
        assert split_prompt([word]) == ([], word), word
    # the usual typo: the command mistyped, then what it acts on; two letters swapped
    # (which makes no word), or search with a letter dropped, then any words
    for typed, meant in (
        ("shwo 1", "show 1"),
        ("exprot 8c1d", "export 8c1d"),
        ("--agent x tere 2", "tree 2"),
        ("serach mint leaves", "search mint leaves"),
        ("seach apples", "search apples"),
        ("shwo me around", "show me around"),
    ):
        with pytest.raises(UsageError) as refused:
            split_prompt(typed.split())
        assert f"chatloop {meant}`" in refused.value.hint, refused.value.hint
    for question in (
        "starch in potatoes",
        "snow 2",
        "three 4",
        "tell me 1",
        "help me write a poem",
        "list the planets",
        "new ideas for dinner",
        "resume writing tips",
        "imports 2023",
        "doctors 911",
        "session 3",
        "exports 2023 2024",
        "expert cafe",
    ):
        assert split_prompt(question.split()) == ([], question), question


def test_words_from_other_tools_alone_are_the_commands_they_mean() -> None:
    from chatloop.cli import split_prompt

    for typed, argv in {
        "help": ["--help"],
        "help search": ["search", "--help"],
        "version": ["--version"],
        "chat": [],
        "--agent file_fiona chat": ["--agent", "file_fiona"],
        "new": ["--new"],
        "continue": ["-c"],
        "resume": ["-r"],
        "resume 3": ["-r", "3"],
        "list": ["sessions"],
        "ls": ["sessions"],
        "logs": ["sessions"],
        "history": ["sessions"],
    }.items():
        assert split_prompt(typed.split()) == (argv, ""), typed
    assert split_prompt(["--", "help"]) == ([], "help")  # `--` sends anything
    assert split_prompt(["help", "me"]) == ([], "help me")


def test_a_subcommands_argument_error_shows_its_own_usage_and_chat_options_are_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from chatloop.cli import main

    for argv, usage in (
        (["sessions", "3"], "usage: chatloop sessions"),
        (["show", "1", "2"], "usage: chatloop show"),
        (["sessions", "--limt", "3"], "usage: chatloop sessions"),
    ):
        with pytest.raises(SystemExit) as ended:
            main(argv)
        err = capsys.readouterr().err
        assert ended.value.code == 2 and err.startswith(usage), (argv, err)
        assert "unrecognized arguments" in err and "Traceback" not in err
    for argv, said in (
        (["-c", "sessions"], "-c/--continue is for the chat"),
        (["-r", "2", "show", "1"], "-r/--resume is for the chat"),
        (["--new", "search", "x"], "--new is for the chat"),
    ):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith(f"error: {said}") and "hint: `chatloop" in err, err
