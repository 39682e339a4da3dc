"""Damage never empties a session and never raises; hand edits can be resealed."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from chatloop.format import (
    Message,
    Plain,
    Session,
    open_document,
    parse_markdown,
    skim,
)
from chatloop.store.index import Index
from chatloop.store.store import Store
from chatloop.ui.listing import transcript_text
from tests.conftest import T0, exchange, new_meta, sealed_by_hand
from tests.strategies import damaged_files, examples

SAMPLES = Path(__file__).resolve().parent.parent / "sample_conversations"
ALL_SAMPLES = sorted(SAMPLES.glob("0*.md")) + sorted((SAMPLES / "format1").glob("0*.md"))


def _front(data: bytes) -> tuple[bytes, bytes]:
    end = data.index(b"\n---\n", 3) + 5
    return data[:end], data[end:]


@pytest.mark.parametrize("path", ALL_SAMPLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_crlf_file_reads_with_all_its_messages(path: Path) -> None:
    data = path.read_bytes()
    result = parse_markdown(data.replace(b"\n", b"\r\n"), path.stem)
    assert [p.kind for p in result.problems] == ["crlf"]
    assert result.session.messages == parse_markdown(data).session.messages
    assert result.session.meta == parse_markdown(data).session.meta
    assert not result.exact  # never cut: its offsets are not the file's


def test_a_bom_is_a_problem_not_an_empty_session() -> None:
    data = (SAMPLES / "01-plain-chat.md").read_bytes()
    result = parse_markdown(b"\xef\xbb\xbf" + data)
    assert [p.kind for p in result.problems] == ["bom"]
    assert result.session == parse_markdown(data).session


@pytest.mark.parametrize(
    "damage",
    [
        lambda fm: fm.replace(b"status: closed", b"status: [closed"),  # YAML that does not parse
        lambda fm: fm[:-4] + b"padding: '" + b"x" * 70_000 + b"'\n---\n",  # over 64 KiB
        lambda fm: b"---\n- a list\n- not a mapping\n---\n",
    ],
    ids=["broken-yaml", "oversized", "not-a-mapping"],
)
def test_broken_front_matter_keeps_the_chain_link_and_the_messages(damage: object) -> None:
    path = SAMPLES / "03-chain-2-of-3.md"
    data = path.read_bytes()
    good = parse_markdown(data, path.stem).session
    front, body = _front(data)
    result = parse_markdown(damage(front) + body, good.meta.id)  # type: ignore[operator]
    assert any(p.kind == "front_matter" for p in result.problems)
    assert result.session.meta.id == good.meta.id  # from the file name at least
    assert [m.text for m in result.session.messages] == [m.text for m in good.messages]
    if b"a list" not in damage(front):  # type: ignore[operator]
        assert result.session.meta.parent_id == good.meta.parent_id  # salvaged


def test_a_missing_format_key_is_told_from_the_frames() -> None:
    for path in (SAMPLES / "01-plain-chat.md", SAMPLES / "format1" / "01-plain-chat.md"):
        data = path.read_bytes()
        without = data.replace(b"format: 2\n", b"").replace(b"format: 1\n", b"")
        assert parse_markdown(without).session.messages == parse_markdown(data).session.messages


def test_naive_times_and_huge_numbers_are_problems_on_that_file_only(store: Store) -> None:
    writer = store.create(new_meta())
    for m in exchange(1):
        writer.append(m)
    writer.close()
    data = writer.path.read_bytes()
    front, body = _front(data)
    created = front.split(b"\ncreated: ", 1)[1].split(b"\n", 1)[0]
    front = front.replace(created, b"2026-11-21T14:30:45")
    front = front.replace(b"  in: 0", b"  in: " + b"9" * 31)
    body = body.replace(b"120/45", b"120/" + b"9" * 400, 1)
    writer.path.write_bytes(front + body)
    other = store.create(new_meta(title="the healthy one"))
    other.append(Message.create("user", T0, text="healthy"))
    other.close()
    result = parse_markdown(writer.path.read_bytes())
    kinds = {p.kind for p in result.problems}
    assert {"naive_time", "range", "checksum"} <= kinds
    assert any("out of range" in p.detail for p in result.problems if p.kind == "checksum")
    assert result.session.meta.created.tzinfo is not None and result.session.meta.tokens_in == 0
    assert len(result.session.messages) == len(exchange(1))
    with Index(store) as index:
        index.sync()
        titles = [row.title for row in index.list_sessions()]
    assert "the healthy one" in titles and len(titles) == 2


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(damaged_files())
def test_no_damage_makes_a_reader_raise(data: bytes) -> None:
    result = parse_markdown(data, "20261121-143045-0a1b2c3d")
    skimmed = skim(data, "20261121-143045-0a1b2c3d")
    assert skimmed.queries <= len(result.session.messages) + 1
    for message in result.session.messages:
        assert message.at.tzinfo is not None
        assert message.usage is None or message.usage.total < 2**54


def test_the_index_lists_every_other_session_beside_hostile_files(store: Store) -> None:
    healthy = store.create(new_meta(title="still listed"))
    healthy.append(Message.create("user", T0, text="hello"))
    healthy.close()
    hostile = [
        b"---\ncreated: 2026-01-01\nqueries: 1" + b"0" * 40 + b"\n---\n",
        b"\xef\xbb\xbf---\r\nid: x\r\n---\r\n",
        b"---\n- a\n---\n",
        b"\x00" * 100,
        b'---\nformat: 2\n---\n<!-- abcdefgh user 10:00:00 {"usage":[1e999,2]} -->\n'
        b"x\n<!-- /abcdefgh 00000000 -->\n",
    ]
    for i, data in enumerate(hostile):
        (store.project_dir / f"20261121-1000{i:02d}-0000000{i}.md").write_bytes(data)
    with Index(store) as index:
        index.sync()
        rows = index.list_sessions()
        hits = index.search("hello")
    assert "still listed" in [r.title for r in rows] and len(rows) == len(hostile) + 1
    assert [h.session.title for h in hits] == ["still listed"]


# ---------------------------------------------------------------- reseal and streaming


def run(*args: str, cwd: Path, home: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "chatloop.cli", *args],
        cwd=cwd,
        env={"CHATLOOP_HOME": str(home), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("version", [2, 1])
def test_reseal_accepts_hand_edits_and_keeps_the_original(
    store: Store, tmp_path: Path, version: int
) -> None:
    writer = store.create(new_meta(format=version))
    for m in exchange(1) + exchange(2):
        writer.append(m)
    writer.finalize(Message.create("summary", T0, text="**Pending:** nothing"))
    writer.close()
    original = writer.path.read_bytes()
    edited = original.replace(b"Question number 1", b"Question number one (fixed by hand)")
    edited = edited.replace(b"line one of 1", b"line one of 1, typed `" + writer.meta.id.encode())
    writer.path.write_bytes(edited)
    cwd = store.cwd
    before = run("show", "1", cwd=cwd, home=store.root)
    assert before.returncode == 0 and "checksum" in before.stderr
    assert "`chatloop reseal " in before.stderr  # says how to accept the edits
    exported = run("export", "1", "--format", "json", "-o", "-", cwd=cwd, home=store.root)
    assert exported.returncode == 0 and "(fixed by hand)" in exported.stdout  # -o -: stdout
    assert f"note: {writer.meta.id}: checksum" in exported.stderr  # as show notes it
    assert not (cwd / "-").exists()
    done = run("reseal", "1", cwd=cwd, home=store.root)
    assert done.returncode == 0 and "2 frame(s)" in done.stdout, done.stdout + done.stderr
    kept = writer.path.with_name(writer.path.name + ".orig")
    assert kept.read_bytes() == edited and stat.S_IMODE(kept.stat().st_mode) == 0o600
    after = run("show", "1", cwd=cwd, home=store.root)
    assert after.returncode == 0 and after.stderr == "" and "(fixed by hand)" in after.stdout
    result = parse_markdown(writer.path.read_bytes())
    assert result.problems == ()
    assert store.summary_of(writer.path).message is not None
    again = run("reseal", "1", cwd=cwd, home=store.root)
    assert "Nothing to reseal" in again.stdout


def test_reseal_says_what_it_cannot_read_and_fails(store: Store) -> None:
    """A frame whose end marker was deleted by hand cannot be read, so reseal cannot
    vouch for it: it names it, leaves it as it is, and exits 1 (it said "checks out")."""
    writer = store.create(new_meta(format=2))
    for m in exchange(1) + exchange(2):
        writer.append(m)
    writer.finalize(Message.create("summary", T0, text="**Pending:** nothing"))
    writer.close()
    lines = writer.path.read_bytes().split(b"\n")
    close = next(i for i, line in enumerate(lines) if line.startswith(b"<!-- /"))
    writer.path.write_bytes(b"\n".join(lines[:close] + lines[close + 1 :]))
    for _ in range(2):  # the second time: nothing left to reseal, the damage stays
        done = run("reseal", "1", cwd=store.cwd, home=store.root)
        assert done.returncode == 1, done.stdout + done.stderr
        assert "note: damaged at byte " in done.stderr and "cannot be read" in done.stderr
        assert "checks out" not in done.stdout and "Traceback" not in done.stderr
    shown = run("show", "1", cwd=store.cwd, home=store.root)
    assert shown.returncode == 0 and "damaged" in shown.stderr


def test_reseal_names_a_broken_front_matter_and_fails(store: Store) -> None:
    """Reseal mends frames, not the front matter: a `created` a person broke is named, the
    front matter is left byte for byte (its summary pointer too: re-rendering it would
    put salvaged values in place of theirs), and reseal exits 1 each time (it said
    "checks out", and show still noted it). Mended by hand, a reseal sets the pointer
    and the summary is trusted again. A key of the person's own is no problem."""
    writer = store.create(new_meta(format=2))
    for m in exchange(1):
        writer.append(m)
    writer.finalize(Message.create("summary", T0, text="**Pending:** nothing"))
    writer.close()
    data = writer.path.read_bytes()
    mine = data.replace(b"\ncreated: ", b"\nmy_note: keep me\ncreated: ", 1)
    writer.path.write_bytes(mine)
    done = run("reseal", "1", cwd=store.cwd, home=store.root)
    assert done.returncode == 0 and "checks out" in done.stdout, done.stdout + done.stderr
    created = re.search(rb"\ncreated: [^\n]*", mine)
    assert created is not None
    broken = mine.replace(created.group(), b"\ncreated: yesterday", 1)
    broken = broken.replace(b"Question number 1", b"Question number one")  # moves the summary
    writer.path.write_bytes(broken)
    head = broken[: broken.index(b"\n---\n", 4) + 5]
    for time in range(2):  # the second time: the frame is sealed, the front matter is not
        done = run("reseal", "1", cwd=store.cwd, home=store.root)
        assert done.returncode == 1, done.stdout + done.stderr
        assert "note: front_matter at byte 0: created is not an ISO 8601 time" in done.stderr
        assert "front matter of" in done.stderr and "cannot mend" in done.stderr
        assert ("Resealed" in done.stdout) == (time == 0) and "checks out" not in done.stdout
        assert "Traceback" not in done.stderr
        assert writer.path.read_bytes().startswith(head)
    shown = run("show", "1", cwd=store.cwd, home=store.root)
    assert "checksum" not in shown.stderr and "created is not" in shown.stderr
    writer.path.write_bytes(
        writer.path.read_bytes().replace(b"\ncreated: yesterday", created.group(), 1)
    )
    done = run("reseal", "1", cwd=store.cwd, home=store.root)
    assert done.returncode == 0 and "Resealed" in done.stdout, done.stdout + done.stderr
    resealed = writer.path.read_bytes()
    assert (
        b"\nmy_note: keep me\n" in resealed
        and parse_markdown(resealed).problems[0].kind == "unknown_key"
    )
    found = store.summary_of(writer.path)
    assert found.message is not None and found.note is None  # the pointer is right again


def test_reseal_moves_the_summary_pointer_in_place(store: Store) -> None:
    """A hand edit before the summary moves it; reseal edits the pointer's lines in the
    front matter and keeps everything else there, a person's comments included."""
    writer = store.create(new_meta(format=2))
    for m in exchange(1) + exchange(2):
        writer.append(m)
    writer.finalize(Message.create("summary", T0, text="**Pending:** nothing"))
    writer.close()
    data = writer.path.read_bytes().replace(b"\ntitle:", b"\n# why: a test\ntitle:", 1)
    data = data.replace(b"Question number 2", b"Question number two, longer", 1)
    writer.path.write_bytes(data)
    moved = store.summary_of(writer.path)  # the pointer is off now: the file is read whole
    assert moved.message is not None and "moved" in (moved.note or "")
    done = run("reseal", "1", cwd=store.cwd, home=store.root)
    assert done.returncode == 0 and "Resealed" in done.stdout, done.stdout + done.stderr
    resealed = writer.path.read_bytes()
    before, after = (x.split(b"\n---\n", 1)[0].split(b"\n") for x in (data[4:], resealed[4:]))
    assert [line for line in before if not line.startswith(b"summary_at:")] == [
        line for line in after if not line.startswith(b"summary_at:")
    ]
    assert b"# why: a test" in after
    found = store.summary_of(writer.path)
    assert found.message is not None and found.note is None  # found where it points
    assert parse_markdown(resealed).problems == ()


def test_show_and_export_stream_every_message(store: Store, tmp_path: Path) -> None:
    at = T0.replace(microsecond=0)  # on the first day, to the second: most frames are plain
    writer = store.create(new_meta(title="long one", created=at))
    for n in range(1, 201):
        for m in exchange(n, at):
            if m.role == "assistant" and not m.tool_calls:  # a reply that ended normally
                m = m._replace(stop_reason="stop", model=writer.meta.model or None)
            writer.append(m)
    writer.finalize(Message.create("summary", T0, text="**Pending:** none"))
    writer.close()
    cwd, home = store.cwd, store.root
    shown = run("show", "1", cwd=cwd, home=home)
    assert shown.returncode == 0 and shown.stdout.count("── Query ") == 200
    session = parse_markdown(writer.path.read_bytes()).session  # shown as its messages are
    assert shown.stdout == transcript_text(session) + "\n" and shown.stderr == ""
    views = list(open_document(writer.path.read_bytes(), "x").views())
    assert sum(isinstance(v, Plain) for v in views) == 400  # (the questions and the answers)
    exported = run("export", "1", "--format", "json", cwd=cwd, home=home)
    (session,) = json.loads(exported.stdout)
    assert session["meta"]["title"] == "long one"
    messages = parse_markdown(writer.path.read_bytes()).session.messages
    assert len(session["messages"]) == len(messages)
    raw = run("show", "1", "--raw", cwd=cwd, home=home)
    assert raw.stdout.encode() == writer.path.read_bytes()
    md = run("export", "1", cwd=cwd, home=home)
    assert md.stdout.encode() == writer.path.read_bytes()


@pytest.mark.parametrize("where", ["open line", "part marker"])
def test_json_nested_deeper_than_the_stack_damages_one_frame(store: Store, where: str) -> None:
    at = T0.replace(microsecond=0)
    writer = store.create(new_meta(title="deep", created=at))
    for n in range(1, 4):
        for m in exchange(n, at):
            writer.append(m)
    writer.close()
    raw = writer.path.read_bytes()
    deep = b"[" * 100_000 + b"]" * 100_000
    if where == "open line":  # the second question's open line gains a key
        key = re.findall(rb"<!-- ([a-z2-7]{8}) user ", raw)[1]
        end = raw.index(b" -->\n", raw.index(b"<!-- %s " % key))
        raw = raw[:end] + b' {"x":' + deep + b"}" + raw[end:]
    else:  # the tool call's part marker
        part = re.search(rb"<!-- ([a-z2-7]{8}) call (\{[^\n]*\}) -->", raw)
        assert part is not None
        key = part.group(1)
        raw = raw[: part.start(2)] + b'{"id":' + deep + b',"name":"x"}' + raw[part.end(2) :]
    writer.path.write_bytes(sealed_by_hand(raw, key))
    result = parse_markdown(writer.path.read_bytes())
    assert [p.kind for p in result.problems] == ["damaged"]
    assert len(result.session.messages) == 9  # every other message kept
    with writer.path.open("rb") as handle:
        assert skim(handle, writer.path.stem).queries >= 2  # (read, not raised)
    shown = run("show", "1", cwd=store.cwd, home=store.root)
    assert shown.returncode == 0 and "Traceback" not in shown.stderr
    assert "unreadable frame" in shown.stderr and shown.stdout.count("── Query ") >= 2
    found = run("search", "Answer", cwd=store.cwd, home=store.root)
    assert found.returncode == 0 and "Traceback" not in found.stderr


def test_show_into_a_closed_pipe_is_quiet(store: Store) -> None:
    writer = store.create(new_meta())
    for n in range(1, 400):
        for m in exchange(n):
            writer.append(m)
    writer.close()
    env = {"CHATLOOP_HOME": str(store.root), "PATH": os.environ["PATH"]}
    command = f"{sys.executable} -m chatloop.cli show 1 | head -3"
    proc = subprocess.run(
        command, shell=True, cwd=store.cwd, env=env, capture_output=True, text=True, timeout=120
    )
    assert len(proc.stdout.splitlines()) == 3 and "Traceback" not in proc.stderr


def test_format_1_stays_format_1_when_appended(store: Store) -> None:
    writer = store.create(new_meta(format=1))
    writer.append(Message.create("user", T0, text="old file"))
    writer.close()
    with store.open(writer.path) as again:
        again.append(Message.create("user", T0, text="appended"))
    result = parse_markdown(writer.path.read_bytes())
    assert result.session.meta.format == 1 and result.problems == ()
    assert [m.text for m in result.session.messages] == ["old file", "appended"]
    assert replace(result.session.meta).format == 1 and isinstance(result.session, Session)


def test_front_matter_that_makes_pyyaml_raise_other_errors_is_a_problem() -> None:
    """Found by the property above (its falsifying example, as it drew it): PyYAML
    raises ValueError for an escape past U+10FFFF in a double-quoted value, and deep
    brackets exhaust its recursive composer; both are front matter that does not load,
    never a traceback, for the parser and for the index's skim."""
    drawn = (
        b"---\nformat: 1\nid: ''\ntitle: ''\nagent: \"<!-- SESSION_SUMMARY_START -->---## "
        b'Query 3 (14:30:45)\\n<!-- chatloop:aaaaaaaa user {\\"at\\":\\"2026-01-01T00:00:00+00'
        b':00\\"} -->\\n"\nagent_path: agents/simple_sally.py\nmodel: "<!-- SESSION_SUMMARY_'
        b"START --><!-- SESSION_SUMMARY_START -->------------\\n---\\n\\n\\n*Time: 2.0s | "
        b"Tokens: 3 (in: 1, out: 2)*0\xc2\xa1\xe0\xa0\x80\\U10010000<!-- SESSION_SUMMARY_"
        b"START -->\"\nbackend_url: ''\ncreated: '2000-01-01T00:00:00+00:00'\nupdated: '2000-01-"
        b"01T00:00:00+00:00'\ncwd: ''\ngit_branch: null\nparent_id: null\nparent_file: null\n"
        b"status: open\nqueries: 0\ntokens:\n  in: 0\n  out: 0\n  restoration: 0\nsummary: "
        b"null\n---\n\n# x Conversation\n"
    )
    unclosed = b"---\nformat: 2\nid: x\nmodel: " + b"[" * 20_000 + b"\n---\n"
    for data in (drawn, unclosed, _nested(1_000)):
        result = parse_markdown(data, "20261121-143045-0a1b2c3d")
        assert "front_matter" in [p.kind for p in result.problems]
        skim(data, "20261121-143045-0a1b2c3d")  # (raised ValueError, RecursionError before)


def _nested(depth: int) -> bytes:
    """Front matter whose model is a list nested ``depth`` deep, closed (valid YAML)."""
    return b"---\nformat: 2\nid: x\nmodel: " + b"[" * depth + b"]" * depth + b"\n---\n"


def test_front_matter_nested_deep_enough_to_overflow_libyaml_is_a_problem(
    tmp_path: Path,
) -> None:
    """30,000 closed brackets (under the 64 KiB cap) overflowed libyaml's C stack: a
    segmentation fault of every reader. Refused before YAML sees it; run in a child,
    so the old failure is a non-zero exit, not this test process dying."""
    path = tmp_path / "20261121-143045-0a1b2c3d.md"
    path.write_bytes(_nested(30_000))
    script = (
        "import sys; from chatloop.format import parse_markdown, skim; "
        "data = open(sys.argv[1], 'rb').read(); "
        "print([p.kind for p in parse_markdown(data, 'x').problems]); skim(data, 'x')"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)},
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-500:])
    assert "front_matter" in done.stdout
