"""Permission bits, as an ordinary user meets them: files and folders in the home that
the user may not read or write. Root ignores permission bits, so the commands run
as ``nobody`` (``setpriv``); where that cannot be done the test is skipped, saying why.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from chatloop.format import Message
from chatloop.store.store import Store
from tests.conftest import T0, Clock, new_meta

NOBODY = 65534
CHECKOUT = Path(__file__).resolve().parents[1]


def as_nobody(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    command = [
        "setpriv",
        f"--reuid={NOBODY}",
        f"--regid={NOBODY}",
        "--clear-groups",
        sys.executable,
        "-m",
        "chatloop.cli",
        *args,
    ]
    return subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.fixture
def shared_place() -> Iterator[Path]:
    """A folder ``nobody`` can reach (pytest's own tmp folders are private to root)."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run commands as an ordinary user")
    base = Path(tempfile.mkdtemp(prefix="chatloop-perm-"))
    base.chmod(0o755)
    probe = subprocess.run(
        [
            "setpriv",
            f"--reuid={NOBODY}",
            f"--regid={NOBODY}",
            "--clear-groups",
            sys.executable,
            "-c",
            "import chatloop",
        ],
        capture_output=True,
        cwd=base,
        check=False,
        env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(CHECKOUT)},
    )
    if probe.returncode != 0:
        shutil.rmtree(base)
        pytest.skip(f"this Python cannot be run as nobody: {probe.stderr.decode()[-200:]}")
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_unreadable_files_and_folders_cost_one_line_not_the_home(shared_place: Path) -> None:
    home, project = shared_place / "home", shared_place / "project"
    project.mkdir()
    store = Store(home, cwd=project, clock=Clock())
    ids = []
    for i in range(3):
        writer = store.create(new_meta(title=f"session {i}"))
        writer.append(Message.create("user", T0, text=f"findme number {i}"))
        writer.finalize(Message.create("summary", T0, text="- done"))
        writer.close()
        ids.append(writer.meta.id)
    for path in (shared_place, *shared_place.rglob("*")):
        os.chown(path, NOBODY, NOBODY)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(shared_place),
        "CHATLOOP_HOME": str(home),
        "XDG_CONFIG_HOME": str(shared_place / "config"),
        "PYTHONPATH": str(CHECKOUT),
    }  # this checkout's code, whatever is installed
    assert as_nobody(["reindex"], env, project).returncode == 0  # the index exists, as usual
    locked = store.find_file(ids[0])
    locked.chmod(0o000)  # one session the user cannot read
    (home / "index.db").chmod(0o400)  # an index the user cannot write
    commands = [
        ["sessions"],
        ["sessions", "--all"],
        ["search", "findme"],
        ["show", "1"],
        ["show", ids[0]],
        ["tree", "1"],
        ["export", "1"],
        ["reindex"],
        ["doctor"],
        ["reseal", "1"],
    ]
    for args in commands:
        done = as_nobody(args, env, project)
        assert done.returncode in (0, 1, 2), (args, done.stderr)
        assert "Traceback" not in done.stderr + done.stdout, (args, done.stderr)
        if done.returncode:
            assert done.stderr.startswith("error: "), (args, done.stderr)
    listed = as_nobody(["sessions"], env, project).stdout
    assert all(f"session {i}" in listed for i in (1, 2))  # the readable ones are all there
    unreadable = as_nobody(["show", ids[0]], env, project)
    assert unreadable.returncode == 1 and "ermission" in unreadable.stderr
    # a whole project folder the user cannot enter: the other projects still work
    (home / "index.db").chmod(0o600)
    store.project_dir.chmod(0o000)
    done = as_nobody(["sessions", "--all"], env, shared_place)
    assert done.returncode in (0, 1) and "Traceback" not in done.stderr, done.stderr
