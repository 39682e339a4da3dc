"""Agents: a name, a system prompt, model options and optional tools, from a Python file
(or, without code, a markdown file: ``chat.agent_markdown``).

An agent file (see ``agents/simple_sally.py``) defines module-level values::

    NAME = "Simple Sally"
    DESCRIPTION = "A friendly, concise assistant."
    SYSTEM_PROMPT = "You are Simple Sally, ..."
    OPTIONS = {"temperature": 0.7, "max_tokens": 512}     # optional
    TOOLS = [read_file, list_dir]                          # optional: plain functions
    READ_ONLY = ["read_file", "list_dir"]                  # optional: act without asking
    APPROVE = {"write_note": "ask"}                        # optional: allow | ask | deny
    MCP = {"time": {"command": "mcp-server-time"}}          # optional: chat.mcp_servers

``OPTIONS`` (and a markdown agent's ``options``) are sampling settings only, each
checked by ``sampling_options``: a key that is not one, or a value out of its
range, is noted and left out, never sent (an agent cannot set the request's
``messages``, ``model``, ``stream`` or ``tools``).

Each tool is a plain function with type hints and a docstring; its JSON
schema is derived from them (``Args:`` lines describe the parameters).
A tool that raises returns an error result to the model instead of crashing. A
tool not named in ``READ_ONLY`` asks the person before it acts (``chat.approval``,
applied when the agent is ``armed`` for a chat).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import json
import math
import re
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chatloop.chat.approval import POLICIES, Approvals
from chatloop.chat.mcp_servers import McpServers, ServerSpec, specs_of
from chatloop.errors import UsageError
from chatloop.format import ToolCall, ToolResult

MAX_TOOL_RESULT_CHARS = 20_000
# the sampling options an agent may set, as the backends send them, and their ranges:
# (low, high, whole) where whole means an integer is wanted
SAMPLING: dict[str, tuple[float, float, bool]] = {
    "temperature": (0.0, 2.0, False),
    "top_p": (0.0, 1.0, False),
    "top_k": (0, 1_000_000, True),
    "min_p": (0.0, 1.0, False),
    "max_tokens": (1, 1 << 24, True),
    "presence_penalty": (-2.0, 2.0, False),
    "frequency_penalty": (-2.0, 2.0, False),
    "repeat_penalty": (0.0, 10.0, False),
    "seed": (-1, (1 << 63) - 1, True),
}
MAX_STOPS = 16  # ``stop``: a text, or a list of at most this many
_JSON_TYPES: dict[Any, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    list: "array",
    tuple: "array",
    dict: "object",
}


@dataclass(frozen=True)
class Tool:
    """A function the model may call, with the JSON schema of its parameters."""

    name: str
    description: str
    parameters: dict[str, Any]
    function: Callable[..., Any]
    policy: str = "ask"  # allow | ask | deny (chat.approval): applied once ``armed``
    server: str = ""  # the MCP server that offers it ("" for the agent's own)

    def spec(self) -> dict[str, Any]:
        """The OpenAI-style tool definition sent to the server."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    def run(self, call: ToolCall) -> ToolResult:
        """Run the call; any exception or bad argument becomes an error result."""
        try:
            arguments = json.loads(call.arguments or "{}")
            if not isinstance(arguments, dict):
                raise TypeError("arguments must be a JSON object")
            value = self.function(**arguments)
        except Exception as exc:  # a tool's failure is the model's to read, not ours to crash on
            said = f"{type(exc).__name__}: {exc}"
            return ToolResult(call.id, call.name, said, True, getattr(exc, "approved", None))
        text = value if isinstance(value, str) else json.dumps(value, default=str, indent=2)
        if len(text) > MAX_TOOL_RESULT_CHARS:
            text = text[:MAX_TOOL_RESULT_CHARS] + f"\n… (cut at {MAX_TOOL_RESULT_CHARS} characters)"
        return ToolResult(call.id, call.name, text, approved=getattr(value, "approved", None))


@dataclass(frozen=True)
class Agent:
    """An agent as loaded from its file."""

    name: str
    system_prompt: str
    description: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    tools: tuple[Tool, ...] = ()
    path: str = ""
    system_given: bool = False  # system_prompt is the person's (``-s``), not the file's
    model: str = ""  # a markdown agent's model, used when none is configured
    notes: tuple[str, ...] = ()  # what its file said that chatloop does not use
    mcp: tuple[ServerSpec, ...] = ()  # the MCP servers whose tools it offers (mcp_servers)

    def tool_specs(self) -> list[dict[str, Any]]:
        return [tool.spec() for tool in self.tools]

    def run_tool(self, call: ToolCall) -> ToolResult:
        for tool in self.tools:
            if tool.name == call.name:
                return tool.run(call)
        known = ", ".join(t.name for t in self.tools) or "none"
        return ToolResult(call.id, call.name, f"No tool named {call.name!r} (tools: {known})", True)


def armed(agent: Agent, servers: McpServers | None, approvals: Approvals) -> Agent:
    """``agent`` ready to chat: the tools ``servers`` offer once started
    (``McpServers.start``) after its own, each acting only as its policy and the
    person decide (``Approvals.gate``)."""
    import dataclasses

    offered = tuple(Tool(*tool) for tool in servers.start()) if servers is not None else ()
    tools = tuple(
        dataclasses.replace(tool, function=approvals.gate(tool.name, tool.policy, tool.function))
        for tool in agent.tools + offered
    )
    return dataclasses.replace(agent, tools=tools) if tools else agent


def sampling_options(given: object, where: str) -> tuple[dict[str, Any], list[str]]:
    """The options an agent file gives (``OPTIONS``, a markdown agent's ``options``)
    that may be sent: the keys of ``SAMPLING`` with a finite number in range (an
    integer where one is wanted) and ``stop`` (a text or a list of texts); and a
    note, naming ``where``, for each key left out (not a sampling option, or a bad
    value). Never raises: a bad option costs its line, never the agent."""
    if not given:
        return {}, []
    if not isinstance(given, Mapping):
        return {}, [f"{where}: the options are not a mapping of names to values; ignored"]
    kept: dict[str, Any] = {}
    notes: list[str] = []
    for key, value in given.items():
        name = str(key)
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:40] + "…"
        if name == "stop":
            stops = [value] if isinstance(value, str) else value
            if (
                isinstance(stops, list)
                and 0 < len(stops) <= MAX_STOPS
                and all(isinstance(s, str) and s for s in stops)
            ):
                kept[name] = value
            else:
                notes.append(
                    f"{where}: option 'stop' is {shown}, not a text or a list of at most "
                    f"{MAX_STOPS} texts; ignored"
                )
            continue
        if name not in SAMPLING:
            known = ", ".join([*SAMPLING, "stop"])
            notes.append(
                f"{where}: option {name[:40]!r} is not a sampling option ({known}); ignored"
            )
            continue
        low, high, whole = SAMPLING[name]
        number = _in_range(value, low, high, whole)
        if number is None:
            kind = "a whole number" if whole else "a number"
            notes.append(
                f"{where}: option {name!r} is {shown}, not {kind} from {low:,g} to {high:,g}; "
                "ignored"
            )
            continue
        kept[name] = number
    return kept, notes


def _in_range(value: object, low: float, high: float, whole: bool) -> int | float | None:
    """``value`` as a finite number from ``low`` to ``high`` (an int when ``whole``),
    or None (booleans and texts are no numbers)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not math.isfinite(value) or not low <= value <= high:
        return None
    if whole:
        return int(value) if float(value).is_integer() else None
    return value


def tool_from_function(function: Callable[..., Any]) -> Tool:
    """Derive a tool from a function's name, signature, type hints and docstring."""
    doc = inspect.getdoc(function) or ""
    summary = doc.split("\n\n", 1)[0].replace("\n", " ").strip()
    arg_docs = dict(
        re.findall(r"^\s*(\w+)(?:\s*\([^)]*\))?:\s*(.+)$", doc.split("Args:", 1)[-1], re.M)
    )
    hints = typing.get_type_hints(function)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for name, parameter in inspect.signature(function).parameters.items():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        schema = _schema(hints.get(name, str))
        if name in arg_docs and "Args:" in doc:
            schema["description"] = arg_docs[name].strip()
        properties[name] = schema
        if parameter.default is inspect.Parameter.empty:
            required.append(name)
    parameters = {"type": "object", "properties": properties, "required": required}
    return Tool(function.__name__, summary or function.__name__, parameters, function)


def _schema(hint: Any) -> dict[str, Any]:
    origin = typing.get_origin(hint)
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if origin is typing.Literal:
        return {"enum": list(typing.get_args(hint))}
    if origin in (typing.Union, types.UnionType):
        return _schema(args[0]) if len(args) == 1 else {"anyOf": [_schema(a) for a in args]}
    if origin in (list, tuple, set, frozenset, Iterable):
        return {"type": "array", "items": _schema(args[0]) if args else {}}
    if origin is dict:
        return {"type": "object"}
    return {"type": _JSON_TYPES.get(hint, "string")}


def normalise(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def agent_dirs(cwd: Path, home: Path) -> list[Path]:
    """Where agents are looked up by name, first match wins."""
    return [cwd / "agents", home / "agents", bundled_agents()]


AGENT_SUFFIXES = (".py", ".md")  # in this order: a folder's NAME.py before its NAME.md


def _agent_files(folder: Path) -> list[Path]:
    """The agent files of ``folder``: ``*.py`` and ``*.md``, by name, a ``.py`` before
    a ``.md`` of the same name (never ``_private`` ones, nor a README)."""
    if not folder.is_dir():
        return []
    found = [
        p
        for suffix in AGENT_SUFFIXES
        for p in folder.glob(f"*{suffix}")
        if not p.name.startswith("_") and p.stem.lower() != "readme"
    ]
    return sorted(found, key=lambda p: (p.stem, AGENT_SUFFIXES.index(p.suffix)))


def agent_names(dirs: Iterable[Path]) -> list[str]:
    """The agent files' stems in ``dirs``, Python and markdown (what ``--agent NAME``
    and ``/agent`` accept)."""
    return sorted({p.stem for d in dirs for p in _agent_files(d)})


def bundled_agents() -> Path:
    """The sample agents that ship with chatloop: ``chatloop/agents`` in an installed
    wheel, the project's own ``agents/`` in a source checkout or editable install."""
    package = Path(__file__).resolve().parents[1]  # chatloop/
    installed = package / "agents"
    return installed if installed.is_dir() else package.parent / "agents"


def find_agent_file(ref: str, dirs: Iterable[Path], *, names_only: bool = False) -> Path:
    """The file for ``ref``: a path to a .py file, or a name matched against agent files.

    With ``names_only`` (a name read from a session file) ``ref`` is only ever
    matched against the agent files of ``dirs``: a session names an agent, it
    never points chatloop at code to run."""
    as_path = Path(ref).expanduser()
    if not names_only and (ref.endswith(AGENT_SUFFIXES) or as_path.is_file()):
        if not as_path.is_file():
            raise UsageError(f"No agent file at {ref}", "Give a path to a .py or .md agent file.")
        return as_path.resolve()
    wanted = normalise(ref)
    seen: list[str] = []
    for folder in dirs:
        for path in _agent_files(folder):
            seen.append(path.stem)
            if normalise(path.stem) == wanted:
                return path.resolve()
    listed = ", ".join(sorted(set(seen))) or "none found"
    raise UsageError(f"No agent named {ref!r}", f"Agents available: {listed}.")


def load_agent(path: Path, source: bytes | None = None) -> Agent:
    """Import an agent file and read its NAME, SYSTEM_PROMPT, OPTIONS and TOOLS.

    ``source``: the file's content as ``chat.trust`` checked it, run instead of a
    second read (which could find another file). Callers that load a file the person
    chose go through ``chat.trust.load``, never here directly. A ``.md`` file is a
    markdown agent (``chat.agent_markdown``): read, never run."""
    if path.suffix == ".md":
        from chatloop.chat.agent_markdown import read_markdown_agent

        said = read_markdown_agent(path, source if source is not None else path.read_bytes())
        options, noted = sampling_options(said.options, path.name)
        said = said._replace(options=options, notes=(*said.notes, *noted))
        return Agent(**said._asdict(), path=str(path))
    spec = importlib.util.spec_from_file_location(f"chatloop_agent_{normalise(path.stem)}", path)
    if spec is None or spec.loader is None:
        raise UsageError(f"Cannot load {path} as Python", "Agent files are .py modules.")
    module = importlib.util.module_from_spec(spec)
    try:
        if source is None:
            spec.loader.exec_module(module)
        else:
            exec(compile(source, str(path), "exec"), module.__dict__)
    except Exception as exc:  # the agent file is user code; report, do not crash
        raise UsageError(
            f"{path.name} failed to load: {type(exc).__name__}: {exc}",
            "Fix the agent file and start chatloop again.",
        ) from exc
    prompt = getattr(module, "SYSTEM_PROMPT", None)
    if not isinstance(prompt, str):
        raise UsageError(
            f"{path.name} defines no SYSTEM_PROMPT string",
            "An agent file needs NAME and SYSTEM_PROMPT.",
        )
    options, notes = sampling_options(getattr(module, "OPTIONS", None), path.name)
    servers, declared = specs_of(getattr(module, "MCP", None), path.name)
    notes.extend(declared)
    tools = tuple(tool_from_function(f) for f in getattr(module, "TOOLS", ()) or ())
    policies = _policies(module, tools, path.name, notes)
    return Agent(
        name=str(getattr(module, "NAME", path.stem.replace("_", " ").title())),
        system_prompt=prompt,
        description=str(getattr(module, "DESCRIPTION", "")),
        options=options,
        tools=tuple(dataclasses.replace(t, policy=policies[t.name]) for t in tools),
        path=str(path),
        notes=tuple(notes),
        mcp=tuple(servers),
    )


def _policies(
    module: types.ModuleType, tools: tuple[Tool, ...], where: str, notes: list[str]
) -> dict[str, str]:
    """Each tool's approval policy: ``APPROVE[name]``, else allow for a name in
    ``READ_ONLY``, else ask; a policy that is not one is noted (it asks)."""
    read_only = set(getattr(module, "READ_ONLY", ()) or ())
    given = dict(getattr(module, "APPROVE", {}) or {})
    out = {}
    for tool in tools:
        policy = str(given.get(tool.name) or ("allow" if tool.name in read_only else "ask"))
        if policy not in POLICIES:
            notes.append(f"{where}: APPROVE[{tool.name!r}] is not one of {', '.join(POLICIES)}")
            policy = "ask"
        out[tool.name] = policy
    return out
