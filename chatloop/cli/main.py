"""``chatloop``'s entry point: read the command line, run one command, turn its
``ChatloopError`` into ``error:``/``hint:`` lines and an exit code.

Exit codes: 0 ok, 1 a user or server error (one clear line and a hint, no
traceback), 2 a usage error. Heavy modules are imported inside the command
that needs them, so ``chatloop --help`` and a listing stay quick.
"""

from __future__ import annotations

import argparse
import io
import sys
from collections.abc import Callable, Sequence

from chatloop.cli.parser import parse, split_prompt
from chatloop.errors import ChatloopError, UsageError

Run = Callable[[argparse.Namespace], int]


def _commands() -> dict[str | None, Run]:
    """Each subcommand's function (None: the chat), imported when asked for."""
    from chatloop.cli import chat, listing, maintenance

    return {
        None: chat.cmd_chat,
        "sessions": listing.cmd_sessions,
        "show": listing.cmd_show,
        "search": listing.cmd_search,
        "tree": listing.cmd_tree,
        "export": listing.cmd_export,
        "reseal": maintenance.cmd_reseal,
        "import": maintenance.cmd_import,
        "reindex": maintenance.cmd_reindex,
        "doctor": maintenance.cmd_doctor,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the exit code."""
    for stream in (sys.stdout, sys.stderr):  # an ASCII terminal shows \u escapes, not a crash
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")
    from chatloop.ui.streams import Notices

    stderr = sys.stderr
    sys.stderr = Notices(stderr)
    try:
        return _run(list(sys.argv[1:] if argv is None else argv))
    finally:
        sys.stderr = stderr


def _run(argv: list[str]) -> int:
    """Parse ``argv`` and run its command inside the one error boundary of the CLI."""
    try:
        args = parse(*split_prompt(argv))
    except ChatloopError as exc:
        print(f"error: {exc.message}\nhint: {exc.hint}", file=sys.stderr)
        return exc.exit_code
    try:
        if "ref" in args and args.ref is None:
            raise UsageError(
                f"chatloop {args.command} needs a session: its number or id",
                f"`chatloop sessions` lists them, numbered; e.g. `chatloop "
                f"{args.command} 1` for the most recent.",
            )
        return _commands()[args.command](args)
    except ChatloopError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        if exc.hint:
            print(f"hint: {exc.hint}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader left (`chatloop show 1 | head`): stop quietly
        from chatloop.ui.streams import write_nowhere

        write_nowhere(sys.stdout)
        return 0
    except OSError as exc:  # the home itself is unusable: a file, unreadable, a full disk
        where = f": {exc.filename}" if exc.filename else ""
        print(f"error: {exc.strerror or exc}{where}", file=sys.stderr)
        print(
            "hint: check that the sessions directory (CHATLOOP_HOME or --sessions-dir) is a "
            "directory you can read and write.",
            file=sys.stderr,
        )
        return 1
