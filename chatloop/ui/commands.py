"""The REPL's command table: each command's name, usage, help and handler in one row.

``/help`` and the prompt's completion are built from ``TABLE``, so a command
cannot exist without its help line. Commands start with ``/``. A few bare
words also work when they are the whole line, because people type them that
way: ``exit``, ``quit``, ``bye``, ``sessions``, ``compact``, ``resume N``. An
unknown ``/x`` is never sent to the model: it becomes ``Unknown`` with the
closest command as a suggestion.

Handlers only ask the ``ChatSession`` and show the answer; they raise
``ChatloopError`` for the REPL's one error boundary to show.
"""

from __future__ import annotations

import base64
import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Protocol

from rich.console import Console

from chatloop.chat.approval import Approvals
from chatloop.chat.session import ChatSession
from chatloop.config import DEFAULT_WINDOW
from chatloop.errors import BackendError, ChatloopError, NotFound
from chatloop.format.front_matter import MAX_TITLE_CHARS
from chatloop.ui import render
from chatloop.ui.terminal_text import visible


class Shell(Protocol):
    """What a handler may use: the session, the screen, the clock, and leaving."""

    session: ChatSession
    console: Console
    approvals: Approvals  # who decides whether a tool acts (chat.approval)
    closers: list[Callable[[], None]]  # run when the chat has ended (MCP servers)

    def now(self) -> datetime: ...

    def leave(self) -> None: ...


Handler = Callable[[Shell, str], None]


@dataclass(frozen=True)
class Spec:
    """One command: how it is typed, what ``/help`` says, and what runs."""

    name: str
    usage: str
    help: str
    run: Handler
    aliases: tuple[str, ...] = ()


# ------------------------------------------------------------------ handlers

USAGE_WIDTH = 18  # the command column of /help


def _help(shell: Shell, arg: str) -> None:
    from rich.table import Table
    from rich.text import Text

    # two columns: on a narrow terminal an explanation wraps in its own column, under
    # itself, never under the command names
    grid = Table.grid(padding=(0, 0, 0, 1))
    grid.add_column(no_wrap=True, min_width=USAGE_WIDTH + 2)
    grid.add_column()
    for spec in TABLE:
        grid.add_row(Text(f"  {spec.usage}"), Text(spec.help))
    shell.console.print(grid)
    keys = Table.grid(padding=(0, 0, 0, 2), pad_edge=True)
    keys.add_column()
    keys.add_row(
        Text("Enter sends · Esc+Enter or a trailing \\ adds a line · Up recalls earlier lines")
    )
    keys.add_row(
        Text("Ctrl-C stops a reply or clears the line · Ctrl-D leaves · // sends a literal /")
    )
    shell.console.print()
    shell.console.print(keys)


def _exit(shell: Shell, arg: str) -> None:
    shell.leave()


def _compact(shell: Shell, arg: str) -> None:
    shell.session.compact(instructions=arg)


def _resume(shell: Shell, arg: str) -> None:
    try:
        shell.session.resume(arg)
    except NotFound as exc:  # its hints name the shell's commands: here, the chat's
        hint = exc.hint.replace(
            "`chatloop sessions --all`", "/sessions (or `chatloop sessions --all`)"
        ).replace("`chatloop sessions`", "/sessions")
        raise NotFound(exc.message, hint) from exc


def _sessions(shell: Shell, arg: str) -> None:
    from chatloop.store.index import Index

    with Index(shell.session.store) as index:
        index.sync(all_projects=False)
        rows = index.list_sessions(limit=20, fold=True)
    if rows:
        shell.console.print(render.sessions_table(rows, shell.now()))
    else:
        render.note(shell.console, "No sessions yet in this directory.")


def _search(shell: Shell, arg: str) -> None:
    from chatloop.store.index import Index
    from chatloop.ui.listing import hit_line

    if not arg.strip():
        raise ChatloopError("Give the words to look for", "For example: /search compost ratio")
    shown = 0
    with Index(shell.session.store) as index:
        index.sync(all_projects=False)
        if pending := index.text_pending():  # (the search waits for them: never silently)
            render.note(
                shell.console, f"Waiting for the words of {pending:,} sessions to be indexed…"
            )
        for hit in index.iter_search(arg, limit=SEARCH_HITS):  # each as soon as it is found
            shell.console.print(hit_line(hit), highlight=False, markup=False, soft_wrap=True)
            shown += 1
    if shown:
        render.note(shell.console, "/resume N or /resume HANDLE continues one of them.")
    else:
        render.note(shell.console, "No session of this project holds every one of those words.")


PREPARED_INFO = {
    "preparing": "its summary is being prepared in the background (a message you send goes first)",
    "ready": "its summary is ready, made while you read (used when the threshold comes)",
}


def _info(shell: Shell, arg: str) -> None:
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


def _context(shell: Shell, arg: str) -> None:
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


def _rename(shell: Shell, arg: str) -> None:
    title = shell.session.rename(arg)
    if len(arg) > MAX_TITLE_CHARS:
        render.note(shell.console, f"Title cut to {MAX_TITLE_CHARS} characters (of {len(arg)}).")
    later = (
        ""
        if shell.session.writer is not None
        else (" (written with your first message: the session begins then)")
    )
    render.note(shell.console, f"Title: {visible(title)}{later}")


def _export(shell: Shell, arg: str) -> None:
    """``/export [--format md|html] [FILE]``: this session as markdown (the file as it
    is) or as one HTML page; a FILE ending in ``.html`` (or ``.htm``) is HTML without
    ``--format``. The default FILE is ``./<id>.md`` (``.html``). Never overwrites."""
    from chatloop.store.export import open_new, write_markdown

    writer = shell.session.writer
    if writer is None:
        raise ChatloopError("Nothing to export yet", "Send a message first.")
    fmt, name = _export_args(arg)
    target = Path(name or f"{writer.meta.id}.{fmt}").expanduser()
    with open_new(target) as sink:
        if fmt == "html":
            from chatloop.ui.as_html import write_html_files

            for _ in write_html_files([writer.path], sink):
                pass  # (a file this chat writes: nothing in it to note)
        else:
            write_markdown([writer.path], sink)
    render.note(shell.console, f"Exported to {visible(str(target))}")


_EXPORT_FORMATS = ("md", "html")


def _export_args(arg: str) -> tuple[str, str]:
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
        if fmt not in _EXPORT_FORMATS:
            raise ChatloopError(f"No export format {fmt!r}", "Use md or html.")
    else:
        name = arg.strip()
    if not fmt:
        fmt = "html" if name.lower().endswith((".html", ".htm")) else "md"
    return fmt, name


def _copy(shell: Shell, arg: str) -> None:
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


def _pin(shell: Shell, arg: str) -> None:
    pins = shell.session.pin(arg)
    render.note(
        shell.console,
        f"Pinned ({len(pins)}): carried word for word into every later session of this chain.",
    )


def _pins(shell: Shell, arg: str) -> None:
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


def _unpin(shell: Shell, arg: str) -> None:
    if not arg.strip().isdigit():
        raise ChatloopError("Give the number of the fact to unpin", "/pins lists them.")
    shell.session.unpin(int(arg))
    render.note(shell.console, f"Unpinned fact {int(arg)}.")


def _fork(shell: Shell, arg: str) -> None:
    arg = arg.strip()
    if arg and not arg.isdigit():
        raise ChatloopError(
            "Give the number of the query to branch after",
            "/fork 3 branches after query 3; /fork alone, after the last.",
        )
    shell.session.fork(int(arg) if arg else None)


def _retry(shell: Shell, arg: str) -> None:
    shell.session.again()


def _file(shell: Shell, arg: str) -> None:
    from chatloop.chat.attachments import attachment, with_attachments

    given, _, question = arg.strip().partition(" ")
    if not given:
        raise ChatloopError(
            "Give the file to attach, then your question if any",
            "For example: /file notes/watering-plan.md what is missing here?",
        )
    shell.session.send(with_attachments(question.strip(), [attachment(given)]))


def _edit(shell: Shell, arg: str) -> None:
    if not arg.strip():
        raise ChatloopError(
            "Give the new text of your last message",
            "For example: /edit And for a north-facing balcony?",
        )
    shell.session.again(arg)


def _new(shell: Shell, arg: str) -> None:
    session = shell.session
    if session.describe().phase == "fresh":
        render.note(shell.console, "This is a new session already: your next message starts it.")
        return
    if session.unsaved:  # they belong to this conversation, not to the next one
        raise ChatloopError(
            f"{session.unsaved} message(s) of this session are not saved yet",
            "They are written as soon as the disk takes them; /new after that.",
        )
    closed = session.close()
    if closed.parent is not None:
        render.note(
            shell.console,
            f"New session: your next message starts it. "
            f"{closed.parent.meta.id} is closed; /resume 1 continues it.",
        )
    else:
        render.note(shell.console, "New session: your next message starts it.")


def _model(shell: Shell, arg: str) -> None:
    session = shell.session
    current = session.backend.model
    if not arg:
        try:
            offered = session.backend.models()
        except BackendError as exc:
            render.note(
                shell.console,
                f"Model: {visible(current)}. The server did not list its "
                f"models ({visible(exc.message)}); /model NAME switches anyway.",
                "yellow",
            )
            return
        lines = [f"{'*' if name == current else ' '} {name}" for name in offered] or [
            f"* {current}"
        ]
        shell.console.print(visible("\n".join(lines)), highlight=False, markup=False)
        render.note(shell.console, "/model NAME switches to another.")
        return
    unchecked = session.use_model(arg)
    render.note(
        shell.console,
        f"Now with the model {visible(arg)}: each reply records the model that gave it.",
    )
    if unchecked:
        render.note(
            shell.console,
            f"Not checked: the server did not list its models "
            f"({visible(unchecked)}); the next reply says whether it has it.",
            "yellow",
        )


def _agent(shell: Shell, arg: str) -> None:
    from chatloop.chat.agent import agent_dirs, agent_names, find_agent_file

    session = shell.session
    dirs = agent_dirs(session.store.cwd, session.arming.home)
    if not arg:
        mine = Path(session.agent.path).stem
        others = [name for name in agent_names(dirs) if name != mine]
        render.note(
            shell.console,
            f"Agent: {visible(session.agent.name)}. Others: "
            f"{', '.join(others) or 'none'}; /agent NAME switches.",
        )
        return
    path = find_agent_file(arg, dirs, names_only=True)
    if path.resolve() == Path(session.agent.path).resolve():
        render.note(shell.console, f"{visible(session.agent.name)} is the agent already.")
        return
    agent = session.arming.arm(path)  # as every entry point arms (chat.arming)
    for said in agent.notes:  # (what its file gives that is not used: as at a start)
        render.note(shell.console, said, "yellow")
    branched = session.use_agent(agent)
    where = (
        " The conversation goes on in a branch of this session, so each file names the "
        "agent that answered in it."
        if branched
        else ""
    )
    render.note(shell.console, f"Now talking with {visible(agent.name)}.{where}")


def _clear(shell: Shell, arg: str) -> None:
    shell.console.clear()


SEARCH_HITS = 20  # sessions /search lists: a screenful

TABLE: tuple[Spec, ...] = (
    Spec("help", "/help", "show the commands and keys", _help),
    Spec(
        "exit",
        "/exit",
        "save, summarize and leave (also /quit, exit, quit, bye, Ctrl-D)",
        _exit,
        ("quit",),
    ),
    Spec(
        "compact",
        "/compact [TEXT]",
        "summarize (TEXT: what to keep), then continue in a new linked session",
        _compact,
    ),
    Spec("resume", "/resume [N|ID]", "continue a past session from its summary", _resume),
    Spec(
        "sessions",
        "/sessions",
        "list this project's sessions (1 = most recent; a chain is one line)",
        _sessions,
    ),
    Spec(
        "search",
        "/search WORDS",
        "find this project's sessions holding every word "
        "(/resume takes the number or handle shown)",
        _search,
    ),
    Spec("info", "/info", "this session: id, file, agent, model, tokens", _info),
    Spec(
        "context", "/context", "exactly what the next call would send, with token counts", _context
    ),
    Spec("rename", "/rename TITLE", "give this session a title", _rename),
    Spec("pin", "/pin TEXT", "keep a fact word for word in every later session", _pin),
    Spec("pins", "/pins", "list the pinned facts (and what the ledger could not carry)", _pins),
    Spec("unpin", "/unpin N", "unpin fact N", _unpin),
    Spec(
        "export",
        "/export [FILE]",
        "write this session as markdown (default: ./<id>.md), or as one HTML page: "
        "a FILE ending .html, or /export --format html [FILE]",
        _export,
    ),
    Spec("copy", "/copy", "copy the last reply to the clipboard (terminal OSC 52)", _copy),
    Spec(
        "fork",
        "/fork [N]",
        "branch after query N (default: the last): this session closes "
        "as it is; a linked new one carries the history up to there",
        _fork,
    ),
    Spec(
        "retry",
        "/retry",
        "ask your last message again, in a branch (/fork) where the model "
        "has not seen its first answer; this session keeps it",
        _retry,
    ),
    Spec(
        "edit",
        "/edit TEXT",
        "send TEXT instead of your last message, in a branch (/fork) after the message before it",
        _edit,
    ),
    Spec(
        "file",
        "/file PATH [TEXT]",
        "send TEXT with the file's text attached (a path without spaces; as -f does)",
        _file,
    ),
    Spec("model", "/model [NAME]", "list the server's models, or switch to NAME", _model),
    Spec(
        "agent",
        "/agent [NAME]",
        "list the agents, or go on with NAME (in a branch of this session, carrying its history)",
        _agent,
    ),
    Spec("new", "/new", "close this session with its summary and start a new one", _new),
    Spec(
        "clear",
        "/clear",
        "clear the screen only (the session goes on; /new starts another)",
        _clear,
    ),
)
_BY_NAME = {name: spec for spec in TABLE for name in (spec.name, *spec.aliases)}
_BARE = {
    "exit": "exit",
    "quit": "exit",
    "bye": "exit",
    "sessions": "sessions",
    "compact": "compact",
}
_BARE_RESUME = re.compile(r"^resume(?:\s+(\S+))?$", re.IGNORECASE)


# ------------------------------------------------------------------ parsing


@dataclass(frozen=True)
class Command:
    spec: Spec
    arg: str = ""

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass(frozen=True)
class Unknown:
    typed: str
    suggestion: str | None


@dataclass(frozen=True)
class Text:
    """A message for the model."""

    text: str


Parsed = Command | Unknown | Text


def spec(name: str) -> Spec:
    """The row of command ``name`` (or one of its aliases)."""
    return _BY_NAME[name]


def parse(line: str) -> Parsed:
    """Classify one submitted line (which may span several lines)."""
    stripped = line.strip()
    if stripped.startswith("/") and not stripped.startswith("//"):
        word, _, arg = stripped[1:].partition(" ")
        found = _BY_NAME.get(word.lower())
        if found is None:
            close = difflib.get_close_matches(word.lower(), list(_BY_NAME), n=1, cutoff=0.5)
            return Unknown(word, f"/{close[0]}" if close else None)
        return Command(found, arg.strip())
    lowered = stripped.lower()
    if lowered in _BARE:
        return Command(_BY_NAME[_BARE[lowered]])
    match = _BARE_RESUME.match(stripped)
    if match and (
        match.group(1) is None or re.fullmatch(r"\d+|\d{8}-\d{6}-[0-9a-f]{8}", match.group(1))
    ):
        return Command(_BY_NAME["resume"], match.group(1) or "")
    return Text(line[1:] if stripped.startswith("//") else line)


def completions() -> list[str]:
    """Words the prompt offers to complete: every command and alias."""
    return [f"/{name}" for name in _BY_NAME]
