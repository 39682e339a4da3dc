"""Writes that a kill or a full disk cannot tear, and front matter that stays readable
(issue 31, item 5): titles and model ids cut when written, an unreadable block
refused with one line, failed forks and compactions leaving nothing behind."""

from __future__ import annotations

import pytest

from chatloop.errors import StoreError
from chatloop.format.front_matter import MAX_MODEL_CHARS, MAX_TITLE_CHARS
from chatloop.store.store import Store
from tests.conftest import new_meta
from tests.fakes import STRUCTURED, FakeBackend
from tests.hosts import chat, files


def test_a_70kb_model_id_and_title_compact_into_a_finalized_readable_child(
    store: Store,
) -> None:
    backend = FakeBackend("A.", "B.", STRUCTURED, "Acknowledged.", "C.", STRUCTURED)
    backend.model = "m" * 70_000  # what a server answered
    session, _ = chat(store, backend)
    session.title = "t" * 70_000  # as a parent's title is inherited, uncut
    session.send("one")
    session.send("two")
    session.compact()
    session.send("three")
    session.close()
    parent, child = files(store)
    assert child.meta.parent_id == parent.meta.id
    for done in (parent, child):
        assert done.meta.status == "closed"
        assert done.meta.title == "t" * MAX_TITLE_CHARS
        assert done.meta.model == "m" * MAX_MODEL_CHARS
    assert next(m.text for m in child.messages if not m.restore) == "three"


def test_front_matter_the_reader_would_refuse_is_refused_at_write_time(store: Store) -> None:
    made = store.create(new_meta(title="t" * 70_000, model="m" * 70_000))
    made.close()
    meta = store.read(made.path).session.meta
    assert (len(meta.title), len(meta.model)) == (MAX_TITLE_CHARS, MAX_MODEL_CHARS)
    before = sorted(store.project_dir.iterdir())
    with pytest.raises(StoreError) as refused:
        store.create(new_meta(extra={"notes": "x" * 70_000}))
    assert "cannot read back" in refused.value.message and "\n" not in refused.value.message
    assert sorted(store.project_dir.iterdir()) == before  # nothing half made
