"""Imported seed sessions are first-class: a handle, their ids taken everywhere, an
empty reply read as one, the first question as the title, the bundled agent found
by name, and a summary made for one without stored once, in the copy only."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from chatloop.cli import split_prompt
from chatloop.format import parse_markdown
from chatloop.format.legacy import parse_legacy, with_summary
from chatloop.store.importer import import_sessions
from chatloop.store.index import Index
from chatloop.store.store import Store
from tests.fakes import FakeBackend
from tests.hosts import chat, continue_file

SAMPLES = Path(__file__).resolve().parent.parent / "sample_conversations"
LEGACY = SAMPLES / "legacy" / "Simple_Sally_20250614_101500.md"
SUMMARY_AT = LEGACY.read_bytes().index(b"\n<!-- SESSION_SUMMARY_START")


def interrupted_seed(folder: Path, empty_reply: bool = False) -> Path:
    """The sample seed session without its summary (the seed tool was killed), with
    its second reply empty when ``empty_reply``."""
    data = LEGACY.read_bytes()[:SUMMARY_AT].rstrip().removesuffix(b"---").rstrip() + b"\n"
    if empty_reply:
        data = data.replace(
            b"**Simple Sally:** Mint on its own, always: its runners take over any shared "
            b"pot within a season.",
            b"**Simple Sally:**",
        )
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "Simple_Sally_20250616_080000.md"
    path.write_bytes(data.replace(b"Simple_Sally_20250614_101500", path.stem.encode()))
    return path


def import_sample(store: Store, tmp_path: Path) -> None:
    """The sample seed session, imported from a seed project's folder."""
    seed = tmp_path / "old" / ".chat-sessions"
    seed.mkdir(parents=True)
    shutil.copy(LEGACY, seed)
    import_sessions(store, [seed])


def test_an_empty_seed_reply_is_an_empty_reply_and_the_title_is_the_first_question(
    tmp_path: Path,
) -> None:
    path = interrupted_seed(tmp_path, empty_reply=True)
    session = parse_legacy(path.read_bytes()).session
    said = [(m.role, m.text) for m in session.messages]
    assert said == [
        ("user", "Which herbs grow well together in one pot?"),
        ("assistant", said[1][1]),
        ("user", "And mint?"),
        ("assistant", ""),
    ]
    assert said[1][1].startswith("Mediterranean herbs")
    assert session.meta.title == "Which herbs grow well together in one pot?"
    assert session.meta.status == "interrupted"


def test_a_summary_in_the_seeds_markers_is_read_back_and_a_marker_in_it_stays_text(
    tmp_path: Path,
) -> None:
    data = interrupted_seed(tmp_path).read_bytes()
    text = "**Decisions Made:**\n<!-- SESSION_SUMMARY_START -->\n- mint alone"
    summarized = with_summary(data, text)
    assert summarized.startswith(data.rstrip())
    found = parse_legacy(summarized).session
    assert found.meta.status == "closed"
    assert found.messages[-1].role == "summary"
    kept = found.messages[-1].text
    assert "mint alone" in kept and "SESSION_SUMMARY_START" in kept
    before = parse_legacy(data).session.messages
    assert [m.text for m in found.messages[:-1]] == [m.text for m in before]
    try:
        with_summary(summarized, "again")
    except ValueError:
        pass
    else:
        raise AssertionError("a second summary was written")


def test_an_imported_session_has_a_handle_and_its_id_is_taken_everywhere(
    store: Store, tmp_path: Path
) -> None:
    import_sample(store, tmp_path)
    with Index(store) as index:
        index.sync()
        (row,) = index.list_sessions()
        assert row.id == LEGACY.stem and len(row.handle) >= 4
        assert row.handle == hashlib.sha256(LEGACY.stem.encode()).hexdigest()[: len(row.handle)]
        assert index.find(row.handle).id == row.id == index.find(LEGACY.stem).id
        assert row.title == "Which herbs grow well together in one pot?"
    for typed in (f"-r {LEGACY.stem} and basil?", f"-r {row.handle} and basil?"):
        kept, question = split_prompt(typed.split())
        assert question == "and basil?" and kept[0] == "-r", typed


def test_resuming_an_interrupted_import_twice_summarizes_it_once_in_the_copy_only(
    store: Store, tmp_path: Path
) -> None:
    original = interrupted_seed(tmp_path / "old" / ".chat-sessions")
    before = original.read_bytes()
    import_sessions(store, [original.parent])
    copy = store.project_dir / original.name
    summary = (
        "**Background Context:** herbs.\n\n**Topics Discussed:**\n- pots\n\n"
        "**Decisions Made:**\n- mint alone\n\n**Pending:**\n- None"
    )
    backend = FakeBackend(summary, "Noted.")
    session, host = chat(store, backend)
    continue_file(session, copy)
    assert host.said(f"Wrote the missing summary into {copy.name}")
    assert not host.said("not in your agent folders")  # Simple Sally is bundled
    session.close()
    assert original.read_bytes() == before  # the original is never touched
    stored = parse_markdown(copy.read_bytes(), copy.stem).session
    assert stored.meta.status == "closed" and "mint alone" in stored.messages[-1].text
    assert len(backend.calls) == 1  # the summary: nothing was said in the child
    assert host.said("closed with its summary")
    again, host = chat(store, backend)
    continue_file(again, copy)
    again.close()
    assert len(backend.calls) == 1  # the stored summary is used: the model is not asked
    assert not host.said("Wrote the missing summary")
    assert host.said("closed with its summary")


def test_a_session_resumed_from_another_directory_is_continued_in_its_own_project(
    store: Store, tmp_path: Path
) -> None:
    import_sample(store, tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    there = Store(store.root, cwd=elsewhere)
    session, _ = chat(there, FakeBackend("Noted."))
    continue_file(session, store.project_dir / LEGACY.name)
    session.send("And basil?")
    session.close()
    (child,) = [p for p in store.project_dir.glob("*.md") if p.name != LEGACY.name]
    assert parse_markdown(child.read_bytes(), child.stem).session.meta.parent_id == LEGACY.stem
    assert not there.project_dir.exists()  # nothing of the chain where it was resumed from
    with Index(store) as index:
        index.sync()
        (row,) = index.list_sessions(fold=True)  # the chain, folded, in its own project
        assert row.chain == 2 and row.id == child.stem
