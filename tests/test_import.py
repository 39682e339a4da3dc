"""`chatloop import`: the seed project's sessions (and chatloop's own) copied into a
project through the installed program, twice; originals untouched; chains kept."""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

from chatloop.format import Message, parse_markdown
from chatloop.store.importer import import_sessions
from chatloop.store.store import Store
from tests.conftest import T0, new_meta
from tests.pty_driver import chatloop_bin, environment

SAMPLES = Path(__file__).resolve().parent.parent / "sample_conversations"
LEGACY = SAMPLES / "legacy" / "Simple_Sally_20250614_101500.md"


def digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def seed_folder(tmp_path: Path) -> Path:
    """A seed project's .chat-sessions: a session and the one resumed from it, a
    format-1 chatloop file, a damaged one, a note that is no session, its JSON index."""
    folder = tmp_path / "old-project" / ".chat-sessions"
    folder.mkdir(parents=True)
    shutil.copy(LEGACY, folder)
    child = (
        LEGACY.read_text(encoding="utf-8")
        .replace("Simple_Sally_20250614_101500", "Simple_Sally_20250615_090000")
        .replace(
            "**Date:** 2025-06-14T10:15:00.481922",
            "**Date:** 2025-06-15T09:00:00.000000\n\n"
            "**Resumed From:** Simple_Sally_20250614_101500",
        )
    )
    (folder / "Simple_Sally_20250615_090000.md").write_text(child, encoding="utf-8")
    shutil.copy(SAMPLES / "format1" / "01-plain-chat.md", folder)
    (folder / "broken.md").write_bytes(b"---\nid: 20261121-120000-abcdabcd\n---\n\n<!-- chat")
    (folder / "notes.md").write_text("# My notes\n\nNot a chat at all.\n", encoding="utf-8")
    (folder / ".index.json").write_text("{}", encoding="utf-8")
    return folder


def test_import_copies_once_keeps_chains_and_reports_every_file(
    chatloop_home: Path, tmp_path: Path
) -> None:
    folder = seed_folder(tmp_path)
    before = digest(folder)
    project = folder.parent
    env = environment(chatloop_home, 12)
    doctor = subprocess.run(
        [chatloop_bin(), "doctor", "--base-url", "http://127.0.0.1:9/v1"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
    )
    assert "(3 not imported); `chatloop import .chat-sessions`" in doctor.stdout
    first = subprocess.run(
        [chatloop_bin(), "import", ".chat-sessions"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
    )
    assert first.returncode == 0, first.stderr
    assert "Imported 3 session(s)" in first.stdout
    assert "broken.md: damaged" in first.stdout and "notes.md: not a session" in first.stdout
    assert digest(folder) == before  # the originals are untouched
    again = subprocess.run(
        [chatloop_bin(), "import", ".chat-sessions"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
    )
    assert "Nothing new to import (3 already here, 2 skipped)" in again.stdout
    doctor = subprocess.run(
        [chatloop_bin(), "doctor", "--base-url", "http://127.0.0.1:9/v1"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
    )
    assert "chatloop import" not in doctor.stdout  # done: no longer suggested
    assert "3 imported, none left" in doctor.stdout
    imported = {p.stem: p for p in chatloop_home.rglob("*.md")}
    assert set(imported) == {
        "Simple_Sally_20250614_101500",
        "Simple_Sally_20250615_090000",
        parse_markdown((SAMPLES / "format1" / "01-plain-chat.md").read_bytes()).session.meta.id,
    }
    assert imported["Simple_Sally_20250614_101500"].read_bytes() == LEGACY.read_bytes()
    listed = subprocess.run(
        [chatloop_bin(), "sessions", "--expand"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert len(listed.strip().splitlines()) == 3
    tree = subprocess.run(
        [chatloop_bin(), "tree", "Simple_Sally_20250615_090000"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "Simple_Sally_20250614_101500" in tree.splitlines()[0]
    assert "└─ Simple_Sally_20250615_090000" in tree


def test_import_into_another_project_and_a_different_file_with_a_taken_id(
    chatloop_home: Path, tmp_path: Path
) -> None:
    folder = seed_folder(tmp_path)
    elsewhere = tmp_path / "new-project"
    elsewhere.mkdir()
    env = environment(chatloop_home, 12)
    done = subprocess.run(
        [chatloop_bin(), "import", str(LEGACY), "--project", str(elsewhere)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0 and "Imported 1 session(s)" in done.stdout
    changed = folder / "Simple_Sally_20250614_101500.md"
    text = changed.read_text(encoding="utf-8")  # edited, not only longer (that is a repair)
    changed.write_text(text.rstrip("\n") + " (edited)\n", encoding="utf-8")
    done = subprocess.run(
        [chatloop_bin(), "import", str(changed), "--project", str(elsewhere)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert "duplicate: a different session" in done.stdout
    missing = subprocess.run(
        [chatloop_bin(), "import", str(tmp_path / "nope")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 1 and missing.stdout == ""  # said once, as the error
    assert "error: No such file or folder" in missing.stderr and "Traceback" not in missing.stderr
    nowhere = str(tmp_path / "nonexistent")  # (a fixed path may exist: another's)
    bad = subprocess.run(
        [chatloop_bin(), "import", str(LEGACY), "--project", nowhere],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "not a directory" in bad.stderr


def test_another_home_keeps_its_projects_apart(chatloop_home: Path, tmp_path: Path) -> None:
    """`chatloop import OTHER_HOME` put every project's sessions into the current one;
    each now goes into the project of the same name (the name is the folder's path
    and its hash, the same on both machines), and `--project` still gathers them."""
    from chatloop.format import Message
    from chatloop.store.store import Store
    from tests.conftest import T0, new_meta

    other = tmp_path / "other-home"
    made = {}
    for n, name in enumerate(("garden", "kitchen", "_work")):
        folder = tmp_path / name
        folder.mkdir()
        store = Store(other, cwd=folder)
        meta = new_meta(id=f"20261120-10000{n}-5fe0a1b{n}", title=name)
        with store.create(meta) as writer:
            writer.append(Message.create("user", T0, text=f"about the {name}"))
            writer.finalize()
        made[meta.id] = store.project
    here = tmp_path / "here"
    here.mkdir()
    env = environment(chatloop_home, 12)
    done = subprocess.run(
        [chatloop_bin(), "import", str(other)], cwd=here, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "into 3 projects" in done.stdout and "sessions --all" in done.stdout
    placed = {p.stem: p.parent.name for p in (chatloop_home / "projects").rglob("*.md")}
    assert placed == made
    gathered = tmp_path / "gathered"
    gathered.mkdir()
    done = subprocess.run(
        [chatloop_bin(), "import", str(other), "--project", str(gathered)],
        cwd=here,
        env=env,
        capture_output=True,
        text=True,
    )
    assert "Imported 3 session(s) into " in done.stdout
    project = Store(chatloop_home, cwd=gathered.resolve()).project_dir
    assert sorted(p.stem for p in project.glob("*.md")) == sorted(made)
    link = tmp_path / "link-to-home"
    link.symlink_to(other)
    done = subprocess.run(
        [chatloop_bin(), "import", str(link)], cwd=here, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0 and "a symbolic link to a folder (not followed" in done.stdout


def test_a_folder_only_called_projects_is_imported_into_this_project(
    chatloop_home: Path, tmp_path: Path
) -> None:
    """``~/projects/chat-exports/x.md`` is not a chatloop home's project: its sessions
    come into the current project (they went to a project named chat-exports, which
    no folder maps to)."""
    from chatloop.store.store import Store

    exports = tmp_path / "u" / "projects" / "chat-exports"
    exports.mkdir(parents=True)
    shutil.copy(LEGACY, exports)
    here = tmp_path / "here"
    here.mkdir()
    for named in (exports, tmp_path / "u"):
        done = subprocess.run(
            [chatloop_bin(), "import", str(named)],
            cwd=here,
            env=environment(chatloop_home, 12),
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr
    project = Store(chatloop_home, cwd=here).project_dir
    assert [p.name for p in (chatloop_home / "projects").iterdir()] == [project.name]
    assert [p.name for p in project.glob("*.md")] == [LEGACY.name]


def _sources(store: Store, n: int, size: int) -> list[Path]:
    """``n`` chatloop sessions of about ``size`` bytes each, closed, in ``store``."""
    paths = []
    for i in range(n):
        with store.create(new_meta(title=f"big {i}")) as writer:
            writer.append(Message.create("user", T0, text=f"question {i}"))
            writer.append(Message.create("assistant", T0, text=("word " * (size // 5))))
            writer.finalize()
            paths.append(writer.path)
    return paths


def test_a_truncated_copy_a_killed_import_left_is_repaired_not_a_duplicate(
    store: Store, tmp_path: Path
) -> None:
    source = _sources(store, 1, 4000)[0]
    here = Store(store.root, cwd=tmp_path)
    target = here.project_dir / source.name
    here.project_dir.mkdir(parents=True)
    target.write_bytes(source.read_bytes()[:1500])  # what an in-place write left at the kill
    dead = _dead_pid()
    stale = here.project_dir / f".{source.name}.tmp-{dead}-abcdef"
    stale.write_bytes(b"half")
    other = here.project_dir / f".{source.name}.tmp-{os.getpid()}-abcdef"  # live: kept
    other.write_bytes(b"a neighbour's rewrite under way")
    outcomes = import_sessions(here, [source])
    assert [o.status for o in outcomes] == ["repaired"]
    assert target.read_bytes() == source.read_bytes()
    assert not stale.exists() and other.exists()
    assert [o.status for o in import_sessions(here, [source])] == ["present"]
    target.write_bytes(source.read_bytes()[:1500] + b"edited by hand")  # not a prefix
    assert [o.status for o in import_sessions(here, [source])] == ["skipped"]


def test_the_temp_file_of_an_import_killed_after_its_last_link_is_cleared(
    store: Store, tmp_path: Path
) -> None:
    """The kill landed between the last copy's link and the unlink of its temp file:
    every copy is there, so the next import writes nothing, and still clears the temp
    file (it cleaned only when it wrote: a flake of the kill loop below)."""
    source = _sources(store, 1, 4000)[0]
    here = Store(store.root, cwd=tmp_path)
    here.project_dir.mkdir(parents=True)
    (here.project_dir / source.name).write_bytes(source.read_bytes())
    stale = here.project_dir / f".{source.name}.tmp-{_dead_pid()}-abcdef"
    stale.write_bytes(source.read_bytes())
    assert [o.status for o in import_sessions(here, [source])] == ["present"]
    assert sorted(p.name for p in here.project_dir.iterdir()) == [source.name]


def _dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


_IMPORT_CHILD = """
import sys
from pathlib import Path
from chatloop.store.importer import import_sessions
from chatloop.store.store import Store
print("began", flush=True)
import_sessions(Store(Path(sys.argv[1]), cwd=Path(sys.argv[2])), [Path(sys.argv[3])])
print("done", flush=True)
"""


def test_an_import_killed_at_random_moments_is_whole_after_the_next(
    store: Store, tmp_path: Path
) -> None:
    """kill -9 an import child at a random moment after it says it began (a line on a
    pipe), re-run it: every copy equals its source, no temp file is left."""
    sources = _sources(store, 12, 400_000)
    folder = sources[0].parent
    rng = random.Random(31)
    killed_mid = 0
    for round_ in range(6):
        project = tmp_path / f"p{round_}"
        project.mkdir()
        child = subprocess.Popen(
            [sys.executable, "-c", _IMPORT_CHILD, str(store.root), str(project), str(folder)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None
        assert child.stdout.readline() == "began\n"
        time.sleep(rng.uniform(0, 0.25))
        child.kill()
        child.wait()
        here = Store(store.root, cwd=project)
        left = (
            sorted(p.name for p in here.project_dir.glob("*")) if here.project_dir.exists() else []
        )
        killed_mid += 0 < len(left) < len(sources)
        outcomes = import_sessions(here, [folder])
        assert all(o.status in ("imported", "present", "repaired") for o in outcomes), outcomes
        for source in sources:
            assert (here.project_dir / source.name).read_bytes() == source.read_bytes()
        assert sorted(p.name for p in here.project_dir.iterdir()) == sorted(s.name for s in sources)
    assert killed_mid  # some kill landed while copies were being written


def test_two_imports_at_once_of_the_same_files_both_succeed(store: Store, tmp_path: Path) -> None:
    """Issue 44: two `chatloop import` of one folder, started together: the copy one
    of them linked into place after the other had decided to write it is "already
    here" for the other (it failed with "File exists"); both exit 0, every session
    is listed once."""
    sources = _sources(store, 200, 300)
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    for source in sources:
        shutil.copy(source, folder)
    project = tmp_path / "p"
    project.mkdir()
    env = environment(store.root, 12)
    started = [
        subprocess.Popen(
            [chatloop_bin(), "import", str(folder)],
            cwd=project,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    ended = [child.communicate(timeout=300) for child in started]
    for child, (_, err) in zip(started, ended, strict=True):
        assert child.returncode == 0, err
        assert "Traceback" not in err and "error" not in err
    imported = sum(out.count("\nimported ") + out.startswith("imported ") for out, _ in ended)
    assert imported == len(sources)  # each copy written once, by one of them
    listed = subprocess.run(
        [chatloop_bin(), "sessions", "--limit", "1000", "--json"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert listed.returncode == 0, listed.stderr
    ids = sorted(row["id"] for row in json.loads(listed.stdout))
    assert ids == sorted(source.stem for source in sources)
