"""The commands over this project's past sessions: ``/sessions``, ``/search`` and
``/resume``. The first two read the index; ``/resume`` asks the ``ChatSession``,
which locates the session as every entry point does (``chat.continuation``).
"""

from __future__ import annotations

from chatloop.errors import ChatloopError, NotFound
from chatloop.ui import render
from chatloop.ui.commands.shell import Shell

SEARCH_HITS = 20  # sessions /search lists: a screenful


def resume(shell: Shell, arg: str) -> None:
    try:
        shell.session.resume(arg)
    except NotFound as exc:  # its hints name the shell's commands: here, the chat's
        hint = exc.hint.replace(
            "`chatloop sessions --all`", "/sessions (or `chatloop sessions --all`)"
        ).replace("`chatloop sessions`", "/sessions")
        raise NotFound(exc.message, hint) from exc


def sessions(shell: Shell, arg: str) -> None:
    from chatloop.store.index import Index

    with Index(shell.session.store) as index:
        index.sync(all_projects=False)
        rows = index.list_sessions(limit=20, fold=True)
    if rows:
        shell.console.print(render.sessions_table(rows, shell.now()))
    else:
        render.note(shell.console, "No sessions yet in this directory.")


def search(shell: Shell, arg: str) -> None:
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
