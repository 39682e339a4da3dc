"""`chatloop sessions` folds a compact/resume chain into one line; --expand lists
every file; numbers mean the same either way (in process, through cli.main)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chatloop.cli import main
from chatloop.store.index import Index
from chatloop.store.store import Store
from tests.fakes import STRUCTURED, FakeBackend
from tests.hosts import chat


def listing(capsys: pytest.CaptureFixture[str], *args: str) -> list[str]:
    assert main(["sessions", *args]) == 0
    return capsys.readouterr().out.splitlines()


def chain_and_lone(store: Store) -> None:
    """A chain of three files (two compactions), then a lone session."""
    session, _ = chat(store, FakeBackend(default=STRUCTURED))
    session.send("first part about compost")
    session.compact()
    session.send("second part")
    session.compact()
    session.send("third part")
    session.close()
    alone, _ = chat(store, FakeBackend(default=STRUCTURED))
    alone.send("a lone question")
    alone.close()


def test_a_chain_is_one_line_with_its_length_and_forks_stay_apart(
    store: Store, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(store.cwd)
    chain_and_lone(store)
    brancher, _ = chat(store, FakeBackend(default=STRUCTURED))
    with Index(store) as index:
        index.sync()
        (last,) = [r for r in index.list_sessions(fold=True) if r.chain == 3]
    assert brancher.resume(str(last.number), fork=True)  # the chain's last file, as listed
    brancher.send("a branch of it")
    brancher.close()

    expanded = listing(capsys, "--expand")
    assert len(expanded) == 5 and not any("chain of" in line for line in expanded)
    folded = listing(capsys)
    assert len(folded) == 3, (folded, expanded)
    (chain,) = [line for line in folded if "[chain of 3]" in line]
    (fork,) = [line for line in folded if "[fork after query 1]" in line]
    (lone,) = [line for line in folded if "a lone question" in line]
    assert "chain of" not in fork + lone
    # the same number and handle for the same session, folded or not (compared word by
    # word: a listing's handle column is as wide as its longest handle)
    words = [line.split() for line in expanded]
    assert chain.replace(" [chain of 3]", "").split() in words
    assert fork.split() in words and lone.split() in words
    shown = capsys.readouterr() if main(["show", fork.split()[0]]) == 0 else None
    assert shown is not None and "branches from " in shown.out and " after query 1\n" in shown.out
    assert "\ncontinues " not in shown.out  # (the chain's files continue; a fork branches)
    assert "── Carried over (" in shown.out and "Session restored" not in shown.out
    assert main(["show", chain.split()[0]]) == 0 and "\ncontinues " in capsys.readouterr().out
    assert len(json.loads("\n".join(listing(capsys, "--json")))) == 3
    assert len(json.loads("\n".join(listing(capsys, "--json", "--expand")))) == 5
    limited = listing(capsys, "--limit", "2")
    assert len(limited) == 3 and limited[-1].startswith("… 1 older")


def test_the_picker_lists_a_chain_as_its_last_file_as_sessions_does(store: Store) -> None:
    from datetime import datetime

    from chatloop.ui.picker import line_for

    chain_and_lone(store)
    picker, host = chat(store, FakeBackend(default=STRUCTURED))
    host.pick_none = True
    assert picker.resume("") is False
    rows = sorted(host.picked_from, key=lambda row: row.chain)
    assert [row.chain for row in rows] == [1, 3]  # the lone one, and the chain's last file
    with Index(store) as index:  # under the number and handle `sessions` gives it
        last = index.find(rows[1].id)
    assert rows[1].parent_id is not None and (rows[1].number, rows[1].handle) == (
        last.number,
        last.handle,
    )
    now = datetime.now().astimezone()
    assert "(chain of 3)" in line_for(rows[1], now, width=200)
    assert "(chain of" not in line_for(rows[0], now, width=200)


def write(store: Store, session_id: str, parent: str | None, minute: int) -> None:
    from datetime import timedelta

    from chatloop.format import Message, Session, render_markdown
    from tests.conftest import T0, new_meta

    at = T0 + timedelta(minutes=minute)
    meta = new_meta(
        id=session_id,
        parent_id=parent,
        status="closed",
        created=at,
        updated=at,
        title=f"session {session_id[-4:]}",
        queries=1,
    )
    messages = (Message.create("user", at, text=f"question of {session_id}"),)
    store.project_dir.mkdir(parents=True, exist_ok=True)
    (store.project_dir / f"{session_id}.md").write_bytes(render_markdown(Session(meta, messages)))


def test_a_continuation_elsewhere_or_a_loop_of_links_hides_no_session(
    store: Store,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    elsewhere = Store(store.root, cwd=other)
    write(store, "20261121-100000-aaaa0001", None, 1)
    write(elsewhere, "20261121-100000-bbbb0002", "20261121-100000-aaaa0001", 2)  # resumed there
    write(store, "20261121-100000-cccc0003", "20261121-100000-dddd0004", 3)  # a loop, by hand
    write(store, "20261121-100000-dddd0004", "20261121-100000-cccc0003", 4)
    write(store, "20261121-100000-eeee0005", "20261121-100000-eeee0005", 5)  # its own parent
    monkeypatch.chdir(store.cwd)
    folded = listing(capsys)
    assert any("session 0001" in line for line in folded)  # continued in another project
    assert any("session 0004" in line for line in folded)  # the later of the loop stays
    assert any("session 0005" in line for line in folded)
    assert len(listing(capsys, "--expand")) == 4 and len(folded) == 3


def test_a_continuation_being_written_leaves_its_parent_listed_under_its_number(
    store: Store,
) -> None:
    import os
    import subprocess
    import sys

    first, _ = chat(store, FakeBackend(default=STRUCTURED))
    first.send("the first conversation")
    first.close()
    going, _ = chat(store, FakeBackend(default=STRUCTURED))
    assert going.resume("1")
    going.send("and it goes on")  # the child is open, its lock held by this process
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(root), "CHATLOOP_CONFIG": ""}
    shown = subprocess.run(
        [sys.executable, "-c", "from chatloop.cli import main; main()", "sessions"],
        cwd=store.cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.splitlines()
    limited = subprocess.run(
        [sys.executable, "-c", "from chatloop.cli import main; main()", "sessions", "--limit", "1"],
        cwd=store.cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.splitlines()
    going.close()
    assert limited[-1].startswith("… 1 older; `--limit 2`"), limited  # the count agrees
    assert len(shown) == 2, shown
    assert shown[0].lstrip().startswith("*") and "[open]" in shown[0]
    assert shown[1].lstrip().startswith("1 ") and "the first conversation" in shown[1]


def test_the_chat_listing_keeps_number_and_handle_at_80_columns(store: Store) -> None:
    import io

    from rich.console import Console

    from chatloop.store.index import Index
    from chatloop.ui.render import sessions_table
    from tests.conftest import T0

    session, _ = chat(store, FakeBackend(default=STRUCTURED))
    session.send(
        "How do I compost coffee grounds and eggshells in a small apartment "
        "kitchen bin without smell?"
    )
    session.close()
    with Index(store) as index:
        index.sync()
        (row,) = index.list_sessions(fold=True)
    out = io.StringIO()
    Console(file=out, width=80).print(sessions_table([row], T0))
    header, line = out.getvalue().splitlines()[:2]
    assert header.split()[:2] == ["#", "handle"]
    assert line.split()[:2] == ["1", row.handle] and line.rstrip().endswith("…")


def test_resuming_a_file_a_later_one_continues_says_it_starts_a_second_line(
    store: Store,
) -> None:
    chain_and_lone(store)
    with Index(store) as index:
        index.sync()
        rows = index.list_sessions()  # unfolded: the chain's three files, the lone one
        roots = [r for r in rows if r.parent_id is None]
        first = next(r for r in roots if index.continued_by(r.id))  # the chain's first file
        lone = next(r for r in roots if not index.continued_by(r.id))
        second = index.continued_by(first.id)
        last = next(r for r in rows if r.parent_id == second[0])
    older, host = chat(store, FakeBackend("Ready.", default=STRUCTURED))
    assert older.resume(first.id) is True
    assert host.said(f"Session {first.id} was continued already, in {second[0]}")
    newest, quiet = chat(store, FakeBackend("Ready.", default=STRUCTURED))
    assert newest.resume(last.id) is True and not quiet.said("continued already")
    forked, _ = chat(store, FakeBackend("Ready.", default=STRUCTURED))
    assert forked.resume(lone.id, fork=True)
    forked.send("a branch")  # the fork's file is written: a branch, not a continuation
    forked.close()
    with Index(store) as index:
        index.sync()
        assert index.continued_by(lone.id) == []
        assert [r.forked_at for r in index.list_sessions() if r.parent_id == lone.id] == [1]
