"""The store: creation, appends, locks, permissions, paths, hand edits, full disks."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from chatloop.errors import SessionLocked, StoreError, UsageError
from chatloop.format import Message, parse_markdown
from chatloop.store.index import Index
from chatloop.store.store import Store
from tests.conftest import T0, Clock, exchange, new_meta

ROOT = Path(__file__).resolve().parent.parent


def child(mode: str, path: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.child_writer", mode, str(path), *extra],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )


def test_create_append_finalize(store: Store) -> None:
    with store.create(new_meta(title="first")) as writer:
        for message in exchange(1) + exchange(2):
            writer.append(message)
        summary = Message.create("summary", T0, text="**Background Context:** Initial session.")
        meta = writer.finalize(summary)
    result = store.read(writer.path)
    assert result.problems == ()
    assert result.session.meta.status == "closed" == meta.status
    assert result.session.meta.queries == 2
    assert result.session.meta.tokens_in == 40 + 120 * 2
    assert result.session.meta.summary == "model"
    assert result.session.messages == writer.session.messages


def test_append_cost_does_not_read_the_file(store: Store) -> None:
    """Appending writes exactly one record: the bytes before it are never rewritten."""
    writer = store.create(new_meta())
    writer.append(Message.create("user", T0, text="one"))
    before = writer.path.read_bytes()
    inode = writer.path.stat().st_ino
    writer.append(Message.create("user", T0, text="two"))
    after = writer.path.read_bytes()
    assert after.startswith(before) and writer.path.stat().st_ino == inode
    writer.close()


def test_files_and_dirs_are_private_under_umask_000(store: Store) -> None:
    old = os.umask(0)
    try:
        writer = store.create(new_meta())
        writer.append(Message.create("user", T0, text="secret"))
        writer.update_meta(title="still secret")
        writer.close()
        # a torn tail makes a .corrupt file; recovery must create it private too
        with open(writer.path, "ab") as handle:
            handle.write(b"\n<!-- abcdefgh user 14:30:")
        store.recover(writer.path)
        with Index(store) as index:
            index.sync()
    finally:
        os.umask(old)
    root = store.root
    for path in [root, *root.rglob("*")]:
        mode = stat.S_IMODE(path.lstat().st_mode)
        expected = 0o700 if path.is_dir() else 0o600
        assert mode == expected, f"{path} has mode {oct(mode)}"
    assert list(root.rglob("*.corrupt-*")), "the torn tail was set aside"
    assert (root / "index.db").exists()


@pytest.mark.parametrize("bad", ["../x", "/etc/passwd", "a\x00b", "..", "", "x/../../y", " "])
def test_hostile_ids_are_refused(store: Store, bad: str) -> None:
    with pytest.raises(UsageError):
        store.path_for(bad)
    with pytest.raises(UsageError):
        store.find_file(bad)
    if bad:  # an empty id asks create() for a generated one
        with pytest.raises(UsageError):
            store.create(new_meta(id=bad))


def test_planted_symlink_is_not_followed(store: Store, tmp_path: Path) -> None:
    target = tmp_path / "victim.txt"
    target.write_text("do not touch")
    store.project_dir.mkdir(parents=True)
    session_id = "20261121-143045-0badc0de"
    (store.project_dir / f"{session_id}.md").symlink_to(target)
    with pytest.raises(StoreError):
        store.create(new_meta(id=session_id))
    with pytest.raises(StoreError):
        store.open(store.project_dir / f"{session_id}.md")
    assert target.read_text() == "do not touch"
    assert list(store.session_files()) == []


def test_two_writers_on_one_session_are_refused(store: Store) -> None:
    writer = store.create(new_meta())
    with pytest.raises(SessionLocked) as info:
        store.open(writer.path)
    assert str(os.getpid()) in info.value.message and info.value.hint
    proc = subprocess.run(
        [sys.executable, "-m", "tests.child_writer", "append", str(writer.path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0 and "SessionLocked" in proc.stderr
    writer.append(Message.create("user", T0, text="still mine"))
    writer.close()
    result = store.read(writer.path)
    assert result.problems == () and len(result.session.messages) == 1


def test_lock_of_a_dead_process_is_taken_over(store: Store) -> None:
    writer = store.create(new_meta())
    path = writer.path
    writer.close()
    holder = child("hold", path)
    assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
    with pytest.raises(SessionLocked):
        store.open(path)
    holder.kill()
    holder.wait()
    writer = store.open(path)
    writer.append(Message.create("user", T0, text="took over"))
    writer.close()


def test_a_discarded_empty_session_leaves_nothing_and_one_with_messages_stays(
    store: Store,
) -> None:
    empty = store.create(new_meta())
    store.discard(empty)
    assert list(store.project_dir.iterdir()) == []
    kept = store.create(new_meta())
    kept.append(Message.create("user", T0, text="hello"))
    store.discard(kept)
    assert [m.text for m in store.read(kept.path).session.messages] == ["hello"]


def test_dead_open_session_becomes_interrupted(store: Store) -> None:
    writer = store.create(new_meta())
    writer.append(Message.create("user", T0, text="hello"))
    path = writer.path
    writer.close()
    assert store.read(path).session.meta.status == "open"
    result = store.recover(path)
    assert result.session.meta.status == "interrupted"
    assert result.session.messages[0].text == "hello"


def test_hand_edits_are_never_overwritten(store: Store) -> None:
    writer = store.create(new_meta(title="original"))
    for message in exchange(2):
        writer.append(message)
    data = writer.path.read_bytes()
    edited = data.replace(b"title: original", b"title: my title\nmy_tag: keep me")
    edited = edited.replace(b"Answer 2.", b"Answer 2 (corrected by hand).", 1)
    edited += b"\nA note I typed at the end.\n"
    writer.path.write_bytes(edited)
    st = writer.path.stat()
    os.utime(writer.path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    writer.append(Message.create("user", T0, text="after the edit"))
    writer.finalize()
    final = writer.path.read_bytes()
    assert b"A note I typed at the end." in final
    assert b"Answer 2 (corrected by hand)." in final
    meta = parse_markdown(final).session.meta
    assert meta.title == "my title" and meta.extra == {"my_tag": "keep me"}
    assert parse_markdown(final).session.messages[-1].text == "after the edit"


def test_nothing_is_deleted_when_years_pass(store: Store, tmp_path: Path) -> None:
    for _ in range(3):
        with store.create(new_meta()) as writer:
            writer.append(Message.create("user", T0, text="old"))
            writer.finalize()
    before = sorted(p.name for p in store.root.rglob("*"))
    later = Store(store.root, cwd=store.cwd, clock=Clock(T0 + timedelta(days=365 * 30)))
    with later.create(new_meta()) as writer:
        writer.finalize()
    with Index(later) as index:
        index.sync()
        assert len(index.list_sessions()) == 4
    after = {p.name for p in store.root.rglob("*")}
    assert set(before) <= after


def test_write_failure_leaves_old_bytes_and_session_usable(store: Store) -> None:
    """RLIMIT_FSIZE makes a real write fail (EFBIG) at a chosen size, no root needed."""
    writer = store.create(new_meta())
    writer.append(Message.create("user", T0, text="kept"))
    path = writer.path
    writer.close()
    for k in (0, 1, 10, 200, 1000, 4000):
        before = path.read_bytes()
        proc = child("fsize", path, str(k))
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0, out
        lines = out.splitlines()
        assert lines[0].startswith("error: Could not save a message"), lines
        assert "disk space" in lines[0] and lines[0].endswith("unchanged=True")
        assert lines[1] == "recovered"
        result = parse_markdown(path.read_bytes())
        old = parse_markdown(before).session.messages
        assert result.session.messages[: len(old)] == old
        assert [p.kind for p in result.problems] == []
        assert result.session.messages[-1].text == "after the disk was freed"


def test_full_disk_on_a_real_tmpfs(tmp_path: Path, small_disk: Path) -> None:
    mount = small_disk
    store = Store(mount / "home", cwd=tmp_path, clock=Clock())
    writer = store.create(new_meta())
    writer.append(Message.create("user", T0, text="first message"))
    filler = mount / "filler"
    failures = 0
    for k in range(0, 6000, 257):
        free = os.statvfs(mount).f_bavail * os.statvfs(mount).f_frsize
        with open(filler, "ab") as handle:
            handle.write(b"\0" * max(0, free - k))
        before = writer.path.read_bytes()
        try:
            writer.append(Message.create("user", T0, text="m" * 3000))
        except StoreError as exc:
            failures += 1
            assert "disk space" in exc.hint
            assert writer.path.read_bytes() == before
        filler.unlink()
    assert failures > 0
    writer.append(Message.create("user", T0, text="after"))
    writer.close()
    result = parse_markdown(writer.path.read_bytes())
    assert result.problems == () and result.session.messages[-1].text == "after"
