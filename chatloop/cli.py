"""The ``chatloop`` command: parse arguments, wire the parts, map errors to exit codes.

Exit codes: 0 ok, 1 a user or server error (one clear line and a hint, no
traceback), 2 a usage error. Heavy modules are imported inside the command
that needs them, so ``chatloop --version`` and ``--help`` stay fast.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from chatloop import __version__
from chatloop.errors import ChatloopError

EXAMPLES = """\
examples:
  chatloop sessions             list this project's sessions, 1 = most recent
  chatloop show 1               print the most recent session
  chatloop search "error budget"  find a word in every message
  chatloop reindex              rebuild the session index from the files

Sessions are markdown files under $CHATLOOP_HOME (see `chatloop sessions --all`).
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="chatloop",
        description="A terminal chat loop for local LLM agents, with lossless markdown "
        "transcripts and summary chains.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"chatloop {__version__}")
    parser.add_argument(
        "--sessions-dir", metavar="DIR", help="root directory of sessions (env CHATLOOP_HOME)"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("sessions", help="list sessions, most recent first")
    p.add_argument("--all", action="store_true", help="every project, not only this directory")
    p.add_argument("--limit", type=_positive, metavar="N", help="show at most N sessions")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.set_defaults(run=cmd_sessions)

    p = sub.add_parser("show", help="print one session's transcript")
    p.add_argument("ref", metavar="N|ID", help="session number (1 = most recent) or id")
    p.add_argument("--raw", action="store_true", help="print the markdown file as it is")
    p.set_defaults(run=cmd_show)

    p = sub.add_parser("search", help="full-text search over every message")
    p.add_argument("query", help="words to look for")
    p.add_argument("--all", action="store_true", help="search every project")
    p.add_argument("--limit", type=_positive, default=50, metavar="N", help="at most N hits")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.set_defaults(run=cmd_search)

    p = sub.add_parser("reindex", help="rebuild the session index from the files")
    p.set_defaults(run=cmd_reindex)
    return parser


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be 1 or more")
    return value


def _store(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from chatloop.config import chatloop_home
    from chatloop.store import Store

    root = Path(args.sessions_dir).expanduser() if args.sessions_dir else chatloop_home()
    return Store(root)


def _index(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from chatloop.index import Index

    index = Index(_store(args))
    index.sync(all_projects=True)
    return index


def cmd_sessions(args: argparse.Namespace) -> int:
    from chatloop import listing
    from chatloop.store import local_now

    with _index(args) as index:
        rows = index.list_sessions(all_projects=args.all, limit=args.limit)
    text = (
        listing.sessions_json(rows)
        if args.json
        else listing.sessions_text(rows, local_now(), show_project=args.all)
    )
    print(text)
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from chatloop import listing

    with _index(args) as index:
        row = index.find(args.ref)
        result = index.store.read(Path(row.path))
    if args.raw:
        sys.stdout.write(Path(row.path).read_text(encoding="utf-8", errors="replace"))
    else:
        print(listing.transcript_text(result.session))
    for problem in result.problems:
        if problem.kind not in ("unknown_key", "legacy"):
            print(f"note: {problem}", file=sys.stderr)
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    from chatloop import listing

    with _index(args) as index:
        hits = index.search(args.query, all_projects=args.all, limit=args.limit)
    print(listing.hits_json(hits) if args.json else listing.hits_text(hits))
    return 0


def cmd_reindex(args: argparse.Namespace) -> int:
    from chatloop.index import Index

    def progress(done: int, total: int) -> None:
        if sys.stderr.isatty():
            print(f"\rindexing {done}/{total}", end="", file=sys.stderr, flush=True)

    with Index(_store(args)) as index:
        count = index.rebuild(progress=progress)
    if sys.stderr.isatty():
        print(file=sys.stderr)
    print(f"Indexed {count} session files into {index.path}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    run: Callable[[argparse.Namespace], int] | None = getattr(args, "run", None)
    if run is None:
        parser.print_help()
        return 0
    try:
        return run(args)
    except ChatloopError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        if exc.hint:
            print(f"hint: {exc.hint}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
