"""Issue 49, items 1 and 4: a lost index never blocks, whatever the files.

After the index is lost, every session is listed from its head (its front
matter, or a legacy file's first and last few kB): a format 1 file, an imported
seed session, a session still open or interrupted, one whose summary never
finished. What the head cannot say (the queries, the last activity, whether a
summary ends it; a seed's tokens) is None, shown "?", and filled when the words
are read: the rows are then those of a full build. Real files, real processes
(the words are read by the background process); waits are on events.
"""

from __future__ import annotations

import dataclasses
import io
import os
import shutil
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import BinaryIO

import pytest

from chatloop.format import GLANCE_BYTES, Message, Session, render_markdown, reseal
from chatloop.store import fsio, index_scan
from chatloop.store.index import Index
from chatloop.store.rows import SessionRow
from chatloop.store.store import Store
from chatloop.ui.listing import sessions_text
from tests.conftest import LEGACY, T0, new_meta
from tests.test_index_glance import lose_index, wait_gone

SEED = (
    Path(__file__).parent.parent
    / "sample_conversations"
    / "legacy"
    / "Simple_Sally_20250614_101500.md"
)
LONG = "a long answer that fills the file well past its head. " * 300  # ~16 kB


def at(i: int) -> datetime:
    """Message ``i``'s time: before the store's clock (which starts at T0), as a
    message is written before the front matter that closes its session."""
    return T0 - timedelta(days=7) + timedelta(minutes=i)


def by_writer(store: Store, i: int, kind: str) -> Path:
    """Session ``i`` of ``kind`` as chatloop writes it: closed with its summary (format
    1 or 2), left open (its summary never finished: the worker died), or closed
    without a summary pointer (format 2, a summary that never came)."""
    fmt = 1 if kind.startswith("format1") else 2
    writer = store.create(new_meta(title=f"{kind} {i}" if i % 3 else "", format=fmt))
    writer.append(Message.create("user", at(i), text=f"question {i} of {kind}"))
    writer.append(Message.create("assistant", at(i), text=LONG if i % 2 else f"answer {i}"))
    if kind.endswith("closed"):
        writer.finalize(Message.create("summary", at(i), text=f"**Pending:** {i}"))
    writer.close()
    return writer.path


def rendered(
    store: Store, i: int, status: str, fmt: int = 2, lag: timedelta = timedelta(0)
) -> Path:
    """Session ``i`` written whole, its front matter saying ``status`` (``interrupted``:
    as a recovery leaves it; its front matter's counters lag its frames, and its
    ``updated`` by ``lag``, its last message that much after T0)."""
    last = at(i) + timedelta(seconds=40) if not lag else T0 + lag
    messages = (
        Message.create("user", at(i), text=f"question {i}"),
        Message.create("assistant", at(i) + timedelta(seconds=30), text=LONG),
        Message.create("user", last, text=f"again {i}"),
    )
    meta = new_meta(
        id=f"{at(i):%Y%m%d-%H%M%S}-{i:08x}",
        status=status,
        queries=1,
        format=fmt,
        title="",
        updated=T0 if not lag else T0 - lag,
    )
    data = render_markdown(Session(meta, messages))
    path = store.project_dir / f"{meta.id}.md"
    path.write_bytes(data)
    return path


def seeds(store: Store, count: int, start: int = 0) -> list[Path]:
    """``count`` imported seed sessions (the legacy format), closed with their summary,
    interrupted (none), short (the head is the whole file) and long (past two heads)."""
    sample = SEED.read_bytes()
    short = LEGACY.encode()
    paths = []
    for i in range(start, start + count):
        name = f"Simple_Sally_2025{i // 10000 + 1:02d}{i % 10000:04d}_101500"
        data = sample if i % 3 else short
        if i % 2:
            data = data.replace(b"**Simple Sally:** ", b"**Simple Sally:** " + LONG.encode(), 2)
        data = data.replace(b"Simple_Sally_20250614_101500", name.encode())
        data = data.replace(b"Simple_Sally_20250614_101500", name.encode())
        path = store.project_dir / f"{name}.md"
        path.write_bytes(data)
        paths.append(path)
    return paths


def imported(store: Store, tmp_path: Path, count: int) -> list[Path]:
    """Seed sessions brought in by ``chatloop import``'s code (a copy byte for byte)."""
    from chatloop.store.importer import import_sessions

    source = tmp_path / "seed" / ".chat-sessions"
    source.mkdir(parents=True)
    elsewhere = Store(tmp_path / "elsewhere", cwd=tmp_path)
    elsewhere.project_dir.mkdir(parents=True)
    for path in seeds(elsewhere, count):
        shutil.move(path, source / path.name)
    import_sessions(store, [source])
    return sorted(store.project_dir.glob("*.md"))


class Reads:
    """How far each file was read through ``fsio.open_read`` (its highest offset)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.furthest: dict[str, int] = {}
        self.scanned: list[str] = []
        opened = fsio.open_read
        scan = index_scan.scan_file

        def open_read(path: str | Path) -> BinaryIO:
            handle = opened(path)
            return _Counted(handle, str(path), self.furthest)

        def counted(path: str, words: object = None):  # type: ignore[no-untyped-def]
            self.scanned.append(path)
            return scan(path, words)  # type: ignore[arg-type]

        monkeypatch.setattr(fsio, "open_read", open_read)
        monkeypatch.setattr(index_scan, "scan_file", counted)

    def past_heads(self, paths: list[Path]) -> list[str]:
        """The files read past their head (a legacy file: past its head and its tail)."""
        out = []
        for path in paths:
            size = path.stat().st_size
            far = self.furthest.get(str(path), 0)
            legacy = path.read_bytes().startswith(b"# ")
            if far > GLANCE_BYTES and not (legacy and far == size):
                out.append(path.name)
        return out


class _Counted(io.BufferedIOBase):
    """A file read through, its furthest offset noted (read + seek only)."""

    def __init__(self, handle: BinaryIO, path: str, furthest: dict[str, int]) -> None:
        self._handle, self._path, self._furthest = handle, path, furthest
        self._read_from: list[int] = []

    def read(self, size: int | None = -1) -> bytes:
        data = self._handle.read(size)
        where = self._handle.tell()
        self._furthest[self._path] = max(self._furthest.get(self._path, 0), where)
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._handle.seek(offset, whence)

    def tell(self) -> int:
        return self._handle.tell()

    def close(self) -> None:
        self._handle.close()

    def __enter__(self) -> _Counted:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def known(row: SessionRow, full: SessionRow) -> SessionRow:
    """``full`` with what ``row`` does not know yet (its None fields, its preview and
    problems, which a head never counts) taken from ``row``."""
    unknown = {
        name: None
        for name in ("queries", "updated", "has_summary", "tokens_in", "tokens_out")
        if getattr(row, name) is None
    }
    return full._replace(**unknown, preview=row.preview, problems=row.problems)


def listed_from_heads(
    store: Store, monkeypatch: pytest.MonkeyPatch, paths: list[Path]
) -> tuple[list[SessionRow], list[SessionRow]]:
    """The rows of a full build, then those listed after the index is lost (checking
    that no file was read past its head meanwhile): both, sorted by id."""
    with Index(store) as index:
        index.rebuild()
        full = index.list_sessions(all_projects=True)
    lose_index(store.root)
    reads = Reads(monkeypatch)
    with Index(store) as index:
        assert index.sync() == len(paths)
        listed = index.list_sessions(all_projects=True)
    monkeypatch.undo()
    assert reads.scanned == []  # no file skimmed whole
    assert reads.past_heads(paths) == []
    return sorted(listed, key=_id), sorted(full, key=_id)


def test_a_number_names_the_session_of_a_full_build_while_the_words_are_read(
    store: Store, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``-c`` (and ``-r N``, ``show N``) continue the session a full build numbers 1,
    though a head says nothing of an interrupted session's last activity."""
    store.project_dir.mkdir(parents=True, exist_ok=True)
    paths = [by_writer(store, i, "format1-closed") for i in range(70)]
    latest = rendered(store, 70, "interrupted", lag=timedelta(days=40))
    with Index(store) as index:
        index.rebuild()
        first = index.find("1")
    assert first.path == str(latest) and len(paths) >= 64
    lose_index(store.root)
    with Index(store) as index:
        assert index.sync() == len(paths) + 1 and index.text_pending()
        assert index.find("1").id == first.id
        assert index.find("2").id != first.id
    wait_gone(store.root)


def _id(row: SessionRow) -> str:
    return row.id


def completed(store: Store) -> list[SessionRow]:
    """The listing once the words are read (a search waits for them)."""
    with Index(store) as index:
        index.complete_text()
        assert index.text_pending() == 0
        rows = index.list_sessions(all_projects=True)
    wait_gone(store.root)
    return rows


def by_kind(store: Store, tmp_path: Path) -> Iterator[tuple[str, Callable[[int], Path]]]:
    yield "format2-closed", lambda i: by_writer(store, i, "format2-closed")
    yield "format1-closed", lambda i: by_writer(store, i, "format1-closed")
    yield "format2-open", lambda i: by_writer(store, i, "format2-open")
    yield "format1-open", lambda i: by_writer(store, i, "format1-open")
    yield "format2-closed-no-summary", lambda i: rendered(store, i, "closed")
    yield "format2-interrupted", lambda i: rendered(store, i, "interrupted")
    yield "format1-interrupted", lambda i: rendered(store, i, "interrupted", 1)


def test_every_kind_of_file_is_listed_from_its_head_and_a_full_build_once_read(
    store: Store, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    store.project_dir.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    kinds: dict[str, str] = {}
    n = 0
    for kind, make in by_kind(store, tmp_path):
        for _ in range(12):
            paths.append(make(n))
            kinds[paths[-1].stem] = kind
            n += 1
    for path in seeds(store, 24, start=n):
        paths.append(path)
        kinds[path.stem] = "seed"
    # the most recent of all: interrupted, its front matter a month older than its frames
    latest = rendered(store, n, "interrupted", lag=timedelta(days=40))
    paths.append(latest)
    kinds[latest.stem] = "format2-interrupted"
    listed, full = listed_from_heads(store, monkeypatch, paths)
    assert [r.id for r in listed] == [r.id for r in full]
    for row, whole in zip(listed, full, strict=True):
        assert row == known(row, whole)._replace(number=row.number), kinds[row.id]
        # finalize wrote the counts beside its pointer; a seed whose head is the whole
        # file says all; the others' front matter may lag their frames: not yet known
        if kinds[row.id] not in ("format2-closed", "seed"):
            assert row.queries is None and row.has_summary is None, kinds[row.id]
        if kinds[row.id].endswith(("open", "interrupted")):
            assert row.updated is None, kinds[row.id]
    shown = sessions_text(listed, T0 + timedelta(days=1))
    unknown = [line for line in shown.splitlines() if "  ?q  " in line]
    assert len(unknown) == len([r for r in listed if r.queries is None]) > 0
    assert "None" not in shown
    said_so(listed)
    assert sorted(completed(store), key=_id) == full  # the words read: a full build's rows


def said_so(rows: list[SessionRow]) -> None:
    """The picker's lines and the table of /sessions show a figure not yet known as
    "?", never "None" nor a number."""
    from rich.console import Console

    from chatloop.ui.picker import line_for
    from chatloop.ui.render import sessions_table

    now = T0 + timedelta(days=1)
    for row in rows:
        line = line_for(row, now, width=200)
        assert "None" not in line
        assert ("  ?q  " in line) == (row.queries is None), line
    console = Console(file=io.StringIO(), width=200, color_system=None)
    console.print(sessions_table(rows, now))
    drawn = console.file.getvalue()  # type: ignore[attr-defined]
    assert "None" not in drawn and " ? " in drawn


# A few thousand files with CHATLOOP_SLOW=1; otherwise 600, still three of the index's
# write batches (index_build.BATCH_FILES), half of them longer than a glance
FEW_THOUSAND = 2000 if os.environ.get("CHATLOOP_SLOW") else 600


def few_thousand(store: Store, kind: str, tmp_path: Path) -> list[Path]:
    """A home of ``FEW_THOUSAND`` files of ``kind``, written whole (as bench/corpus.py)."""
    store.project_dir.mkdir(parents=True, exist_ok=True)
    if kind == "seed":
        return imported(store, tmp_path, FEW_THOUSAND)
    fmt = 1 if kind == "format1" else 2
    status = "open" if kind == "open" else "closed"
    template = Session(
        new_meta(id=f"{at(0):%Y%m%d-%H%M%S}-{0:08x}", status=status, queries=1, format=fmt),
        (
            Message.create("user", at(0), text="question"),
            Message.create("assistant", at(0), text=LONG),
            Message.create("summary", at(0), text="**Pending:** nothing"),
        ),
    )
    if status == "closed" and fmt == 2:
        meta = dataclasses.replace(template.meta, summary_key=template.messages[-1].key)
        template = dataclasses.replace(template, meta=dataclasses.replace(meta, summary_at=0))
    data = reseal(render_markdown(template))[0]
    paths = []
    for i in range(FEW_THOUSAND):
        new_id = f"{at(i):%Y%m%d-%H%M%S}-{i:08x}"
        path = store.project_dir / f"{new_id}.md"
        path.write_bytes(data.replace(template.meta.id.encode(), new_id.encode()))
        paths.append(path)
    return paths


@pytest.mark.parametrize("kind", ["format1", "open", "seed"])
def test_a_home_of_a_few_thousand_files_lists_without_reading_past_the_heads(
    store: Store, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, kind: str
) -> None:
    paths = few_thousand(store, kind, tmp_path)
    assert len(paths) == FEW_THOUSAND
    assert all(p.stat().st_size > 2 * GLANCE_BYTES for p in paths[1::2])
    lose_index(store.root)
    reads = Reads(monkeypatch)
    with Index(store) as index:
        assert index.sync() == len(paths)
        listed = index.list_sessions(all_projects=True, limit=len(paths))
    monkeypatch.undo()
    assert reads.scanned == []
    assert reads.past_heads(paths) == []
    assert len(listed) == len(paths)
    past = [row for row in listed if Path(row.path).stat().st_size > GLANCE_BYTES]
    assert len(past) >= FEW_THOUSAND // 2 and all(row.queries is None for row in past)
    rows = completed(store)
    assert all(row.queries is not None and row.has_summary is not None for row in rows)
