"""Sessions for the index tests to list and search, and what the index asks of
SQLite (``statements``)."""

from __future__ import annotations

from pathlib import Path

from chatloop.format import Message
from chatloop.store.index import Index
from chatloop.store.store import Store
from tests.conftest import exchange, new_meta


def populate(store: Store, count: int, word: str = "unicorn") -> list[Path]:
    paths = []
    for i in range(count):
        with store.create(new_meta(title=f"session {i}")) as writer:
            writer.append(Message.create("user", store.clock(), text=f"{word}{i} question"))
            for message in exchange(i)[1:]:
                writer.append(message)
            writer.finalize()
        paths.append(writer.path)
    return paths


def two_projects(store: Store, here: int) -> Store:
    """``here`` sessions in this project and one (its word "okapi") in another, whose
    store is returned."""
    populate(store, here)
    other = Store(store.root, cwd=store.cwd.parent, clock=store.clock)
    populate(other, 1, word="okapi")
    return other


def statements(index: Index) -> list[str]:
    seen: list[str] = []
    index.file.db.set_trace_callback(seen.append)
    return seen
