"""One owner of continuations: the same resume, from the shell and from a chat,
goes on with the same agent and the same server (``chat.continuation.agent_for``
and ``chat.server.connect`` are the only rules), and a session number means the
row with that number in the listing the person sees."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from chatloop.backends.openai_compat import OpenAICompatBackend
from chatloop.chat import continuation, server
from chatloop.store.store import Store
from tests.fakes import STRUCTURED
from tests.hosts import chat
from tests.scripted_server import scripted_server


def answer(request: dict[str, Any]) -> str:
    last = str(request["messages"][-1]["content"])
    return STRUCTURED if "progressive summary" in last else "Ready."


def held_session(store: Store, url: str) -> None:
    """A closed session held with File Fiona on the server at ``url``."""
    backend = OpenAICompatBackend(url, "scripted")
    first, _ = chat(store, backend, agent="file_fiona.py")
    first.send("list the notes")
    first.close()
    backend.close()


def newest(store: Store) -> Any:
    from chatloop.store.index import Index

    with Index(store) as index:
        index.sync()
        return index.list_sessions(fold=False)[0]


def test_the_same_resume_from_the_shell_and_the_chat_keeps_agent_and_server(
    store: Store, chatloop_home: Path
) -> None:
    with scripted_server(answer) as held_at, scripted_server(answer) as elsewhere:
        held_session(store, held_at)
        # from the shell: `chatloop -r 1 "…"`, Simple Sally configured, no server named
        env = {
            **os.environ,
            "CHATLOOP_HOME": str(chatloop_home),
            "CHATLOOP_TITLES": "first",
            "CHATLOOP_SUMMARIES": "wait",
        }
        done = subprocess.run(
            [sys.executable, "-m", "chatloop.cli", "-r", "1", "go on"],
            cwd=store.cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert "session's own agent, File Fiona" in done.stderr
        shell = newest(store)
        # from a chat: Simple Sally on another server (found, not named), then /resume
        # of the same session
        other = OpenAICompatBackend(elsewhere, "scripted")
        session, host = chat(store, other)  # Settings(): auto, no base URL
        assert session.resume(shell.parent_id or "")
        session.send("go on")
        session.close()
        in_chat = newest(store)
    assert shell.parent_id == in_chat.parent_id
    assert (shell.agent, in_chat.agent) == ("File Fiona", "File Fiona")
    assert session.backend.base_url == held_at  # the chat moved to the session's server
    assert host.said("session's own agent, File Fiona")
    for row in (shell, in_chat):
        meta = Store(store.root, cwd=store.cwd).summary_of(Path(row.path)).meta
        assert meta.backend_url == held_at, row.id


def test_a_server_the_person_named_wins_over_the_sessions_own(store: Store) -> None:
    with scripted_server(answer) as held_at, scripted_server(answer) as named:
        held_session(store, held_at)
        located = continuation.locate(store, "1")
        settings = chat(store, None)[0].settings._replace(base_url=named)
        connected = server.connect(settings, server.Held.of(located.parent.meta))
        try:
            assert connected.backend.base_url == named and connected.notes == ()
        finally:
            connected.backend.close()
        # not named: the session's own, tried first
        auto = settings._replace(base_url="")
        connected = server.connect(auto, server.Held.of(located.parent.meta))
        try:
            assert connected.backend.base_url == held_at
        finally:
            connected.backend.close()


def test_a_number_is_a_row_of_the_listing_never_a_hidden_file(store: Store) -> None:
    """A chain of three files is one row, number 1: `-r 2` is no hidden middle file;
    that file is reached by its handle, and resuming it says where the chain went."""
    import pytest

    from chatloop.errors import NotFound
    from chatloop.store.index import Index
    from tests.fakes import FakeBackend

    session, _ = chat(store, FakeBackend(default=STRUCTURED))
    session.send("first part")
    session.compact()
    session.send("second part")
    session.compact()
    session.send("third part")
    session.close()
    with Index(store) as index:
        index.sync()
        (row,) = index.list_sessions(fold=True)
        every = index.list_sessions()
    assert row.number == 1 and row.chain == 3
    assert [r.number for r in every] == [1, None, None]
    assert continuation.locate(store, "1").row.id == row.id
    with pytest.raises(NotFound, match="1 is the only number"):
        continuation.locate(store, "2")
    middle = every[1]
    located = continuation.locate(store, middle.handle)
    assert located.row.id == middle.id and located.continued_by == (row.id,)
