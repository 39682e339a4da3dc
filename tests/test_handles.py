"""Short handles: the shortest unique prefix of an id's random part (4 or more, with a
letter in it), shown by every listing and taken by every command that takes N|ID."""

from __future__ import annotations

import hashlib
import json
import random
import subprocess
from pathlib import Path

from chatloop.format import Message
from chatloop.ids import MIN_HANDLE, handles, tail_of
from chatloop.store.store import Store
from tests.conftest import T0, new_meta
from tests.pty_driver import chatloop_bin, environment


def test_handles_are_short_unique_prefixes_that_cannot_be_read_as_numbers() -> None:
    rng = random.Random(5)
    ids = [f"20261121-1200{n % 60:02d}-{rng.getrandbits(32):08x}" for n in range(3000)]
    ids += [
        "20261121-120000-abcd0001",
        "20261121-120001-abcd0002",
        "20261121-120002-12345678",
        "agent_20250101_120000",
    ]
    found = handles(ids)
    # a legacy id's handle is made of a digest of the id (it has no random part)
    digest = hashlib.sha256(b"agent_20250101_120000").hexdigest()[:8]
    assert tail_of("agent_20250101_120000") == digest
    assert found["agent_20250101_120000"] == handles(ids)["agent_20250101_120000"]  # stable
    tails = {i: tail_of(i) or "" for i in found}
    for session_id, handle in found.items():
        assert tails[session_id].startswith(handle) and len(handle) >= MIN_HANDLE
        others = [t for i, t in tails.items() if i != session_id]
        assert not any(t.startswith(handle) for t in others), handle  # unique
        assert not handle.isdigit() or handle == tails[session_id]  # a letter, if it can
    assert found["20261121-120000-abcd0001"] == "abcd0001"  # they share seven characters
    assert found["20261121-120002-12345678"] == "12345678"
    assert handles(["20261121-120000-5fe0aaaa"]) == {"20261121-120000-5fe0aaaa": "5fe0"}


def test_every_command_takes_a_handle_from_any_directory(
    store: Store, chatloop_home: Path, tmp_path: Path
) -> None:
    with store.create(new_meta(title="Garden plan")) as writer:
        writer.append(Message.create("user", T0, text="Where do the kumquats go?"))
        writer.finalize()
    env = environment(chatloop_home, 12)
    listed = subprocess.run(
        [chatloop_bin(), "sessions", "--json"],
        cwd=store.cwd,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    (row,) = json.loads(listed)
    handle = row["handle"]
    assert len(handle) >= MIN_HANDLE and row["id"][-8:].startswith(handle)
    text = subprocess.run(
        [chatloop_bin(), "sessions"],
        cwd=store.cwd,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert handle in text
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for args in (["show", handle], ["tree", handle], ["export", handle], ["search", "kumquats"]):
        done = subprocess.run(
            [chatloop_bin(), *args, *(["--all"] if args[0] == "search" else [])],
            cwd=elsewhere,
            env=env,
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, (args, done.stderr)
        assert "Garden plan" in done.stdout or "kumquats" in done.stdout, args
    done = subprocess.run(
        [chatloop_bin(), "show", "ffff0"], cwd=elsewhere, env=env, capture_output=True, text=True
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr


def test_a_number_out_of_range_is_never_read_as_the_start_of_a_handle(store: Store) -> None:
    """``show 1234`` with three sessions: no session number 1234, even though one id's
    random part starts with 1234 (its handle is longer, with a letter)."""
    import pytest

    from chatloop.errors import NotFound
    from chatloop.store.index import Index

    _closed_sessions(store, ("1234abcd", "5678ef01", "9abc0000"))
    with Index(store) as index:
        index.sync()
        with pytest.raises(NotFound, match="no session number 1234") as raised:
            index.find("1234")
        assert "written whole: 1234a" not in raised.value.hint  # 1234abcd has letters
        with pytest.raises(NotFound, match="no session number 5") as raised:
            index.find("5")  # 5678ef01 begins with it: no handle is named for one digit
        assert raised.value.hint == "`chatloop sessions` lists them with their numbers."
        # the numbers there are: the rows of the listing the person sees
        assert "(numbers 1-3, as `chatloop sessions` lists them)" in raised.value.message
        assert index.find("1234a").id.endswith("1234abcd")  # the handle itself works


def test_a_session_copied_into_two_projects_is_named_by_its_id_or_handle(
    chatloop_home: Path, tmp_path: Path
) -> None:
    """One id in two projects (imported into each) could not be named at all: "matches
    several sessions: X, X", "give more of the id". The copy of the project the
    command runs in is taken; from elsewhere, the error names the projects."""
    import pytest

    from chatloop.errors import NotFound
    from chatloop.store.index import Index

    folders = [tmp_path / name for name in ("garden", "kitchen", "elsewhere")]
    meta = new_meta(id="20261120-100000-5fe0a1b2", title="Kumquats")
    digits = new_meta(id="20261120-110000-12345678", title="Figs")  # its handle: 8 digits
    for folder in folders[:2]:
        folder.mkdir()
        for made in (meta, digits):
            with Store(chatloop_home, cwd=folder).create(made) as writer:
                writer.append(Message.create("user", T0, text="Where do the kumquats go?"))
                writer.finalize()
    folders[2].mkdir()
    for folder in folders[:2]:
        store = Store(chatloop_home, cwd=folder)
        with Index(store) as index:
            index.sync(all_projects=True)
            for ref in (meta.id, "5fe0", "20261120-100000", "12345678"):
                assert Path(index.find(ref).path).parent == store.project_dir, ref
    with Index(Store(chatloop_home, cwd=folders[2])) as index:
        index.sync(all_projects=True)
        with pytest.raises(NotFound, match="is in several projects") as raised:
            index.find("5fe0")
        assert "garden" in raised.value.message and "kitchen" in raised.value.message


def test_digits_that_start_with_zero_are_a_handle_never_a_number(store: Store) -> None:
    """Issue 31: ``show 00000001`` showed session number 1, not the session whose handle
    that is. A number has no leading zero; digits with one are a handle (or an error)."""
    import pytest

    from chatloop.errors import NotFound
    from chatloop.store.index import Index

    _closed_sessions(store, ("00000001", "5678ef01", "9abc0000"))
    with Index(store) as index:
        index.sync()
        assert index.find("1").id.endswith("9abc0000")  # number 1: the most recent
        assert index.find("00000001").id.endswith("00000001")
        assert index.find("0000").id.endswith("00000001")
        with pytest.raises(NotFound):
            index.find("01")  # not number 1, and no handle starts so


def _closed_sessions(store: Store, tails: tuple[str, ...]) -> None:
    """One closed session per id tail, a second apart, the last the most recent."""
    for n, tail in enumerate(tails):
        meta = new_meta(id=f"20261120-10000{n}-{tail}", title=f"s{n}")
        with store.create(meta) as writer:
            writer.append(Message.create("user", T0, text=f"question {n}"))
            writer.finalize()
