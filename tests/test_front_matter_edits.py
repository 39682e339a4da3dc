"""Hand edits of the front matter survive every rewrite (issue 13, parts 4 and 7).

A person may add comments, blank lines and keys of their own, reorder keys, or
write a value differently: a rewrite changes only the lines of the keys whose
values change, and what it writes always reads back as the writer's meta.
"""

from __future__ import annotations

import io
import os
import re
import threading
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput
from rich.console import Console

from chatloop.chat.agent import load_agent
from chatloop.errors import StoreError
from chatloop.format import Message, Session, SessionMeta, parse_markdown
from chatloop.format.front_matter import (
    MAX_TITLE_CHARS,
    front_matter_end,
    read_head,
    render_front_matter,
    rewrite_front_matter,
)
from chatloop.format.yaml_strict import MAX_FRONT_MATTER_BYTES
from chatloop.store.store import Store
from chatloop.ui.repl import Repl
from tests.conftest import T0, Clock, exchange, new_meta
from tests.hosts import TEST_SETTINGS
from tests.repl_driver import AGENTS, drive, fake_server, only_session
from tests.strategies import at_st, examples, sessions, text_st, title_st

_KEY_RE = re.compile(r"\s*([A-Za-z_]+):")

# Comments on their own lines and after keys, blank lines, unknown keys in odd
# places (first, between known keys, a nested list, a block scalar, a quoted
# key), a key order of the person's own and a value written unlike chatloop.
HAND_EDITED = """\
# Session notes, written by hand
project: "ACME-7"   # billing code

status: open  # chatloop keeps this one up to date
id: {id}
title: original  # my note
# the agent below is my favourite
agent: Simple Sally
agent_name: ''
model: "gemma-3-270m"
tags:
  - garden   # first
  - balcony
backend_url: ''
created: '{created}'
updated: '{updated}'
cwd: {cwd}


git_branch: null
parent_id: ~
parent_file: null
queries: 0
tokens:   # the counters
  in: 0
  # output counter below
  out: 0
  restoration: 0
summary: null
notes: |
  a block of text
  # not a comment: part of the text
"Quoted key": 'kept as typed'
format: 2   # version
# last words
"""

# Every line of HAND_EDITED that no rewrite below may touch.
KEPT = [
    "# Session notes, written by hand\n",
    'project: "ACME-7"   # billing code\n',
    "# the agent below is my favourite\n",
    'model: "gemma-3-270m"\n',
    "tags:\n  - garden   # first\n  - balcony\n",
    "cwd: ",
    "\n\n\ngit_branch: null\nparent_id: ~\n",
    "tokens:   # the counters\n",
    "  # output counter below\n",
    "notes: |\n  a block of text\n  # not a comment: part of the text\n",
    "\"Quoted key\": 'kept as typed'\nformat: 2   # version\n# last words\n",
]


def _front_matter(data: bytes) -> str:
    return data[: front_matter_end(data)].decode()


def _edit_by_hand(path: Path, meta: SessionMeta) -> str:
    """Replace the front matter of ``path`` with HAND_EDITED (as a person would,
    with an editor: the file's mtime moves); returns the new front matter."""
    data = path.read_bytes()
    text = (
        "---\n"
        + HAND_EDITED.format(
            id=meta.id,
            created=meta.created.isoformat(),
            updated=meta.updated.isoformat(),
            cwd=meta.cwd,
        )
        + "---\n"
    )
    path.write_bytes(text.encode() + data[front_matter_end(data) :])
    st_ = path.stat()
    os.utime(path, ns=(st_.st_atime_ns, st_.st_mtime_ns + 1_000_000))
    return text


def _other_lines(front: str, changed: set[str]) -> list[str]:
    """The lines of a front matter block that are not those of ``changed`` keys."""
    return [
        line
        for line in front.splitlines(keepends=True)
        if not ((m := _KEY_RE.match(line)) and m.group(1) in changed)
    ]


def _assert_only_changed(before: str, after: str, changed: set[str], added: list[str]) -> None:
    """``after`` is ``before`` with only the lines of ``changed`` keys rewritten (in
    place) and the ``added`` keys inserted, in order, before the closing ``---``."""
    for piece in KEPT:
        assert piece in after
    rest = _other_lines(after, changed | set(added))
    assert rest == _other_lines(before, changed)
    lines = after.splitlines()
    assert [_KEY_RE.match(line).group(1) for line in lines[-1 - len(added) : -1]] == added  # type: ignore[union-attr]
    assert [m.group(1) for line in before.splitlines() if (m := _KEY_RE.match(line))] == [
        m.group(1) for line in lines if (m := _KEY_RE.match(line)) and m.group(1) not in added
    ]


def _same_meta(a: SessionMeta, b: SessionMeta) -> None:
    assert a == b and a.extra == b.extra


# ---------------------------------------------------------------- through the writer


def test_rename_and_finalize_keep_every_hand_edit(store: Store) -> None:
    writer = store.create(new_meta(title="original"))
    for message in exchange(1):
        writer.append(message)
    before = _edit_by_hand(writer.path, writer.meta)

    meta = writer.update_meta(title="Garden plans")
    after = _front_matter(writer.path.read_bytes())
    _assert_only_changed(before, after, {"title", "updated"}, [])
    assert "title: Garden plans  # my note\n" in after
    assert "status: open  # chatloop keeps this one up to date\n" in after
    result = parse_markdown(writer.path.read_bytes())
    _same_meta(result.session.meta, meta)
    assert meta.extra == {
        "project": "ACME-7",
        "tags": ["garden", "balcony"],
        "notes": "a block of text\n# not a comment: part of the text\n",
        "Quoted key": "kept as typed",
    }

    for message in exchange(2):
        writer.append(message)
    summary = Message.create("summary", T0, text="**Background Context:** garden beds.")
    meta = writer.finalize(summary)
    writer.close()
    final = writer.path.read_bytes()
    after_finalize = _front_matter(final)
    changed = {"updated", "status", "queries", "in", "out", "restoration", "summary"}
    _assert_only_changed(after, after_finalize, changed, ["summary_key", "summary_at"])
    assert "status: closed  # chatloop keeps this one up to date\n" in after_finalize
    assert "tokens:   # the counters\n  in: 280\n  # output counter below\n" in after_finalize
    result = parse_markdown(final)
    assert not [p for p in result.problems if p.kind != "unknown_key"]
    _same_meta(result.session.meta, meta)
    assert meta.status == "closed" and meta.queries == 2 and meta.tokens_in == 280
    assert result.session.summary is not None and "garden beds" in result.session.summary.text
    assert result.session.messages == tuple(writer.messages)


def test_recovery_of_a_dead_open_session_keeps_every_hand_edit(store: Store) -> None:
    writer = store.create(new_meta(title="original"))
    for message in exchange(1):
        writer.append(message)
    path = writer.path
    before = _edit_by_hand(path, writer.meta)
    writer.close()  # the process "died": the session is still open

    result = store.recover(path)
    after = _front_matter(path.read_bytes())
    _assert_only_changed(before, after, {"status", "updated", "queries", "in", "out"}, [])
    assert "status: interrupted  # chatloop keeps this one up to date\n" in after
    assert "title: original  # my note\n" in after
    again = parse_markdown(path.read_bytes())
    _same_meta(again.session.meta, result.session.meta)
    assert result.session.meta.status == "interrupted" and result.session.meta.queries == 1
    assert result.session.meta.extra["project"] == "ACME-7"


def test_an_oversized_change_is_refused_and_changes_nothing(store: Store) -> None:
    writer = store.create(new_meta(title="small"))
    writer.append(Message.create("user", T0, text="hello"))
    data = writer.path.read_bytes()
    meta = writer.meta
    with pytest.raises(StoreError) as caught:
        writer.update_meta(extra={"notes": "x" * (MAX_FRONT_MATTER_BYTES + 10)})  # (a title is cut)
    assert "KiB" in str(caught.value) and caught.value.hint
    assert writer.path.read_bytes() == data and writer.meta == meta
    writer.append(Message.create("user", T0, text="still saving"))
    writer.close()
    result = parse_markdown(writer.path.read_bytes())
    assert result.session.meta.id == meta.id and result.session.meta.title == "small"
    assert [m.text for m in result.session.messages] == ["hello", "still saving"]


def _drive_long(store: Store, lines: str) -> str:
    """``tests.test_repl.drive`` for input longer than a pipe holds (64 KiB): the text
    is fed from a thread while the REPL reads it."""
    out = io.StringIO()
    with create_pipe_input() as pipe:
        feeder = threading.Thread(target=pipe.send_text, args=(lines,), daemon=True)
        feeder.start()
        repl = Repl(
            load_agent(AGENTS / "simple_sally.py"),
            fake_server([]),
            store,
            TEST_SETTINGS,
            Console(file=out, width=240),
            input=pipe,
            output=DummyOutput(),
            clock=Clock(),
        )
        assert repl.run() == 0
        feeder.join(timeout=10)
    return out.getvalue()


def test_a_70000_character_rename_is_cut_with_a_note(store: Store) -> None:
    long_title = "x" * 70_000
    pasted = f"\x1b[200~{long_title}\x1b[201~"  # a bracketed paste: one key event, fast
    shown = _drive_long(store, f"hello\r/rename {pasted}\rexit\r")
    assert f"Title cut to {MAX_TITLE_CHARS} characters" in shown
    path = only_session(store)
    result = parse_markdown(path.read_bytes())
    assert not [p for p in result.problems if p.kind == "front_matter"]
    meta = result.session.meta
    assert meta.title == "x" * MAX_TITLE_CHARS and meta.id == path.stem
    assert meta.agent == "Simple Sally" and meta.status == "closed"


def test_a_long_rename_before_the_first_message_is_cut_too(store: Store) -> None:
    _repl, shown = drive(store, fake_server([]), f"/rename {'y' * 500}\rhello\rexit\r")
    assert "Title cut to 200 characters" in shown
    meta = parse_markdown(only_session(store).read_bytes()).session.meta
    assert meta.title == "y" * MAX_TITLE_CHARS


# ---------------------------------------------------------------- the pure function


def _meta(**fields: object) -> SessionMeta:
    return new_meta(
        id="20261121-143045-abcdef01", agent_name="simple_sally", agent_path="", **fields
    )


def test_unchanged_values_keep_their_lines_even_written_unlike_chatloop() -> None:
    meta = _meta(title="no", queries=3)
    text = render_front_matter(meta).decode()
    text = text.replace("title: 'no'\n", 'title: "no"\n').replace("queries: 3\n", "queries: '3'\n")
    text = text.replace("created: '2026", "created: 2026")
    text = text.replace("+01:00'\nupdated", "+01:00\nupdated")
    original = read_head(text.encode()).meta
    assert original == meta
    out = rewrite_front_matter(text.encode(), replace(meta, status="closed")).decode()
    assert out == text.replace("status: open", "status: closed")


def test_a_comment_after_a_value_that_becomes_several_lines_moves_above_it() -> None:
    meta = _meta()
    text = (
        render_front_matter(meta)
        .decode()
        .replace("tokens:\n  in: 0\n  out: 0\n  restoration: 0\n", "tokens: ~  # none yet\n")
    )
    new = replace(meta, tokens_in=7)
    out = rewrite_front_matter(text.encode(), new)
    assert b"# none yet\ntokens:\n  in: 7\n  out: 0\n  restoration: 0\n" in out
    assert read_head(out).meta == new


def test_missing_counters_are_added_inside_tokens() -> None:
    meta = _meta()
    text = render_front_matter(meta).decode().replace("  restoration: 0\n", "")
    text = text.replace("  out: 0\n", "  out: 0  # so far\n")
    new = replace(meta, restoration_tokens=5, summary="model")
    out = rewrite_front_matter(text.encode(), new).decode()
    assert "tokens:\n  in: 0\n  out: 0  # so far\n  restoration: 5\nsummary: model\n" in out
    assert read_head(out.encode()).meta == new


@pytest.mark.parametrize(
    "edit",
    [
        ("tokens:\n  in: 0\n  out: 0\n  restoration: 0\n", "tokens: {in: 0, out: 0}  # flow\n"),
        ("title: ''\n", "title: |  # block\n  two\n  lines\n"),
        ("title: ''\n", "title: [\n"),  # does not load: salvaged
        ("title: ''\n", "title: 'x' 'y'\n"),
        ("status: open\n", "status: open\nstatus: open\n"),
    ],
)
def test_what_cannot_be_edited_safely_is_written_whole(edit: tuple[str, str]) -> None:
    meta = _meta()
    text = render_front_matter(meta).decode().replace(*edit)
    new = replace(meta, title="Changed", tokens_in=4)
    out = rewrite_front_matter(text.encode(), new)
    assert out == render_front_matter(new)
    assert read_head(out).meta == new


def test_new_keys_go_before_the_closing_line_in_order() -> None:
    meta = _meta()
    text = "---\n# only a comment\nid: 20261121-143045-abcdef01\n---\n"
    out = rewrite_front_matter(text.encode(), meta).decode()
    assert out.startswith("---\n# only a comment\nid: 20261121-143045-abcdef01\nformat: 2\n")
    assert read_head(out.encode()).meta == meta
    assert rewrite_front_matter(b"---\n---\n", meta) == render_front_matter(meta)


# ---------------------------------------------------------------- any meta, any comments

_comment_text = st.text(
    alphabet=st.characters(whitelist_categories=("L", "N", "P", "S", "Zs")), max_size=20
)


def _changes() -> st.SearchStrategy[dict[str, object]]:
    return st.fixed_dictionaries(
        {},
        optional={
            "title": title_st,
            "status": st.sampled_from(["open", "closed", "interrupted"]),
            "queries": st.integers(0, 10**6),
            "tokens_in": st.integers(0, 10**9),
            "tokens_out": st.integers(0, 10**9),
            "restoration_tokens": st.integers(0, 10**9),
            "updated": at_st,
            "summary": st.sampled_from([None, "model", "fallback"]),
            "git_branch": st.none() | text_st,
        },
    )


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sessions(), st.data())
def test_comments_survive_any_change_of_any_meta(session: Session, data: st.DataObject) -> None:
    meta = session.meta
    units: list[str] = []  # a top-level key with its indented lines (the counters)
    for line in render_front_matter(meta).decode().splitlines(keepends=True)[1:-1]:
        if line.startswith(" "):
            units[-1] += line
        else:
            units.append(line)
    units = data.draw(st.permutations(units), label="the person's key order")
    body = "".join(units).splitlines(keepends=True)
    comments: list[str] = []
    for i in reversed(range(len(body) + 1)):
        if i < len(body) and data.draw(st.booleans(), label=f"comment after line {i}"):
            text = data.draw(_comment_text, label="text")
            body[i] = body[i][:-1] + f"  # {text}\n"
            comments.append(f"# {text}")
        if data.draw(st.booleans(), label=f"comment line before line {i}"):
            text = data.draw(_comment_text, label="text")
            indent = data.draw(st.sampled_from(["", "  "]), label="indent")
            body.insert(i, f"{indent}# {text}\n")
            comments.append(f"# {text}")
    original = ("---\n" + "".join(body) + "---\n").encode()
    assert read_head(original).meta == meta

    changes = data.draw(_changes(), label="changes")
    if meta.format >= 2 and data.draw(st.booleans(), label="summary pointer"):
        changes["summary_key"] = "abcdefgh"
        changes["summary_at"] = data.draw(st.integers(0, 10**9), label="summary_at")
    new = replace(meta, **changes)
    out = rewrite_front_matter(original, new)
    head = read_head(out)
    assert not [kind for kind, _ in head.problems if kind == "front_matter"]
    assert head.meta == new and head.meta.extra == new.extra
    text = out.decode()
    for comment in comments:  # the block was edited in place, never re-rendered
        assert comment in text
