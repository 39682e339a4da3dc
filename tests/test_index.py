"""The index is a cache: listing, numbering, search, and rebuilds from the files."""

from __future__ import annotations

import os
import shutil
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from chatloop.errors import NotFound
from chatloop.format import Message
from chatloop.ids import handles
from chatloop.store import index_build
from chatloop.store.index import Index
from chatloop.store.store import Store
from tests.conftest import T0, new_meta
from tests.index_helpers import populate

SAMPLES = Path(__file__).resolve().parent.parent / "sample_conversations"


def test_numbers_are_most_recent_first_and_skip_the_live_session(store: Store) -> None:
    paths = populate(store, 3)
    live = store.create(new_meta(title="live"))
    live.append(Message.create("user", store.clock(), text="still talking"))
    with Index(store) as index:
        index.sync()
        rows = index.list_sessions()
        assert [r.title for r in rows] == ["live", "session 2", "session 1", "session 0"]
        assert [r.number for r in rows] == [None, 1, 2, 3]
        assert index.find("1").path == str(paths[2])
        assert index.find(rows[3].id).number == 3
        with pytest.raises(NotFound):
            index.find("4")
    live.close()
    with Index(store) as index:
        index.sync()
        rows = index.list_sessions()
        assert rows[0].status == "interrupted" and rows[0].number == 1


def test_deleted_or_corrupt_index_is_rebuilt_identical(store: Store) -> None:
    populate(store, 4)
    with Index(store) as index:
        index.sync()
        before = index.list_sessions()
        hits_before = index.search("unicorn2")
    os.unlink(store.root / "index.db")
    with Index(store) as index:
        index.sync()
        assert index.list_sessions() == before
    (store.root / "index.db").write_bytes(b"this is not a database" * 100)
    for suffix in ("-wal", "-shm"):
        (store.root / f"index.db{suffix}").unlink(missing_ok=True)
    with Index(store) as index:
        index.sync()
        assert index.list_sessions() == before
        assert index.search("unicorn2") == hits_before
        assert index.rebuild() == 4
        assert index.list_sessions() == before


def test_a_changed_file_is_read_again(store: Store) -> None:
    (path,) = populate(store, 1)
    with Index(store) as index:
        index.sync()
        assert index.search("zebra") == []
        data = path.read_bytes().replace(b"unicorn0 question", b"zebra question")
        path.write_bytes(data)
        assert index.sync() == 1
        assert [h.session.path for h in index.search("zebra")] == [str(path)]
        path.unlink()
        index.sync()
        assert index.list_sessions() == []


def test_search_finds_words_in_tool_results_and_reports_snippets(store: Store) -> None:
    populate(store, 2)
    with Index(store) as index:
        index.sync()
        hits = index.search("line two")
        assert hits and all(h.role == "tool" for h in hits)
        assert "[line]" in hits[0].snippet or "[two]" in hits[0].snippet
        assert index.search('unicorn1 "quoted') == []  # quotes are just characters


def test_legacy_and_samples_are_listed(store: Store) -> None:
    store.project_dir.mkdir(parents=True)
    for sample in [*SAMPLES.glob("*.md"), *SAMPLES.glob("legacy/*.md")]:
        shutil.copy(
            sample,
            store.project_dir / f"{sample.stem.split('-', 1)[0]}x{sample.stem[-6:]}.md"
            if sample.parent.name != "legacy"
            else store.project_dir / sample.name,
        )
    with Index(store) as index:
        index.sync()
        rows = index.list_sessions()
        assert len(rows) == 8
        legacy = [r for r in rows if r.legacy]
        assert len(legacy) == 1 and legacy[0].agent == "Simple Sally" and legacy[0].queries == 2
        assert index.search("mint")[0].session.legacy


def test_a_large_session_is_indexed_in_chunks_like_a_small_one(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chatloop.format import skimming

    writer = store.create(new_meta(title="big one"))
    writer.append(Message.create("user", T0, text="aardvarkfirst in the first message"))
    for n in range(1, 60):
        writer.append(Message.create("assistant", T0, text=f"filler words number {n} " * 40))
    writer.append(Message.create("user", T0, text="zebralast in the last message"))
    writer.close()
    with Index(store) as whole:
        whole.sync()
        expected = whole.list_sessions()
    (store.root / "index.db").unlink()
    monkeypatch.setattr(index_build, "STREAM_FROM", 1000)  # read it as a large file
    monkeypatch.setattr(skimming, "SEARCH_CHUNK_BYTES", 2000)
    with Index(store) as chunked:
        chunked.sync()
        assert chunked.list_sessions() == expected
        chunks = chunked.file.db.execute("SELECT count(*) FROM chunks").fetchone()[0]
        assert chunks > 5
        for word in ("aardvarkfirst", "zebralast", "filler"):
            hits = chunked.search(word)
            assert [h.session.title for h in hits] == ["big one"], word
        with store.open(writer.path) as again:
            again.append(Message.create("user", T0, text="one more"))
        chunked.sync()  # the file changed: its old chunks are unlisted, new ones come
        assert len(chunked.search("filler")) == 1
        after = chunked.file.db.execute("SELECT count(*) FROM chunks").fetchone()[0]
        assert chunks <= after <= chunks + 1
        dead = chunked.file.db.execute("SELECT value FROM info WHERE key = 'dead'").fetchone()[0]
        assert int(dead) > 0  # counted, for the rebuild that clears them


def test_a_word_edited_out_of_a_file_is_no_longer_found(store: Store) -> None:
    """The index keeps no text (contentless FTS): a file read again is indexed anew and
    its old words, still in the FTS table, are never listed."""
    with store.create(new_meta(title="edited")) as writer:
        writer.append(Message.create("user", T0, text="the kumquat tree by the gate"))
        writer.finalize()
    with Index(store) as index:
        index.sync()
        assert [h.session.title for h in index.search("kumquat")] == ["edited"]
        text = writer.path.read_text(encoding="utf-8").replace("kumquat", "fig")
        writer.path.write_text(text, encoding="utf-8")
        os.utime(writer.path, ns=(1, 1))
        index.sync()
        assert index.search("kumquat") == []
        assert [h.session.title for h in index.search("fig")] == ["edited"]


def test_unlisted_chunks_that_outweigh_the_listed_ones_rebuild_the_index(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(index_build, "DEAD_REBUILD", 1)
    writer = store.create(new_meta(title="growing"))
    rebuilds: list[int] = []
    real_build = index_build._build

    def build(*args: object) -> int:
        rebuilds.append(1)
        return real_build(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(index_build, "_build", build)
    with Index(store) as index:
        for n in range(6):  # the file changes each time: read again, old chunks unlisted
            writer.append(Message.create("user", T0, text=f"message {n} about quinces"))
            index.sync()
        found = index.file.db.execute("SELECT value FROM info WHERE key = 'dead'").fetchone()
        dead = int(found[0]) if found else 0
        live = index.file.db.execute("SELECT sum(size) FROM chunks").fetchone()[0]
        assert rebuilds and dead <= live  # rebuilt when the unlisted outweighed the listed
        assert [h.session.title for h in index.search("quinces")] == ["growing"]
    writer.close()


HOSTILE_WORDS = [
    "<!--",
    "-->",
    "chatloop:frame",
    "---",
    "summary:",
    "[bold]",
    "\x1b[2J",
    "```",
    "**You:**",
    "SESSION_SUMMARY_START",
    "\u202e",
    '{"role":1}',
]


def test_search_finds_the_sessions_grep_finds(store: Store) -> None:
    """A generated corpus with hostile text around the words: for each word, the
    sessions search names are the files ``grep -rilw`` names (words that appear in no
    markup, so grep sees content only; `_` joins words for grep, not for FTS5, so the
    corpus never glues a word to one)."""
    import random
    import subprocess

    rng = random.Random(7)
    vocabulary = [
        "apricot",
        "bramble",
        "cinder",
        "damson",
        "elder",
        "fennel",
        "gorse",
        "hazel",
        "iris",
        "juniper",
        "kelp",
        "larch",
    ]
    for n in range(60):
        with store.create(new_meta(title=f"corpus {n}")) as writer:
            for _ in range(rng.randint(1, 4)):
                others = [*HOSTILE_WORDS, "plain", "words", "here"]
                said = [
                    rng.choice(vocabulary) if rng.random() < 0.08 else rng.choice(others)
                    for _ in range(rng.randint(3, 30))
                ]
                writer.append(
                    Message.create(rng.choice(["user", "assistant"]), T0, text=" ".join(said))
                )
            writer.finalize()
    with Index(store) as index:
        index.sync()
        for word in vocabulary:
            ours = {h.session.path for h in index.search(word, limit=1000)}
            grep = subprocess.run(
                ["grep", "-rilw", "--include=*.md", word, str(store.root)],
                capture_output=True,
                text=True,
            ).stdout.split()
            assert ours == set(grep), word
            assert ours or word in ("kelp",), word  # most words are somewhere


def test_hits_in_copies_are_labelled_and_come_after_the_message_itself(store: Store) -> None:
    """A word typed in one session is copied into its summary and into the next
    session's restoration prompt: search names the session where it was typed first,
    as the person's message, then the continuation, labelled "restored"."""
    from tests.fakes import FakeBackend
    from tests.hosts import chat

    summary = (
        "**Background Context:** Initial session.\n\n**Current Session Summary:**\n\n"
        "**Topics Discussed:**\n- The kumquat tree\n\n**Decisions Made:**\n- None.\n\n"
        "**Pending:**\n- None."
    )
    session, _ = chat(store, FakeBackend("Noted.", summary, "Ack.", "Fine."))
    session.send("Plant the kumquat tree by the gate")
    session.compact()
    session.send("And the fig?")
    session.close()
    with Index(store) as index:
        index.sync()
        hits = index.search("kumquat")
    assert [h.role for h in hits] == ["user", "restored"]
    assert hits[0].session.parent_id is None and hits[1].session.parent_id == hits[0].session.id


def test_search_hits_carry_the_numbers_and_handles_of_the_listing(
    chatloop_home: Path, tmp_path: Path
) -> None:
    """Hits are numbered by counting in SQL, the listing as it is read: the same
    numbers, across projects, with ties in time, a live and an interrupted session."""

    class Twice:  # every moment twice: sessions updated at the same second
        def __init__(self) -> None:
            self.calls = 0

        def __call__(self):  # type: ignore[no-untyped-def]
            self.calls += 1
            return T0 + timedelta(seconds=self.calls // 2)

    stores = [Store(chatloop_home, cwd=tmp_path / name, clock=Twice()) for name in "ab"]
    for n in range(14):
        store = stores[n % 3 == 0]
        with store.create(new_meta(title=f"s{n}")) as writer:
            writer.append(Message.create("user", store.clock(), text=f"kestrel {n}"))
            if n != 5:  # session 5 is left open, unlocked: interrupted
                writer.finalize()
    live = stores[0].create(new_meta(title="live"))
    live.append(Message.create("user", stores[0].clock(), text="kestrel live"))
    copied = next(iter(stores[0].session_files())).path
    for n in range(3):  # copies of a file: the same id and time, so only the row breaks ties
        shutil.copy(copied, stores[0].project_dir / f"copy{n}.md")
    try:
        with Index(stores[0]) as index:
            index.sync()
            rows = index.list_sessions(all_projects=True)
            hits = index.search("kestrel", all_projects=True, limit=100)
            found = index.search_sessions("kestrel", all_projects=True, limit=100)
            every = [r.id for r in rows]  # the handles the index reads are ids.handles'
            assert index.handles(set(every)) == handles(every)
            here = [r for r in rows if r.project == stores[0].project and r.number]
            assert [index.find(str(r.number)).path for r in here] == [r.path for r in here]
        listed = {r.path: (r.number, r.handle, r.status) for r in rows}
        assert len(listed) == 18 and None in {number for number, _, _ in listed.values()}
        assert {r[2] for r in listed.values()} == {"closed", "open", "interrupted"}
        assert {
            h.session.path: (h.session.number, h.session.handle, h.session.status) for h in hits
        } == listed
        assert {r.path: (r.number, r.handle, r.status) for r in found} == listed
    finally:
        live.close()


def test_sessions_written_in_other_time_zones_are_listed_by_the_moment(store: Store) -> None:
    """A session written under another time zone (a laptop that travelled, a shell
    without TZ) is placed by when it happened, not by its time's text: `-c` (number 1)
    continues the one most recently updated."""
    west = timezone(timedelta(hours=-5))
    earlier = datetime(2026, 11, 22, 16, 34, 34, tzinfo=UTC)  # its text sorts last
    later = datetime(2026, 11, 22, 11, 35, 49, tzinfo=west)  # 16:35:49 UTC
    for when, title in ((later, "in New York"), (earlier, "in London")):
        there = Store(store.root, cwd=store.cwd, clock=lambda when=when: when)
        with there.create(new_meta(title=title, created=when, updated=when)) as writer:
            writer.append(Message.create("user", when, text=f"written {title}"))
            writer.finalize()
    with Index(store) as index:
        index.sync()
        assert [r.title for r in index.list_sessions()] == ["in New York", "in London"]
        assert index.find("1").title == "in New York"


def test_sessions_updated_in_the_same_second_put_the_one_written_last_first(
    store: Store,
) -> None:
    """Times are whole seconds: a compaction's child and its parent often share one.
    The file written last (its modification time) is then the most recent."""
    when = datetime(2026, 11, 22, 16, 34, 34, tzinfo=UTC)
    paths = []
    for title in ("parent", "child"):
        there = Store(store.root, cwd=store.cwd, clock=lambda: when)
        with there.create(new_meta(title=title, created=when, updated=when)) as writer:
            writer.append(Message.create("user", when, text=f"said in the {title}"))
            writer.finalize()
        paths.append(writer.path)
    for path, ns in zip(paths, (2_000_000_000, 1_000_000_000), strict=True):
        os.utime(path, ns=(ns, ns))  # the parent written last, whatever the ids say
    with Index(store) as index:
        index.sync()
        assert [r.title for r in index.list_sessions()] == ["parent", "child"]
    for path, ns in zip(paths, (1_000_000_000, 2_000_000_000), strict=True):
        os.utime(path, ns=(ns, ns))
    with Index(store) as index:
        index.sync()
        assert [r.title for r in index.list_sessions()] == ["child", "parent"]
        assert index.find("1").title == "child"
