"""The commands after which the chat goes on in another session, or another way:
``/compact``, ``/fork``, ``/retry``, ``/edit``, ``/new``, ``/model`` and ``/agent``.

Each handler asks the ``ChatSession`` (which decides whether a branch or a child
is made) and shows the answer; it raises ``ChatloopError`` for the REPL's one error
boundary to show.
"""

from __future__ import annotations

from pathlib import Path

from chatloop.errors import BackendError, ChatloopError
from chatloop.ui import render
from chatloop.ui.commands.shell import Shell
from chatloop.ui.terminal_text import visible


def compact(shell: Shell, arg: str) -> None:
    shell.session.compact(instructions=arg)


def fork(shell: Shell, arg: str) -> None:
    arg = arg.strip()
    if arg and not arg.isdigit():
        raise ChatloopError(
            "Give the number of the query to branch after",
            "/fork 3 branches after query 3; /fork alone, after the last.",
        )
    shell.session.fork(int(arg) if arg else None)


def retry(shell: Shell, arg: str) -> None:
    shell.session.again()


def edit(shell: Shell, arg: str) -> None:
    if not arg.strip():
        raise ChatloopError(
            "Give the new text of your last message",
            "For example: /edit And for a north-facing balcony?",
        )
    shell.session.again(arg)


def new(shell: Shell, arg: str) -> None:
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


def model(shell: Shell, arg: str) -> None:
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


def agent(shell: Shell, arg: str) -> None:
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
