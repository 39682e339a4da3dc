"""The commands that look after the home: ``import``, ``reseal``, ``reindex`` and
``doctor``. Each calls one library function and prints its report.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from chatloop.cli import wiring
from chatloop.errors import ChatloopError, NotFound, UsageError


def cmd_doctor(args: argparse.Namespace) -> int:
    """Report what works and what does not, one line each; exit 1 if anything fails."""
    from chatloop.chat.doctor import checks, config_looked
    from chatloop.ui.terminal_text import visible

    said: list[str] = []
    settings = wiring.settings(args, said)
    config, looked = config_looked(args.config)
    failed = 0
    for check in checks(settings, wiring.store(args, settings), config, said, looked):
        failed += check.verdict == "FAIL"
        print(visible(f"{check.verdict:<4}  {check.text}"))  # (names from servers, files)
        if check.hint:
            print(visible(f"      {check.hint}"))
    return 1 if failed else 0


def cmd_import(args: argparse.Namespace) -> int:
    """Copy sessions from files or folders into a project; report each file."""
    from chatloop.store.importer import NO_SUCH_PATH, import_sessions
    from chatloop.store.store import Store
    from chatloop.ui.terminal_text import visible

    store = wiring.store(args)
    if args.project:
        project = Path(args.project).expanduser()
        if not project.is_dir():
            raise UsageError(
                f"{args.project} is not a directory",
                "--project names the directory the sessions belong to.",
            )
        store = Store(store.root, cwd=project.resolve())
    # a file of another home goes into its own project, unless --project names one
    outcomes = import_sessions(
        store, [Path(p).expanduser() for p in args.paths], keep_projects=not args.project
    )
    # a path that does not exist is said once, as the error below, not as a skip too
    missing = [str(o.source) for o in outcomes if o.reason == NO_SUCH_PATH]
    outcomes = [o for o in outcomes if o.reason != NO_SUCH_PATH]
    counts = {
        status: sum(o.status == status for o in outcomes)
        for status in ("imported", "repaired", "present", "skipped")
    }
    for outcome in outcomes:
        if outcome.status == "skipped":
            print(visible(f"skipped  {outcome.source}: {outcome.reason}"))
        elif outcome.status == "imported":
            print(visible(f"imported {outcome.source} → {outcome.session_id}"))
        elif outcome.status == "repaired":  # a truncated copy a killed import left
            print(visible(f"repaired {outcome.source} → {outcome.session_id} (was cut short)"))
    if not outcomes and not missing:
        print("No files found to import.")
    elif not outcomes:
        pass  # only paths that do not exist: the error says so
    elif not counts["imported"]:
        repaired = f"{counts['repaired']} repaired, " if counts["repaired"] else ""
        print(
            f"Nothing new to import ({repaired}{counts['present']} already here, "
            f"{counts['skipped']} skipped)."
        )
    else:
        into = sorted({o.project for o in outcomes if o.status == "imported"})
        where = (
            f"into {store.project_dir}"
            if into == [store.project]
            else f"into {len(into)} project{'s' if len(into) > 1 else ''} under "
            f"{store.root / 'projects'} ({', '.join(into)})"
        )
        more = "" if into == [store.project] else " --all"
        repaired = f"{counts['repaired']} repaired, " if counts["repaired"] else ""
        print(
            visible(
                f"Imported {counts['imported']} session(s) {where} ({repaired}{counts['present']} "
                f"already here, {counts['skipped']} skipped). `chatloop sessions{more}` "
                "lists them."
            )
        )
    if missing:  # as cp does: the rest is imported, and the exit says a path was wrong
        done = " (what the other paths held was imported)" if counts["imported"] else ""
        raise NotFound(
            visible(f"No such file or folder: {', '.join(missing)}"), f"Check the path{done}."
        )
    return 0


def cmd_reseal(args: argparse.Namespace) -> int:
    """Accept hand edits; exit 1 when some of the file is too damaged to read, or its
    front matter has problems (those are left as they are, each named, and ``show``
    still notes them)."""
    from chatloop.format import HEAD_DAMAGE
    from chatloop.ui.terminal_text import visible

    with wiring.index(args) as index:
        row = index.find(args.ref)
        changed, kept, left = index.store.reseal(Path(row.path))
    if kept is None and not left:
        print(f"Nothing to reseal: every frame of {row.id} checks out.")
        return 0
    if kept is not None:
        print(
            f"Resealed {row.id}: {changed} frame(s) given new checksums; the file as it "
            f"was is kept as {kept}"
        )
    if not left:
        return 0
    for problem in left:
        print(visible(f"note: {problem}"), file=sys.stderr)
    raw = f"`chatloop show {row.handle or row.id} --raw` shows the file"
    frames = [p for p in left if p.kind not in HEAD_DAMAGE]
    if frames:
        print(
            f"error: {len(frames)} part(s) of {row.id} cannot be read, so they are left as "
            f"they are (offsets in the file as it was)\nhint: mend them by hand ({raw}), "
            "then reseal again; everything else reads as it is.",
            file=sys.stderr,
        )
    if len(frames) < len(left):
        print(
            f"error: the front matter of {row.id} has problems that reseal cannot mend\n"
            f"hint: edit those lines by hand ({raw}; docs/format.md lists each key), "
            "then run `chatloop show` again: it is quiet when they read.",
            file=sys.stderr,
        )
    return 1


def cmd_reindex(args: argparse.Namespace) -> int:
    from chatloop.store.index import Index

    with Index(wiring.store(args)) as index:
        count = index.rebuild(progress=wiring.progress_bar(at_least=1))
    if index.in_memory:
        raise ChatloopError(
            f"Read {count:,} session files, but cannot write the index {index.path}",
            "Check that you may write it (its permissions, a read-only mount); meanwhile every "
            "command reads the session files directly.",
        )
    print(f"Indexed {count:,} session files into {index.path}")
    return 0
