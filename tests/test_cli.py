"""The management commands, run as a real program (the installed console script)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SAMPLES = Path(__file__).resolve().parent.parent / "sample_conversations"


def run(*args: str, cwd: Path, home: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "chatloop.cli", *args],
        cwd=cwd,
        env={"CHATLOOP_HOME": str(home), "PATH": "/usr/bin:/bin", "HOME": str(home), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def project(tmp_path: Path, chatloop_home: Path) -> Path:
    from chatloop.store.store import Store

    cwd = tmp_path / "work"
    cwd.mkdir()
    folder = Store(chatloop_home, cwd=cwd).project_dir
    folder.mkdir(parents=True)
    for sample in SAMPLES.glob("0*.md"):
        meta_id = sample.read_text().split("\nid: ", 1)[1].split("\n", 1)[0]
        shutil.copy(sample, folder / f"{meta_id}.md")
    return cwd


def test_sessions_show_search_reindex(project: Path, chatloop_home: Path) -> None:
    out = run("sessions", "--json", "--expand", cwd=project, home=chatloop_home)
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    # every file, numbered as the folded listing numbers them: the two files a later
    # session continues have no number (their handles reach them)
    numbers = [r["number"] for r in rows]
    assert len(rows) == 7 and numbers[:3] == [1, 2, 3] and numbers[3:5] == [None, None]
    assert [n for n in numbers if n] == list(range(1, 1 + sum(1 for n in numbers if n)))
    assert rows[0]["status"] == "interrupted"
    folded = json.loads(run("sessions", "--json", cwd=project, home=chatloop_home).stdout)
    assert [r["number"] for r in folded] == list(range(1, len(folded) + 1))
    assert [r["id"] for r in folded] == [r["id"] for r in rows if r["number"]]
    text = run("sessions", cwd=project, home=chatloop_home).stdout
    assert "Raised bed, continued" in text and text.splitlines()[1].lstrip().startswith("2 ")
    shown = run("show", "2", cwd=project, home=chatloop_home)
    assert shown.returncode == 0 and "250 kg per square metre" in shown.stdout
    raw = run("show", rows[1]["id"], "--raw", cwd=project, home=chatloop_home).stdout
    assert raw == Path(rows[1]["path"]).read_text()
    hits = json.loads(run("search", "tumbler", "--json", cwd=project, home=chatloop_home).stdout)
    assert hits and {h["id"] for h in hits} <= {r["id"] for r in rows}
    assert "Indexed 7 session files" in run("reindex", cwd=project, home=chatloop_home).stdout


def test_a_search_cut_by_its_limit_says_how_many_more_match(
    project: Path, chatloop_home: Path
) -> None:
    every = json.loads(run("search", "tumbler", "--json", cwd=project, home=chatloop_home).stdout)
    assert len(every) == 3  # the three files of the composting chain
    cut = run("search", "tumbler", "--limit", "2", cwd=project, home=chatloop_home).stdout
    lines = cut.splitlines()
    assert len(lines) == 3 and lines[-1] == "… 1 more session matches; `--limit 3` lists them all"
    whole = run("search", "tumbler", "--limit", "3", cwd=project, home=chatloop_home).stdout
    assert len(whole.splitlines()) == 3 and "more session" not in whole
    cut_json = run("search", "tumbler", "--limit", "2", "--json", cwd=project, home=chatloop_home)
    assert len(json.loads(cut_json.stdout)) == 2  # JSON holds the hits alone


def test_errors_are_one_line_with_a_hint(project: Path, chatloop_home: Path) -> None:
    missing = run("show", "99", cwd=project, home=chatloop_home)
    assert missing.returncode == 1
    assert missing.stderr.startswith("error: There is no session number 99")
    assert "hint:" in missing.stderr and "Traceback" not in missing.stderr
    hostile = run("show", "../../etc/passwd", cwd=project, home=chatloop_home)
    assert hostile.returncode == 2 and "is not a session id" in hostile.stderr
    bad_flag = run("sessions", "--limit", "zero", cwd=project, home=chatloop_home)
    assert bad_flag.returncode == 2 and "not a whole number" in bad_flag.stderr
    # resume refs are checked before any server is contacted
    no_session = run("--resume", "9", cwd=project, home=chatloop_home)
    assert no_session.returncode == 1 and "There is no session number 9" in no_session.stderr
    empty = project.parent / "empty"
    empty.mkdir()
    nothing = run("-c", cwd=empty, home=chatloop_home)
    assert nothing.returncode == 1
    assert nothing.stderr.splitlines()[0] == (
        "error: There is no session to continue in this project yet"
    )
    assert nothing.stderr.splitlines()[1].startswith("hint: Start one with `chatloop`")
    lone_full = run("--full", cwd=project, home=chatloop_home)
    assert lone_full.returncode == 2 and "--full goes with --resume" in lone_full.stderr
    both = run("-c", "--resume", "2", cwd=project, home=chatloop_home)
    assert both.returncode == 2 and "not allowed with" in both.stderr
    for command in ("show", "tree", "export", "reseal"):  # no session named: one line, a hint
        bare = run(command, cwd=project, home=chatloop_home)
        assert bare.returncode == 2 and "usage:" not in bare.stderr, bare.stderr
        assert bare.stderr.splitlines() == [
            f"error: chatloop {command} needs a session: its number or id",
            f"hint: `chatloop sessions` lists them, numbered; e.g. `chatloop {command} 1` for "
            "the most recent.",
        ]


def test_main_help_teaches_the_chat_options(tmp_path: Path) -> None:
    out = run("--help", cwd=tmp_path, home=tmp_path)
    for option in ("--continue", "--resume", "--full", "--fork", "--agent", "--base-url"):
        assert option in out.stdout
    assert "chatloop -c" in out.stdout and "chatloop --resume" in out.stdout


@pytest.mark.parametrize(
    ("command", "options"),
    [
        ("sessions", ["--all", "--limit", "--json"]),
        ("show", ["--raw"]),
        ("search", ["--all", "--limit", "--json"]),
        ("reindex", []),
        ("reseal", ["N|ID", ".orig"]),
        ("tree", ["N|ID"]),
        ("export", ["--chain", "--format", "--output"]),
        ("doctor", []),
    ],
)
def test_every_subcommand_has_help(command: str, options: list[str], tmp_path: Path) -> None:
    out = run(command, "--help", cwd=tmp_path, home=tmp_path)
    assert out.returncode == 0
    for option in options:
        assert option in out.stdout


def test_version_does_not_import_heavy_modules(tmp_path: Path) -> None:
    code = (
        "import sys; from chatloop.cli import main\n"
        "try: main(['--version'])\nexcept SystemExit: pass\n"
        "heavy = [m for m in ('httpx', 'rich', 'prompt_toolkit', 'yaml', 'sqlite3')"
        " if m in sys.modules]\nprint(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip().endswith("[]"), out.stdout


def test_tree_and_export_follow_the_chain(
    project: Path, chatloop_home: Path, tmp_path: Path
) -> None:
    rows = json.loads(run("sessions", "--json", cwd=project, home=chatloop_home).stdout)
    third = next(r for r in rows if r["title"] == "Composting, part 3")
    tree = run("tree", third["id"], cwd=project, home=chatloop_home).stdout.splitlines()
    assert tree[0].startswith("2") and "Composting, part 1" in tree[0]
    assert tree[1].startswith("└─ ") and "Composting, part 2" in tree[1]
    assert (
        tree[2].startswith("   └─ ") and "Composting, part 3" in tree[2] and "this one" in tree[2]
    )
    every = json.loads(
        run("sessions", "--json", "--expand", cwd=project, home=chatloop_home).stdout
    )
    first = next(r for r in every if r["title"] == "Composting, part 1")
    tree = run("tree", first["id"], cwd=project, home=chatloop_home).stdout.splitlines()
    assert "Composting, part 1" in tree[0] and tree[0].endswith("← this one")
    assert not any("this one" in line for line in tree[1:])
    exported = run(
        "export", third["id"], "--chain", "--format", "json", cwd=project, home=chatloop_home
    )
    sessions = json.loads(exported.stdout)
    assert [s["meta"]["title"] for s in sessions] == [f"Composting, part {i}" for i in (1, 2, 3)]
    out = tmp_path / "chain.md"
    done = run("export", third["id"], "--chain", "-o", str(out), cwd=project, home=chatloop_home)
    assert done.returncode == 0 and out.read_text().count("\nformat: 2\n") == 3
    again = run("export", third["id"], "-o", str(out), cwd=project, home=chatloop_home)
    assert again.returncode == 1 and "already exists" in again.stderr


def test_doctor_reports_each_check(project: Path, chatloop_home: Path) -> None:
    out = run("doctor", cwd=project, home=chatloop_home)
    assert "sessions directory" in out.stdout and "index" in out.stdout
    assert out.returncode in (0, 1) and "Traceback" not in out.stderr
    fresh = chatloop_home.parent / "fresh-home"  # a check creates nothing
    out = run(
        "doctor",
        "--base-url",
        "http://127.0.0.1:9/v1",
        "--sessions-dir",
        str(fresh),
        cwd=project,
        home=chatloop_home,
    )
    assert out.returncode == 1 and not fresh.exists()
    lines = out.stdout.splitlines()
    assert lines[0].startswith("FAIL  server http://127.0.0.1:9/v1: Cannot reach")
    assert lines[1].strip().startswith("Is it running?")  # what to do, under what failed
    assert f"sessions directory {fresh} (not created yet" in out.stdout
    assert f"looked for {chatloop_home / 'config.yaml'} and " in out.stdout  # both places
    loose = chatloop_home.parent / "loose-home"  # made by hand, open to others
    loose.mkdir(mode=0o755)
    loose.chmod(0o755)
    out = run(
        "doctor",
        "--base-url",
        "http://127.0.0.1:9/v1",
        "--sessions-dir",
        str(loose),
        cwd=project,
        home=chatloop_home,
    )
    assert f"FAIL  sessions directory {loose} (mode 0o755)" in out.stdout
    assert f"chmod 700 {loose}" in out.stdout  # what to do, under what failed


def test_config_warnings_are_printed_once(
    project: Path, chatloop_home: Path, tmp_path: Path
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("colour: blue\n")
    out = run("--config", str(config), "doctor", cwd=project, home=chatloop_home)
    assert (out.stderr + out.stdout).count("unknown key 'colour'") == 1
    # in doctor's own lines: not "ok" for a file it partly ignores
    assert f"warn  config file {config}: unknown key 'colour' ignored" in out.stdout
    config.write_text("context_window: [\n")  # not YAML: no "front matter" in a config
    out = run("--config", str(config), "doctor", cwd=project, home=chatloop_home)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert f"Cannot read the config file {config}: it is not valid YAML" in out.stderr
    assert "front matter" not in out.stderr and "context_window" in out.stderr  # the keys
    config.write_text("context_window: 1000000000\n")
    out = run("--config", str(config), "doctor", cwd=project, home=chatloop_home)
    assert "between 0 (0: the default) and 10,000,000" in out.stderr


def test_a_one_shot_question_is_told_from_options_and_their_values() -> None:
    """Abbreviated long options and clusters of short ones take their values as argparse
    gives them; only the words left over are the question."""
    from chatloop.cli import split_prompt

    cases = {
        ("-cr", "3"): (["-cr", "3"], ""),
        ("--res", "3"): (["--res", "3"], ""),
        ("--base-u", "http://x/v1", "sessions"): (["--base-u", "http://x/v1", "sessions"], ""),
        ("--base-u", "http://x/v1", "Say", "hi"): (["--base-u", "http://x/v1"], "Say hi"),
        ("-r", "8c1d", "go on"): (["-r", "8c1d"], "go on"),
        ("-c", "why?"): (["-c"], "why?"),
        ("search", "forty", "cm"): (["search", "--", "forty", "cm"], ""),
        ("search", "-rf", "--lim", "2", "x"): (["search", "--lim", "2", "--", "-rf", "x"], ""),
        ("search", "-c", "--json"): (["search", "--json", "--", "-c"], ""),
        ("search", "-fresh", "-ish"): (["search", "--", "-fresh", "-ish"], ""),
        ("search", "-h"): (["search", "-h"], ""),
        ("search", "--", "--all"): (["search", "--", "--all"], ""),
        ("--", "-v", "is a flag?"): ([], "-v is a flag?"),
    }
    for argv, expected in cases.items():
        assert split_prompt(list(argv)) == expected, argv


@pytest.mark.parametrize("backend", ["openai", "ollama"])
def test_a_question_to_a_server_that_is_not_there_saves_nothing(
    tmp_path: Path, chatloop_home: Path, backend: str
) -> None:
    """A model named on the command line skips the model list, but not the check that
    something listens: no session is made for a question nobody could receive."""
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}" + ("/v1" if backend == "openai" else "")
    done = run(
        "--backend",
        backend,
        "--base-url",
        url,
        "--model",
        "llama3",
        "hi there",
        cwd=tmp_path,
        home=chatloop_home,
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith(f"error: Cannot reach the model server at {url}")
    assert "hint:" in done.stderr and "Saved session" not in done.stderr
    assert not list(chatloop_home.rglob("*.md"))


def test_newcomer_errors_name_their_cause_and_say_what_to_do(
    project: Path, chatloop_home: Path, tmp_path: Path
) -> None:
    env = {"CHATLOOP_HOME": str(chatloop_home), "PATH": "/usr/bin:/bin", "HOME": str(chatloop_home)}
    picker = subprocess.run(
        [sys.executable, "-m", "chatloop.cli", "--resume"],
        cwd=project,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert picker.returncode == 2 and "needs a terminal" in picker.stderr
    assert 'hint: Name it: chatloop -r 3 "…"' in picker.stderr
    config = tmp_path / "config.yaml"
    config.write_text("auto_compact: maybe\n")
    bad = run("sessions", "--config", str(config), cwd=project, home=chatloop_home)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.startswith(
        f"error: config file {config}: auto_compact must be ask, on or off, not 'maybe'"
    )
    assert "\nhint: ask asks before compacting" in bad.stderr
    nowhere = run(
        "export", "1", "-o", str(tmp_path / "no" / "such" / "x.md"), cwd=project, home=chatloop_home
    )
    assert nowhere.returncode == 1 and "\nhint: Check that its folder exists" in nowhere.stderr


def test_show_names_an_untitled_session_as_the_listing_does(
    project: Path, chatloop_home: Path
) -> None:
    """An untitled session is listed by its last question; ``show`` headed it with the
    agent's name, so the two did not match."""
    from chatloop.format import Message
    from chatloop.store.store import Store
    from tests.conftest import T0, new_meta

    with Store(chatloop_home, cwd=project).create(new_meta(title="")) as writer:
        writer.append(Message.create("user", T0, text="Where do the kumquats go?"))
        writer.finalize()
    listed = run("sessions", "--json", cwd=project, home=chatloop_home).stdout
    number = next(r["number"] for r in json.loads(listed) if r["id"] == writer.meta.id)
    shown = run("show", str(number), cwd=project, home=chatloop_home)
    assert shown.stdout.splitlines()[0].startswith("Where do the kumquats go?  ("), shown.stdout


def test_a_search_word_that_starts_with_a_dash_is_a_word(
    chatloop_home: Path, project: Path
) -> None:
    """Issue 31: `chatloop search -rf` was argparse's usage error; it searches for it."""
    from chatloop.format import Message
    from chatloop.store.store import Store
    from tests.conftest import T0, new_meta

    with Store(chatloop_home, cwd=project).create(new_meta(title="Cleanup")) as writer:
        writer.append(Message.create("user", T0, text="Is rm -rf build safe here?"))
        writer.finalize()
    out = run("search", "-rf", "--limit", "5", cwd=project, home=chatloop_home)
    assert out.returncode == 0 and "usage:" not in out.stderr, out.stderr
    assert "Is rm -[rf] build safe here?" in out.stdout  # found, the word marked
    out = run("search", "--limit", "5", cwd=project, home=chatloop_home)
    assert out.returncode == 2 and "required: query" in out.stderr


def test_settings_say_what_was_meant_and_the_line_of_a_yaml_error(
    project: Path, chatloop_home: Path, tmp_path: Path
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("agnet: file_fiona\n")
    out = run("--config", str(config), "sessions", cwd=project, home=chatloop_home)
    assert out.returncode == 0
    assert f"warning: {config}: unknown key 'agnet' ignored (did you mean 'agent'?)" in out.stderr
    config.write_text("agent: simple_sally\nmodel: [unclosed\n")
    out = run("--config", str(config), "sessions", cwd=project, home=chatloop_home)
    assert out.returncode == 2 and "it is not valid YAML (line 2, column 8)" in out.stderr
    out = run(
        "sessions", cwd=project, home=chatloop_home, CHATLOOP_AGNET="x", CHATLOOP_SOMETHING="y"
    )
    assert out.returncode == 0
    said = [line for line in out.stderr.splitlines() if "CHATLOOP_" in line]
    assert said == [
        "warning: CHATLOOP_AGNET is not a setting and is ignored: did you mean CHATLOOP_AGENT?"
    ]  # a name close to none is another tool's: left alone


def test_commands_that_read_never_make_a_home_and_doctor_tells_a_file(
    project: Path, tmp_path: Path
) -> None:
    missing = tmp_path / "no-home-yet"
    for args in (["sessions"], ["search", "kumquat"], ["show", "1"], ["sessions", "--json"]):
        out = run(*args, cwd=project, home=missing)
        assert out.returncode in (0, 1) and "Traceback" not in out.stderr, args
        assert not missing.exists(), args
    assert "No sessions yet" in run("sessions", cwd=project, home=missing).stdout
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    out = run("doctor", "--base-url", "http://127.0.0.1:9/v1", cwd=project, home=a_file)
    assert f"FAIL  sessions directory {a_file} is not a directory" in out.stdout
    assert "chmod" not in out.stdout and "Errno" not in out.stdout
