"""Tools from MCP servers: started when an agent declares them, stopped with the chat.

An agent declares servers by name (a markdown agent's ``mcp`` key, a Python
agent's ``MCP`` dict)::

    mcp:
      time:
        command: mcp-server-time        # started over stdio
        args: [--local-timezone, UTC]
        env: {TZ: UTC}
        approve: ask                    # allow, ask (the default) or deny
        cwd: /srv/clock                 # optional: its working directory (absolute)

Each server runs as a child process speaking the Model Context Protocol over
stdio, through the official ``mcp`` SDK (the optional extra
``chatloop-local[mcp]``, imported only when a server is declared). Its tools
are offered to the model beside the agent's own, named ``SERVER__TOOL``; a call
goes through the same path as any tool call, so it is recorded in the transcript
as one. What a server says is data: its tool names are reduced to the letters a
tool name may hold, its descriptions cut, its results cut
(``agent.MAX_TOOL_RESULT_CHARS``), its stderr never reaches the terminal, nor
does the SDK's own log (``mcp_log``: a file in the home).

Each server is isolated from where the person stands: it runs in the chatloop
home (or the ``cwd`` its declaration gives), with ``PYTHONSAFEPATH=1`` (Python's
``-P``) and only the absolute entries of ``PYTHONPATH``, so a ``sqlite3.py`` in
the working directory is never imported by a Python server. Its process and
every process it starts carry a mark in their environment (``MARK_ENV``); at
``close`` whatever still carries it is ended, a ``setsid`` grandchild too (the
SDK ends the server's process group only when the server outstays its grace).

A server that fails to start costs one line and no tools; one that hangs,
dies in a call or answers garbage costs that call an error result the model
reads. Every wait is bounded (``START_S``, ``CALL_S``, ``STOP_S``).

Approval: each tool offered carries its server's policy (``approve``), which
``chat.approval`` applies before the call. docs/security.md.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from chatloop import children
from chatloop.chat.approval import POLICIES

if TYPE_CHECKING:  # (asyncio costs 28 ms to import: only once a server is declared)
    import asyncio
    import concurrent.futures
    import threading

__all__ = [
    "CALL_S",
    "MARK_ENV",
    "START_S",
    "STOP_S",
    "McpServers",
    "Offered",
    "ServerSpec",
    "specs_of",
]

START_S = 30.0  # a server's start and its tool list
CALL_S = 60.0  # one tool call
STOP_S = 5.0  # each server's stop, then its process is ended
MAX_DESCRIPTION = 1000
MARK_ENV = "CHATLOOP_MCP_RUN"  # in every server's environment: what close ends
END_S = 2.0  # for what carries the mark to leave after SIGTERM, then SIGKILL
_NAME = re.compile(r"[^A-Za-z0-9_-]+")


class Offered(NamedTuple):
    """A tool a server offers, as ``agent.Tool`` is made: its name, description, the
    JSON schema of its parameters, the function that calls it, its server's
    approval policy and its server's name."""

    name: str
    description: str
    parameters: dict[str, Any]
    function: Callable[..., str]
    policy: str
    server: str


class ServerSpec(NamedTuple):
    """One declared server: how it is started and its tools' approval policy
    (``cwd``: its working directory, absolute; "" for the chatloop home)."""

    name: str
    command: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    approve: str = "ask"
    cwd: str = ""


def specs_of(declared: object, where: str) -> tuple[list[ServerSpec], list[str]]:
    """The servers a declaration (``{name: {command, args, env, approve, cwd}}``) names,
    and a note for each entry that cannot be one (never fatal: the chat goes on
    without it). ``where`` names the declaration in the notes."""
    if not declared:
        return [], []
    if not isinstance(declared, Mapping):
        return [], [f"{where}: mcp is not a mapping of server names; ignored"]
    specs: list[ServerSpec] = []
    notes: list[str] = []
    for name, entry in declared.items():
        if not isinstance(entry, Mapping) or not isinstance(entry.get("command"), str):
            notes.append(f"{where}: mcp server {str(name)!r} has no command; ignored")
            continue
        args = entry.get("args") or []
        env = entry.get("env") or {}
        approve = str(entry.get("approve") or "ask")
        if not isinstance(args, list) or not isinstance(env, Mapping):
            notes.append(f"{where}: mcp server {str(name)!r}: args or env malformed; ignored")
            continue
        if approve not in POLICIES:
            notes.append(
                f"{where}: mcp server {str(name)!r}: approve {approve!r} is not one of "
                f"{', '.join(POLICIES)}; it asks"
            )
            approve = "ask"
        cwd = entry.get("cwd") or ""
        if cwd and not (isinstance(cwd, str) and os.path.isabs(os.path.expanduser(cwd))):
            notes.append(
                f"{where}: mcp server {str(name)!r}: cwd {str(cwd)!r} is not an absolute "
                "path; it runs in the chatloop home"
            )
            cwd = ""
        specs.append(
            ServerSpec(
                str(name),
                entry["command"],
                tuple(str(a) for a in args),
                tuple((str(k), str(v)) for k, v in env.items()),
                approve,
                os.path.expanduser(cwd) if cwd else "",
            )
        )
    return specs, notes


class McpServers:
    """The declared servers of one chat, run on an event loop of their own (a thread):
    ``start`` them, hand their ``tools`` to the agent, ``close`` at the end."""

    def __init__(
        self,
        specs: list[ServerSpec],
        say: Callable[[str], None],
        waits: tuple[float, float, float] = (START_S, CALL_S, STOP_S),
        home: Path | None = None,
    ) -> None:
        """``home``: where servers run and the SDK's log is kept (default: the
        chatloop home, ``config.chatloop_home``)."""
        self.specs = specs
        self.start_s, self.call_s, self.stop_s = waits  # (a test waits less)
        self.say = say
        self.home = home
        self._mark = f"{os.getpid()}-{os.urandom(8).hex()}"  # (this chat's servers only)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._sessions: dict[str, Any] = {}
        self._stops: dict[str, asyncio.Event] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._scopes: dict[str, Any] = {}  # each server's anyio cancel scope

    def start(self) -> list[Offered]:
        """Start every server and return the tools they offer (``Offered``: what
        ``agent.Tool`` is made of); a server that cannot start is said in a line and
        offers none."""
        if not self.specs:
            return []
        import asyncio
        import concurrent.futures
        import threading

        try:
            import mcp  # noqa: F401  (the optional extra: said once, when missing)
        except ImportError:
            self.say(
                "MCP servers are declared but the mcp package is not installed: "
                "pip install 'chatloop-local[mcp]'; going on without their tools"
            )
            return []
        from chatloop.chat import mcp_log

        if self.home is None:
            from chatloop.config import chatloop_home

            self.home = chatloop_home()
        mcp_log.to_file(self.home)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        tools: list[Offered] = []
        taken: set[str] = set()
        for spec in self.specs:
            ready: concurrent.futures.Future[list[Any]] = concurrent.futures.Future()
            asyncio.run_coroutine_threadsafe(self._serve(spec, ready), self._loop)
            try:
                listed = ready.result(timeout=self.start_s)
            except concurrent.futures.TimeoutError:
                waited = f"{self.start_s:g} s"
                self.say(f"MCP server {spec.name} did not start within {waited}; no tools")
                self._cancel(spec.name)
                continue
            except Exception as exc:  # (its own failure, as the SDK reports it)
                self.say(f"MCP server {spec.name} did not start: {_first(exc)}; no tools")
                continue
            for found in listed:
                tool = self._tool(spec, found, taken)
                if tool is not None:
                    tools.append(tool)
        return tools

    def close(self) -> None:
        """Stop every server (asked, then cancelled after ``STOP_S``: its process is
        ended either way) and the loop; then end every process still carrying this
        chat's mark (``MARK_ENV``): what the servers started, wherever it went."""
        import asyncio

        loop = self._loop
        if loop is None:
            return
        ending = asyncio.run_coroutine_threadsafe(self._shutdown(), loop)
        with contextlib.suppress(Exception):
            ending.result(timeout=3 * self.stop_s + 5)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=self.stop_s)
        if not loop.is_running():
            loop.close()
        self._loop = None
        _end_marked(f"{MARK_ENV}={self._mark}".encode())

    # ------------------------------------------------------------ on the loop

    async def _shutdown(self) -> None:
        """Ask every server to stop; cancel those still running after ``stop_s`` (one
        that never answered its start, one stuck in a call), and wait for them."""
        import asyncio

        for stop in self._stops.values():
            stop.set()
        running = [task for task in self._tasks.values() if not task.done()]
        if not running:
            return
        _, pending = await asyncio.wait(running, timeout=self.stop_s)
        for name, task in self._tasks.items():
            if task in pending and name in self._scopes:
                self._scopes[name].cancel()
        if pending:  # (the SDK gives a server 2 s to leave, then ends its process tree)
            await asyncio.wait(pending, timeout=self.stop_s + 5)

    async def _serve(self, spec: ServerSpec, ready: concurrent.futures.Future[list[Any]]) -> None:
        """Hold one server's session open until it is asked to stop."""
        import asyncio

        import anyio
        from mcp import ClientSession, StdioServerParameters
        from mcp.client.stdio import stdio_client

        stop = asyncio.Event()
        self._stops[spec.name] = stop
        task = asyncio.current_task()
        if task is not None:
            self._tasks[spec.name] = task
        assert self.home is not None  # (set by start)
        params = StdioServerParameters(
            command=spec.command,
            args=list(spec.args),
            # isolated as every child (chatloop.children), marked as this chat's
            env=children.environment(ours=False, extra={**dict(spec.env), MARK_ENV: self._mark}),
            cwd=spec.cwd or _existing(self.home),
        )
        try:
            # cancelled through its scope (``_cancel``), never the task: the SDK ends
            # the server's process under a shield that a task's cancel would defeat
            with anyio.CancelScope() as scope, open(os.devnull, "w") as quiet:
                self._scopes[spec.name] = scope
                async with (
                    stdio_client(params, errlog=quiet) as (read, write),  # (stderr: nowhere)
                    ClientSession(read, write) as session,
                ):
                    await session.initialize()
                    listed = await session.list_tools()
                    self._sessions[spec.name] = session
                    ready.set_result(list(listed.tools))
                    await stop.wait()
            if scope.cancelled_caught and not ready.done():
                ready.set_exception(TimeoutError("cancelled before it started"))
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError(str(exc)))
        finally:
            self._sessions.pop(spec.name, None)

    # ------------------------------------------------------------ from the chat

    def _cancel(self, name: str) -> None:
        """End the server ``name`` now (it did not start in time): its process too."""
        scope, loop = self._scopes.get(name), self._loop
        if scope is not None and loop is not None:
            loop.call_soon_threadsafe(scope.cancel)

    def _tool(self, spec: ServerSpec, found: Any, taken: set[str]) -> Offered | None:
        """One tool a server listed, as offered: a name a tool may have, the server's
        description (cut), its schema (an object's, or an empty one)."""
        original = str(getattr(found, "name", ""))
        if not original:
            return None
        name = base = _NAME.sub("_", f"{spec.name}__{original}")[:64]
        count = 1
        while name in taken:  # (two names that read alike: numbered, never waited on)
            count += 1
            name = f"{base[:56]}_{count}"
        taken.add(name)
        schema = getattr(found, "input_schema", None) or getattr(found, "inputSchema", None)
        if not isinstance(schema, dict) or schema.get("type") != "object":
            schema = {"type": "object", "properties": {}}
        described = str(getattr(found, "description", "") or "")[:MAX_DESCRIPTION]

        def run(**arguments: Any) -> str:
            return self._call(spec, original, arguments)

        described = f"[{spec.name}] {described}".strip()
        return Offered(name, described, schema, run, spec.approve, spec.name)

    def _call(self, spec: ServerSpec, original: str, arguments: dict[str, Any]) -> str:
        """One call of ``original`` on ``spec``'s server (its policy was applied by the
        caller); raises, an error result for the model, for a timeout, a dead server
        or an error the server reports."""
        import asyncio
        import concurrent.futures

        session, loop = self._sessions.get(spec.name), self._loop
        if session is None or loop is None:
            raise RuntimeError(f"the MCP server {spec.name} is not running")
        future = asyncio.run_coroutine_threadsafe(session.call_tool(original, arguments), loop)
        try:
            result = future.result(timeout=self.call_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            said = f"the MCP server {spec.name} did not answer within {self.call_s:g} s"
            raise TimeoutError(said) from None
        except Exception as exc:
            raise RuntimeError(f"the MCP server {spec.name} failed: {_first(exc)}") from None
        text = _text_of(result)
        if getattr(result, "is_error", None) or getattr(result, "isError", None):
            raise RuntimeError(text or "the tool reported an error")
        return text


def _text_of(result: Any) -> str:
    """A call result's content as text: its text parts, a line for any other part."""
    parts = []
    for item in getattr(result, "content", None) or []:
        text = getattr(item, "text", None)
        parts.append(text if isinstance(text, str) else f"[{getattr(item, 'type', 'content')}]")
    return "\n".join(parts)


def _first(exc: BaseException) -> str:
    """An exception (or the first of a group) in one line."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    said = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {said[0]}" if said else type(exc).__name__


def _existing(home: Path) -> str:
    """``home`` made if missing (0700), as a server's working directory; the root
    when it cannot be made (a read-only place): never where the person stands."""
    from chatloop.store.fsio import ensure_dir

    try:
        return str(ensure_dir(home))
    except OSError:
        return os.path.abspath(os.sep)


def _end_marked(mark: bytes) -> None:
    """End every process whose environment holds ``mark`` (``NAME=VALUE``): SIGTERM,
    SIGKILL to any left after END_S, and wait as long again for them to be gone.
    Found through /proc (Linux); elsewhere nothing is found and the SDK's end of
    each server's process group is all."""
    import time

    began = time.monotonic()
    sent: dict[int, int] = {}
    while left := _marked(mark):
        waited = time.monotonic() - began
        if waited >= 2 * END_S:
            return  # (one that survives SIGKILL is the system's to end)
        sig = signal.SIGKILL if waited >= END_S else signal.SIGTERM
        for pid in left:
            if sent.get(pid) != sig:
                with contextlib.suppress(OSError):
                    os.kill(pid, sig)
                sent[pid] = sig
        time.sleep(0.02)  # (polled: these processes are no children of ours to wait on)


def _marked(mark: bytes) -> list[int]:
    """The live processes (zombies are not) whose environment holds ``mark``,
    never this one."""
    root = Path("/proc")
    if not root.is_dir():
        return []
    found = []
    for entry in root.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if mark not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue  # gone meanwhile, or another user's
        if state not in ("Z", "X"):
            found.append(int(entry.name))
    return found
