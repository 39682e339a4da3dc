"""The commands that read sessions: ``sessions``, ``show``, ``search``, ``tree``,
``export``. Each asks the index and the store, and prints what ``chatloop.ui``
makes of the answer.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from chatloop.cli import wiring
from chatloop.errors import ChatloopError, UsageError

if TYPE_CHECKING:
    from chatloop.format import Problem
    from chatloop.store.rows import SessionRow
    from chatloop.ui.terminal_text import VisibleBytes


def cmd_sessions(args: argparse.Namespace) -> int:
    from chatloop.store.fsio import local_now
    from chatloop.ui import listing

    with wiring.index(args) as index:
        rows, total = index.listing(args.all, args.limit, not args.expand, count=True)
    if args.json:
        from chatloop.ui import as_json

        print(as_json.sessions_json(rows))
        return 0
    print(listing.sessions_text(rows, local_now(), show_project=args.all, columns=wiring.columns()))
    if total > len(rows):
        print(f"… {total - len(rows):,} older; `--limit {total}` lists them all")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    """Print a session, streaming: memory is bounded by the largest message, whatever
    the file's size."""
    import shutil
    from dataclasses import replace

    from chatloop.format import open_document
    from chatloop.store.fsio import open_read
    from chatloop.ui import listing

    with wiring.index(args) as index:
        row = index.find(args.ref)
    path = Path(row.path)
    with open_read(path) as handle:
        if args.raw:  # the bytes as they are, made visible on a terminal
            with _stdout_bytes() as out:
                shutil.copyfileobj(handle, out, 1 << 20)
            return 0
        doc = open_document(handle, path.stem)
        heading = listing.describe(row) if row.title or row.preview else ""  # as listed
        damage = ("damaged", "torn_tail")  # (a checksum problem keeps the frame's bounds)

        def doubt() -> bool:
            return any(p.kind in damage for p in doc.problems)

        # the status as listed (a session whose chat ended is "summarizing" while a
        # worker writes its summary, "interrupted" when its writer died)
        meta = replace(doc.meta, status=row.status)
        lines = listing.transcript_lines(meta, doc.views(), heading, row.forked_at, doubt)
        _write_batched(lines)
    shown = worth_noting(doc.problems)
    for problem in shown:
        print(f"note: {problem}", file=sys.stderr)
    if any(p.kind in ("checksum", "decoration") for p in shown) and not doc.legacy:
        print(
            f"hint: edited by hand on purpose? `chatloop reseal {row.handle or row.id}` "
            "accepts the edits (the original is kept).",
            file=sys.stderr,
        )
    return 0


def _write_batched(chunks: Iterable[str]) -> None:
    """``chunks`` as lines on stdout, written 64 kB at a time (a bigger one at once);
    what was read is shown when reading stops with an error."""
    write = sys.stdout.write
    batch: list[str] = []
    size = 0

    def flush() -> None:
        piece = "\n".join(batch) + "\n"
        batch.clear()  # (first: a write that fails is not tried again)
        write(piece)

    try:
        for chunk in chunks:
            batch.append(chunk)
            size += len(chunk)
            if size >= 1 << 16:
                flush()
                size = 0
    finally:
        if batch:
            flush()
    sys.stdout.flush()


def worth_noting(problems: Iterable[Problem]) -> list[Problem]:
    """The problems of a file read that a person is told of (``show``, ``export``): not
    keys a newer chatloop wrote, nor a file being of the legacy format."""
    return [p for p in problems if p.kind not in ("unknown_key", "legacy")]


def cmd_search(args: argparse.Namespace) -> int:
    from chatloop.store.index import Index
    from chatloop.ui import listing

    if args.search_recall:
        return _search_and_recall(args)
    if args.search_resume or args.search_fork:
        return _search_and_resume(args)
    query = " ".join(args.query)
    with wiring.index(args, words=True) as index:
        rows = index.search_sessions(query, all_projects=args.all, limit=args.limit)
        total = len(rows)
        if total >= args.limit and not args.json:
            total = index.search_count(query, all_projects=args.all)
    hits = Index.hits(rows, query)  # snippets read from the files as they are printed
    if args.json:
        from chatloop.ui import as_json

        print(as_json.hits_json(list(hits)))
        return 0
    shown, columns = 0, wiring.columns()
    for hit in hits:  # each as soon as it is found
        print(listing.hit_line(hit, show_project=args.all, columns=columns), flush=True)
        shown += 1
    if not shown:
        print(listing.hits_text([]))
    elif total > len(rows):
        more = total - len(rows)
        said = "1 more session matches" if more == 1 else f"{more:,} more sessions match"
        print(f"… {said}; `--limit {total}` lists them all")
    return 0


def _search_and_recall(args: argparse.Namespace) -> int:
    """``search WORDS --recall``: a new chat that begins with ``/recall WORDS`` (this
    project's exchanges holding them, ``--all``: every project's), to pick from."""
    from chatloop.chat.continuation import Kind
    from chatloop.cli.chat import chat

    if args.json or args.search_resume or args.search_fork:
        raise UsageError("--recall starts a new chat: it takes no --json, --resume or --fork", "")
    if not sys.stdin.isatty():
        raise UsageError(
            "search --recall lists the exchanges in a chat, which needs a terminal",
            "`chatloop search WORDS` lists the sessions that hold them.",
        )
    opening = f"/recall {' '.join(args.query)}{' --all' if args.all else ''}"
    return chat(args, None, Kind.SUMMARY, opening=(opening,))


def _search_and_resume(args: argparse.Namespace) -> int:
    """``search WORDS --resume``: continue (or fork) the session that matched, after
    the person picks one when several did; the continuation is ``-r``'s."""
    from datetime import datetime

    from chatloop.chat.continuation import Kind
    from chatloop.chat.lookup import IndexLookup
    from chatloop.cli.chat import chat
    from chatloop.ui.picker import pick

    if args.json:
        raise UsageError("--json lists hits; --resume continues one: choose one of them", "")
    if not sys.stdin.isatty():
        raise UsageError(
            "search --resume continues the session in the chat, which needs a terminal",
            'To ask it once from a script: chatloop -r HANDLE "…"',
        )
    query = " ".join(args.query)
    with wiring.index(args, words=True) as index:
        rows = [
            r
            for r in index.search_sessions(query, all_projects=args.all, limit=args.limit)
            if not r.live
        ]
        if not rows:
            raise ChatloopError(
                f"No finished session holds {query!r}",
                "`chatloop sessions` lists them; fewer words find more.",
            )
        if len(rows) == 1:
            row, fork = rows[0], bool(args.search_fork)
            from chatloop.ui.listing import describe

            wiring.say([f"one session holds it: {row.handle or row.id}  {describe(row)[:60]}"])
        else:
            lookup = IndexLookup(index, index.store, args.limit, all_projects=args.all)
            picked = pick(rows, datetime.now().astimezone(), lookup)
            if picked is None:
                print("Nothing resumed.", file=sys.stderr)
                return 0
            row, fork = picked.row, picked.fork or bool(args.search_fork)
    return chat(args, row, Kind.of(fork=fork))  # (a subcommand's line holds no question)


def cmd_tree(args: argparse.Namespace) -> int:
    from chatloop.ui import listing

    with wiring.index(args) as index:
        row = index.find(args.ref)
        chain, children = index.lineage(row)
    print(listing.tree_text(chain[0], children, row.id))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """Write a session (or its chain) as markdown (the files as they are), JSON or
    one HTML page (with ``--chain``, the lineage drawn above the files), streaming to
    stdout (``-o -`` too) or to a new file that is never overwritten
    (``chatloop.store.export``, which ``/export`` uses too). JSON and HTML are read
    from the files: what ``show`` would note of them is noted on stderr."""
    from chatloop.store.export import open_new, write_markdown
    from chatloop.ui.terminal_text import visible

    with wiring.index(args) as index:
        row = index.find(args.ref)
        rows, children = index.lineage(row) if args.chain else ([row], {})
    paths = [Path(r.path) for r in rows]
    output = None if args.output in (None, "", "-") else Path(args.output)
    if args.format in ("json", "html"):  # (both escape every control character themselves)
        sink = open_new(output) if output else sys.stdout.buffer
        try:
            notes = (
                _write_json(paths, sink)
                if args.format == "json"
                else _write_html(paths, sink, rows, children if args.chain else None)
            )
            for note in notes:
                print(visible(f"note: {note}"), file=sys.stderr)
        finally:
            if output:
                sink.close()
    elif output:
        with open_new(output) as sink:
            write_markdown(paths, sink)  # byte for byte
    else:
        with _stdout_bytes() as out:
            write_markdown(paths, out)
    if output:
        print(f"Wrote {len(paths)} session(s) to {output}", file=sys.stderr)
    return 0


@contextmanager
def _stdout_bytes() -> Iterator[BinaryIO | VisibleBytes]:
    """Where a file's bytes are copied to stdout: as they are to a file or a pipe (byte
    for byte), made visible to a terminal (no control sequence in them acts)."""
    from chatloop.ui.terminal_text import VisibleBytes

    out = sys.stdout.buffer
    if not sys.stdout.isatty():
        yield out
        return
    shown = VisibleBytes(out)
    try:
        yield shown
    finally:
        shown.close()


def _write_html(
    paths: list[Path],
    sink: BinaryIO,
    rows: list[SessionRow],
    children: dict[str, list[SessionRow]] | None,
) -> Iterator[str]:
    """The sessions at ``paths`` (``rows``: theirs) as one HTML page on ``sink``; with
    ``children`` (a chain's), the lineage drawn above them. Then, for each, what
    ``show`` would note of it."""
    from chatloop.ui import as_html

    lineage = None
    if children is not None:
        shown = frozenset(r.id for r in rows)
        lineage = as_html.Lineage(rows[0], children, rows[-1].id, shown)
    for session_id, problem in as_html.write_html_files(paths, sink, lineage):
        if worth_noting([problem]):
            yield f"{session_id}: {problem}"


def _write_json(paths: list[Path], sink: BinaryIO) -> Iterator[str]:
    """The sessions at ``paths`` as one JSON document on ``sink`` (bytes), read as they
    are written; then, for each, what ``show`` would note of it."""
    from chatloop.store.export import write_documents
    from chatloop.ui import as_json

    for doc in write_documents(paths, sink, as_json.write_sessions_json):
        for problem in worth_noting(doc.problems):
            yield f"{doc.meta.id}: {problem}"
