"""``chatloop`` with no subcommand: a new chat, a continued one, or a one-shot question.

What to continue, with which agent and which server, is decided by
``chatloop.chat.continuation`` and ``chatloop.chat.server`` (the same rules
``/resume`` uses in a chat); this module reads the command line and the
piped input, and hands over to the REPL or the one-shot runner.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from chatloop.cli import wiring
from chatloop.errors import Unapproved, UsageError

if TYPE_CHECKING:
    from pathlib import Path

    from chatloop.chat import continuation
    from chatloop.chat.arming import Arming
    from chatloop.chat.continuation import Kind, Pick
    from chatloop.chat.host import Lookup, Picked
    from chatloop.config import Settings
    from chatloop.store.rows import SessionRow
    from chatloop.store.store import Store
    from chatloop.ui.repl import Repl
    from chatloop.ui.start import Prompt


def cmd_chat(args: argparse.Namespace) -> int:
    """The interactive REPL, or a one-shot answer; a continuation first when asked.
    A new chat in a terminal draws its prompt before the chat package loads."""
    if (args.full or args.fork) and not (args.continue_ or args.resume is not None):
        flag = "--full" if args.full else "--fork"
        raise UsageError(f"{flag} goes with --resume or --continue", f"e.g. chatloop -r 2 {flag}")
    terminal = sys.stdin.isatty() and sys.stdout.isatty()
    if getattr(args, "files", None) and not args.question and terminal:
        raise _files_need_a_question()  # (from a pipe, the piped text may be the question)
    if not (args.continue_ or args.resume is not None or args.question) and terminal:
        return _chat_new(args)  # (with a terminal, nothing is piped in)
    from chatloop.chat import sharing
    from chatloop.chat.continuation import Kind

    sharing.arrive(wiring.home())  # this home's background work yields while the chat loads

    kind = Kind.of(args.full, args.fork)
    if args.continue_:
        return chat(args, "1", kind, latest=True)
    if args.resume == "" and not args.question and terminal:
        return pick_and_chat(args, kind)
    return chat(args, args.resume or None, kind)


def pick_and_chat(args: argparse.Namespace, kind: Kind) -> int:
    """``chatloop --resume`` alone: the person picks a session of this project (the
    picker, searching the index as they type) before anything else is loaded."""
    from chatloop.chat import continuation

    picked = continuation.choose(wiring.store(args), _picker())
    if picked is None:
        print("Nothing resumed.", file=sys.stderr)
        return 0
    return chat(args, picked.row, continuation.Kind.FORK if picked.fork else kind)


def _picker() -> Pick:
    """The terminal's session picker, as ``continuation.choose`` calls it."""
    from datetime import datetime

    from chatloop.ui.picker import pick

    def choose(rows: list[SessionRow], lookup: Lookup) -> Picked | None:
        return pick(rows, datetime.now().astimezone(), lookup)

    return choose


def chat(
    args: argparse.Namespace,
    ref: str | SessionRow | None,
    kind: Kind,
    latest: bool = False,
    opening: Sequence[str] = (),
) -> int:
    """Continue ``ref`` (None: a new session) in the REPL, or answer a one-shot question
    there. The session is found before anything slow (a wrong ref fails first), then
    its agent and server are chosen by the rules every resume uses. ``opening``: lines
    the chat acts on first, as if typed (``search --recall``'s ``/recall WORDS``)."""
    from chatloop.chat import continuation, server
    from chatloop.chat.agent import agent_dirs, find_agent_file
    from chatloop.chat.arming import with_model

    settings = wiring.settings(args)
    store = wiring.store(args, settings)
    located = None if ref is None else continuation.locate(store, ref, latest=latest)
    system = _system(args, located)
    home = wiring.home()
    dirs = agent_dirs(store.cwd, home)
    agent_file = find_agent_file(settings.agent, dirs)
    # a question about an agent file only in a chat on a terminal; a one-shot refuses
    one_shot = bool(args.question) or not (sys.stdin.isatty() and sys.stdout.isatty())
    arming = wiring.arming(args, settings, ask=None if one_shot else _confirm)
    # the agent that goes on is chosen first, by path: only that file is loaded (and
    # asked about), never a configured one the continuation does not use

    def choose(name: str) -> continuation.AgentChoice:
        assert located is not None
        named = args.agent is not None
        return continuation.agent_for(
            located, current=agent_file, current_name=name, named=named, dirs=dirs
        )

    choice = None if located is None else choose(agent_file.stem)
    try:
        agent = arming.arm(agent_file if choice is None else choice.path, system)
        wiring.say(list(agent.notes))  # (a markdown agent's keys chatloop does not use)
        settings = with_model(settings, agent)
        if choice is not None:
            if choice.path == agent_file and choice.note:
                choice = choose(agent.name)  # the note names it as it calls itself
            wiring.say([choice.note] if choice.note else [])
        question = _question(args)  # after the session and agent: a wrong ref fails first
        held = server.Held.of(located.parent.meta if located else None)
        connected = server.connect(settings, held, home)
        wiring.say(connected.notes)
        backend = connected.backend
        try:
            if question is not None:
                from chatloop.ui.oneshot import answer_once

                return answer_once(
                    agent,
                    backend,
                    store,
                    settings,
                    question,
                    located,
                    kind,
                    agent_named=args.agent is not None,
                    arming=arming,
                )
            from chatloop.ui.repl import Repl

            repl = Repl(
                agent, backend, store, settings, agent_named=args.agent is not None, arming=arming
            )
            return repl.run(resume=located, kind=kind, opening=opening)
        finally:
            backend.close()
    finally:
        arming.close()


SYSTEM_MAX_CHARS = 16_000  # a -s prompt, kept in the front matter (64 KiB with the pins)


def _files_need_a_question() -> UsageError:
    """The error of ``-f`` without a question (a chat's first message is typed)."""
    return UsageError(
        "-f attaches a file to a question: give the question too",
        'chatloop -f notes.md "summarize this"; in the chat, /file PATH [QUESTION].',
    )


def _system(args: argparse.Namespace, located: continuation.Located | None) -> str | None:
    """The system prompt ``-s`` gave, if any (recorded in the session's front matter as
    ``system``); a continued session that had one of its own and is not given one now
    goes on with the agent's, and a line says so."""
    if args.system is not None:
        if len(args.system) > SYSTEM_MAX_CHARS:
            raise UsageError(
                f"-s gives a system prompt of {len(args.system):,} characters; at most "
                f"{SYSTEM_MAX_CHARS:,} fit in a session's front matter",
                "For a longer one, write an agent file (agents/NAME.py, SYSTEM_PROMPT).",
            )
        return str(args.system)
    if located is not None and located.parent.meta.system is not None:
        wiring.say(
            [
                f"session {located.parent.meta.id} had a system prompt of its own (-s); "
                "continuing with its agent's (-s TEXT gives one again)."
            ]
        )
    return None


def _question(args: argparse.Namespace) -> str | None:
    """The one-shot question: the words on the command line, then what is piped in
    (``git diff | chatloop "review this"``); None for the interactive chat."""
    piped = ""
    if args.resume == "" and not args.question and not sys.stdin.isatty():
        raise UsageError(
            "--resume without a session picks one from a list, which needs a terminal",
            'Name it: chatloop -r 3 "…", or continue the last: chatloop -c "…"',
        )
    files = getattr(args, "files", None) or []
    if not sys.stdin.isatty():
        try:
            piped = _read_piped()
        except (OSError, ValueError):
            piped = ""
    if not args.question and not piped.strip():
        if files:
            raise _files_need_a_question()
        if not sys.stdin.isatty():
            raise UsageError(
                "Nothing to send: the piped input is empty",
                'Pipe some text in, or ask on the command line: chatloop "…"',
            )
        return None
    if args.resume == "":
        raise UsageError(
            "A one-shot question cannot pick a session from a list",
            'Name it: chatloop -r 3 "…", or continue the last: chatloop -c "…"',
        )
    from chatloop.chat.attachments import attachment, with_attachments

    said = "\n\n".join(part for part in (_words(args.question or ""), piped.strip()) if part)
    return with_attachments(said, [attachment(given) for given in files])


def _read_piped() -> str:
    """What is piped in, decoded as the locale's encoding allows: the bytes it cannot
    decode are kept as ``\\xNN`` escapes (stored and shown so, never lost), where
    Python's stream would hold them as surrogates no file can be written with. At
    most ``config.MAX_PIPED_BYTES`` are taken: one more is read to know there is
    more, never the rest, and more is a UsageError that names the bound (nothing is
    saved, no server is asked)."""
    from chatloop.config import MAX_PIPED_BYTES as limit

    stdin = sys.stdin
    raw = getattr(stdin, "buffer", None)
    if raw is None:  # a text-only stream (no bytes under it): its surrogates as escapes
        text = stdin.read(limit + 1)
        data = text.encode("utf-8", "backslashreplace")
        if len(text) > limit or len(data) > limit:
            raise _too_much_piped(limit)
        return data.decode("utf-8")
    data = raw.read(limit + 1)
    if len(data) > limit:
        raise _too_much_piped(limit)
    return _escaped(data, stdin.encoding or "utf-8")


def _too_much_piped(limit: int) -> UsageError:
    return UsageError(
        f"Not sent: the piped input is larger than {limit >> 20} MiB ({limit:,} bytes), "
        "the most a question takes",
        "Pipe a part of it (split -b, head -c), or bring a session file in with "
        "`chatloop import PATH`.",
    )


def _words(question: str) -> str:
    """The question's words with the bytes of the command line the file system's
    encoding could not decode (held as surrogates) as ``\\xNN`` escapes."""
    try:
        data = os.fsencode(question)
    except UnicodeError:  # surrogates that stand for no byte
        return question.encode("utf-8", "backslashreplace").decode("utf-8")
    return _escaped(data, sys.getfilesystemencoding())


def _escaped(data: bytes, encoding: str) -> str:
    try:
        return data.decode(encoding, "backslashreplace")
    except LookupError:  # an encoding Python does not know: UTF-8, as chatloop writes
        return data.decode("utf-8", "backslashreplace")


def _chat_new(args: argparse.Namespace) -> int:
    """A new interactive chat, its prompt drawn first: the agent, the backend (and its
    check of the server) and the chat load behind it (``chatloop.ui.start``)."""
    from chatloop.ui.start import start_new_chat

    settings = wiring.settings(args)
    store = wiring.store(args, settings)
    system = _system(args, None)
    # made by the first load, behind the prompt (its modules are the chat's), and kept
    # for the second: the person's answers to its questions hold for the whole run
    armings: list[Arming] = []

    def load(prompt: Prompt) -> Repl:
        from chatloop.chat import sharing

        # (behind the prompt, drawn first) this home's background work yields from now
        sharing.arrive(wiring.home())
        from chatloop.chat import server
        from chatloop.chat.arming import with_model
        from chatloop.ui.repl import Repl

        if not armings:
            # no question from the loading thread: an agent file or servers that need
            # the person's yes end the prompt, and the question is asked below
            armings.append(wiring.arming(args, settings, ask=None, later=True))
        arming = armings[0]
        said: list[str] = []  # said with the banner, above the prompt
        arming.say = arming.approvals.say = said.append
        agent = arming.arm(_agent_file(settings, store), system)
        said[:0] = agent.notes
        chosen = with_model(settings, agent)
        try:
            connected = server.connect(chosen, home=arming.home)
            said.extend(connected.notes)  # (a model the server does not list; a busy server)
            backend = connected.backend
            try:
                repl = Repl(
                    agent,
                    backend,
                    store,
                    chosen,
                    prompt=prompt,
                    agent_named=args.agent is not None,
                    arming=arming,
                )
            except BaseException:
                backend.close()
                raise
        except BaseException:
            arming.close()
            raise
        repl.notes.extend(said)
        repl.busy = connected.busy
        return repl

    try:
        return start_new_chat(store, load)
    except Unapproved as refused:
        typed, sent = refused.typed, refused.sent
    # the agent file or the config's MCP servers need the person's yes: asked on the
    # terminal, then the chat starts anew (the prompt was on the screen for the moment
    # the check took), with what was typed at it meanwhile
    armings[0].ask_first(_agent_file(settings, store), _confirm)
    return start_new_chat(store, load, carried=typed, sent=sent)


def _agent_file(settings: Settings, store: Store) -> Path:
    """The agent file a new chat starts with: the setting's name (or path) looked up in
    the project's, the person's and the bundled agent folders."""
    from chatloop.chat.agent import agent_dirs, find_agent_file

    return find_agent_file(settings.agent, agent_dirs(store.cwd, wiring.home()))


def _confirm(question: str, default: bool) -> bool:
    """A yes/no question on the terminal before the chat has started."""
    from chatloop.ui.start import confirm

    return confirm(question, default)
