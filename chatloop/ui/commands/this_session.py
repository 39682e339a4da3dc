"""The commands that show or change this session: ``/info``, ``/context``, ``/rename``,
the pins, ``/export``, ``/copy`` and ``/file``.

Each handler asks the ``ChatSession`` and shows the answer; it raises
``ChatloopError`` for the REPL's one error boundary to show.
"""

from __future__ import annotations

import base64
from pathlib import Path

from chatloop.config import DEFAULT_WINDOW
from chatloop.errors import ChatloopError
from chatloop.format.front_matter import MAX_TITLE_CHARS
from chatloop.ui import render
from chatloop.ui.commands.shell import Shell
from chatloop.ui.terminal_text import visible

RECALL_FILES = 20  # other sessions /recall reads (the index's best matches)
PREPARED_INFO = {
    "preparing": "its summary is being prepared in the background (a message you send goes first)",
    "ready": "its summary is ready, made while you read (used when the threshold comes)",
}


def info(shell: Shell, arg: str) -> None:
    session = shell.session
    meta, totals, window = session.meta(), session.totals, session.window()
    backend, agent = session.backend, session.agent
    mark = "~" if totals.estimated else ""
    status = session.describe()
    if status.phase == "waiting":  # a continuation decided: it begins with the next message
        started = f"(your next message continues {status.continues} from {status.how})"
    else:
        started = "(not started: send a message)"
    facts = [
        ("session", status.session_id or started),
        ("file", str(status.path) if status.path else "-"),
        ("agent", f"{agent.name} ({agent.path})"),
        (
            "model",
            f"{render.model_label(backend.model)} via {backend.kind} "
            f"{backend.base_url.removeprefix(backend.kind + ':')}",
        ),  # (embedded: a path)
        (
            "context window",
            f"{window:,} tokens"
            if window
            else f"unknown: the server does not say; planned as {DEFAULT_WINDOW:,} "
            "(set context_window to the server's)",
        ),
        ("tools", ", ".join(tool.name for tool in agent.tools) or "none"),
        ("queries", str(totals.queries)),
        # as the toolbar and the exit line count them: what the replies used
        ("tokens", f"{mark}{totals.tokens:,} (in {totals.tokens_in:,}, out {totals.tokens_out:,})"),
    ]
    if totals.restoration:  # overhead, counted apart (and in the chain's total)
        facts.append(
            (
                "restoration",
                f"{totals.restoration:,} tokens (the summary brought in and its acknowledgment)",
            )
        )
    if session.unsaved:
        facts.append(("not yet saved", f"{session.unsaved} message(s), written before the next"))
    if status.phase == "closing":
        facts.append(("state", "closing: its summary is being written"))
    if status.prepared:
        made = PREPARED_INFO[status.prepared]
        facts.append(("next compaction", made))
    if meta.parent_id:
        facts.append(("continues", f"{meta.parent_id} ({meta.parent_file})"))
        facts.append(("chain tokens", f"{status.chain_tokens:,} (this session and every ancestor)"))
    width = max(len(k) for k, _ in facts)
    text = "\n".join(f"  {k:<{width}}  {v}" for k, v in facts)
    # the terminal wraps a long line: a path copied from it has no line break in it
    shell.console.print(visible(text), highlight=False, markup=False, soft_wrap=True)


def context(shell: Shell, arg: str) -> None:
    session = shell.session
    plan, count = session.plan(), session.tokens
    rows = [
        (str(m["role"]), count.message(m), str(m.get("content") or m.get("tool_calls") or ""))
        for m in plan.wire
    ]
    mark = "" if plan.exact else "~"
    b = plan.budget
    # What the call sends besides its messages, so that the rows add up to the total.
    fixed = b.system - (
        count.messages(plan.wire[:1]) if plan.wire[:1] and plan.wire[0]["role"] == "system" else 0
    )
    extra = [("(tools)", b.tools, "the tool definitions")] if b.tools else []
    if fixed:
        extra.append(("(template)", fixed, "the chat template's own tokens, once a call"))
    shell.console.print(
        render.context_table(rows, b.window, plan.tokens, mark, extra, shell.console.width)
    )
    how = (
        "counted by the server's tokenizer"
        if plan.exact
        else "~ estimated: about 4 characters a token, corrected by reported usage"
    )
    lines = [
        f"budget: window {b.window:,} − system {mark}{b.system:,} − tools {mark}{b.tools:,} − "
        f"reply reserve {b.reserve:,} = {b.available:,} for messages "
        f"({mark}{plan.messages_tokens:,} used); tokens {how}"
    ]
    if plan.pruned:
        lines.append(
            f"{plan.pruned} older tool results are left out of the call "
            "(they stay in the transcript)"
        )
    if not plan.fits:
        lines.append("the history no longer fits: the next message compacts first")
    render.note(shell.console, "\n".join(lines))


def rename(shell: Shell, arg: str) -> None:
    title = shell.session.rename(arg)
    if len(arg) > MAX_TITLE_CHARS:
        render.note(shell.console, f"Title cut to {MAX_TITLE_CHARS} characters (of {len(arg)}).")
    later = (
        ""
        if shell.session.writer is not None
        else (" (written with your first message: the session begins then)")
    )
    render.note(shell.console, f"Title: {visible(title)}{later}")


def export(shell: Shell, arg: str) -> None:
    """``/export [--format md|html] [FILE]``: this session as markdown (the file as it
    is) or as one HTML page; a FILE ending in ``.html`` (or ``.htm``) is HTML without
    ``--format``. The default FILE is ``./<id>.md`` (``.html``). Never overwrites."""
    from chatloop.store.export import open_new, write_markdown

    writer = shell.session.writer
    if writer is None:
        raise ChatloopError("Nothing to export yet", "Send a message first.")
    fmt, name = export_args(arg)
    target = Path(name or f"{writer.meta.id}.{fmt}").expanduser()
    with open_new(target) as sink:
        if fmt == "html":
            from chatloop.ui.as_html import write_html_files

            for _ in write_html_files([writer.path], sink):
                pass  # (a file this chat writes: nothing in it to note)
        else:
            write_markdown([writer.path], sink)
    render.note(shell.console, f"Exported to {visible(str(target))}")


EXPORT_FORMATS = ("md", "html")


def export_args(arg: str) -> tuple[str, str]:
    """``/export``'s format and file: ``--format F`` (or ``--format=F``) first, else
    the file's suffix (``.html``/``.htm``: HTML), else markdown."""
    words = arg.split(maxsplit=2)
    fmt = ""
    if words and words[0].startswith("--format"):
        flag, _, value = words[0].partition("=")
        if flag != "--format" or (not value and len(words) < 2):
            raise ChatloopError("Usage: /export [--format md|html] [FILE]", "")
        fmt = value or words[1]
        name = " ".join(words[1:] if value else words[2:])
        if fmt not in EXPORT_FORMATS:
            raise ChatloopError(f"No export format {fmt!r}", "Use md or html.")
    else:
        name = arg.strip()
    if not fmt:
        fmt = "html" if name.lower().endswith((".html", ".htm")) else "md"
    return fmt, name


def copy(shell: Shell, arg: str) -> None:
    reply = shell.session.last_reply()
    if reply is None:
        raise ChatloopError("No reply to copy yet", "")
    payload = base64.b64encode(reply.encode()).decode()
    shell.console.file.write(f"\x1b]52;c;{payload}\x07")  # our own sequence; the text is base64
    render.note(
        shell.console,
        "Sent the last reply to your terminal's clipboard (OSC 52). Some terminals drop "
        "it (tmux needs set-clipboard on): if it is not there, `chatloop show` prints it.",
    )


def pin(shell: Shell, arg: str) -> None:
    pins = shell.session.pin(arg)
    render.note(
        shell.console,
        f"Pinned ({len(pins)}): carried word for word into every later session of this chain.",
    )


def pins(shell: Shell, arg: str) -> None:
    pins = shell.session.pins
    if not pins:
        render.note(shell.console, "Nothing pinned. /pin TEXT keeps a fact across compactions.")
    else:
        shell.console.print(
            "\n".join(visible(f"  {i}. {p}") for i, p in enumerate(pins, 1)),
            highlight=False,
            markup=False,
        )
    left = shell.session.ledger_left_out()
    if left:
        render.note(
            shell.console,
            f"Not carried into this session ({len(left)}: its restoration had no room; they "
            "stay in the ledger of the session it continues). /pin TEXT carries one:",
        )
        shell.console.print(
            "\n".join(visible(f"  - {text}") for text in left), highlight=False, markup=False
        )


def unpin(shell: Shell, arg: str) -> None:
    if not arg.strip().isdigit():
        raise ChatloopError("Give the number of the fact to unpin", "/pins lists them.")
    shell.session.unpin(int(arg))
    render.note(shell.console, f"Unpinned fact {int(arg)}.")


def recall(shell: Shell, arg: str) -> None:
    """``/recall WORDS [--all]`` lists the earlier exchanges holding WORDS (this chain's,
    then other sessions' found by the index); ``/recall N [N...]`` picks from that list
    what goes with the next message (``chat.recall.Recall``)."""
    from chatloop.store.index import Index

    words = arg.split()
    everywhere = "--all" in words
    words = [w for w in words if w != "--all"]
    if not words:
        raise ChatloopError(
            "Give the words to look for, or the numbers to bring in",
            "For example: /recall staging proxy, then /recall 1 3",
        )
    recalls = shell.session.recalls
    if all(w.isdigit() for w in words):
        picked = recalls.pick([int(w) for w in words])
        count = len(picked)
        render.note(
            shell.console,
            f"{count} exchange{'s' if count != 1 else ''} will go with your next message "
            "(as recalled context, within an eighth of the window).",
        )
        return
    text = " ".join(words)
    shell.session.follow_chain()
    with Index(shell.session.store) as index:
        index.sync(all_projects=everywhere)
        rows = index.search_sessions(text, all_projects=everywhere, limit=RECALL_FILES)
    shown = recalls.search(text, [Path(row.path) for row in rows])
    if not shown:
        render.note(shell.console, "No earlier exchange holds those words.")
        return
    for number, (_, line) in enumerate(shown, 1):
        shell.console.print(
            f"{number:>3}. {visible(line.removeprefix('- '))}",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )
    render.note(shell.console, "/recall N [N...] brings those in with your next message.")


def norecall(shell: Shell, arg: str) -> None:
    """Send ``arg`` as a message, without recall (``chat.recall``) for it."""
    if not arg.strip():
        raise ChatloopError(
            "Give the message to send without recall",
            "For example: /norecall what did we decide about the proxy?",
        )
    shell.session.send(arg.strip(), recalling=False)


def file(shell: Shell, arg: str) -> None:
    from chatloop.chat.attachments import attachment, with_attachments

    given, _, question = arg.strip().partition(" ")
    if not given:
        raise ChatloopError(
            "Give the file to attach, then your question if any",
            "For example: /file notes/watering-plan.md what is missing here?",
        )
    shell.session.send(with_attachments(question.strip(), [attachment(given)]))
