"""The ``chatloop`` command: parse arguments, wire the parts, map errors to exit codes.

Exit codes: 0 ok, 1 a user or server error (one clear line and a hint, no
traceback), 2 a usage error. Heavy modules are imported inside the command
that needs them, so ``chatloop --version`` and ``--help`` stay fast.
"""

from __future__ import annotations

import argparse
import io
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, TypeVar

from chatloop import __version__
from chatloop.errors import BackendError, ChatloopError, NotFound, Unreachable, UsageError

if TYPE_CHECKING:  # the settings and backend modules load only when a command needs them
    from chatloop.backends.base import Backend
    from chatloop.backends.detect import Candidate
    from chatloop.chat.host import Picked
    from chatloop.config import Settings
    from chatloop.format import Problem
    from chatloop.store.index import Index, SessionRow
    from chatloop.store.lookahead import LookAhead
    from chatloop.store.store import Store
    from chatloop.ui.repl import Repl

COMMANDS = ("sessions", "show", "search", "tree", "export", "reseal", "import", "reindex", "doctor")

EXAMPLES = """\
examples:
  chatloop                      chat with the default agent (Simple Sally)
  chatloop --agent file_fiona   chat with an agent from agents/ (by name or path)
  chatloop --base-url http://127.0.0.1:8080/v1 --model qwen2.5
                                use a specific OpenAI-compatible server
  chatloop -c                   continue the most recent session from its summary
  chatloop --resume             pick a past session: type to filter, Tab searches all
                                text, Enter resumes, Ctrl-F forks
  chatloop --resume 3 --full    continue session 3 with its whole history, if it fits
  chatloop --resume 3 --fork    branch session 3: it stays as it is, a new one goes on
  chatloop "why is the sky blue?"   ask once: the reply on stdout, the session saved
  git diff | chatloop "review this"  piped text is sent too (after the question)
  chatloop -c "and in winter?"  a follow-up to the most recent session, once
  chatloop sessions             list this project's sessions, 1 = most recent
  chatloop show 1               print the most recent session
  chatloop search error budget  find sessions holding every word
  chatloop search tomato --resume   continue the session that matched (pick if several)
  chatloop tree 1               show the compact/resume lineage of a session
  chatloop export 1 --chain -o chain.md   write a session and its ancestors
  chatloop reseal 2             accept your hand edits to session 2 (new checksums)
  chatloop import .chat-sessions   bring in the seed project's sessions (copies)
  chatloop reindex              rebuild the session index from the files
  chatloop doctor               check the server, the sessions directory and the index

In the chat, /help lists the commands (/compact, /resume, /pin, ...). Sessions
are markdown files under $CHATLOOP_HOME; settings come from the config file
(--config, CHATLOOP_CONFIG, $CHATLOOP_HOME/config.yaml, else
~/.config/chatloop/config.yaml), then CHATLOOP_* variables, then these flags.
`chatloop doctor` says which config file it read and where the window comes from.
"""


T = TypeVar("T")
LIST_LIMIT = 50  # sessions listed by default: a screenful or two; --limit shows more


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
    parser.add_argument("--config", metavar="FILE", help="YAML config file to read")
    chat = parser.add_argument_group("chat options")
    chat.add_argument("--agent", metavar="NAME|PATH", help="agent name in agents/ or a .py file")
    chat.add_argument("--model", metavar="M", help="model name on the server")
    chat.add_argument(
        "--backend",
        choices=("auto", "openai", "ollama", "embedded"),
        help="auto (default) probes Ollama, LM Studio, llama.cpp, vLLM, then the embedded model",
    )
    chat.add_argument("--base-url", metavar="URL", help="server URL, e.g. http://127.0.0.1:8080/v1")
    chat.add_argument("--new", action="store_true", help="start a new session (the default)")
    start = chat.add_mutually_exclusive_group()
    start.add_argument(
        "-c", "--continue", dest="continue_", action="store_true",
        help="continue the most recent session of this directory (from its summary)",
    )  # fmt: skip
    start.add_argument(
        "-r", "--resume", nargs="?", const="", metavar="N|ID",
        help="continue session N (1 = most recent) or ID; without a value, pick from a list",
    )  # fmt: skip
    chat.add_argument(
        "--full", action="store_true",
        help="with --resume/--continue: restore the full history instead of the summary "
        "when it fits the context window",
    )  # fmt: skip
    chat.add_argument(
        "--fork", action="store_true",
        help="with --resume/--continue: branch that session instead (it stays as it is; the "
        "new session carries its history)",
    )  # fmt: skip
    chat.add_argument(
        "-y", "--yes", action="store_true",
        help="accept the questions a resume may ask (e.g. a different agent)",
    )  # fmt: skip
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    shared = _shared_options()
    add = sub.add_parser

    def sub_parser(name: str, **kwargs: object) -> argparse.ArgumentParser:
        return add(name, parents=[shared], **kwargs)  # type: ignore[arg-type]

    sub.add_parser = sub_parser  # type: ignore[method-assign]

    p = sub.add_parser("sessions", help="list sessions, most recent first")
    p.add_argument("--all", action="store_true", help="every project, not only this directory")
    p.add_argument("--limit", type=_positive, default=LIST_LIMIT, metavar="N",
                   help=f"show the N most recent (default {LIST_LIMIT})")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("--expand", action="store_true",
                   help="list every file of a compact/resume chain (by default a chain is one "
                        "line, its latest session, with its length)")  # fmt: skip
    p.set_defaults(run=cmd_sessions)

    p = sub.add_parser("show", help="print one session's transcript")
    _session_ref(p)
    p.add_argument("--raw", action="store_true", help="print the markdown file as it is")
    p.set_defaults(run=cmd_show)

    p = sub.add_parser("search", help="full-text search over every message")
    p.add_argument("query", nargs="+", help="words to look for (no quotes needed)")
    p.add_argument("--all", action="store_true", help="search every project")
    p.add_argument("--limit", type=_positive, default=50, metavar="N", help="at most N hits")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("--resume", dest="search_resume", action="store_true",
                   help="continue a session that matched: the only one, or the one you pick")
    p.add_argument("--fork", dest="search_fork", action="store_true",
                   help="like --resume, but branch the session (it stays as it is)")
    p.set_defaults(run=cmd_search)

    p = sub.add_parser("tree", help="show the compact/resume lineage of a session")
    _session_ref(p)
    p.set_defaults(run=cmd_tree)

    p = sub.add_parser("export", help="write a session (or its whole chain) as markdown or JSON")
    _session_ref(p)
    p.add_argument("--chain", action="store_true", help="include every ancestor, oldest first")
    p.add_argument("--format", choices=("md", "json"), default="md", help="md (default) or json")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="write to FILE (never overwritten; - is stdout)")
    p.set_defaults(run=cmd_export)

    p = sub.add_parser(
        "reseal", help="accept your hand edits to a session file (new checksums)",
        description="Re-check a session file you edited by hand and give the frames you "
        "changed new checksums, so `show` no longer reports them. The original is kept "
        "beside it as {id}.md.orig (mode 0600). Hand edits are kept without this too; "
        "they are only reported.",
    )  # fmt: skip
    _session_ref(p)
    p.set_defaults(run=cmd_reseal)

    p = sub.add_parser(
        "import", help="copy sessions in: the seed project's .chat-sessions, other homes",
        description="Copy session files (the seed project's markdown, or chatloop's own) "
        "from files or folders into this directory's project (or --project DIR). The "
        "originals are never moved or changed; running it again imports nothing new. "
        "Each file is reported: imported, already here, or skipped and why.",
    )  # fmt: skip
    p.add_argument("paths", nargs="+", metavar="PATH", help="session files or folders")
    p.add_argument("--project", metavar="DIR", help="the project (directory) they belong to")
    p.set_defaults(run=cmd_import)

    p = sub.add_parser("reindex", help="rebuild the session index from the files")
    p.set_defaults(run=cmd_reindex)

    p = sub.add_parser("doctor", help="check the model server, sessions directory and index")
    p.set_defaults(run=cmd_doctor)
    parser.set_defaults(run=cmd_chat)
    return parser


def _shared_options() -> argparse.ArgumentParser:
    """The top-level options every subcommand also accepts after its name
    (``chatloop doctor --base-url URL``); given there, they win."""
    shared = argparse.ArgumentParser(add_help=False)
    group = shared.add_argument_group("options shared with the chat")
    quiet = argparse.SUPPRESS  # absent: the value given before the subcommand stands
    group.add_argument("--sessions-dir", metavar="DIR", default=quiet,
                       help="root directory of sessions (env CHATLOOP_HOME)")  # fmt: skip
    group.add_argument("--config", metavar="FILE", default=quiet, help="YAML config file")
    group.add_argument("--base-url", metavar="URL", default=quiet, help="server URL")
    group.add_argument("--model", metavar="M", default=quiet, help="model name on the server")
    group.add_argument("--backend", choices=("auto", "openai", "ollama", "embedded"),
                       default=quiet, help="which kind of server")  # fmt: skip
    group.add_argument("--agent", metavar="NAME|PATH", default=quiet, help="agent name or file")
    return shared


def split_prompt(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[list[str], str]:
    """``argv`` without the words of a one-shot question, and the question ("" when the
    first word that is not an option names a subcommand, or there is none). Raises
    UsageError for a lone word that is nearly a subcommand (``sesions``), or a word
    nearly a subcommand that acts on a session followed by a session's number or id
    (``shwo 1``): ``--`` before it sends it as a question."""
    takes: dict[str, object] = {}
    commands: set[str] = set()
    for action in parser._actions:
        for option in action.option_strings:
            takes[option] = action.nargs
        if isinstance(action, argparse._SubParsersAction):
            commands.update(action.choices)
    kept: list[str] = []
    words: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        if token == "--" and not words:
            return kept, " ".join(argv[i + 1 :])  # all question, whatever it looks like
        if token.startswith("-") and token != "-":
            kept.append(token)
            meant = _option(token, takes)
            nargs = takes.get(meant) if meant else 0
            wants = "=" not in token and nargs not in (0, "?")
            optional = "=" not in token and nargs == "?"
            if i + 1 < len(argv) and (wants or (optional and _is_ref(argv[i + 1]))):
                kept.append(argv[i + 1])
                i += 1
        elif not words and token in commands:
            return argv, ""
        else:
            words.append(token)
        i += 1
    # One word that is almost a command is a typo, not a question; so is a word almost
    # a command that acts on a session, then a session's number or id (`shwo 1`; one
    # with a digit: `cafe` is a handle, and a word).
    named = len(words) == 2 and _is_ref(words[1]) and any(c.isdigit() for c in words[1])
    if len(words) == 1 or named:
        meant = _mistyped(words[0], commands)
        if meant and (len(words) == 1 or meant in _ACT_ON_A_SESSION):
            said, typed = " ".join([meant, *words[1:]]), " ".join(words)
            raise UsageError(f"{words[0]!r} is not a command",
                             f"Did you mean `chatloop {said}`? To ask it as a question: "
                             f"chatloop -- {typed}")  # fmt: skip
    return kept, " ".join(words)


_ACT_ON_A_SESSION = frozenset({"show", "export", "reseal", "tree"})  # `chatloop show N`


def _mistyped(word: str, commands: set[str]) -> str | None:
    """The command ``word`` is a typo of: one letter dropped, added, changed or two
    swapped, in a lowercase word of letters only, for commands of six letters or
    more (``sesions``, ``serach``, ``docter``). Short commands (``show``, ``tree``)
    sit too close to ordinary words (``snow``, ``three``, ``tee``) to guess more
    than two neighbouring letters swapped (``shwo``), which makes no word."""
    if not (word.isalpha() and word.islower()):
        return None
    for command in sorted(commands):
        if _one_edit(word, command) and (len(command) >= 6 or _swapped(word, command)):
            return command
    return None


def _swapped(a: str, b: str) -> bool:
    """True when ``a`` and ``b`` (one edit apart: ``_one_edit``) differ by two
    neighbouring letters swapped, not by one letter."""
    return len(a) == len(b) and sum(x != y for x, y in zip(a, b, strict=True)) == 2


def _one_edit(a: str, b: str) -> bool:
    """True when ``a`` and ``b`` differ by exactly one insertion, deletion, change, or
    swap of two neighbouring letters."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        return len(diff) == 1 or (len(diff) == 2 and diff[1] == diff[0] + 1
                                  and a[diff[0]] == b[diff[1]] and a[diff[1]] == b[diff[0]])
    short, long = (a, b) if len(a) < len(b) else (b, a)
    return any(long[:i] + long[i + 1 :] == short for i in range(len(long)))


def _option(token: str, takes: dict[str, object]) -> str | None:
    """The option ``token`` means, as argparse reads it: itself, the one long option it
    abbreviates, or the last of a cluster of short ones (``-yr``); None if unknown."""
    name = token.split("=", 1)[0]
    if name in takes:
        return name
    if name.startswith("--"):
        found = [option for option in takes if option.startswith(name)]
        return found[0] if len(found) == 1 else None
    last = f"-{name[-1]}"
    return last if len(name) > 2 and last in takes else None


def _is_ref(text: str) -> bool:
    """A word that names a session (a number, a handle or an id) rather than starts a
    question."""
    from chatloop.ids import is_file_stem, is_handle

    return text.isdigit() or is_handle(text) or (is_file_stem(text) and text[:8].isdigit())


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be 1 or more")
    return value


def _settings(args: argparse.Namespace, said: list[str] | None = None):  # type: ignore[no-untyped-def]
    """The settings of this run; their warnings (a config file's unknown keys) on
    stderr, or into ``said`` when given."""
    from chatloop.config import load_settings

    flags = {k: getattr(args, k, None) for k in ("agent", "model", "backend", "base_url")}
    flags["sessions_dir"] = args.sessions_dir
    settings, warnings = load_settings(flags, config_file=args.config, read_yaml=_read_yaml)
    if said is not None:  # the caller says them (doctor, in its own lines)
        said.extend(warnings)
    else:
        for warning in warnings:
            print(f"warning: {warning}", file=sys.stderr)
    return settings


def _read_yaml(text: str) -> Any:
    """The config file's YAML, read strictly (loaded only when there is a file)."""
    from chatloop.format.yaml_strict import load

    return load(text)


def _store(args: argparse.Namespace, settings=None):  # type: ignore[no-untyped-def]
    """The store under the configured root; pass ``settings`` when already loaded, so the
    config file is read (and its warnings printed) once."""
    import os

    from chatloop.config import chatloop_home
    from chatloop.store.store import Store

    settings = settings or _settings(args)
    root = (Path(os.path.abspath(Path(settings.sessions_dir).expanduser()))
            if settings.sessions_dir else chatloop_home())  # fmt: skip
    return Store(root)


def _backend(settings: Settings, candidates: tuple[Candidate, ...] | None = None) -> Backend:
    """The backend the settings ask for (``auto``: the first of ``candidates`` that
    answers, by default the usual local ports)."""
    from chatloop.backends.base import Timeouts
    from chatloop.backends.detect import CANDIDATES, BackendChoice, make_backend

    return make_backend(
        BackendChoice(
            kind=settings.backend,
            base_url=settings.base_url,
            model=settings.model,
            api_key=settings.api_key or None,
            window=settings.context_window or None,
            timeouts=Timeouts(settings.connect_timeout, settings.read_timeout),
            retries=settings.retries,
        ),
        candidates or CANDIDATES,
    )


def cmd_chat(args: argparse.Namespace, picked: SessionRow | None = None) -> int:
    """Start the interactive REPL, or answer a one-shot question. ``picked``: the
    session a picker chose (resumed as it is: its id is not looked up again, since
    the same id may name a copy in another project)."""
    settings = _settings(args)
    store = _store(args, settings)
    resume = "1" if args.continue_ else args.resume
    if args.full and resume is None:
        raise UsageError("--full goes with --resume or --continue", "e.g. chatloop -r 2 --full")
    if args.fork and resume is None:
        raise UsageError("--fork goes with --resume or --continue", "e.g. chatloop -r 2 --fork")
    if args.fork and args.full:
        raise UsageError("--fork carries the history already; drop --full", "")
    if resume is None and not args.question and sys.stdin.isatty() and sys.stdout.isatty():
        return _chat_new(args, settings, store)  # (with a terminal, nothing is piped in)
    if resume == "" and not args.question and sys.stdin.isatty() and sys.stdout.isatty():
        chosen = _pick(store)  # first: the session picked names its agent and its server
        if chosen is None:
            print("Nothing resumed.", file=sys.stderr)
            return 0
        picked, resume, args.fork = chosen.row, chosen.row.id, args.fork or chosen.fork
    from chatloop.chat.agent import agent_dirs, find_agent_file, load_agent, normalise
    from chatloop.ui.repl import Repl

    agent_file = None
    held_with = ("", "")  # the server (and model) the resumed session was held with
    target: Path | str | None = resume  # "" picks in the REPL; a ref is found here, once
    if resume:  # find the session before anything slow; a wrong ref fails here
        from chatloop.store.index import Index

        row = picked
        if row is None:
            with Index(store) as index:
                index.sync(all_projects=True)
                if args.continue_ and not index.count():
                    raise NotFound(
                        "There is no session to continue in this project yet",
                        "Start one with `chatloop`; `chatloop sessions --all` lists other "
                        "projects' sessions (`-r HANDLE` resumes one).",
                    )
                row = index.find(resume)
        target = Path(row.path)
        held_with = _held_with(store, target)
        if args.agent is None and row.agent_name:  # the agent the session was held with
            try:
                dirs = agent_dirs(store.cwd, store.root)
                agent_file = find_agent_file(row.agent_name, dirs, names_only=True)
            except ChatloopError:  # no agent of that name here: the configured one
                agent_file = None
                print(f"note: session {row.id} was held with the agent "
                      f"{row.agent or row.agent_name!r}, which is not in your agent folders "
                      "(--agent chooses the one to continue with).", file=sys.stderr)  # fmt: skip
    own = agent_file is not None  # the session's own agent, not the configured one
    if agent_file is None:
        agent_file = find_agent_file(settings.agent, agent_dirs(store.cwd, store.root))
    agent = load_agent(agent_file)
    question = _question(args)  # after the session and agent: a wrong ref fails first
    if own and question is not None and normalise(agent_file.stem) != normalise(
            Path(settings.agent).stem):  # no banner in a one-shot run says which agent answers
        print(f"note: continuing with the session's own agent, {agent.name} (--agent chooses "
              "another).", file=sys.stderr)  # fmt: skip
    backend = _ready_backend(settings, held_with)
    try:
        if question is not None:
            return _ask_once(agent, backend, store, settings, question, target, args.full,
                             args.fork)  # fmt: skip
        repl = Repl(agent, backend, store, settings, assume_yes=args.yes)
        return repl.run(resume=target, full=args.full, fork=args.fork)
    finally:
        backend.close()


def _pick(store: Store) -> Picked | None:
    """``chatloop --resume`` alone: the person picks a session of this project (the
    picker, searching the index as they type) before anything else is loaded."""
    from datetime import datetime

    from chatloop.chat.lookup import IndexLookup
    from chatloop.chat.session import PICK_LIMIT
    from chatloop.store.index import Index
    from chatloop.ui.picker import pick

    with Index(store) as index:
        index.sync(all_projects=True)
        rows = index.list_sessions(limit=PICK_LIMIT, fold=True)  # a chain: its last file
        return pick(rows, datetime.now().astimezone(), IndexLookup(index, store, PICK_LIMIT))


def _chat_new(args: argparse.Namespace, settings: Settings, store: Store) -> int:
    """A new interactive chat, its prompt drawn first: the agent, the backend (and its
    check of the server) and the chat load behind it (``chatloop.ui.start``)."""
    import signal

    from chatloop.ui.prompt import chat_prompt, file_history
    from chatloop.ui.start import Startup

    def agent_names() -> list[str]:
        from chatloop.chat.agent import agent_dirs, agent_names

        return agent_names(agent_dirs(store.cwd, store.root))

    prompt = chat_prompt(agent_names, file_history(store.project_dir))

    def load() -> Repl:
        from chatloop.chat.agent import agent_dirs, find_agent_file, load_agent
        from chatloop.ui.repl import Repl

        agent = load_agent(find_agent_file(settings.agent, agent_dirs(store.cwd, store.root)))
        backend = _ready_backend(settings)
        try:
            return Repl(agent, backend, store, settings, assume_yes=args.yes, prompt=prompt)
        except BaseException:
            backend.close()
            raise

    startup = Startup(prompt, load, announce=lambda repl: repl.banner(),
                      toolbar=lambda repl: repl.toolbar())  # fmt: skip
    # Until the loop takes over (it saves what was said), SIGTERM and SIGHUP end the
    # prompt as Ctrl-C would, once (later ones are ignored, so nothing cuts short the
    # terminal's restoring): nothing was sent yet, so there is nothing to save; a line
    # typed while the rest loaded is shown, so it is not lost silently.
    signalled: list[int] = []

    def on_signal(signum: int, frame: object) -> None:
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        signalled.append(signum)
        raise KeyboardInterrupt

    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        for sig in previous:
            signal.signal(sig, on_signal)
        first = startup.first_line()
        if first is None or signalled:  # Ctrl-D (or a signal) before anything was said
            return 0
        try:
            repl = startup.loaded()
        except KeyboardInterrupt:
            if not signalled:
                raise
            from chatloop.ui.terminal_text import visible  # typed text: shown, never acted on

            print(f"Signal received before the chat had started; not sent: "
                  f"{visible(first())}", file=sys.stderr)  # fmt: skip
            return 0
        try:  # the loop puts its own handlers in, and back (ours) when it ends
            return repl.run(first=first)
        finally:
            repl.session.backend.close()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _held_with(store: Store, path: Path) -> tuple[str, str]:
    """The URL of the server a session was held with and its model (("", "") if no
    server is recorded, or it was the embedded model)."""
    try:
        meta = store.summary_of(path).meta
    except (OSError, ChatloopError):
        return "", ""
    if not meta.backend_url.startswith(("http://", "https://")):
        return "", ""
    return meta.backend_url, meta.model


def _ready_backend(settings: Settings, held_with: tuple[str, str] = ("", "")) -> Backend:
    """The configured backend, its model chosen; fails fast, with the server's own
    words, when the server is not usable. ``held_with``: a resumed session's server
    and model, tried first when no backend is configured (``auto``, no base URL),
    with a note when it no longer answers and another is used (only a plain URL of
    this machine's loopback, ``detect.held_candidates``: another gets a note); its
    model is kept when no model is configured and that server still lists it."""
    held_at, held_model = held_with
    same_server = False
    if held_at and settings.backend == "auto" and not settings.base_url:
        from chatloop.backends.detect import CANDIDATES, held_candidates
        from chatloop.ui.terminal_text import visible

        held = held_candidates(held_at)
        if not held:
            print(f"note: this session was held with the server at {visible(held_at)}, which "
                  "is not a plain URL of this machine: --base-url uses it again (a session "
                  "file never sends a conversation elsewhere by itself).",
                  file=sys.stderr)  # fmt: skip
            return _ready_backend(settings)
        backend = _backend(settings, (*held, *CANDIDATES))
        same_server = backend.base_url in {c.base_url for c in held}
        if not same_server:
            now = ("the embedded model" if backend.base_url.startswith("embedded:")
                   else backend.base_url)  # fmt: skip
            print(f"note: this session was held with the server at {visible(held_at)}, which "
                  f"does not answer; continuing with {visible(now)} (--base-url chooses "
                  "another).", file=sys.stderr)  # fmt: skip
    else:
        backend = _backend(settings)
    try:
        if not backend.model:
            listed = backend.models()
            keep = same_server and held_model in listed
            backend.model = held_model if keep else (listed or [""])[0]
        elif backend.kind != "embedded":
            try:  # a model was named: still, nothing is saved for a server that is not there
                backend.models()
            except Unreachable:
                raise
            except BackendError:  # it answered (a server without a model list): go on
                pass
    except BaseException:
        backend.close()
        raise
    return backend


def _question(args: argparse.Namespace) -> str | None:
    """The one-shot question: the words on the command line, then what is piped in
    (``git diff | chatloop "review this"``); None for the interactive chat."""
    piped = ""
    if args.resume == "" and not args.question and not sys.stdin.isatty():
        raise UsageError(
            "--resume without a session picks one from a list, which needs a terminal",
            'Name it: chatloop -r 3 "…", or continue the last: chatloop -c "…"',
        )
    if not sys.stdin.isatty():
        try:
            piped = sys.stdin.read()
        except (OSError, ValueError):
            piped = ""
        if not piped.strip() and not args.question:
            raise UsageError(
                "Nothing to send: the piped input is empty",
                'Pipe some text in, or ask on the command line: chatloop "…"',
            )
    if not args.question and not piped.strip():
        return None
    if args.resume == "":
        raise UsageError(
            "A one-shot question cannot pick a session from a list",
            'Name it: chatloop -r 3 "…", or continue the last: chatloop -c "…"',
        )
    return "\n\n".join(part for part in (args.question, piped.strip()) if part)


def _ask_once(agent, backend, store, settings, question: str,  # type: ignore[no-untyped-def]
              target: Path | str | None, full: bool, fork: bool) -> int:  # fmt: skip
    """Answer ``question`` once (after resuming or forking ``target``), without a REPL."""
    from chatloop.chat.session import ChatSession
    from chatloop.ui.oneshot import PlainHost, ask_once, settings_once

    if backend.kind == "embedded":  # (on stderr: the answer alone goes to stdout)
        from chatloop.config import EMBEDDED_NOTE

        print(f"note: {EMBEDDED_NOTE}", file=sys.stderr)
    session = ChatSession(agent, backend, store, settings_once(settings), PlainHost(),
                          assume_yes=True)  # fmt: skip
    if isinstance(target, Path):
        begun = session.fork_path(target) if fork else session.resume_path(target, full)
        if not begun:
            return 1
    return ask_once(session, question)


def cmd_doctor(args: argparse.Namespace) -> int:
    """Report what works and what does not, one line each; exit 1 if anything fails."""
    import stat

    from chatloop.backends.detect import CANDIDATES, detect
    from chatloop.backends.embedded import embedded_available
    from chatloop.store.index import Index

    config_warnings: list[str] = []
    settings = _settings(args, config_warnings)
    store = _store(args, settings)
    problems = 0

    def line(ok: bool, text: str) -> None:
        nonlocal problems
        problems += not ok
        print(f"{'ok  ' if ok else 'FAIL'}  {text}")

    if settings.base_url:
        try:
            backend = _backend(settings)
            models = backend.models()
            line(
                True, f"server {settings.base_url}: {len(models)} model(s): {', '.join(models[:5])}"
            )
            status, text = _window_status(backend, settings)
            print(f"{status:<4}  {text}")
        except ChatloopError as exc:
            line(False, f"server {settings.base_url}: {exc.message}")
            if exc.hint:
                print(f"      {exc.hint}")
    else:
        found = detect()
        tried = ", ".join(f"{c.label} ({c.base_url})" for c in CANDIDATES)
        if found is not None:
            line(True, f"model server: {found.label} at {found.base_url}")
        else:
            line(embedded_available(), f"no model server answered (tried {tried}); embedded "
                 f"model {'installed' if embedded_available() else 'not installed'}")  # fmt: skip
    import os

    from chatloop.config import CONFIG_NAME, chatloop_home, config_path

    config = config_path(args.config, os.environ)
    if config.is_file() and config_warnings:  # it works: what it says is partly ignored
        said = '; '.join(w.removeprefix(f"{config}: ") for w in config_warnings)
        print(f"warn  config file {config}: {said}")
    elif config.is_file():
        line(True, f"config file {config}")
    else:  # with neither named, both places were looked at
        looked = str(config)
        if not args.config and not os.environ.get("CHATLOOP_CONFIG"):
            looked = f"{chatloop_home(os.environ) / CONFIG_NAME} and {config}"
        line(True, f"config file: none (looked for {looked}); defaults apply")
    from chatloop.store.importer import SEED_FOLDER, import_sessions

    seed = Path.cwd() / SEED_FOLDER
    if seed.is_dir() and any(seed.glob("*.md")):
        outcomes = import_sessions(store, [seed], write=False)  # what an import would do now
        left = sum(1 for outcome in outcomes if outcome.status == "imported")
        here = sum(1 for outcome in outcomes if outcome.status == "present")
        if left:
            print(f"note  the seed project's sessions are here: {seed} ({left} not imported"
                  f"{f', {here} already' if here else ''}); `chatloop import {SEED_FOLDER}` "
                  "copies them in")  # fmt: skip
        elif here:
            line(True, f"the seed project's sessions ({seed}): {here} imported, none left")
    root = store.root
    if root.exists():
        mode = stat.S_IMODE(root.stat().st_mode)
        private = mode & 0o077 == 0
        line(private, f"sessions directory {root} (mode {oct(mode)})")
        if not private:  # chatloop makes it 0700; one made by hand may be open to others
            print(f"      others can read your conversations there: chmod 700 {root}")
    else:  # a check makes nothing: the first chat creates it, and the index
        line(True, f"sessions directory {root} (not created yet: your first chat creates it)")
        return 1 if problems else 0
    try:
        with Index(store) as index:
            index.sync()
            count = len(index.list_sessions(all_projects=True))
        line(True, f"index {index.path}: {count:,} session{'' if count == 1 else 's'}")
    except (ChatloopError, OSError) as exc:
        line(False, f"index: {exc}")
    return 1 if problems else 0


def _window_status(backend: Backend, settings: Settings) -> tuple[str, str]:
    """Where the context window comes from ("ok"), or what to do when nobody says
    ("warn": chatloop works, but plans with a guess)."""
    from chatloop.config import DEFAULT_WINDOW

    if settings.context_window:
        return "ok", f"context window {settings.context_window:,} tokens (your context_window)"
    told = backend.context_window()
    if told:
        return "ok", f"context window {told:,} tokens (from the server)"
    return "warn", (f"the server does not say its context window, so chatloop assumes "
                    f"{DEFAULT_WINDOW:,}: set context_window to what the server was started "
                    "with (for llama-cpp-python, its --n_ctx; e.g. CHATLOOP_CONTEXT_WINDOW=2048)")


def _index(args: argparse.Namespace) -> Index:
    """The index, synced. The stat of every session file runs in a child process
    (``LookAhead``, started by ``main`` before the arguments are parsed when the
    command reads the index) while this one parses, imports what the command
    needs and opens the index."""
    index, ahead = _unsynced(args)
    with ahead:
        index.sync(all_projects=True, progress=_progress_bar(at_least=200), ahead=ahead)
    return index


def _fresh_read(args: argparse.Namespace, read: Callable[[Index], T]) -> T:
    """``read(index)`` (it must only read the index) as of a fresh index: done while the
    child looks at the files, and kept if that look says the index was fresh
    (``Index.read_ahead``); else (or if it raised a ChatloopError, such as a session
    not found) done again once the index is synced."""
    index, ahead = _unsynced(args)
    with index, ahead:
        try:
            found = index.read_ahead(ahead, lambda: read(index))
        except ChatloopError:  # (a session not found in what may be a stale index: the
            found = None  # sync says, and the read after it)
        if found is None:
            index.sync(all_projects=True, progress=_progress_bar(at_least=200), ahead=ahead)
            found = read(index)
    return found


def _unsynced(args: argparse.Namespace) -> tuple[Index, LookAhead]:
    """The index, opened, not yet synced, and the look taken ahead of every project's
    files (to sync with, or to check hits found meanwhile against: close it)."""
    store = _store(args)
    ahead = getattr(args, "ahead", None)
    if ahead is None or ahead.root != store.root:  # (a config or flag named another home)
        from chatloop.store.lookahead import LookAhead

        if ahead is not None:
            ahead.close()
        ahead = args.ahead = LookAhead(store, all_projects=True)
    try:
        from chatloop.store.index import Index

        return Index(store), ahead
    except BaseException:
        ahead.close()
        raise


def cmd_sessions(args: argparse.Namespace) -> int:
    from chatloop.store.fsio import local_now
    from chatloop.ui import listing

    fold = not args.expand
    rows, total = _fresh_read(args, lambda index: index.listing(args.all, args.limit, fold,
                                                                 count=True))  # fmt: skip
    if args.json:
        from chatloop.ui import as_json

        print(as_json.sessions_json(rows))
        return 0
    print(listing.sessions_text(rows, local_now(), show_project=args.all, columns=_columns()))
    if total > len(rows):
        print(f"… {total - len(rows):,} older; `--limit {total}` lists them all")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    """Print a session, streaming: memory is bounded by the largest message, whatever
    the file's size."""
    import shutil

    from chatloop.format import open_document
    from chatloop.store.fsio import open_read
    from chatloop.ui import listing

    row = _fresh_read(args, lambda index: index.find(args.ref))
    path = Path(row.path)
    with open_read(path) as handle:
        if args.raw:
            shutil.copyfileobj(handle, sys.stdout.buffer, 1 << 20)
            return 0
        doc = open_document(handle, path.stem)
        write = sys.stdout.write
        heading = listing.describe(row) if row.title or row.preview else ""  # as listed
        batch: list[str] = []  # written 64 kB at a time (a bigger message at once)
        size = 0

        def flush() -> None:
            piece = "\n".join(batch) + "\n"
            batch.clear()  # (first: a write that fails is not tried again)
            write(piece)

        try:
            for chunk in listing.transcript_lines(doc.meta, doc.views(), heading,
                                                  row.forked_at):
                batch.append(chunk)
                size += len(chunk)
                if size >= 1 << 16:
                    flush()
                    size = 0
        finally:  # what was read is shown when reading stops with an error
            if batch:
                flush()
    sys.stdout.flush()
    shown = _worth_noting(doc.problems)
    for problem in shown:
        print(f"note: {problem}", file=sys.stderr)
    if any(p.kind in ("checksum", "decoration") for p in shown) and not doc.legacy:
        print(f"hint: edited by hand on purpose? `chatloop reseal {row.handle or row.id}` "
              "accepts the edits (the original is kept).", file=sys.stderr)  # fmt: skip
    return 0


def _worth_noting(problems: Iterable[Problem]) -> list[Problem]:
    """The problems of a file read that a person is told of (``show``, ``export``): not
    keys a newer chatloop wrote, nor a file being of the legacy format."""
    return [p for p in problems if p.kind not in ("unknown_key", "legacy")]


def cmd_search(args: argparse.Namespace) -> int:
    # The snippets' reader loads while the files are looked at, before the index is synced.
    import chatloop.store.index_scan  # noqa: F401
    from chatloop.ui import listing

    if args.search_resume or args.search_fork:
        return _search_and_resume(args)
    from chatloop.store.index import Index

    query = " ".join(args.query)
    rows = _fresh_read(args, lambda index: index.search_sessions(
        query, all_projects=args.all, limit=args.limit))  # fmt: skip
    hits = Index.hits(rows, query)  # snippets read from the files as they are printed
    if args.json:
        from chatloop.ui import as_json

        print(as_json.hits_json(list(hits)))
        return 0
    shown, columns = 0, _columns()
    for hit in hits:  # each as soon as it is found
        print(listing.hit_line(hit, show_project=args.all, columns=columns), flush=True)
        shown += 1
    if not shown:
        print(listing.hits_text([]))
    return 0


def _search_and_resume(args: argparse.Namespace) -> int:
    """``search WORDS --resume``: continue (or fork) the session that matched, after
    the person picks one when several did."""
    from datetime import datetime

    from chatloop.chat.lookup import IndexLookup
    from chatloop.ui.picker import pick

    if args.json:
        raise UsageError("--json lists hits; --resume continues one: choose one of them", "")
    if not sys.stdin.isatty():
        raise UsageError("search --resume continues the session in the chat, which needs a "
                         "terminal", 'To ask it once from a script: chatloop -r HANDLE "…"')
    query = " ".join(args.query)
    with _index(args) as index:
        rows = [r for r in index.search_sessions(query, all_projects=args.all, limit=args.limit)
                if r.number is not None]  # fmt: skip
        if not rows:
            raise ChatloopError(f"No finished session holds {query!r}",
                                "`chatloop sessions` lists them; fewer words find more.")
        if len(rows) == 1:
            row, fork = rows[0], bool(args.search_fork)
        else:
            lookup = IndexLookup(index, index.store, args.limit, all_projects=args.all)
            picked = pick(rows, datetime.now().astimezone(), lookup)
            if picked is None:
                print("Nothing resumed.", file=sys.stderr)
                return 0
            row, fork = picked.row, picked.fork or bool(args.search_fork)
    args.resume, args.continue_, args.fork, args.full = row.id, False, fork, False
    args.question = None
    return cmd_chat(args, row)


def cmd_import(args: argparse.Namespace) -> int:
    """Copy sessions from files or folders into a project; report each file."""
    from chatloop.store.importer import NO_SUCH_PATH, import_sessions
    from chatloop.store.store import Store
    from chatloop.ui.terminal_text import visible

    store = _store(args)
    if args.project:
        project = Path(args.project).expanduser()
        if not project.is_dir():
            raise UsageError(f"{args.project} is not a directory",
                             "--project names the directory the sessions belong to.")  # fmt: skip
        store = Store(store.root, cwd=project.resolve())
    # a file of another home goes into its own project, unless --project names one
    outcomes = import_sessions(store, [Path(p).expanduser() for p in args.paths],
                               keep_projects=not args.project)  # fmt: skip
    counts = {status: sum(o.status == status for o in outcomes)
              for status in ("imported", "present", "skipped")}  # fmt: skip
    for outcome in outcomes:
        if outcome.status == "skipped":
            print(visible(f"skipped  {outcome.source}: {outcome.reason}"))
        elif outcome.status == "imported":
            print(visible(f"imported {outcome.source} → {outcome.session_id}"))
    if not outcomes:
        print("No files found to import.")
    elif not counts["imported"]:
        print(f"Nothing new to import ({counts['present']} already here, "
              f"{counts['skipped']} skipped).")  # fmt: skip
    else:
        into = sorted({o.project for o in outcomes if o.status == "imported"})
        where = (f"into {store.project_dir}" if into == [store.project] else
                 f"into {len(into)} project{'s' if len(into) > 1 else ''} under "
                 f"{store.root / 'projects'} ({', '.join(into)})")  # fmt: skip
        more = "" if into == [store.project] else " --all"
        print(visible(f"Imported {counts['imported']} session(s) {where} ({counts['present']} "
                      f"already here, {counts['skipped']} skipped). `chatloop sessions{more}` "
                      "lists them."))  # fmt: skip
    missing = [str(o.source) for o in outcomes if o.reason == NO_SUCH_PATH]
    if missing:  # as cp does: the rest is imported, and the exit says a path was wrong
        done = " (what the other paths held was imported)" if counts["imported"] else ""
        raise NotFound(visible(f"No such file or folder: {', '.join(missing)}"),
                       f"Check the path{done}.")  # fmt: skip
    return 0


def cmd_tree(args: argparse.Namespace) -> int:
    from chatloop.ui import listing

    def lineage(index: Index) -> tuple[SessionRow, list[SessionRow], dict[str, list[SessionRow]]]:
        row = index.find(args.ref)
        return (row, *index.lineage(row))

    row, chain, children = _fresh_read(args, lineage)
    print(listing.tree_text(chain[0], children, row.id))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """Write a session (or its chain) as markdown (the files as they are) or JSON,
    streaming to stdout (``-o -`` too) or to a new file that is never overwritten.
    JSON is read from the files: what ``show`` would note of them is noted on stderr."""
    import os
    import shutil

    from chatloop.format import Document, open_document
    from chatloop.store.fsio import open_read
    from chatloop.ui import as_json
    from chatloop.ui.terminal_text import visible

    def chosen(index: Index) -> list[SessionRow]:
        row = index.find(args.ref)
        return index.lineage(row)[0] if args.chain else [row]

    paths = [Path(r.path) for r in _fresh_read(args, chosen)]
    output = None if args.output in (None, "", "-") else args.output
    if output:
        try:
            fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            raise ChatloopError(f"{output} already exists", "Choose another file.") from None
        except OSError as exc:
            raise ChatloopError(f"Cannot write {output}: {exc.strerror}",
                                "Check that its folder exists and that you may write "
                                "there, or leave out -o to write to the terminal.") from exc
        sink: BinaryIO = os.fdopen(fd, "wb")
    else:
        sink = sys.stdout.buffer
    try:
        if args.format == "json":
            text = io.TextIOWrapper(sink, encoding="utf-8", write_through=False)

            read: list[Document] = []

            def documents() -> Iterator[tuple[object, Iterator[object]]]:
                for path in paths:
                    with open_read(path) as handle:
                        doc = open_document(handle, path.stem)
                        read.append(doc)
                        yield doc.meta, doc.views()

            as_json.write_sessions_json(documents(), text.write)  # type: ignore[arg-type]
            text.flush()
            text.detach()
            for doc in read:
                for problem in _worth_noting(doc.problems):
                    print(visible(f"note: {doc.meta.id}: {problem}"), file=sys.stderr)
        else:
            for i, path in enumerate(paths):
                if i:
                    sink.write(b"\n")
                with open_read(path) as handle:
                    shutil.copyfileobj(handle, sink, 1 << 20)
        sink.flush()
    finally:
        if output:
            sink.close()
    if output:
        print(f"Wrote {len(paths)} session(s) to {output}", file=sys.stderr)
    return 0


def _progress_bar(at_least: int) -> Callable[[int, int], None]:
    """A one-line bar on stderr (a terminal only) for work of ``at_least`` files;
    redrawn 40 times at most, not once per file."""
    shown = [-1]

    def progress(done: int, total: int) -> None:
        step = done * 40 // total
        if total < at_least or not sys.stderr.isatty() or (step == shown[0] and done < total):
            return
        shown[0] = step
        bar = "#" * step + "." * (40 - step)
        end = "\n" if done == total else ""
        print(f"\rindexing [{bar}] {done:,}/{total:,}", end=end, file=sys.stderr, flush=True)

    return progress


def cmd_reseal(args: argparse.Namespace) -> int:
    """Accept hand edits; exit 1 when some of the file is too damaged to read, or its
    front matter has problems (those are left as they are, each named, and ``show``
    still notes them)."""
    from chatloop.format import HEAD_DAMAGE
    from chatloop.ui.terminal_text import visible

    with _index(args) as index:
        row = index.find(args.ref)
        changed, kept, left = index.store.reseal(Path(row.path))
    if kept is None and not left:
        print(f"Nothing to reseal: every frame of {row.id} checks out.")
        return 0
    if kept is not None:
        print(f"Resealed {row.id}: {changed} frame(s) given new checksums; the file as it "
              f"was is kept as {kept}")  # fmt: skip
    if not left:
        return 0
    for problem in left:
        print(visible(f"note: {problem}"), file=sys.stderr)
    raw = f"`chatloop show {row.handle or row.id} --raw` shows the file"
    frames = [p for p in left if p.kind not in HEAD_DAMAGE]
    if frames:
        print(f"error: {len(frames)} part(s) of {row.id} cannot be read, so they are left as "
              f"they are (offsets in the file as it was)\nhint: mend them by hand ({raw}), "
              "then reseal again; everything else reads as it is.", file=sys.stderr)  # fmt: skip
    if len(frames) < len(left):
        print(f"error: the front matter of {row.id} has problems that reseal cannot mend\n"
              f"hint: edit those lines by hand ({raw}; docs/format.md lists each key), "
              "then run `chatloop show` again: it is quiet when they read.",
              file=sys.stderr)  # fmt: skip
    return 1


def cmd_reindex(args: argparse.Namespace) -> int:
    from chatloop.store.index import Index

    with Index(_store(args)) as index:
        count = index.rebuild(progress=_progress_bar(at_least=1))
    if index.in_memory:
        raise ChatloopError(
            f"Read {count:,} session files, but cannot write the index {index.path}",
            "Check that you may write it (its permissions, a read-only mount); meanwhile every "
            "command reads the session files directly.",
        )
    print(f"Indexed {count:,} session files into {index.path}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the exit code."""
    for stream in (sys.stdout, sys.stderr):  # an ASCII terminal shows \u escapes, not a crash
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")
    argv = list(sys.argv[1:] if argv is None else argv)
    ahead = _look_ahead(argv)
    from chatloop.ui.streams import Notices

    stderr = sys.stderr
    sys.stderr = Notices(stderr)
    try:
        return _main(argv, ahead)
    finally:
        if ahead is not None:
            ahead.close()
        sys.stderr = stderr


INDEX_COMMANDS = ("sessions", "show", "search", "tree", "export")  # they read the index first


def _look_ahead(argv: list[str]) -> LookAhead | None:
    """For a command that starts by syncing the index, the look at its folders begun
    now, in a child process, under the home the environment names (``_index`` drops
    it if the settings name another)."""
    if not argv or argv[0] not in INDEX_COMMANDS:
        return None
    from chatloop.config import chatloop_home
    from chatloop.store.lookahead import LookAhead
    from chatloop.store.store import Store

    try:
        return LookAhead(Store(chatloop_home()), all_projects=True)
    except Exception:  # (no current directory, no home): the command says so, or does
        return None  # not need it (--sessions-dir): a look ahead only saves time


def _columns() -> int | None:
    """The terminal's width when stdout is one (a listing fits it), else None (a pipe
    or a file gets whole lines)."""
    if not sys.stdout.isatty():
        return None
    import shutil

    return shutil.get_terminal_size().columns


def _session_ref(p: argparse.ArgumentParser) -> None:
    """The session a command acts on. Optional to argparse, so that leaving it out is
    said in one line with a hint (``_main``), not with the whole usage."""
    p.add_argument("ref", metavar="N|ID", nargs="?",
                   help="session number (1 = most recent; `chatloop sessions` lists them) "
                        "or id")  # fmt: skip


def _main(argv: list[str], ahead: LookAhead | None) -> int:
    parser = build_parser()
    try:
        argv, question = split_prompt(parser, argv)
    except ChatloopError as exc:
        print(f"error: {exc.message}\nhint: {exc.hint}", file=sys.stderr)
        return exc.exit_code
    args = parser.parse_args(argv)
    args.question = question
    args.ahead = ahead
    run: Callable[[argparse.Namespace], int] = args.run
    try:
        if "ref" in args and args.ref is None:
            raise UsageError(f"chatloop {args.command} needs a session: its number or id",
                             f"`chatloop sessions` lists them, numbered; e.g. `chatloop "
                             f"{args.command} 1` for the most recent.")  # fmt: skip
        return run(args)
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
        print("hint: check that the sessions directory (CHATLOOP_HOME or --sessions-dir) is a "
              "directory you can read and write.", file=sys.stderr)  # fmt: skip
        return 1


if __name__ == "__main__":
    sys.exit(main())
