"""Hostile homes: every command survives any session file, odd homes and bad settings."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chatloop.chat import chain
from chatloop.cli import main
from chatloop.errors import StoreError
from chatloop.format import Message, render_markdown
from chatloop.store.store import Store
from tests.conftest import T0, new_meta
from tests.strategies import damaged_files, examples

COMMANDS = [
    ["sessions"],
    ["sessions", "--all", "--json"],
    ["show", "1"],
    ["show", "1", "--raw"],
    ["search", "hello"],
    ["tree", "1"],
    ["export", "1"],
    ["export", "1", "--format", "json"],
    ["reseal", "1"],
    ["reindex"],
    ["show", "2"],
    ["tree", "2"],
]


def cli(*args: str, cwd: Path, home: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "chatloop.cli", *args],
        cwd=cwd,
        env={"CHATLOOP_HOME": str(home), "PATH": "/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def healthy(store: Store) -> Path:
    writer = store.create(new_meta(title="the healthy one"))
    writer.append(Message.create("user", T0, text="hello there"))
    writer.finalize(Message.create("summary", T0, text="**Pending:** none"))
    writer.close()
    return writer.path


@st.composite
def hostile_files(draw: st.DrawFn) -> list[tuple[str, bytes | str]]:
    """(kind, content) for a handful of files: damaged sessions, garbage, FIFOs, links."""
    out: list[tuple[str, bytes | str]] = []
    for _ in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(["damaged", "binary", "fifo", "link", "chain", "empty"]))
        if kind == "damaged":
            out.append((kind, draw(damaged_files())))
        elif kind == "binary":
            out.append((kind, draw(st.binary(max_size=300))))
        elif kind == "chain":  # a parent link that loops back, and one to a FIFO
            out.append((kind, b""))
        else:
            out.append((kind, b""))
    return out


def plant(store: Store, files: list[tuple[str, bytes | str]]) -> None:
    folder = store.project_dir
    for i, (kind, content) in enumerate(files):
        path = folder / f"20261121-1200{i:02d}-00000{i:03x}.md"
        if kind == "fifo":
            os.mkfifo(path)
            os.mkfifo(folder / f"20261121-1300{i:02d}-00000{i:03x}.md.lock")
        elif kind == "link":
            outside = store.root.parent / "outside-the-home.txt"  # (its own tmp_path)
            outside.write_text("root:x:0:0:root:/root:/bin/sh\n")
            path.symlink_to(outside)
        elif kind == "chain":
            fifo = folder / f"fifo-{i}"
            os.mkfifo(fifo)
            meta = new_meta(
                id=path.stem, parent_id=path.stem, parent_file=str(fifo), status="closed"
            )
            path.write_bytes(render_markdown_one(meta))
        else:
            assert isinstance(content, bytes)
            path.write_bytes(content)


def render_markdown_one(meta: object) -> bytes:
    from chatloop.format import Session

    return render_markdown(Session(meta, (Message.create("user", T0, text="hello loop"),)))  # type: ignore[arg-type]


SLOW_OK = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture]


@settings(max_examples=examples(25), deadline=None, suppress_health_check=SLOW_OK)
@given(hostile_files())
def test_every_subcommand_survives_a_hostile_home(
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    capfdbinary: pytest.CaptureFixture[bytes],
    files: list[tuple[str, bytes | str]],
) -> None:
    base = tmp_path_factory.mktemp("hostile")
    cwd = base / "work"
    cwd.mkdir()
    store = Store(base / "home", cwd=cwd)
    healthy(store)
    plant(store, files)
    monkeypatch.setenv("CHATLOOP_HOME", str(store.root))
    monkeypatch.chdir(cwd)
    for command in COMMANDS:
        started = time.monotonic()
        code = main(command)  # a traceback here fails the test
        assert code in (0, 1, 2), command
        assert time.monotonic() - started < 30, command
        capfdbinary.readouterr()  # binary: `show --raw` prints a damaged file's bytes
    main(["sessions", "--json"])
    sys.stdout.flush()
    assert b"the healthy one" in capfdbinary.readouterr().out


def test_a_fifo_in_place_of_a_lock_or_a_parent_never_blocks(store: Store, tmp_path: Path) -> None:
    path = healthy(store)
    lock = path.with_name(path.name + ".lock")
    lock.unlink()  # the lock file stays after a session closes; a FIFO takes its place
    os.mkfifo(lock)
    fifo = tmp_path / "parent.md"
    os.mkfifo(fifo)
    child = new_meta(
        id="20261121-143045-0f0f0f0f", parent_id="20261121-143045-0e0e0e0e", parent_file=str(fifo)
    )
    assert chain.chain_tokens(store, path, child) == 0  # returns, does not block
    listed = cli("sessions", cwd=store.cwd, home=store.root)
    assert listed.returncode == 0 and "the healthy one" in listed.stdout
    with pytest.raises(StoreError, match="not a regular file"):
        store.open(path)


def test_a_symlinked_project_folder_is_never_written_through(store: Store, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    store.project_dir.parent.mkdir(parents=True)
    store.project_dir.symlink_to(elsewhere)
    with pytest.raises(StoreError, match="symbolic link"):
        store.create(new_meta())
    assert list(elsewhere.iterdir()) == []
    listed = cli("sessions", cwd=store.cwd, home=store.root)
    assert listed.returncode == 0 and "Traceback" not in listed.stderr


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"CHATLOOP_CONNECT_TIMEOUT": "nan"}, "connect_timeout must be between"),
        ({"CHATLOOP_CONTEXT_WINDOW": "-5"}, "context_window must be between"),
        ({"CHATLOOP_RETRIES": "1000"}, "retries must be between"),
        ({"CHATLOOP_BASE_URL": "http://[::1"}, "is not a usable http(s) URL"),
        ({"CHATLOOP_MAX_TOKENS": "lots"}, "max_tokens must be a whole number"),
    ],
)
def test_bad_settings_are_one_line_naming_the_key(
    store: Store, env: dict[str, str], says: str
) -> None:
    out = cli("sessions", cwd=store.cwd, home=store.root, **env)
    assert out.returncode == 2 and says in out.stderr and "Traceback" not in out.stderr
    assert out.stderr.count("\n") == 2  # one line and its hint


def test_a_bad_value_in_the_config_file_names_the_file(store: Store, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("read_timeout: -1\n")
    out = cli("sessions", cwd=store.cwd, home=store.root, CHATLOOP_CONFIG=str(config))
    assert out.returncode == 2 and f"config file {config}: read_timeout" in out.stderr


def test_a_home_under_a_file_and_an_ascii_terminal_are_one_line(
    store: Store, tmp_path: Path
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    out = cli("sessions", cwd=store.cwd, home=blocker / "home")
    assert out.returncode == 1 and out.stderr.startswith("error: Not a directory")
    assert "Traceback" not in out.stderr
    writer = store.create(new_meta(title="café ☕ — naïve"))
    writer.append(Message.create("user", T0, text="ünïcödé everywhere ✓"))
    writer.close()
    shown = cli("show", "1", cwd=store.cwd, home=store.root, PYTHONIOENCODING="ascii")
    assert shown.returncode == 0 and "Traceback" not in shown.stderr
    assert "\\u2713" in shown.stdout or "\\xfc" in shown.stdout


def test_homes_with_spaces_unicode_or_a_relative_path_work(tmp_path: Path) -> None:
    work = tmp_path / "the wörk dir"
    work.mkdir()
    home = tmp_path / "my chät home ☕"
    store = Store(home, cwd=work)
    healthy(store)
    listed = cli("sessions", cwd=work, home=home)
    assert listed.returncode == 0 and "the healthy one" in listed.stdout
    relative = cli("sessions", cwd=work, home=Path("..") / home.name)  # from the work dir
    assert relative.returncode == 0 and "the healthy one" in relative.stdout, relative.stderr
    import sqlite3

    with sqlite3.connect(home / "index.db") as db:
        paths = [row[0] for row in db.execute("SELECT path FROM sessions")]
    assert paths and all(Path(p).is_absolute() and ".." not in Path(p).parts for p in paths)


def test_a_directory_planted_where_a_temp_file_goes_is_left_alone(store: Store) -> None:
    path = healthy(store)
    planted = path.with_name(f".{path.name}.tmp-1-abcdef")
    planted.mkdir()
    store.recover(path)  # no IsADirectoryError
    assert planted.is_dir()


def test_a_chat_that_cannot_save_says_so_in_one_line(store: Store) -> None:
    from tests.fakes import FakeBackend
    from tests.repl_driver import drive

    store.project_dir.parent.mkdir(parents=True)
    store.project_dir.write_text("not a folder")  # like a read-only or broken home
    _, shown = drive(store, FakeBackend("A.", "B."), "hello\rexit\r")
    assert "error: Could not lock" in shown and "hint:" in shown
    assert "1 message kept in memory, not yet saved" in shown  # the truth, in the hint
    assert "[user] hello" in shown  # and at exit, on screen to copy
    assert "Traceback" not in shown


def test_a_chain_two_thousand_sessions_deep(store: Store) -> None:
    """tree, export --chain and the chain's token count walk a deep chain without
    recursing or reading more than the front matter of each ancestor."""
    from chatloop.format import Session

    store.project_dir.mkdir(parents=True)
    parent_id = None
    for n in range(2000):
        meta = new_meta(
            id=f"20261121-{n // 3600:02d}{n // 60 % 60:02d}{n % 60:02d}-{n:08x}",
            parent_id=parent_id,
            parent_file=f"{parent_id}.md" if parent_id else None,
            status="closed",
            tokens_in=1,
        )
        message = Message.create("user", T0, text=f"message {n}")
        (store.project_dir / f"{meta.id}.md").write_bytes(
            render_markdown(Session(meta, (message,)))
        )
        parent_id = meta.id
    last = store.project_dir / f"{parent_id}.md"
    tree = cli("tree", parent_id or "", cwd=store.cwd, home=store.root)
    assert tree.returncode == 0 and len(tree.stdout.splitlines()) == 2000
    exported = cli("export", parent_id or "", "--chain", cwd=store.cwd, home=store.root)
    assert exported.returncode == 0 and exported.stdout.count("\nformat: 2\n") == 2000
    from chatloop.format import parse_markdown

    meta = parse_markdown(last.read_bytes()).session.meta
    assert chain.chain_tokens(store, last, meta) == 1999
