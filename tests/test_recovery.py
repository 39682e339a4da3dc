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
