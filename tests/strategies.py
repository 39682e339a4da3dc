"""The hypothesis strategies the property tests share: text as hostile as any
model, tool or person may send, messages and sessions made of it, and the
damaged files a disk or an editor may leave.

Every count of examples is given as ``examples(n)``: ``n`` in the ``slow`` profile
(CHATLOOP_SLOW=1), a quarter of it in ``ci`` and a tenth in ``dev`` (see
``tests/conftest.py``), so a ``@settings`` on a test never overrides the profile's
choice.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from hypothesis import settings
from hypothesis import strategies as st

from chatloop.format import (
    KNOWN_KEYS,
    SUMMARY_END,
    SUMMARY_START,
    Message,
    Session,
    Thinking,
    ToolCall,
    ToolResult,
    Usage,
    render_markdown,
)
from chatloop.format.front_matter import MAX_TITLE_CHARS
from tests.conftest import FULL_EXAMPLES, new_meta


def examples(n: int) -> int:
    """``n`` examples scaled to the loaded profile (``n`` itself in ``slow``)."""
    return max(1, n * settings().max_examples // FULL_EXAMPLES)


HOSTILE = [
    SUMMARY_START,
    SUMMARY_END,
    "---",
    "\n---\n",
    "## Query 3 (14:30:45)\n",
    "**You:** ",
    "**Simple Sally:** ",
    "```",
    "````json\n",
    "~~~",
    "<!-- x -->",
    "<!--",
    "-->",
    '<!-- chatloop:aaaaaaaa user {"at":"2026-01-01T00:00:00+00:00"} -->\n',
    "<!-- /chatloop:aaaaaaaa 00000000 -->\n",
    "\x00",
    "\r\n",
    "\r",
    "\ufeff",
    "🦙",
    "\u2028",
    "<details>",
    "</details>",
    "*Time: 1.0s*",
    "\n\n*Time: 2.0s | Tokens: 3 (in: 1, out: 2)*",
    "\t",
    " ",
    "\n",
]

# Any character but a lone surrogate (no UTF-8 file holds one): controls, NUL, BOM,
# CR, LS and PS, combining marks, unassigned code points.
ANY_CHAR = st.characters(exclude_categories=("Cs",))
# What str.isprintable() accepts, drawn as such: no category C (controls, format,
# private use, unassigned), no separator but the ASCII space. (Filtering arbitrary
# text by isprintable threw most draws away: test_views drew 10,979 invalid examples
# for its 150, in 82 s; drawn so, 15 for 150, in 20 s.)
PRINTABLE_CHAR = st.characters(exclude_categories=("C", "Zl", "Zp", "Zs"), include_characters=" ")

# Text as a model, a tool or a person may send it: anything, or printable pieces
# mixed with what the format must never take for structure (markers, `---`, fences,
# headings, frame lines, NUL, CRLF and CR, BOM, LS).
text_st = st.one_of(
    st.text(ANY_CHAR, max_size=60),
    st.lists(
        st.one_of(st.sampled_from(HOSTILE), st.text(PRINTABLE_CHAR, max_size=8)), max_size=12
    ).map("".join),
)
opt_text = st.none() | text_st
tz_st = st.integers(-23 * 60 - 59, 23 * 60 + 59).map(lambda m: timezone(timedelta(minutes=m)))
at_st = st.builds(
    lambda d, tz: d.replace(tzinfo=tz),
    st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2100, 1, 1)),
    tz_st,
)
usage_st = st.none() | st.builds(Usage, st.integers(0, 10**9), st.integers(0, 10**9), st.booleans())
thinking_st = st.builds(Thinking, text_st, opt_text)
call_st = st.builds(ToolCall, text_st, text_st, text_st)
result_st = st.builds(
    ToolResult,
    text_st,
    text_st,
    text_st,
    st.booleans(),
    st.one_of(st.none(), st.sampled_from(["allow", "once", "always", "no"]), text_st),
)


@st.composite
def messages(draw: st.DrawFn) -> Message:
    return Message.create(
        draw(st.sampled_from(["user", "assistant", "tool", "summary"])),
        draw(at_st),
        text=draw(text_st),
        thinking=tuple(draw(st.lists(thinking_st, max_size=2))),
        tool_calls=tuple(draw(st.lists(call_st, max_size=2))),
        tool_results=tuple(draw(st.lists(result_st, max_size=2))),
        model=draw(opt_text),
        stop_reason=draw(opt_text),
        usage=draw(usage_st),
        duration=draw(st.none() | st.floats(0, 1e6, allow_nan=False)),
        interrupted=draw(st.booleans()),
        restore=draw(st.booleans()),
        fallback=draw(st.booleans()),
        copy=draw(st.booleans()),
        unsent=draw(st.booleans()),
        recalled=draw(st.booleans()),
    )


# Titles as chatloop writes them: cut to MAX_TITLE_CHARS (``front_matter.bounded``);
# hostile text otherwise, as every other string.
title_st = text_st.map(lambda text: text[:MAX_TITLE_CHARS])


@st.composite
def sessions(draw: st.DrawFn) -> Session:
    extra_keys = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=8).filter(
        lambda k: k not in KNOWN_KEYS
    )
    version = draw(st.sampled_from([1, 2]))
    meta = new_meta(
        format=version,
        agent_path="agents/simple_sally.py" if version == 1 else "",
        agent_name="" if version == 1 else "simple_sally",
        id=draw(text_st),
        title=draw(title_st),  # (a title is cut when written: front_matter.bounded)
        agent=draw(text_st),
        model=draw(text_st),
        created=draw(at_st),
        updated=draw(at_st),
        git_branch=draw(opt_text),
        parent_id=draw(opt_text),
        system=draw(opt_text),
        queries=draw(st.integers(0, 10**6)),
        tokens_in=draw(st.integers(0, 10**9)),
        status=draw(st.sampled_from(["open", "closed", "interrupted"])),
        extra=draw(st.dictionaries(extra_keys, st.one_of(text_st, st.integers()), max_size=2)),
    )
    return Session(meta, tuple(draw(st.lists(messages(), max_size=5))))


@st.composite
def damaged_files(draw: st.DrawFn) -> bytes:
    data = render_markdown(draw(sessions()))
    for _ in range(draw(st.integers(1, 4))):
        how = draw(st.sampled_from(["crlf", "bom", "flip", "cut", "splice", "number"]))
        if how == "crlf":
            data = data.replace(b"\n", b"\r\n")
        elif how == "bom":
            data = b"\xef\xbb\xbf" + data
        elif how == "flip" and data:
            at = draw(st.integers(0, len(data) - 1))
            data = data[:at] + bytes([data[at] ^ draw(st.integers(1, 255))]) + data[at + 1 :]
        elif how == "cut":
            data = data[: draw(st.integers(0, len(data)))]
        elif how == "splice":
            junk = draw(
                st.sampled_from(
                    [
                        b"queries: 1e999\n",
                        b"created: 2026-01-01\n",
                        b"tokens:\n  in: -5\n",
                        b"- x\n",
                        b"id: ../../x\n",
                        b'{"usage":{"in":1e999}}',
                        b" 1e999s 9/9 ",
                        b"summary_at: 99999999\n",
                        b"format: 7\n",
                    ]
                )
            )
            at = draw(st.integers(0, len(data)))
            data = data[:at] + junk + data[at:]
        elif how == "number":
            data = data.replace(b"queries: ", b"queries: 1" + b"0" * 40, 1)
    return data
