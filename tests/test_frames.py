"""The one frame scanner read from a file in pieces: the same frames and flaws as from
the whole file in memory, however the pieces fall, and a long frame read in few reads."""

from __future__ import annotations

import io

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chatloop.format import (
    Flaw,
    Frame,
    Message,
    Session,
    frames,
    iter_frames,
    open_document,
    render_markdown,
)
from tests.conftest import T0, exchange, new_meta
from tests.strategies import examples

JUNK = [
    b"",
    b"\n",
    b"<",
    b"<!-- ",
    b"<!-- /",
    b" -->\n",
    b"\n<!-- /aaaaaaaa 00000000 -->\n",
    b"<!-- aaaaaaaa user 10:00:00 -->\nforged\n<!-- /aaaaaaaa 00000000 -->\n",
    b"<!-- chatloop:aaaaaaaa user {} -->\n",
    b"\xff\xfe",
    b"---\n",
]


class CountedReads(io.BytesIO):
    """A file whose reads are counted."""

    reads = 0

    def read(self, size: int | None = -1) -> bytes:
        self.reads += 1
        return super().read(size)


def _file(version: int, queries: int) -> bytes:
    meta = (
        new_meta(format=version)
        if version == 1
        else new_meta(agent_path="", agent_name="simple_sally")
    )
    messages = tuple(m for n in range(1, queries + 1) for m in exchange(n))
    return render_markdown(Session(meta, messages))


def _in_pieces(data: bytes, chunk: int) -> list[Frame | Flaw]:
    doc = open_document(data)
    source = CountedReads(data)
    source.seek(doc.body_start)
    return list(iter_frames(source, doc.body_start, doc.meta.format, chunk))


def _whole(data: bytes) -> list[Frame | Flaw]:
    doc = open_document(data)
    return list(iter_frames(data, doc.body_start, doc.meta.format))


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from([1, 2]),
    st.integers(1, 6),
    st.integers(1, 400),
    st.lists(st.tuples(st.floats(0, 1), st.integers(0, 40), st.sampled_from(JUNK)), max_size=3),
)
def test_a_file_read_in_pieces_gives_what_its_bytes_give(
    version: int, queries: int, chunk: int, edits: list[tuple[float, int, bytes]]
) -> None:
    data = _file(version, queries)
    body = open_document(data).body_start
    for where, cut, junk in edits:  # damage after the front matter: cut bytes, add junk
        at = body + int(where * (len(data) - body))
        data = data[:at] + junk + data[at + cut :]
    assert _in_pieces(data, chunk) == _whole(data)


def test_a_long_frame_is_read_in_few_reads() -> None:
    long = Message.create("user", T0, text="word " * 200_000)  # a 1 MB question
    data = render_markdown(Session(new_meta(), (long, *exchange(1))))
    doc = open_document(data)
    source = CountedReads(data)
    source.seek(doc.body_start)
    read = list(iter_frames(source, doc.body_start, 2, 1024))
    assert read == _whole(data) and len(read) == 5
    assert all(isinstance(f, Frame) and f.crc_ok for f in read)
    assert source.reads <= 20  # (a kilobyte at a time: a thousand reads)


def test_a_frame_longer_than_the_limit_is_skipped_and_the_next_one_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(frames, "MAX_FRAME_BYTES", 100_000)
    monkeypatch.setattr(frames, "_GROW_MAX", 25_000)
    huge = Message.create("user", T0, text="x" * 300_000)
    data = render_markdown(Session(new_meta(), (huge, *exchange(2))))
    opens = data.index(b"<!-- ", open_document(data).body_start)
    for chunk in (1000, 4096, 30_000):
        read = _in_pieces(data, chunk)
        assert isinstance(read[0], Flaw) and read[0].kind == "damaged"
        assert read[0].offset == opens  # where it opens, whatever the chunk
        assert "longer than" in read[0].detail  # told once: its close line is no new damage
        assert [f.role if isinstance(f, Frame) else f.kind for f in read[1:]] == [
            "user",
            "assistant",
        ]


def test_the_limit_holds_whatever_the_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(frames, "MAX_FRAME_BYTES", 100_000)
    monkeypatch.setattr(frames, "_GROW_MAX", 25_000)
    for size, skipped in ((98_000, False), (100_300, True)):  # its text; a frame is more
        data = render_markdown(Session(new_meta(), (Message.create("user", T0, text="x" * size),)))
        for chunk in (1000, 4096, 30_000, 99_000):
            (read,) = _in_pieces(data, chunk)
            assert isinstance(read, Flaw) == skipped, (size, chunk)
