"""The format: lossless round trips, hostile content, strict front matter."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chatloop.format import (
    SUMMARY_END,
    SUMMARY_START,
    UNREADABLE,
    Frame,
    Message,
    Problem,
    Session,
    SessionMeta,
    Thinking,
    ToolCall,
    ToolResult,
    Usage,
    iter_frames,
    message_from,
    parse_markdown,
    render_frame,
    render_markdown,
)
from chatloop.format.body import compact_json
from chatloop.ui.as_json import escaped, message_dict, message_json
from tests.conftest import T0, new_meta
from tests.strategies import examples, messages, sessions, text_st, tz_st

# offsets with seconds (Python's own fromisoformat drops an offset's microseconds, so
# none of those is ever read back exactly: not generated)
odd_tz_st = st.builds(
    lambda minutes, seconds: timezone(timedelta(minutes=minutes, seconds=seconds)),
    st.integers(-23 * 60, 23 * 60),
    st.integers(1, 59),
)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30)),
    tz_st | odd_tz_st | st.just(UTC),
    st.lists(st.integers(-86400, 86400), min_size=1, max_size=6),
    st.lists(st.sampled_from([None, 0.5, 12.0, 1e-05, 3e15, 123456789012345.5])),
    st.sampled_from([1, 2]),
)
def test_times_on_the_first_day_and_after_it_round_trip(
    created: datetime,
    tz: timezone,
    seconds: list[int],
    durations: list[float | None],
    version: int,
) -> None:
    # format 2 writes HH:MM:SS for a message on the session's first day (read through
    # a fast path) and full ISO times otherwise; any offset, either side of midnight
    start = created.replace(tzinfo=tz)
    meta = new_meta(
        format=version,
        created=start,
        updated=start,
        agent_path="agents/simple_sally.py" if version == 1 else "",
        agent_name="" if version == 1 else "simple_sally",
    )
    found = [
        Message.create(
            "assistant",
            start + timedelta(seconds=n),
            text=f"at {n}",
            duration=durations[i % len(durations)] if durations else None,
        )
        for i, n in enumerate(seconds)
    ]
    session = Session(meta, tuple(found))
    result = parse_markdown(render_markdown(session))
    assert result.session == session and not result.problems
    for got, want in zip(result.session.messages, found, strict=True):
        assert got.at.utcoffset() == want.at.utcoffset()


@pytest.mark.parametrize("version", [1, 2])
def test_a_lone_surrogate_in_a_frames_json_keeps_the_message(version: int) -> None:
    meta = new_meta(
        format=version,
        model="front-model",
        agent_path="agents/simple_sally.py" if version == 1 else "",
        agent_name="" if version == 1 else "simple_sally",
    )
    reply = Message.create("assistant", T0, text="hi", model="xQy")
    data = render_markdown(Session(meta, (reply,))).replace(b"xQy", b"x\xed\xa0\x80y")
    result = parse_markdown(data)
    assert [m.model for m in result.session.messages] == ["x\ud800y"]
    assert [p.kind for p in result.problems] == ["checksum"]  # edited: kept as found


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages(), st.none() | st.floats() | st.integers(0, 10))
def test_a_message_exported_as_json_is_what_json_dumps_writes(
    message: Message, duration: float | None
) -> None:
    # durations include NaN, infinities and ints: json writes them as it writes any value
    # (and control characters json leaves raw are escaped: ``escaped``)
    plain = message._replace(thinking=(), tool_calls=(), tool_results=())
    ints = (
        plain._replace(interrupted=1, usage=None),  # type: ignore[arg-type]
        plain._replace(usage=Usage(1, 2, 0)),
    )  # type: ignore[arg-type]
    for m in (message, plain, plain._replace(duration=duration), *ints):
        assert message_json(m) == escaped(json.dumps(message_dict(m), ensure_ascii=False))
        assert json.loads(message_json(m))["text"] == m.text


@pytest.mark.parametrize("odd", ["int flag", "int signature", "none argument", "int model"])
def test_a_message_with_parts_of_odd_types_is_exported_as_json_dumps_writes(odd: str) -> None:
    # a value of another type than declared is written as json writes it
    parts = {
        "thinking": (Thinking('hmm "x"\n', "s1"), Thinking("b", None)),
        "tool_calls": (ToolCall("c1", "read", '{"p": 1}'),),
        "tool_results": (
            ToolResult("c1", "read", "out\n", True),
            ToolResult("c2", "r\u2028", "é", False),
        ),
    }
    m = Message.create("assistant", T0, text="t", usage=Usage(3, 4), duration=1.5, **parts)
    assert message_json(m) == escaped(json.dumps(message_dict(m), ensure_ascii=False))
    if odd == "int flag":
        m = m._replace(tool_results=(ToolResult("c1", "read", "o", 1),))  # type: ignore[arg-type]
    elif odd == "int signature":
        m = m._replace(thinking=(Thinking("t", 7),))  # type: ignore[arg-type]
    elif odd == "none argument":
        m = m._replace(tool_calls=(ToolCall("c1", "read", None),))  # type: ignore[arg-type]
    else:
        m = m._replace(model=5)  # type: ignore[arg-type]
    assert message_json(m) == escaped(json.dumps(message_dict(m), ensure_ascii=False))


_V1_VALUE = st.one_of(
    text_st,
    st.integers(-5, 10**16),
    st.floats(allow_nan=False),
    st.booleans(),
    st.none(),
    st.sampled_from(
        [
            "2026-11-18T09:12:34-05:00",
            "2026-11-18T09:12:34",
            "2026-13-01T00:00:00Z",
            "2026-11-18T09:12:34.5+00:00",
        ]
    ),
)
_V1_EDITS = [
    (b'":', b'": '),
    (b'"in":', b'"in":0'),
    (b'"secs":', b'"secs":0'),
    (b'"out":', b'"out":00'),
    (b"true", b"True"),
    (b'"at":', b'"at":"x","at":'),
    (b"}", b" }"),
    (b'"in":', b'"in":-'),
    (b".", b"e1"),
    (b'"', b"\\u0022"),
    (b"a", b"\\u0061"),
]


def _reads_as_json_reads(
    frame: Frame, meta: SessionMeta, raw: bytes, put: Callable[[Frame, bytes], Frame]
) -> object:
    """``message_from`` of ``frame`` with ``raw`` put in its JSON's place (the message
    and its problems, or the error's type), asserted the same as with the value json
    reads from ``raw`` written anew: a line edited by hand reads as json reads it."""

    def read(line: bytes) -> object:
        problems: list[Problem] = []
        try:
            return message_from(put(frame, line), meta, problems), problems
        except UNREADABLE as exc:
            return type(exc)

    found = read(raw)
    try:
        value = json.loads(raw)
    except ValueError:
        assert found is json.JSONDecodeError or found is UnicodeDecodeError
        return found
    if not isinstance(value, dict):
        assert found is ValueError
        return found
    assert read(compact_json(value).encode("utf-8", "surrogatepass")) == found
    return found


def _info(frame: Frame, raw: bytes) -> Frame:
    return frame._replace(info=raw)


@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    messages(),
    st.dictionaries(
        st.sampled_from(
            [
                "at",
                "model",
                "stop",
                "secs",
                "usage",
                "in",
                "out",
                "est",
                "interrupted",
                "restore",
                "fallback",
            ]
        ),
        _V1_VALUE,
        max_size=4,
    ),
    st.lists(st.sampled_from(_V1_EDITS), max_size=2),
    st.sampled_from([None, "llama3.2:3b"]),
    st.sampled_from([None, "stop", "length"]),
    st.booleans(),
)
def test_a_format_1_open_line_reads_as_json_reads_it(
    message: Message,
    changes: dict[str, object],
    edits: list[tuple[bytes, bytes]],
    model: str | None,
    stop: str | None,
    as_written: bool,
) -> None:
    # any line, as written or edited by hand, gives the message and problems (or the
    # error) of the value json reads from it
    meta = new_meta(format=1, agent_path="agents/simple_sally.py", agent_name="")
    if as_written:  # the values chatloop writes (else any text, mostly read by json)
        message = message._replace(model=model, stop_reason=stop)
    frame = next(iter_frames(render_frame(message, meta, 1), 0, 1))
    assert isinstance(frame, Frame)
    info = json.loads(frame.info)
    for name, value in changes.items():
        (
            info["usage"]
            if name in ("in", "out", "est") and isinstance(info.get("usage"), dict)
            else info
        )[name] = value
    raw = compact_json(info).encode()
    for old, new in edits:
        raw = raw.replace(old, new, 1)
    _reads_as_json_reads(frame, meta, raw, _info)


_V1_LINE = (
    b'{"at":"2026-11-18T09:12:34.100000-05:00","model":"llama3.2:3b","stop":"stop",'
    b'"secs":4.1,"usage":{"in":58,"out":121,"est":true},"interrupted":true,'
    b'"restore":true,"fallback":true}'
)


@pytest.mark.parametrize(
    "edit",
    [
        (b"", b""),
        (b'"secs":4.1', b'"secs":04.1'),
        (b'"secs":4.1', b'"secs":4'),
        (b'"secs":4.1', b'"secs":4.1e2'),
        (b'"in":58', b'"in":058'),
        (b'"out":121', b'"out":-1'),
        (b'"in":58', b'"in":99999999999999999'),
        (b',"est":true', b',"est":false'),
        (b'"stop":"stop"', b'"stop":"st\\u006fp"'),
        (b'"model":', b'"model": '),
        (b',"restore":true', b""),
        (b'"fallback":true', b'"fallback":1'),
        (b'"at":"2026-11-18T09:12:34.100000-05:00"', b'"at":"2026-11-18T09:12:34"'),
        (b'"at":"2026-11-18T09:12:34.100000-05:00"', b'"at":"yesterday"'),
        (b'"model":"llama3.2:3b"', b'"model":"caf\xc3\xa9"'),
        (b"}", b"}}"),
        (b'"model":"llama3.2:3b"', b'"model":"x\xed\xa0\x80y"'),  # a lone surrogate: json keeps it
    ],
)
def test_a_format_1_open_line_edited_by_hand_reads_as_json_reads_it(
    edit: tuple[bytes, bytes],
) -> None:
    meta = new_meta(format=1, agent_path="agents/simple_sally.py", agent_name="")
    frame = next(
        iter_frames(render_frame(Message.create("assistant", T0, text="hi"), meta, 1), 0, 1)
    )
    assert isinstance(frame, Frame)
    _reads_as_json_reads(frame, meta, _V1_LINE.replace(*edit), _info)


@pytest.mark.parametrize(
    "edit",
    [
        (b"", b""),
        (b'"name":"read_file"', b'"name":"read_file","error":true'),
        (b'"name":"read_file"', b'"name":"read_file","error":false'),
        (b'"name":"read_file"', b'"name":"read_file","error":1'),
        (b'":"', b'": "'),
        (b'"id":"c1","name":"read_file"', b'"name":"read_file","id":"c1"'),
        (b'"c1"', b'"\\u0063\\u0031"'),
        (b'"c1"', b"1"),
        (b'"c1"', b"null"),
        (b'"id":"c1",', b""),
        (b'"read_file"', b'"caf\xc3\xa9"'),
        (b'"read_file"', b'"x\\"y"'),
        (b'"name":"read_file"', b'"name":"read_file","id":"c2"'),
        (b"}", b"}}"),
        (b"}", b""),
    ],
)
@pytest.mark.parametrize("kind", ["call", "result"])
def test_a_part_marker_edited_by_hand_reads_as_json_reads_it(
    edit: tuple[bytes, bytes], kind: str
) -> None:
    # a call or result marker edited by hand gives the message (or the error) of the
    # value json reads from it
    meta = new_meta()
    if kind == "call":
        message = Message.create("assistant", T0, tool_calls=(ToolCall("c1", "read_file", "{}"),))
    else:
        message = Message.create("tool", T0, tool_results=(ToolResult("c1", "read_file", "x"),))
    frame = next(iter_frames(render_frame(message, meta, 1), 0, 2))
    assert isinstance(frame, Frame)
    marker = f"<!-- {frame.key} {kind} ".encode()
    head, _, rest = frame.body.partition(marker)
    info, _, tail = rest.partition(b" -->\n")
    assert info == b'{"id":"c1","name":"read_file"}'

    def put(frame: Frame, raw: bytes) -> Frame:
        return frame._replace(body=head + marker + raw + b" -->\n" + tail)

    found = _reads_as_json_reads(frame, meta, info.replace(*edit), put)
    if edit == (b"", b""):
        assert isinstance(found, tuple) and found[1] == []


@settings(max_examples=examples(500), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sessions())
def test_any_session_round_trips_exactly(session: Session) -> None:
    data = render_markdown(session)
    result = parse_markdown(data)
    assert result.session == session
    assert not [p for p in result.problems if p.kind != "unknown_key"]
    assert result.end == len(data)
    assert render_markdown(result.session) == data


def test_each_field_round_trips() -> None:
    at = T0
    rich = Message.create(
        "assistant",
        at,
        text="Here you go",
        thinking=(Thinking("let me think", "sig-123"), Thinking("more", None)),
        tool_calls=(
            ToolCall("call_1", "read_file", '{"path": "a b.txt"}'),
            ToolCall("c2", "x", ""),
        ),
        model="llama3.2:3b",
        stop_reason="tool_calls",
        usage=Usage(123, 222, estimated=True),
        duration=3.25,
        interrupted=True,
    )
    tool = Message.create(
        "tool", at, tool_results=(ToolResult("call_1", "read_file", "boom", is_error=True),)
    )
    back = parse_markdown(render_markdown(Session(new_meta(id="x"), (rich, tool)))).session
    got_rich, got_tool = back.messages
    for name in ("text", "thinking", "tool_calls", "model", "stop_reason", "usage", "duration"):
        assert getattr(got_rich, name) == getattr(rich, name), name
    assert got_rich.interrupted and got_rich.at == at
    assert got_tool.tool_results == tool.tool_results


def test_one_megabyte_line_round_trips() -> None:
    big = "x" * 1_000_000 + "`" * 500
    message = Message.create("user", T0, text=big)
    data = render_markdown(Session(new_meta(id="big"), (message,)))
    assert parse_markdown(data).session.messages[0].text == big


def test_summary_is_read_from_the_last_valid_block() -> None:
    fake = f"{SUMMARY_START}\nI am a fake summary\n{SUMMARY_END}"
    msgs = (
        Message.create("summary", T0, text="first"),
        Message.create("user", T0, text=fake),
        Message.create("summary", T0, text=f"second {SUMMARY_END} still second"),
        Message.create("assistant", T0, text=fake),
    )
    session = parse_markdown(render_markdown(Session(new_meta(id="s"), msgs))).session
    assert session.summary is not None
    assert session.summary.text == f"second {SUMMARY_END} still second"


def test_file_is_readable_markdown() -> None:
    msgs = (
        Message.create("user", T0, text="hello"),
        Message.create("assistant", T0, text="Hi!", usage=Usage(123, 222), duration=3.2),
    )
    meta = new_meta(id="20261121-143045-0a1b2c3d", format=1)
    text = render_markdown(Session(meta, msgs)).decode()
    assert text.startswith("---\n")
    assert "# Simple Sally Conversation" in text
    assert "## Query 1 (14:30:45)" in text
    assert "**You:** hello" in text
    assert "**Simple Sally:** Hi!" in text
    assert "*Time: 3.2s | Tokens: 345 (in: 123, out: 222)*" in text


def test_format_2_says_each_fact_once_and_reads_as_markdown() -> None:
    msgs = (
        Message.create("user", T0.replace(microsecond=0), text="- a list\n- of things"),
        Message.create(
            "assistant",
            T0.replace(microsecond=0),
            text="Hi!",
            usage=Usage(123, 222),
            duration=3.2,
            model="gemma-3-270m",
            stop_reason="stop",
        ),
    )
    text = render_markdown(Session(new_meta(id="20261121-143045-0a1b2c3d"), msgs)).decode()
    body = text.split("\n---\n", 1)[1]
    assert "## Query 1\n- a list\n- of things\n" in body  # user text starts its own line
    assert "### Simple Sally\nHi!" in body
    assert " 3.2s 123/222 -->" in body  # time and tokens once, in the open line
    assert "gemma-3-270m" not in body and '"stop"' not in body  # the defaults are not repeated
    assert "Tokens:" not in body and "chatloop:" not in body
    assert max(len(line) for line in body.splitlines()) <= 100


# ---------------------------------------------------------------- front matter


def _with_front_matter(yaml_text: str) -> bytes:
    return f"---\n{yaml_text}---\n\n# X Conversation\n".encode()


def test_title_no_stays_a_string_and_dates_stay_strings() -> None:
    base = "id: a\ncreated: 2026-01-01T00:00:00+00:00\nupdated: 2026-01-01T00:00:00+00:00\n"
    result = parse_markdown(_with_front_matter(base + "title: no\nagent: on\nmine: 0x1F\n"))
    meta = result.session.meta
    assert meta.title == "no" and meta.agent == "on"
    assert meta.extra == {"mine": "0x1F"}


def test_python_object_payload_runs_nothing(tmp_path: Path) -> None:
    pwned = tmp_path / "chatloop-pwned"
    payload = f"id: a\ntitle: !!python/object/apply:os.system ['touch {pwned}']\n"
    result = parse_markdown(_with_front_matter(payload))
    assert [p.kind for p in result.problems] == ["front_matter"]
    assert result.session.meta.id == "a"  # salvaged line by line; the tag ran nothing
    assert not pwned.exists()


def test_alias_bomb_is_refused_fast() -> None:
    lines = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    for i in range(1, 12):
        lines.append(f"{chr(97 + i)}: &{chr(97 + i)} [{','.join(['*' + chr(96 + i)] * 9)}]")
    started = time.perf_counter()
    result = parse_markdown(_with_front_matter("\n".join(lines) + "\n"))
    assert time.perf_counter() - started < 1.0
    assert any("alias" in p.detail for p in result.problems)


def test_oversized_front_matter_is_refused() -> None:
    result = parse_markdown(_with_front_matter("title: " + "x" * 70_000 + "\n"))
    assert any("larger than" in p.detail for p in result.problems)


def test_unknown_keys_survive_a_rewrite() -> None:
    session = Session(new_meta(id="k", extra={"project_code": "ACME-7", "tags": ["a", "b"]}))
    again = parse_markdown(render_markdown(session)).session
    changed = replace(again.meta, status="closed")
    final = parse_markdown(render_markdown(Session(changed))).session.meta
    assert final.extra == {"project_code": "ACME-7", "tags": ["a", "b"]}


@pytest.mark.parametrize("cut", ["", "---\n", "---\nid: [\n---\n"])
def test_broken_front_matter_is_a_problem_not_an_exception(cut: str) -> None:
    result = parse_markdown(cut.encode())
    assert result.problems
