"""Settings and where things live.

All of chatloop's data sits under one root, ``CHATLOOP_HOME`` (default:
``$XDG_DATA_HOME/chatloop``, else ``~/.local/share/chatloop``). Tests point it
at a temporary directory.

Settings come from, lowest to highest precedence: the defaults below, the
YAML config file, environment variables (``CHATLOOP_<KEY>``, e.g.
``CHATLOOP_MODEL``), and command-line flags. Unknown keys in the file are
reported, not fatal. The config file is the first of: ``--config FILE``,
``CHATLOOP_CONFIG``, ``config.yaml`` in the data root (a home that carries
its own settings), ``$XDG_CONFIG_HOME/chatloop/config.yaml`` (default
``~/.config/chatloop/config.yaml``). ``chatloop doctor`` says which was read.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from chatloop.errors import UsageError

DEFAULT_HOME_NAME = "chatloop"
DEFAULT_PREVIEW_CHARS = 100
HOME_ENV = "CHATLOOP_HOME"
CONFIG_ENV = "CHATLOOP_CONFIG"
CONFIG_NAME = "config.yaml"

# Every default, stated once. Settings uses them; so does any code that runs without
# Settings (a backend built by hand, a plan made in a test). docs/architecture.md.
DEFAULT_AGENT = "simple_sally"
DEFAULT_CONNECT_TIMEOUT = 5.0  # seconds to reach a server
# the start-up check waits this long at most for a server's model list (a one-slot server
# reading a summary's prompt holds even that: llama-cpp-python's takes the model's lock),
# then says the server is busy and goes on: the banner never waits on the model
STARTUP_CHECK_S = 1.0
DEFAULT_READ_TIMEOUT = 120.0  # seconds between two pieces of a reply
DEFAULT_RETRIES = 2  # retries of a request that failed before any reply arrived
DRAFT_SECONDS = 1.0  # a streaming reply is put on disk at most this often (and at its start)
DEFAULT_MAX_TOOL_ROUNDS = 8  # rounds of tool calls in one turn, then a reply without tools
DEFAULT_AUTO_COMPACT = "ask"  # ask | on | off
DEFAULT_RECALL = "auto"  # auto | off: recall in continued chats (chat.recall)
# recall brings back at most window // RECALL_SHARE tokens for one message (2,048 -> 256),
# and never more than the window has free beside it and the reply's room
RECALL_SHARE = 8
DEFAULT_COMPACT_THRESHOLD = 0.8  # share of the window after which compaction is offered
DEFAULT_SUMMARY_MAX_TOKENS = 700  # the longest summary reply (about 500 words)
# Shares of the context window, so that the defaults work from 2K to 128K tokens
# (docs/chains.md, "The budget"): a reply, a summary and an acknowledgment take at most
# window // these, within the floors and the caps above or the agent's own.
REPLY_SHARE = 24  # 2,048 → 85 tokens; 16K and up → the agent's cap (Simple Sally: 512)
SUMMARY_SHARE = 8  # 2,048 → 256 tokens; 5,600 and up → DEFAULT_SUMMARY_MAX_TOKENS
ACK_SHARE = 32  # 2,048 → 64 tokens
PROSE_FLOOR = 45  # tokens of a restoration's summary kept for the prose beside the ledger
RESTORE_SHARE = 4  # 2,048 → 512 tokens: a restoration prompt and its acknowledgment at most
REPLY_FLOOR, SUMMARY_FLOOR, ACK_FLOOR = 64, 96, 48
# A child (a compaction, a resume from a summary) carries its parent's last exchanges
# word for word: at most window // CARRY_SHARE tokens of them, MAX_CARRIED messages,
# and no more than keeps restoration + acknowledgment + them within CHILD_PERCENT.
CARRY_SHARE = 5  # 2,048 → 409 tokens
CHILD_PERCENT = 35  # 2,048 → 716 tokens for all that a child begins with
MAX_CARRIED = 8
DEFAULT_SUMMARY_TIMEOUT = 120.0  # seconds per summary request (then one retry)
# A summary worker (chat.background) gives the model this long a try, its retry and the
# window probe included (a try that yielded to the person does not count: chat.sharing),
# then writes the summary built from the transcript: a server that hangs kept a worker
# (and its ~30 MB) for two read timeouts, 4 minutes, per chat left.
DEFAULT_SUMMARY_WORKER_TIMEOUT = 90.0
# The summary worker asks the model only once the person has left the server alone this
# long (chat.sharing: the person goes first), and a worker gives up waiting (for that
# idle, for another worker's turn, for its own requests yielded and asked again) after
# this long in all, then writes the summary built from the transcript.
DEFAULT_BACKGROUND_IDLE = 15.0
DEFAULT_SUMMARY_WORKER_PATIENCE = 600.0
# A continuation (`-c`, `/resume`) waits this long for a summary a worker is writing, then
# says so and goes on from one built from the transcript (the worker still writes its own).
DEFAULT_SUMMARY_WAIT = 5.0
# The most bytes a one-shot reads from a pipe (more is refused, nothing saved). A message
# is one frame of its session file, and the reader takes a frame over 32 MiB
# (format.frames.MAX_FRAME_BYTES) for damage; bytes the locale cannot decode are kept as
# 4-character \xNN escapes, so 4 MiB can grow to 16. It is still far more than a local
# model reads (128K tokens is about 0.5 MB); a session file is `chatloop import`ed.
MAX_PIPED_BYTES = 4 << 20
DEFAULT_WINDOW = 4096  # the context window assumed when neither settings nor server say
DEFAULT_REPLY_RESERVE = 512  # tokens kept free for the reply when no max_tokens is set
DEFAULT_EMBEDDED_WINDOW = 2048  # the context the embedded model is loaded with
EMBEDDED_NOTE = (  # said wherever the embedded model answers (the chat, a one-shot question)
    "Using the embedded Gemma 3 270M demo model: a tiny base model whose replies are often "
    "nonsense (it loads with your first message, about 2 s). For real work start Ollama or "
    "LM Studio, or pass --base-url URL --model NAME."
)
DEFAULT_TITLES = "model"  # model | first | off: how a new conversation gets its title
DEFAULT_TITLE_TIMEOUT = 10.0  # seconds for the title request (then the first request's line)
DEFAULT_TITLE_MAX_TOKENS = 16  # the longest title reply (about 6 words asked for)
DEFAULT_SUMMARIES = "background"  # background | wait: who writes the summary of a chat that ended
DEFAULT_ACKNOWLEDGMENT = "written"  # written | model: who acknowledges a restoration prompt
DEFAULT_PREPARE_COMPACTION = "on"  # on | off: the next compaction's summary made ahead
PREPARE_LOOKBACK = 4  # exchanges whose largest foretells the next one's size
PREPARE_IDLE_S = 2.0  # a preparation asks the model only after the person let this pass


class Settings(NamedTuple):
    """Every knob, with its default. The config file uses these names as keys. (A named
    tuple, not a dataclass: every command reads settings, and ``dataclasses`` costs a
    listing 9 ms to import.)"""

    agent: str = DEFAULT_AGENT
    backend: str = "auto"  # auto | openai | ollama | embedded
    base_url: str = ""
    model: str = ""
    api_key: str = ""
    context_window: int = 0  # 0: ask the server
    max_tokens: int = 0  # 0: the agent's own cap, scaled down for small windows
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    read_timeout: float = DEFAULT_READ_TIMEOUT
    retries: int = DEFAULT_RETRIES
    max_tool_rounds: int = DEFAULT_MAX_TOOL_ROUNDS
    auto_compact: str = DEFAULT_AUTO_COMPACT  # ask | on | off
    compact_threshold: float = DEFAULT_COMPACT_THRESHOLD
    summary_max_tokens: int = 0  # 0: a share of the window, at most DEFAULT_SUMMARY_MAX_TOKENS
    summary_timeout: float = DEFAULT_SUMMARY_TIMEOUT
    summary_worker_timeout: float = DEFAULT_SUMMARY_WORKER_TIMEOUT
    summary_wait: float = DEFAULT_SUMMARY_WAIT
    summary_worker_patience: float = DEFAULT_SUMMARY_WORKER_PATIENCE
    background_idle: float = DEFAULT_BACKGROUND_IDLE
    titles: str = DEFAULT_TITLES  # model | first | off
    title_timeout: float = DEFAULT_TITLE_TIMEOUT
    summaries: str = DEFAULT_SUMMARIES  # background | wait
    acknowledgment: str = DEFAULT_ACKNOWLEDGMENT  # written | model
    prepare_compaction: str = DEFAULT_PREPARE_COMPACTION  # on | off
    recall: str = DEFAULT_RECALL  # auto | off
    sessions_dir: str = ""
    # MCP servers every agent is offered (chat.mcp_servers): the config file's mapping,
    # kept as JSON text (a setting is a plain value); an agent's own of the same name win
    mcp_servers: str = ""


KEYS: dict[str, type] = {key: type(value) for key, value in Settings._field_defaults.items()}


def chatloop_home(environ: Mapping[str, str] | None = None) -> Path:
    """The root directory for sessions and the index, from the environment; always
    absolute (a relative one is taken from the current directory, once), so the
    paths the index stores mean the same from any directory."""
    env = os.environ if environ is None else environ
    explicit = env.get(HOME_ENV)
    if explicit:
        return Path(os.path.abspath(Path(explicit).expanduser()))
    data_home = env.get("XDG_DATA_HOME")
    base = Path(data_home).expanduser() if data_home else Path.home() / ".local" / "share"
    return Path(os.path.abspath(base / DEFAULT_HOME_NAME))


def config_path(explicit: str | None, environ: Mapping[str, str]) -> Path:
    """The config file to read (it may not exist): see the module's docstring."""
    if explicit:
        return Path(explicit).expanduser()
    if environ.get(CONFIG_ENV):
        return Path(environ[CONFIG_ENV]).expanduser()
    in_home = chatloop_home(environ) / CONFIG_NAME
    if in_home.is_file():
        return in_home
    return own_config(environ)


def own_config(environ: Mapping[str, str]) -> Path:
    """The person's own config file, ``$XDG_CONFIG_HOME/chatloop/config.yaml`` (default
    ``~/.config/chatloop/config.yaml``): the one file whose commands (MCP servers) run
    without a question. A home's ``config.yaml`` can come with a copied home, and a
    file named by ``--config`` or ``CHATLOOP_CONFIG`` with a project."""
    base = environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base).expanduser() / "chatloop" / CONFIG_NAME


SERVERS_ENV = "CHATLOOP_MCP_SERVERS"


class Declared(NamedTuple):
    """Where the setting ``mcp_servers`` was read: ``where`` (the config file's absolute
    path, or the variable's name) and whether that is the person's own config file."""

    where: str
    own: bool


def servers_declared(config_file: str | None, environ: Mapping[str, str] | None = None) -> Declared:
    """Where ``mcp_servers`` comes from in this run (the variable outranks the file, as
    every setting's does); ``docs/security.md``."""
    env = os.environ if environ is None else environ
    if env.get(SERVERS_ENV, "") != "":
        return Declared(f"the environment variable {SERVERS_ENV}", False)
    path = Path(os.path.abspath(config_path(config_file, env))).resolve()
    return Declared(str(path), path == own_config(env).resolve())


# What each number may be: (lowest, highest), both allowed. Anything else is a mistake
# worth one clear line, not a hang (a NaN timeout) or a traceback (a negative window).
LIMITS: dict[str, tuple[float, float]] = {
    "context_window": (0, 10_000_000),
    "max_tokens": (0, 1_000_000),
    "connect_timeout": (0.1, 3600),
    "read_timeout": (0.1, 86_400),
    "retries": (0, 10),
    "max_tool_rounds": (0, 100),
    "compact_threshold": (0.1, 1.0),
    "summary_max_tokens": (0, 100_000),
    "summary_timeout": (1, 86_400),
    "summary_worker_timeout": (1, 86_400),
    "summary_wait": (0, 3600),
    "summary_worker_patience": (1, 86_400),
    "background_idle": (0, 3600),
    "title_timeout": (0.1, 3600),
}
# where 0 is no size at all but "the default": the server's window, the agent's or a
# share of the window for the caps
_ZERO_IS_DEFAULT = ("context_window", "max_tokens", "summary_max_tokens")


CHOICES: dict[str, tuple[tuple[str, ...], str]] = {  # the words a key takes, and what they mean
    "auto_compact": (
        ("ask", "on", "off"),
        "ask asks before compacting a full window, on compacts without asking, off only says so.",
    ),
    "titles": (
        ("model", "first", "off"),
        "model asks the model, first takes the first request's line, off makes none.",
    ),
    "prepare_compaction": (
        ("on", "off"),
        "on makes the next compaction's summary in the background while you read, once "
        "one more exchange would pass the threshold; off makes it when compacting.",
    ),
    "summaries": (
        ("background", "wait"),
        "background writes a chat's summary after it ends, in a worker; wait writes it "
        "before chatloop returns; background also lets a compaction begin the new "
        "session at once, its model summary written behind.",
    ),
    "recall": (
        ("auto", "off"),
        "auto brings back, in front of a message in a continued chat, the earlier "
        "exchanges of its chain that match it and that the new session no longer holds "
        '(docs/chains.md, "Recall"); off never does. /norecall skips one message.',
    ),
    "acknowledgment": (
        ("written", "model"),
        "written: chatloop acknowledges a restoration prompt itself, so a continued "
        "session's first reply waits for no other call; model asks the model first.",
    ),
}


def _said(number: float) -> str:
    """A limit as a person reads it: 10,000,000, not 1e+07; 0.1 as it is."""
    return f"{int(number):,}" if number == int(number) else f"{number:g}"


def _coerce(key: str, value: Any, source: str) -> Any:
    kind = KEYS[key]
    if key == "mcp_servers":
        return _servers_json(value, source)
    try:
        if kind is int:
            if isinstance(value, float) and not value.is_integer():
                raise ValueError(value)
            number: float = int(value)
        elif kind is float:
            number = float(value)
        else:
            text = "" if value is None else str(value)
            if key == "base_url" and text:
                _check_url(text, source)
            words, meaning = CHOICES.get(key, ((text,), ""))
            if text not in words:
                raise UsageError(
                    f"{source}: {key} must be {', '.join(words[:-1])} or {words[-1]}, not {text!r}",
                    meaning,
                )
            return text
    except (TypeError, ValueError, OverflowError):
        raise UsageError(
            f"{source}: {key} must be a {'whole number' if kind is int else 'number'}, "
            f"not {value!r}",
            "Fix the value and try again.",
        ) from None
    low, high = LIMITS.get(key, (float("-inf"), float("inf")))
    if not low <= number <= high:  # also false for NaN
        zero = " (0: the default)" if low == 0 and key in _ZERO_IS_DEFAULT else ""
        raise UsageError(
            f"{source}: {key} must be between {_said(low)}{zero} and {_said(high)}, not {value!r}",
            "Fix the value and try again.",
        )
    return number


def _servers_json(value: Any, source: str) -> str:
    """MCP server declarations as JSON text: a mapping (the config file's) or JSON text
    of one (``CHATLOOP_MCP_SERVERS``); what each entry holds is checked where the
    servers start (``chat.mcp_servers.specs_of``)."""
    import json

    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else {}
        except ValueError:
            value = None
    if not isinstance(value, dict):
        raise UsageError(
            f"{source}: mcp_servers must be a mapping of server names",
            "For example: mcp_servers: {time: {command: mcp-server-time}}",
        )
    return json.dumps(value) if value else ""


def _check_url(text: str, source: str) -> None:
    """A server URL chatloop can use: http(s), a host, a valid port."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(text)
        port_ok = parts.port is None or 0 < parts.port < 65536
    except ValueError:
        parts, port_ok = None, False
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or not port_ok:
        raise UsageError(
            f"{source}: base_url {text!r} is not a usable http(s) URL",
            "For example: http://127.0.0.1:8080/v1",
        )


# What a config file may change that runs code or sends the conversation elsewhere: named
# on screen at every start when the file is not the person's own (docs/security.md).
REDIRECTING = ("agent", "base_url")


def _redirections(
    path: Path, values: Mapping[str, Any], *, named: bool, environ: Mapping[str, str]
) -> list[str]:
    """One line per redirecting key set by a config file that lies inside the sessions
    home (which can travel with a copied home) or inside the current directory (a
    project: a cloned folder can carry one), unless ``--config`` named it."""
    real = Path(os.path.abspath(path)).resolve()
    home = chatloop_home(environ).resolve()
    if real.is_relative_to(home):
        where = "inside the chatloop home"
    elif not named and (cwd := _cwd()) is not None and real.is_relative_to(cwd):
        if real == own_config(environ).resolve():
            return []  # the person's own config file, even when run from their home folder
        where = "inside this project"
    else:
        return []
    shown = _printable(str(real))
    said = {"agent": "the agent that answers", "base_url": "every message is sent there"}
    return [
        f"{shown} ({where}) sets {key} to {_printable(str(values[key]))} ({said[key]})"
        for key in REDIRECTING
        if key in values and values[key] != ""
    ]


def _cwd() -> Path | None:
    try:
        return Path.cwd().resolve()
    except OSError:  # a deleted directory: no project
        return None


def _printable(text: str) -> str:
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


def _meant(key: str) -> str:
    """What to say of an unknown config key: the one it is close to, else every key."""
    import difflib

    close = difflib.get_close_matches(key.lower(), KEYS, n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}?" if close else f"known: {', '.join(KEYS)}"


ENV_NAMES = (HOME_ENV, CONFIG_ENV)  # the variables that are not a setting's


def _misspelled(env: Mapping[str, str]) -> list[str]:
    """A warning for each ``CHATLOOP_*`` variable that names no setting but is close to
    one that does (``CHATLOOP_AGNET``); others are left alone (they may be another
    tool's, or a test's)."""
    import difflib

    known = [*ENV_NAMES, *(f"CHATLOOP_{key.upper()}" for key in KEYS)]
    out = []
    for name in sorted(n for n in env if n.startswith("CHATLOOP_") and n not in known):
        close = difflib.get_close_matches(name.upper(), known, n=1, cutoff=0.85)
        if close:
            out.append(f"{name} is not a setting and is ignored: did you mean {close[0]}?")
    return out


def load_settings(
    flags: Mapping[str, Any] | None = None,
    *,
    config_file: str | None = None,
    environ: Mapping[str, str] | None = None,
    read_yaml: Callable[[str], Mapping[str, Any]],
) -> tuple[Settings, list[str]]:
    """Merge defaults, the config file, the environment and flags; return settings and
    warnings (unknown keys; a config file inside the home or the project that sets
    ``agent`` or ``base_url``, named with the value). A missing default config file is
    fine; a missing explicit one is a UsageError. ``read_yaml`` loads the file's text (the CLI
    passes the strict loader of ``chatloop.format.yaml_strict``, so that
    ``auto_compact: on`` stays the word ``on``); it raises ValueError."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    warnings: list[str] = []
    path = config_path(config_file, env)
    if path.is_file():
        try:
            data = read_yaml(path.read_text(encoding="utf-8"))
        except (ValueError, OSError) as exc:  # (the YAML reader speaks of front matter)
            said = str(exc).replace("front matter", "it", 1)
            raise UsageError(
                f"Cannot read the config file {path}: {said}",
                f"Fix or remove it; the keys it may set: {', '.join(KEYS)}.",
            ) from exc
        for key, value in data.items():
            if key in KEYS:
                values[key] = _coerce(key, value, f"config file {path}")
            else:
                warnings.append(f"{path}: unknown key {key!r} ignored ({_meant(str(key))})")
        warnings.extend(_redirections(path, values, named=bool(config_file), environ=env))
    elif config_file or env.get(CONFIG_ENV):
        raise UsageError(f"No config file at {path}", "Check --config / CHATLOOP_CONFIG.")
    for key in KEYS:
        name = f"CHATLOOP_{key.upper()}"
        if name in env and env[name] != "":
            values[key] = _coerce(key, env[name], name)
    warnings.extend(_misspelled(env))
    for key, value in (flags or {}).items():
        if key in KEYS and value is not None:
            values[key] = _coerce(key, value, f"--{key.replace('_', '-')}")
    return Settings(**values), warnings
