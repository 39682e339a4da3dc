"""Issue 46's paper cuts, each through the installed program: an unknown option names
the one meant, usage errors exit 2 with a hint, a wrong path is said once, ``--help``
names markdown agents and ``tree`` marks a title it cuts."""

from __future__ import annotations

import io
from pathlib import Path

import pexpect
import pytest

from chatloop.format import Message
from chatloop.store.store import Store
from chatloop.ui.terminal_text import visible
from tests.conftest import T0, new_meta
from tests.pty_driver import run, spawn
from tests.scripted_server import scripted_server


def test_an_unknown_option_close_to_a_known_one_names_it(store: Store) -> None:
    for args, meant in ((("--agnet", "x"), "--agent"), (("sessions", "--alll"), "--all")):
        done = run(*args, home=store.root, cwd=store.cwd)
        assert done.returncode == 2, done.stderr
        assert f"(did you mean {meant}?)" in done.stderr.splitlines()[-1], done.stderr
    done = run("--zzzzqq", home=store.root, cwd=store.cwd)
    assert done.returncode == 2 and "did you mean" not in done.stderr


def test_fork_and_full_together_is_a_usage_error_with_a_hint(store: Store) -> None:
    done = run("--resume", "3", "--fork", "--full", home=store.root, cwd=store.cwd)
    assert done.returncode == 2, done.stderr
    error, hint = done.stderr.strip().splitlines()
    assert error.startswith("error: --fork and --full") and hint.startswith("hint: ")


def test_a_path_that_does_not_exist_is_said_once(store: Store) -> None:
    done = run("import", "/nonexistent/path", home=store.root, cwd=store.cwd)
    assert done.returncode == 1
    said = done.stdout + done.stderr
    assert said.count("/nonexistent/path") == 1, said
    assert "Nothing new to import" not in said


def test_help_names_markdown_agents(store: Store) -> None:
    done = run("--help", home=store.root, cwd=store.cwd)
    words = " ".join(done.stdout.split())  # (argparse wraps the help to the width)
    assert (
        done.returncode == 0
        and "--agent NAME|PATH agent name in agents/, or an agent file (.py, or .md" in words
    )


def test_tree_marks_a_title_it_cuts(store: Store) -> None:
    title = "a title that is far longer than the fifty characters tree gives it"
    with store.create(new_meta(title=title)) as writer:
        writer.append(Message.create("user", T0, text="hello"))
        writer.finalize()
    done = run("tree", "1", home=store.root, cwd=store.cwd)
    assert done.returncode == 0, done.stderr
    line = next(line for line in done.stdout.splitlines() if "a title that" in line)
    assert title not in line and f"{title[:49]}…" in line, line


@pytest.mark.e2e
def test_a_chat_notes_a_model_the_server_does_not_list(chatloop_home: Path, project: Path) -> None:
    """As the one-shot does: the banner's notes name the model the server lacks."""
    with scripted_server(lambda request: "Hi.", model="scripted") as url:
        shown = io.StringIO()
        child = spawn(url, chatloop_home, project, 12, "-m", "scripte", log=shown)
        child.sendline("exit")  # (nothing was said: nothing to save)
        child.expect(pexpect.EOF)
    words = " ".join(visible(shown.getvalue()).split())
    assert "does not list the model 'scripte' (did you mean scripted?)" in words, words


def test_show_labels_a_carried_copy_as_carried_from_its_parent(store: Store) -> None:
    """A compaction's child carries exchanges word for word: ``show`` says they are
    copies, and where from; an empty carried reply is an empty reply, not an
    acknowledgment. The restoration itself stays "Session restored"."""
    meta = new_meta(title="child", parent_id="20250101-000000-aaaaaaaa")
    with store.create(meta) as writer:
        writer.append(Message.create("user", T0, text="the summary", restore=True))
        writer.append(Message.create("assistant", T0, text="Understood.", restore=True))
        carried = {"restore": True, "copy": True}
        writer.append(Message.create("user", T0, text="an earlier question", **carried))
        writer.append(Message.create("assistant", T0, text="", stop_reason="stop", **carried))
        writer.append(Message.create("user", T0, text="a new question"))
        writer.finalize()
    done = run("show", "1", home=store.root, cwd=store.cwd)
    assert done.returncode == 0, done.stderr
    labels = [line for line in done.stdout.splitlines() if line.startswith("── ")]
    assert [label.split(" (")[0] for label in labels] == [
        "── Session restored",
        "── Carried over from 20250101-000000-aaaaaaaa",
        "── Query 1",
    ], done.stdout
    assert "(the model sent an empty reply)" in done.stdout
    assert "empty acknowledgment" not in done.stdout


def test_the_fallback_summary_files_no_reply_under_decisions() -> None:
    from chatloop.chat.prompts import HEADINGS, fallback_summary, section

    said = [
        Message.create("user", T0, text="Which pot should I buy for the basil?"),
        Message.create("assistant", T0, text="I've always wanted a terracotta one."),
    ]
    older = f"{HEADINGS[3]}\n- Use clay pots\n- Last answer: something said once\n"
    summary = fallback_summary(said, older)
    assert section(summary, HEADINGS[3]) == ["Use clay pots"]
    assert "Last answer: I've always wanted a terracotta one" in section(summary, HEADINGS[2])


def test_a_message_never_sent_is_pending_in_the_summary_built_from_the_transcript() -> None:
    """A chat that could not start keeps the message marked as not sent: the session's
    summary (the one ``-c`` continues from) keeps it pending."""
    from chatloop.chat.prompts import HEADINGS, fallback_summary, section

    kept = Message.create("user", T0, text="How often should I water basil?", unsent=True)
    summary = fallback_summary([kept], None)
    assert section(summary, HEADINGS[4]) == ["Not sent: How often should I water basil?"]


def test_a_carried_copy_is_headed_carried_over_in_the_file_and_reads_back_the_same(
    store: Store,
) -> None:
    """In an editor too, a copied question reads as carried, not as a restoration; the
    file reads back message for message, and one written before says what it said."""
    from chatloop.format import parse_markdown

    carried = Message.create("user", T0, text="an earlier question", restore=True, copy=True)
    prompt = Message.create("user", T0, text="the summary", restore=True)
    with store.create(new_meta(title="child", parent_id="20250101-000000-aaaaaaaa")) as writer:
        writer.append(prompt)
        writer.append(carried)
        writer.finalize()
    text = writer.path.read_text(encoding="utf-8")
    assert "## Session restored\nthe summary" in text
    assert "## Carried over\nan earlier question" in text
    messages = parse_markdown(writer.path.read_bytes()).session.messages
    assert [m for m in messages if m.role == "user"] == [prompt, carried]


def test_export_heads_an_old_files_copies_carried_over_and_keeps_every_other_byte(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file written before copies were headed ``## Carried over`` (its copies under
    ``## Session restored``) is exported with each copy headed as chatloop heads one
    now: the same messages, every checksum good, every other byte as it was; a file
    written since is exported byte for byte."""
    from chatloop.format import body, parse_markdown

    def old_lead(message: Message, query: int, version: int) -> str:  # (before the change)
        if message.role == "user" and message.restore and version >= 2:
            return "## Session restored\n"
        return new_lead(message, query, version)

    new_lead = body._lead
    carried = Message.create("user", T0, text="an earlier question", restore=True, copy=True)
    prompt = Message.create("user", T0, text="the summary", restore=True)
    asked = Message.create("user", T0, text="a new question")
    monkeypatch.setattr(body, "_lead", old_lead)
    with store.create(new_meta(title="old", parent_id="20250101-000000-aaaaaaaa")) as writer:
        for message in (prompt, carried, asked):
            writer.append(message)
        writer.finalize()
    monkeypatch.setattr(body, "_lead", new_lead)
    old = writer.path.read_bytes()
    assert old.count(b"## Session restored\n") == 2  # the file as an older chatloop wrote it

    done = run("export", writer.path.stem, home=store.root, cwd=store.cwd)
    assert done.returncode == 0, done.stderr
    exported = done.stdout.encode()
    assert b"## Carried over\nan earlier question" in exported
    assert exported.count(b"## Session restored\n") == 1  # the restoration prompt's
    result = parse_markdown(exported)
    assert not result.problems  # every checksum good
    assert result.session.messages == parse_markdown(old).session.messages
    assert len(exported) == len(old) + len(b"## Carried over\n") - len(b"## Session restored\n")

    with store.create(new_meta(title="new")) as fresh:  # written now: byte for byte
        fresh.append(carried._replace(key="bbbbbbbb"))
        fresh.finalize()
    done = run("export", fresh.path.stem, home=store.root, cwd=store.cwd)
    assert done.stdout.encode() == fresh.path.read_bytes()
