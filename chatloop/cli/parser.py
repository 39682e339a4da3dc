"""The command line's shape: every option and subcommand, declared once, and the
split of a command line into a command or a one-shot question.

``OPTIONS`` declares the chat's options and ``COMMANDS`` the subcommands; the
argparse parser is built from them, and so is ``split_prompt``'s knowledge of
which options take a value (no argparse private API). Nothing here runs a
command: ``chatloop.cli.main`` dispatches.
"""

from __future__ import annotations

import argparse
from typing import Any, NamedTuple, NoReturn

from chatloop import __version__
from chatloop.errors import UsageError

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
  chatloop -f notes.md "summarize this"   attach a file to the question
  chatloop -s "Answer in French." -m llama3.2   your own system prompt, another model
  git diff | chatloop "review this"  piped text is sent too (after the question)
  chatloop -c "and in winter?"  a follow-up to the most recent session, once
  chatloop sessions             list this project's sessions, 1 = most recent
  chatloop show 1               print the most recent session
  chatloop search error budget  find sessions holding every word
  chatloop search tomato --resume   continue the session that matched (pick if several)
  chatloop search tomato --recall   a new chat with the exchanges that hold it, to bring in
  chatloop tree 1               show the compact/resume lineage of a session
  chatloop export 1 --chain -o chain.md   write a session and its ancestors
  chatloop reseal 2             accept your hand edits to session 2 (new checksums)
  chatloop import .chat-sessions   bring in the seed project's sessions (copies)
  chatloop reindex              rebuild the session index from the files
  chatloop doctor               check the server, the sessions directory and the index
  chatloop help search          a command's help (also: version, chat, new, continue,
                                resume N, list/ls/logs/history, as llm or git say them)

In the chat, /help lists the commands (/compact, /resume, /pin, ...). Sessions
are markdown files under $CHATLOOP_HOME; settings come from the config file
(--config, CHATLOOP_CONFIG, $CHATLOOP_HOME/config.yaml, else
~/.config/chatloop/config.yaml), then CHATLOOP_* variables, then these flags.
`chatloop doctor` says which config file it read and where the window comes from.
"""


LIST_LIMIT = 50  # sessions listed by default: a screenful or two; --limit shows more
BACKENDS = ("auto", "openai", "ollama", "embedded")


class Option(NamedTuple):
    """One option of the chat (also accepted after a subcommand when ``shared``)."""

    names: tuple[str, ...]
    kwargs: dict[str, Any]
    shared: bool = False  # also an option of every subcommand, where it wins

    @property
    def takes(self) -> str:
        """ "flag" (no value), "value" (one), or "optional" (a value if one follows)."""
        if self.kwargs.get("action") in ("store_true", "version"):
            return "flag"
        return "optional" if self.kwargs.get("nargs") == "?" else "value"


OPTIONS = (
    Option(
        ("--sessions-dir",),
        {"metavar": "DIR", "help": "root directory of sessions (env CHATLOOP_HOME)"},
        shared=True,
    ),
    Option(("--config",), {"metavar": "FILE", "help": "YAML config file to read"}, shared=True),
    Option(
        ("--agent",),
        {
            "metavar": "NAME|PATH",
            "help": "agent name in agents/, or an agent file (.py, or .md as Claude "
            "Code writes them)",
        },
        shared=True,
    ),
    Option(("-m", "--model"), {"metavar": "M", "help": "model name on the server"}, shared=True),
    Option(
        ("--backend",),
        {
            "choices": BACKENDS,
            "help": "auto (default) probes Ollama, LM "
            "Studio, llama.cpp, vLLM, then the embedded model",
        },
        shared=True,
    ),
    Option(
        ("--base-url",),
        {"metavar": "URL", "help": "server URL, e.g. http://127.0.0.1:8080/v1"},
        shared=True,
    ),
    Option(("--new",), {"action": "store_true", "help": "start a new session (the default)"}),
    Option(
        ("-s", "--system"),
        {
            "metavar": "TEXT",
            "help": "a system prompt for this session instead of the agent's (recorded in "
            "its file)",
        },
    ),
    Option(
        ("-f", "--file"),
        {
            "dest": "files",
            "action": "append",
            "metavar": "PATH",
            "help": "attach a text file to the question (repeatable; in the chat: /file PATH)",
        },
    ),
    Option(
        ("-c", "--continue"),
        {
            "dest": "continue_",
            "action": "store_true",
            "help": "continue the most recent session of this directory (from its summary)",
        },
    ),
    Option(
        ("-r", "--resume"),
        {
            "nargs": "?",
            "const": "",
            "metavar": "N|ID",
            "help": "continue session N (1 = most recent) or ID; without a value, pick from a list",
        },
    ),
    Option(
        ("--full",),
        {
            "action": "store_true",
            "help": "with --resume/--continue: restore "
            "the full history instead of the summary when it fits the context window",
        },
    ),
    Option(
        ("--fork",),
        {
            "action": "store_true",
            "help": "with --resume/--continue: branch "
            "that session instead (it stays as it is; the new session carries its history)",
        },
    ),
)
STARTS = frozenset({"-c", "-r"})  # one of these at most: what the chat starts from


class Command(NamedTuple):
    """One subcommand: its name, its one-line help, and a longer description."""

    name: str
    help: str
    description: str = ""


COMMANDS_TABLE = (
    Command("sessions", "list sessions, most recent first"),
    Command("show", "print one session's transcript"),
    Command("search", "full-text search over every message"),
    Command("tree", "show the compact/resume lineage of a session"),
    Command("export", "write a session (or its whole chain) as markdown, JSON or HTML"),
    Command(
        "reseal",
        "accept your hand edits to a session file (new checksums)",
        "Re-check a session file you edited by hand and give the frames you changed "
        "new checksums, so `show` no longer reports them. The original is kept beside "
        "it as {id}.md.orig (mode 0600). Hand edits are kept without this too; they "
        "are only reported.",
    ),
    Command(
        "import",
        "copy sessions in: the seed project's .chat-sessions, other homes",
        "Copy session files (the seed project's markdown, or chatloop's own) from "
        "files or folders into this directory's project (or --project DIR). The "
        "originals are never moved or changed; running it again imports nothing new. "
        "Each file is reported: imported, already here, or skipped and why.",
    ),
    Command("reindex", "rebuild the session index from the files"),
    Command("doctor", "check the model server, sessions directory and index"),
)
COMMANDS = tuple(c.name for c in COMMANDS_TABLE)
ACT_ON_A_SESSION = frozenset({"show", "export", "reseal", "tree"})  # `chatloop show N`


class Guessing(argparse.ArgumentParser):
    """A parser whose "unrecognized arguments" error names the option meant."""

    def error(self, message: str) -> NoReturn:
        """argparse's error (usage, the message, exit 2), with the option meant when an
        unknown one is close to one this parser takes (``--agnet``: ``--agent``)."""
        import difflib

        prefix = "unrecognized arguments: "
        if message.startswith(prefix):
            known = list(self._option_string_actions)
            guesses = []
            for word in message.removeprefix(prefix).split():
                name = word.split("=", 1)[0]
                if name.startswith("-"):
                    guesses += difflib.get_close_matches(name, known, n=1, cutoff=0.6)
            if guesses:
                message += f" (did you mean {' '.join(dict.fromkeys(guesses))}?)"
        super().error(message)


class Parser(Guessing):
    """The whole command line's parser; ``commands`` holds each subcommand's own."""

    commands: dict[str, argparse.ArgumentParser]


def parse(argv: list[str], question: str) -> argparse.Namespace:
    """``argv`` (``split_prompt``'s) parsed, with the one-shot ``question``. Words or
    options a subcommand does not take are refused with that subcommand's usage; an
    option that starts or continues a chat (``-c``, ``-r``, ``--new``, ``--full``,
    ``--fork``) beside a subcommand is a UsageError (argparse exits for the others)."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv, argparse.Namespace(question=question))
    owner = parser.commands.get(args.command or "", parser)
    if extra:
        owner.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command:
        given = ["/".join(o.names) for o in OPTIONS if not o.shared and _given(args, o)]
        if given:
            raise UsageError(
                f"{given[0]} is for the chat; `chatloop {args.command}` does not take it",
                f"`chatloop {given[0].split('/')[0]}` alone runs the chat; "
                f"`chatloop {args.command} --help` lists what `{args.command}` takes.",
            )
    return args


def _given(args: argparse.Namespace, option: Option) -> bool:
    """Whether the chat ``option`` was given on the command line (its value is not its
    default: False, or None for ``-r``)."""
    dest = option.kwargs.get("dest") or option.names[-1].lstrip("-").replace("-", "_")
    value = getattr(args, dest, None)
    return value is not None and value is not False


def build_parser() -> Parser:
    """The whole command line: the chat's options, then each subcommand's."""
    parser = Parser(
        prog="chatloop",
        description="A terminal chat loop for local LLM agents, with lossless markdown "
        "transcripts and summary chains.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"chatloop {__version__}")
    chat = parser.add_argument_group("chat options")
    start = chat.add_mutually_exclusive_group()
    for option in OPTIONS:
        group = start if STARTS & set(option.names) else chat
        group.add_argument(*option.names, **option.kwargs)
    shared = Guessing(add_help=False)
    given = shared.add_argument_group("options shared with the chat")
    for option in OPTIONS:
        if option.shared:  # absent after the subcommand: the value given before it stands
            given.add_argument(*option.names, **{**option.kwargs, "default": argparse.SUPPRESS})
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Guessing)
    made: dict[str, argparse.ArgumentParser] = {
        c.name: sub.add_parser(
            c.name, parents=[shared], help=c.help, description=c.description or None
        )
        for c in COMMANDS_TABLE
    }

    p = made["sessions"]
    p.add_argument("--all", action="store_true", help="every project, not only this directory")
    p.add_argument(
        "--limit",
        type=_positive,
        default=LIST_LIMIT,
        metavar="N",
        help=f"show the N most recent (default {LIST_LIMIT})",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument(
        "--expand",
        action="store_true",
        help="list every file of a compact/resume chain (by default a chain is one "
        "line, its latest session, with its length)",
    )
    _session_ref(made["show"])
    made["show"].add_argument("--raw", action="store_true", help="print the markdown file as it is")
    p = made["search"]
    p.add_argument(
        "query",
        nargs="+",
        help="words to look for (no quotes needed; a word that starts with - is a word too)",
    )
    p.add_argument("--all", action="store_true", help="search every project")
    p.add_argument("--limit", type=_positive, default=50, metavar="N", help="at most N hits")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument(
        "--resume",
        dest="search_resume",
        action="store_true",
        help="continue a session that matched: the only one, or the one you pick",
    )
    p.add_argument(
        "--fork",
        dest="search_fork",
        action="store_true",
        help="like --resume, but branch the session (it stays as it is)",
    )
    p.add_argument(
        "--recall",
        dest="search_recall",
        action="store_true",
        help="start a new chat that lists the exchanges holding the words (/recall WORDS): "
        "/recall N [N...] brings those in with your first message",
    )
    _session_ref(made["tree"])
    p = made["export"]
    _session_ref(p)
    p.add_argument("--chain", action="store_true", help="include every ancestor, oldest first")
    p.add_argument(
        "--format",
        choices=("md", "json", "html"),
        default="md",
        help="md (default), json, or html (one self-contained page; --chain draws the lineage)",
    )
    p.add_argument(
        "-o", "--output", metavar="FILE", help="write to FILE (never overwritten; - is stdout)"
    )
    _session_ref(made["reseal"])
    p = made["import"]
    p.add_argument("paths", nargs="+", metavar="PATH", help="session files or folders")
    p.add_argument("--project", metavar="DIR", help="the project (directory) they belong to")
    parser.commands = made
    return parser


def _session_ref(p: argparse.ArgumentParser) -> None:
    """The session a command acts on. Optional to argparse, so that leaving it out is
    said in one line with a hint (``main``), not with the whole usage."""
    p.add_argument(
        "ref",
        metavar="N|ID",
        nargs="?",
        help="session number (1 = most recent; `chatloop sessions` lists them) or id",
    )


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be 1 or more")
    return value


def _takes() -> dict[str, str]:
    """What each option of the chat takes (``Option.takes``), by each of its names."""
    return {name: option.takes for option in (*OPTIONS, _HELP, _VERSION) for name in option.names}


_HELP = Option(("-h", "--help"), {"action": "store_true"})
_VERSION = Option(("--version",), {"action": "version"})


def split_prompt(argv: list[str]) -> tuple[list[str], str]:
    """``argv`` without the words of a one-shot question, and the question ("" when the
    first word that is not an option names a subcommand, or there is none). Raises
    UsageError for a lone word that is nearly a subcommand (``sesions``), or a word
    nearly a subcommand that acts on a session followed by a session's number or id
    (``shwo 1``): ``--`` before it sends it as a question."""
    takes = _takes()
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
            kind = takes.get(meant, "flag") if meant else "flag"
            wants = "=" not in token and kind == "value"
            optional = "=" not in token and kind == "optional"
            if i + 1 < len(argv) and (wants or (optional and _is_ref(argv[i + 1]))):
                kept.append(argv[i + 1])
                i += 1
        elif not words and token == "search":
            return _search_words(argv, i), ""
        elif not words and token in COMMANDS:
            return argv, ""
        else:
            words.append(token)
        i += 1
    meant_words = _word_meant(words)
    if meant_words is not None:
        return kept + meant_words, ""
    # One word that is almost a command is a typo, not a question; so is a word almost
    # a command that acts on a session, then a session's number or id (`shwo 1`; one
    # with a digit: `cafe` is a handle, and a word); and a command's two neighbouring
    # letters swapped (`serach apples`, `shwo me`: such a swap makes no word), or
    # `search` with a letter dropped or added (`seach`), then any words.
    if words:
        meant = _mistyped(words[0])
        named = len(words) == 2 and _is_ref(words[1]) and any(c.isdigit() for c in words[1])
        typo = meant is not None and (
            len(words) == 1
            or (named and meant in ACT_ON_A_SESSION)
            or _swapped(words[0], meant)
            or (meant == "search" and len(words[0]) != len(meant))
        )
        if meant and typo:
            said, typed = " ".join([meant, *words[1:]]), " ".join(words)
            raise UsageError(
                f"{words[0]!r} is not a command",
                f"Did you mean `chatloop {said}`? To ask it as a question: chatloop -- {typed}",
            )
    return kept, " ".join(words)


# Words people bring from other tools (llm, aichat, Claude Code, git) for what
# chatloop does: each alone (``help`` and ``resume`` may name one thing more) is the
# command it means; followed by other words, it begins a question.
WORDS: dict[str, tuple[str, ...]] = {
    "help": ("--help",),
    "version": ("--version",),
    "chat": (),
    "new": ("--new",),
    "continue": ("-c",),
    "resume": ("-r",),
    "list": ("sessions",),
    "ls": ("sessions",),
    "logs": ("sessions",),
    "history": ("sessions",),
}


def _word_meant(words: list[str]) -> list[str] | None:
    """The arguments a command line of ``words`` (no options among them) means when it
    is one of ``WORDS`` alone: ``help COMMAND`` is that command's help, ``resume N``
    resumes session N; None when the words are a question."""
    if not words or words[0] not in WORDS:
        return None
    first, rest = words[0], words[1:]
    if not rest:
        return list(WORDS[first])
    if first == "help" and len(rest) == 1 and rest[0] in COMMANDS:
        return [rest[0], "--help"]
    if first == "resume" and len(rest) == 1 and _is_ref(rest[0]):
        return ["-r", rest[0]]
    return None


def _mistyped(word: str) -> str | None:
    """The command ``word`` is a typo of: one letter dropped, added, changed or two
    swapped, in a lowercase word of letters only, for commands of six letters or
    more (``sesions``, ``serach``, ``docter``). Short commands (``show``, ``tree``)
    sit too close to ordinary words (``snow``, ``three``, ``tee``) to guess more
    than two neighbouring letters swapped (``shwo``), which makes no word."""
    if not (word.isalpha() and word.islower()):
        return None
    for command in sorted(COMMANDS):
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
        return len(diff) == 1 or (
            len(diff) == 2
            and diff[1] == diff[0] + 1
            and a[diff[0]] == b[diff[1]]
            and a[diff[1]] == b[diff[0]]
        )
    short, long = (a, b) if len(a) < len(b) else (b, a)
    return any(long[:i] + long[i + 1 :] == short for i in range(len(long)))


# The options of `chatloop search` (as built above), for ``_search_words``.
_SEARCH_TAKES = {"--all": "flag", "--limit": "value", "--json": "flag"}
_SEARCH_TAKES.update({"--resume": "flag", "--fork": "flag", "--recall": "flag"})


def _search_words(argv: list[str], at: int) -> list[str]:
    """``argv`` (``search`` at index ``at``) with the words to look for moved after a
    ``--``, in their order, so that a word that starts with ``-`` (``-rf``, ``-1``) is
    a word, never an unknown option; the options stay before it."""
    shared = {
        name: o.takes for o in (*OPTIONS, _HELP) if o.shared or o is _HELP for name in o.names
    }
    takes = {**shared, **_SEARCH_TAKES}
    head, words = argv[: at + 1], []
    i = at + 1
    while i < len(argv):
        token = argv[i]
        if token == "--":
            words += argv[i + 1 :]
            break
        # a long option, or a short one exactly (no clusters: `-fresh` is a word, not -h)
        if token.startswith("--"):
            meant = _option(token, takes)
        else:
            meant = token.split("=", 1)[0] if token.split("=", 1)[0] in takes else None
        if meant is None:
            words.append(token)
        else:
            head.append(token)
            if "=" not in token and takes.get(meant) == "value" and i + 1 < len(argv):
                head.append(argv[i + 1])
                i += 1
        i += 1
    return [*head, "--", *words] if words else head


def _option(token: str, takes: dict[str, str]) -> str | None:
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
    from chatloop.ids import is_file_stem, is_handle, is_seed_id

    return (
        text.isdigit()
        or is_handle(text)
        or (is_file_stem(text) and text[:8].isdigit())
        or is_seed_id(text)
    )
