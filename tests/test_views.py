"""``Document.views``: a frame that holds only text is read without building its
message (``show`` is built on it), and says exactly what that message says."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chatloop.format import (
    Message,
    Plain,
    Session,
    ToolCall,
    Usage,
    open_document,
    render_markdown,
)
from chatloop.format.read import message_from, plain_facts, plain_of
from chatloop.ui.as_json import message_json, plain_json, write_sessions_json
from chatloop.ui.listing import transcript_lines
from tests.conftest import T0, new_meta, sealed_by_hand
from tests.strategies import examples, messages, sessions


@st.composite
def mostly_plain(draw: st.DrawFn) -> Session:
    """A session (format 2 mostly) whose messages are often plain: a question or a
    reply with text only, on the session's first day, with no flag; others are put
    on that day too, with what makes them not plain (parts, flags, a stop reason)."""
    meta = draw(sessions()).meta
    if draw(st.integers(0, 3)):
        meta = replace(meta, format=2, agent_path="", agent_name="simple_sally")
    out = []
    for m in draw(st.lists(messages(), min_size=2, max_size=8)):
        clock = draw(st.times()).replace(microsecond=0)
        at = datetime.combine(meta.created.date(), clock, meta.created.tzinfo)
        role = draw(st.sampled_from(["user", "assistant"]))
        plain = Message.create(
            role,
            at,
            text=m.text if draw(st.integers(0, 4)) else "",
            model=None if role == "user" else meta.model or None,
            stop_reason=None if role == "user" else "stop",
            usage=m.usage,
            duration=m.duration,
        )
        kind = draw(st.sampled_from(["plain", "plain", "parts", "flags", "as drawn"]))
        if kind == "parts":
            calls = m.tool_calls or (ToolCall("c1", "look", "{}"),)  # at least one part
            m = Message.create(
                role,
                at,
                text=plain.text or "text",
                thinking=m.thinking,
                tool_calls=calls,
                tool_results=m.tool_results,
                model=plain.model,
                stop_reason=plain.stop_reason,
            )
        elif kind == "flags":
            m = Message.create(
                role,
                at,
                text=plain.text,
                model=plain.model,
                stop_reason=m.stop_reason,
                interrupted=m.interrupted,
                restore=m.restore,
                fallback=m.fallback,
            )
        elif kind == "plain":
            m = plain
        out.append(m)
    return Session(meta, tuple(out))


def _damaged(raw: bytes, at: int | None) -> bytes:
    """``raw`` with one byte of its body changed (a hand edit), if ``at`` is given."""
    if at is None:
        return raw
    body = raw.index(b"\n---\n", 4) + 5
    if body >= len(raw):
        return raw
    where = body + at % (len(raw) - body)
    return raw[:where] + (b"Y" if raw[where : where + 1] != b"Y" else b"Z") + raw[where + 1 :]


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mostly_plain(), st.none() | st.integers(0, 10**6))
def test_a_plain_frame_says_what_its_message_says(session: Session, at: int | None) -> None:
    raw = _damaged(render_markdown(session), at)
    by_message, by_view = open_document(raw, "x"), open_document(raw, "x")
    expected = list(transcript_lines(by_message.meta, by_message.messages()))
    assert list(transcript_lines(by_view.meta, by_view.views())) == expected
    assert by_view.problems == by_message.problems and by_view.end == by_message.end
    assert _exported(raw, "views") == _exported(raw, "messages")
    doc = open_document(raw, "x")
    for frame in doc.frames():  # what a Plain promises, frame by frame
        plain = plain_of(frame, doc.meta.format)
        if plain is None:
            continue
        problems: list[object] = []
        m = message_from(frame, doc.meta, problems)  # type: ignore[arg-type]
        assert problems == []
        assert (m.role, m.text, m.at.isoformat()[11:19]) == (plain.role, plain.text, plain.clock)
        assert m.at.date() == doc.meta.created.date()
        assert m.stop_reason == ("stop" if m.role == "assistant" else None)
        assert not (m.thinking or m.tool_calls or m.tool_results)
        assert not (m.interrupted or m.restore or m.fallback)
        facts = (m.at.isoformat(), m.model, m.stop_reason, m.usage, m.duration)
        assert tuple(plain_facts(plain, doc.meta)) == facts
        assert plain_json(plain, doc.meta) == message_json(m)


def _exported(raw: bytes, how: str) -> str:
    """``export --format json`` of ``raw`` read by ``views()`` or ``messages()``."""
    doc, out = open_document(raw, "x"), []
    write_sessions_json([(doc.meta, getattr(doc, how)())], out.append)
    return "".join(out)


def test_export_reads_plain_frames_as_their_messages_in_any_time_zone() -> None:
    """Every field a plain frame's message has, time, usage (estimated or not) and
    duration included, in an offset of whole minutes and in one with seconds."""
    for tz in (timezone(timedelta(hours=-9, minutes=-30)), timezone(timedelta(hours=5, seconds=7))):
        at = datetime(2026, 3, 1, 23, 59, 58, tzinfo=tz)
        meta = new_meta(format=2, agent_name="simple_sally", agent_path="", created=at)
        said = (
            Message.create("user", at, text="hi", usage=Usage(3, 0, True)),
            Message.create(
                "assistant",
                at + timedelta(seconds=1),
                text="yo",
                model=meta.model,
                stop_reason="stop",
                usage=Usage(12, 7, False),
                duration=0.25,
            ),
            Message.create("assistant", at, text="bare", model=meta.model, stop_reason="stop"),
        )
        raw = render_markdown(Session(meta, said))
        views = list(open_document(raw, "x").views())
        assert [type(v) for v in views] == [Plain] * 3
        for plain, m in zip(views, said, strict=True):
            assert plain_json(plain, meta) == message_json(m)  # type: ignore[arg-type]
        assert _exported(raw, "views") == _exported(raw, "messages")
        assert '"estimated": true' in _exported(raw, "views")


def test_only_text_as_written_is_plain() -> None:
    at = T0.replace(microsecond=0)  # (a time with a fraction is written in full)
    meta = new_meta(format=2, agent_name="simple_sally", agent_path="", created=at)
    said = [
        Message.create("user", at, text="hello <!-- x --> ## Query 9\n"),
        Message.create("assistant", at, text="hi", model=meta.model, stop_reason="stop"),
        Message.create("assistant", at, text="", model=meta.model, stop_reason="stop"),
    ]
    other = [
        Message.create("user", at, text="again", restore=True),
        Message.create("assistant", at, text="cut", stop_reason="length"),
        Message.create("assistant", at, text="late", interrupted=True, stop_reason="stop"),
        Message.create("assistant", at, tool_calls=(ToolCall("c1", "read", "{}"),)),
        Message.create("user", at + timedelta(days=1), text="the next day"),
        Message.create("summary", at, text="**Pending:** none"),
    ]
    raw = render_markdown(Session(meta, (*said, *other)))
    views = list(open_document(raw, "x").views())
    assert [type(v) for v in views] == [Plain] * len(said) + [Message] * len(other)
    assert [v.text for v in views[: len(said)]] == [m.text for m in said]
    hand_edited = raw.replace(b"\nhi\n", b"\nhey\n")
    again = list(open_document(hand_edited, "x").views())
    assert type(again[1]) is Message and again[1].text == "hey"  # checksum: read in full
    # a part marker added by hand under the speaker line, then resealed: read in full
    part = b'<!-- %s call {"id":"c2","name":"look"} -->\n```json\n{}\n```\n' % said[1].key.encode()
    sealed = sealed_by_hand(raw.replace(b"\nhi\n", b"\nhi\n" + part), said[1].key)
    (_, reply, *_) = open_document(sealed, "x").views()
    assert type(reply) is Message and reply.tool_calls[0].name == "look"


def test_format_1_frames_are_never_plain() -> None:
    meta = new_meta(format=1)
    raw = render_markdown(Session(meta, (Message.create("user", T0, text="hello"),)))
    assert [type(v) for v in open_document(raw, "x").views()] == [Message]


def test_export_writes_what_it_built_when_reading_stops() -> None:
    """Export writes in 64 kB pieces; an error while reading (a disk that fails, a
    Ctrl-C) still leaves every message read before it in the output."""
    meta = new_meta(format=2, agent_name="simple_sally", agent_path="", created=T0)
    said = [Message.create("user", T0, text=f"line {i}") for i in range(3)]

    def failing() -> Iterator[Message]:
        yield from said
        raise OSError("the disk went away")

    out: list[str] = []
    with pytest.raises(OSError):
        write_sessions_json([(meta, failing())], out.append)
    written = "".join(out)
    assert all(message_json(m) in written for m in said)
    assert len(out) == 1  # (small: one piece, written at the end)


def test_export_never_writes_a_piece_twice_and_bounds_every_piece() -> None:
    """A piece whose writing fails (a full disk, a Ctrl-C in a blocked pipe) is not
    written again on the way out; sessions without messages count toward a piece."""
    meta = new_meta(format=2, agent_name="simple_sally", agent_path="", created=T0)
    said = [Message.create("user", T0, text="x" * 5000) for _ in range(40)]
    tried: list[str] = []

    def full_disk(piece: str) -> None:
        tried.append(piece)
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        write_sessions_json([(meta, iter(said))], full_disk)
    assert len(tried) == 1
    pieces: list[str] = []
    titled = replace(meta, title="t" * 1000)
    write_sessions_json([(titled, iter(()))] * 300, pieces.append)
    assert len(pieces) > 1 and max(map(len, pieces)) < 2 * 65536


def test_a_forks_copies_are_carried_over_not_restored() -> None:
    """In ``show``, a fork's first messages are copies of its parent's: headed
    "Carried over", an empty one an empty reply, not an acknowledgment; a child of a
    compaction or resume keeps "Session restored" and its acknowledgment."""
    meta = replace(new_meta(format=2, created=T0), parent_id="20260101-000000-aaaaaaaa")
    said = (
        Message.create("user", T0, text="Name a herb.", restore=True),
        Message.create("assistant", T0, text="", restore=True, stop_reason="stop"),
        Message.create("user", T0, text="And another?"),
    )
    fork = "\n".join(transcript_lines(meta, said, forked_at=1))
    assert "branches from 20260101-000000-aaaaaaaa after query 1" in fork
    assert "── Carried over (" in fork and "Session restored" not in fork
    assert "(the model sent an empty reply)" in fork and "acknowledgment" not in fork
    child = "\n".join(transcript_lines(meta, said))
    assert "continues 20260101-000000-aaaaaaaa" in child and "── Session restored (" in child
    assert "(the model sent an empty acknowledgment)" in child and "Carried over" not in child
