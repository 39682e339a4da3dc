"""THE place a chosen agent file becomes the agent a chat or a one-shot talks with.

Every entry point that starts with an agent or changes it (a new chat, ``-c``,
``-r``, the picker, ``search --resume``, a one-shot, ``/agent``, ``/resume``) has
chosen a file (``agent.find_agent_file``, ``continuation.agent_for``) and hands it
to ``Arming.arm``, which does every step, in this order, the same way each time:

1. the file may run (``trust.load``: the person's folders, or their yes);
2. ``-s`` replaces its system prompt, when the command line gave one;
3. its MCP servers and the config's (``mcp_servers``) that it does not declare
   itself are started: the config's only when they come from the person's own
   config file or the person said yes to that declaration (``trust.approved_servers``);
   else they are named and, where no one can be asked, left out with one line;
4. each tool acts only as its policy and the person decide (``agent.armed``).

An ``Arming`` belongs to one run of chatloop: it knows the person's home (one
notion of it: ``config.chatloop_home``, never the sessions folder
``--sessions-dir`` names), who is asked, and the servers it started, which it
stops when ``close`` is called (the chat or the one-shot has ended).
docs/security.md.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

from chatloop.chat import trust
from chatloop.chat.agent import Agent, armed
from chatloop.chat.approval import Approvals, Approve
from chatloop.chat.mcp_servers import McpServers, ServerSpec, specs_of
from chatloop.config import Declared, Settings
from chatloop.errors import Unapproved

__all__ = ["Arming", "with_model"]


class Arming:
    """Arms agents for one run: ``home`` (the person's: trust, their agent folder),
    ``settings`` (the config's MCP servers), ``declared`` (where those come from),
    ``ask`` (a yes/no question on the terminal; None: no one can be asked now),
    ``later`` (with ``ask`` None: a question is due, so raise ``Unapproved`` and let
    the caller ask on the terminal and arm again, as a new chat's first prompt does;
    otherwise the config's unapproved servers are left out with a line),
    ``approvals`` (who lets tools act) and ``say`` (a line for the person)."""

    def __init__(
        self,
        home: Path,
        settings: Settings,
        declared: Declared,
        approvals: Approvals,
        say: Callable[[str], None],
        ask: trust.Ask | None = None,
        later: bool = False,
    ) -> None:
        self.home = home
        self.settings = settings
        self.declared = declared
        self.approvals = approvals
        self.say = say
        self.ask = ask
        self.later = later
        self.working: Callable[[str], AbstractContextManager[object]] = _quietly
        self._declined = False  # the person said no to the config's servers in this run
        self._running: list[McpServers] = []  # the servers of every agent armed

    @classmethod
    def of(cls, settings: Settings, say: Callable[[str], None]) -> Arming:
        """The arming of a chat made without a command line (a test, a library user):
        the home and config of the environment, nobody asked until ``attach``."""
        from chatloop.config import chatloop_home, servers_declared

        return cls(chatloop_home(), settings, servers_declared(None), Approvals(say=say), say)

    def attach(
        self,
        ask: trust.Ask,
        approve: Approve,
        say: Callable[[str], None],
        working: Callable[[str], AbstractContextManager[object]],
    ) -> None:
        """From now on a chat asks (``ask``: an agent file or servers; ``approve``: a
        tool's call), hears the lines (``say``) and shows slow work (``working``): the
        chat calls this once it can."""
        self.ask, self.later, self.working = ask, False, working
        self.approvals.approve = approve
        self.approvals.say = self.say = say

    def arm(self, path: Path, system: str | None = None) -> Agent:
        """The agent of ``path`` ready to talk: allowed to run (raises ``Unapproved``
        otherwise), ``system`` as its prompt when given (``-s``), its tools and its
        servers' (and the config's) each gated by its approval. Its servers run until
        ``close`` (an agent switched away from may be switched back to)."""
        agent = trust.load(path, self.home, self.ask)
        if system is not None:
            agent = dataclasses.replace(agent, system_prompt=system, system_given=True)
        specs = self._specs(agent)
        servers = McpServers(specs, say=self.say, home=self.home)
        try:
            with self.working("Starting MCP servers...") if specs else nullcontext():
                ready = armed(agent, servers, self.approvals)
        except BaseException:
            servers.close()
            raise
        self._running.append(servers)
        return ready

    def close(self) -> None:
        """Stop the servers of every agent armed (the chat has ended)."""
        running, self._running = self._running, []
        for servers in running:
            servers.close()

    def ask_first(self, path: Path, ask: trust.Ask) -> None:
        """Ask now, through ``ask``, what arming ``path`` would have to ask (the agent
        file, the config's servers); each yes is remembered, a no to the file raises
        ``Unapproved``, a no to the servers leaves them out for this run."""
        trust.approved_source(path, self.home, ask)
        declared = self.settings.mcp_servers
        if declared and not self.declared.own and not self._declined:
            self._declined = not trust.approved_servers(
                self.declared.where, declared, self.home, ask
            )

    def _specs(self, agent: Agent) -> list[ServerSpec]:
        """The servers of ``agent``: its own, then the config's it does not declare, when
        they may start."""
        own = {spec.name for spec in agent.mcp}
        configured = [spec for spec in self._configured() if spec.name not in own]
        return [*agent.mcp, *configured]

    def _configured(self) -> list[ServerSpec]:
        """The config's servers, when the person's own file declares them or the person
        allowed this declaration; [] (and a line) when not."""
        declared = self.settings.mcp_servers
        if not declared or self._declined:
            return []
        where = self.declared.where
        if not self.declared.own:
            try:
                allowed = trust.approved_servers(where, declared, self.home, self.ask)
            except Unapproved as refused:
                if self.later:
                    raise
                self.say(f"{refused.message}. {refused.hint}")
                allowed = False
            if not allowed:
                self._declined = True
                return []
        specs, notes = specs_of(json.loads(declared), f"mcp_servers of {where}")
        for note in notes:
            self.say(note)
        if specs and not self.declared.own:  # named at every start, as a redirection is
            self.say(f"MCP servers from {where}: {', '.join(spec.name for spec in specs)}")
        return specs


def _quietly(label: str) -> AbstractContextManager[object]:
    return nullcontext()


def with_model(settings: Settings, agent: Agent) -> Settings:
    """``settings`` with ``agent``'s model (a markdown agent's ``model:``) when none was
    configured: the rule every entry point applies."""
    return settings._replace(model=agent.model) if agent.model and not settings.model else settings
