"""Crashes and damage: torn tails, flipped bytes, SIGKILL during appends and rewrites."""

from __future__ import annotations

import random
import re
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from chatloop.format import Message, Session, parse_markdown, render_markdown
from chatloop.store.store import Store
from tests.conftest import T0, exchange, new_meta

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = Session(
    new_meta(id="20261121-143045-00c0ffee"),
    tuple(exchange(1) + exchange(2) + [Message.create("summary", T0, text="**Pending:** none")]),
)
BOTH = [SAMPLE, replace(SAMPLE, meta=replace(SAMPLE.meta, format=1))]
_OPEN = re.compile(rb"<!-- (?:chatloop:)?([a-z2-7]{8}) (?:user|assistant|tool|summary) ")


def _frames(data: bytes) -> list[tuple[int, int]]:
    """(start, end) of every frame: the open marker to just past the close line."""
    spans = []
    pos = 0
    while (found := _OPEN.search(data, pos)) is not None:
        start, key = found.start(), found.group(1)
        close = re.compile(rb"<!-- /(?:chatloop:)?" + key + rb" ").search(data, start)
        assert close is not None
        end = data.find(b"\n", close.start()) + 1
        spans.append((start, end))
        pos = end
    return spans


@pytest.mark.parametrize("sample", BOTH, ids=["format2", "format1"])
def test_torn_tail_at_every_byte_of_the_last_two_messages(store: Store, sample: Session) -> None:
    data = render_markdown(sample)
    spans = _frames(data)
    store.project_dir.mkdir(parents=True)
    path = store.project_dir / f"{sample.meta.id}.md"
    first_cut = spans[-2][0] - 1  # from the blank line before the second-to-last frame
    for cut in range(first_cut, len(data) + 1):
        path.write_bytes(data[:cut])
        complete = sum(1 for _, end in spans if end <= cut)
        writer = store.open(path)
        assert writer.session.messages == sample.messages[:complete], cut
        writer.append(Message.create("user", T0, text="next"))
        writer.close()
        result = parse_markdown(path.read_bytes())
        assert [p.kind for p in result.problems] == [], (cut, result.problems)
        assert result.session.messages == (*sample.messages[:complete], writer.messages[-1])
        kept_aside = b"".join(p.read_bytes() for p in path.parent.glob("*.corrupt-*"))
        assert data[:cut].endswith(kept_aside) or not kept_aside
        for aside in path.parent.glob("*.corrupt-*"):
            aside.unlink()


@pytest.mark.parametrize("sample", BOTH, ids=["format2", "format1"])
def test_damage_in_one_message_never_hides_the_others(sample: Session) -> None:
    data = render_markdown(sample)
    spans = _frames(data)
    rng = random.Random(1234)
    for trial in range(500):
        victim = rng.randrange(len(spans))
        start, end = spans[victim]
        offset = rng.randrange(start, end)
        damaged = bytearray(data)
        damaged[offset] ^= rng.randrange(1, 256)
        result = parse_markdown(bytes(damaged))
        problems = [p for p in result.problems]
        assert len(problems) == 1, (trial, offset, problems)
        others = [m for i, m in enumerate(sample.messages) if i != victim]
        got = [m for m in result.session.messages if m.key != sample.messages[victim].key]
        assert got == others, (trial, offset)


def test_sigkill_during_appends_loses_no_acknowledged_message(store: Store) -> None:
    writer = store.create(new_meta())
    path = writer.path
    writer.close()
    acknowledged: list[str] = []
    rng = random.Random(99)
    for _ in range(50):
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.child_writer", "append", str(path)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        acknowledged.append(proc.stdout.readline().strip())  # wait until it is writing
        time.sleep(rng.uniform(0, 0.03))
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate()
        acknowledged += [line for line in out.splitlines() if line.startswith("wrote")]
        result = parse_markdown(path.read_bytes())
        assert {p.kind for p in result.problems} <= {"torn_tail"}, result.problems
    final = store.recover(path)
    on_disk = [f"wrote {m.role} {m.text.split()[1]}" for m in final.session.messages]
    assert len(acknowledged) > 100
    for line in acknowledged:
        assert line in on_disk, line
    assert [p.kind for p in parse_markdown(path.read_bytes()).problems] == []


def test_sigkill_during_rewrites_leaves_old_or_new_file(store: Store) -> None:
    writer = store.create(new_meta())
    for message in exchange(1):
        writer.append(message)
    path = writer.path
    expected = writer.session.messages
    writer.close()
    rng = random.Random(7)
    for _ in range(50):
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.child_writer", "rewrite", str(path)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        assert proc.stdout.readline() == "rewriting\n"  # it began: kill it mid-rewrite
        time.sleep(rng.uniform(0, 0.03))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        result = parse_markdown(path.read_bytes())
        assert result.problems == () and result.session.messages == expected
    store.recover(path)
    strays = [p.name for p in path.parent.iterdir() if ".tmp-" in p.name]
    assert strays == []


def _half_closed(store: Store) -> tuple[Path, bytes]:
    """A session whose close was killed between its two steps (issue 44): the summary
    appended, the closed front matter in a temp file beside it, never renamed. The
    file's bytes as the kill left them."""
    writer = store.create(new_meta())
    for message in exchange(1) + exchange(2):
        writer.append(message)
    path = writer.path
    writer.close()
    killed = subprocess.run(
        [sys.executable, "-m", "tests.child_writer", "halfclose", str(path)],
        cwd=ROOT,
        capture_output=True,
        timeout=60,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    return path, path.read_bytes()


def _temps(path: Path) -> list[Path]:
    return [p for p in path.parent.iterdir() if p.name.startswith(f".{path.name}.tmp-")]


def test_a_close_killed_before_its_rename_is_listed_by_doctor_then_completed_by_the_next_open(
    store: Store,
) -> None:
    from tests.pty_driver import chatloop_bin, environment

    path, left = _half_closed(store)
    (temp,) = _temps(path)
    assert parse_markdown(left).session.meta.status == "open"
    assert parse_markdown(left).session.messages[-1].role == "summary"
    doctor = subprocess.run(
        [chatloop_bin(), "doctor", "--base-url", "http://127.0.0.1:9/v1"],
        cwd=store.cwd,
        env=environment(store.root, 12),
        capture_output=True,
        text=True,
        timeout=120,
    )
    said = [line for line in doctor.stdout.splitlines() if "half-done" in line]
    assert len(said) == 1 and path.stem in said[0] and temp.name in said[0], doctor.stdout
    assert temp.exists() and path.read_bytes() == left  # doctor changes nothing
    with store.open(path) as writer:
        assert writer.meta.status == "closed" and writer.meta.summary == "model"
    assert _temps(path) == []
    result = parse_markdown(path.read_bytes())
    assert result.problems == () and result.session.meta.summary_key
    assert result.session.messages == parse_markdown(left).session.messages  # body kept
    summary = store.summary_of(path)
    assert summary.message is not None and "basil" in summary.message.text
    assert store.left_rewrites() == []


def test_a_temp_file_cut_short_or_older_than_a_hand_edit_is_removed_not_used(
    store: Store,
) -> None:
    """Only a whole temp file of this very body completes a close; any other is removed
    (the file stays the version it is, and an open session is marked interrupted)."""
    path, _ = _half_closed(store)
    (temp,) = _temps(path)
    whole = temp.read_bytes()
    temp.write_bytes(whole[: len(whole) - 40])  # a kill while the temp was written
    store.recover(path)
    assert _temps(path) == []
    assert parse_markdown(path.read_bytes()).session.meta.status == "interrupted"

    other, _ = _half_closed(store)
    (temp,) = _temps(other)
    edited = other.read_bytes().replace(b"Question number 1", b"Question number one")
    other.write_bytes(edited)  # a person's edit after the kill: newer than the temp
    store.recover(other)
    assert _temps(other) == []
    assert b"Question number one" in other.read_bytes()
    assert parse_markdown(other.read_bytes()).session.meta.status == "interrupted"


def test_continuing_a_half_closed_session_completes_its_close(store: Store) -> None:
    """`-c` reads a parent's summary without opening it for writing: a parent left
    half-closed is settled first (its close completed) and continued from it."""
    from tests.fakes import FakeBackend
    from tests.hosts import chat

    path, _ = _half_closed(store)
    session, _ = chat(store, FakeBackend("Acknowledged.", "Every two days."))
    assert session.resume(path.stem)
    assert _temps(path) == []
    assert parse_markdown(path.read_bytes()).session.meta.status == "closed"
