"""Who answers, switched: another model, another server, another agent, as functions.

Who answers a chat is three things that change together: the agent, the backend
(the server and its model) and the meter of that model with that agent (its window,
counts and plans: what was learnt of a model is that model's). ``ChatSession``
holds them and assigns them in one place; what a switch makes is decided here,
over parameters, and comes back as values: the new meter (``model``, ``backend``,
``agent``), the model an agent names (``named_model``), the agent and the server a
``/resume`` goes on with (``agent_for``, ``server_for``: the rules of
``chat.continuation`` and ``chat.server``, which every entry point calls), and a
waiting continuation relabelled for another agent (``relabelled``). What is to be
said comes back as notes (``host.Note``). Nothing here holds a session.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from chatloop.backends.base import Backend
from chatloop.chat import continuation, recall
from chatloop.chat.agent import Agent, agent_dirs
from chatloop.chat.arming import with_model
from chatloop.chat.host import Note
from chatloop.chat.meter import Meter
from chatloop.chat.state import Continuation
from chatloop.config import Settings

__all__ = ["agent", "agent_for", "backend", "model", "named_model", "relabelled", "server_for"]


def model(
    backend: Backend, agent: Agent, settings: Settings, name: str
) -> tuple[Meter, str | None]:
    """``backend`` sending the next requests to its server's model ``name``, and the
    meter made anew for it; with None when the server's list had it, else why it could
    not be checked (its list failed: the switch is made unchecked). Raises
    ChatloopError, with ``backend`` unchanged, when the server lists models and
    ``name`` is not one."""
    from chatloop.chat import server  # (where it is used: the detection it imports)

    unchecked = server.offered(backend, name)
    backend.model = name
    return Meter.of(backend, agent, settings), unchecked


def backend(new: Backend, agent: Agent, settings: Settings) -> Meter:
    """The meter of ``new``'s model with ``agent``, made anew: nothing learnt of the
    model that answered before carries over."""
    return Meter.of(new, agent, settings)


def agent(new: Agent, meter: Meter, recalls: recall.Recall) -> tuple[Agent, Meter]:
    """``new`` as it goes on (with the recall tool when it calls tools:
    ``recall.with_tool``), and the meter that keeps the model's window and counts and
    plans with its system prompt and tools (``Meter.for_agent``)."""
    armed = recall.with_tool(new, recalls)
    return armed, meter.for_agent(armed)


def named_model(agent: Agent, settings: Settings, current: str) -> str | None:
    """The model to switch to for ``agent`` (a markdown agent's ``model:``) when none
    was configured in ``settings`` (``arming.with_model``'s rule, in a chat under way),
    None when it names none, one was configured, or it is ``current`` already."""
    wanted = with_model(settings, agent).model
    if not agent.model or wanted != agent.model or wanted == current:
        return None
    return wanted


def agent_for(
    located: continuation.Located, current: Agent, named: bool, cwd: Path, home: Path
) -> tuple[Path | None, tuple[Note, ...]]:
    """The agent file to arm to continue ``located`` (``continuation.agent_for``: the
    rule ``chatloop -r`` follows), None when ``current`` goes on; and what to say of
    the choice, said before the agent is armed (arming may ask the person first)."""
    choice = continuation.agent_for(
        located,
        current=Path(current.path),
        current_name=current.name,
        named=named,
        dirs=agent_dirs(cwd, home),
    )
    notes: tuple[Note, ...] = ()
    if choice.note:
        notes = ((choice.note[0].upper() + choice.note[1:], "warn"),)
    if choice.path.resolve() == Path(current.path).resolve():
        return None, notes
    return choice.path, notes


def server_for(
    located: continuation.Located, current: Backend, settings: Settings, home: Path
) -> tuple[Backend | None, tuple[Note, ...]]:
    """The backend to continue ``located`` with (``server.connect``: the rule every
    entry point calls), None when ``current`` goes on; and what to say of it. Of the
    two backends, the one not kept is closed here. Raises ``Unreachable`` when no
    server answers (nothing changed)."""
    from chatloop.chat import server

    held = server.Held.of(located.parent.meta)
    if server.same_server(current, settings, held):
        return None, ()
    connected = server.connect(settings, held, home)
    notes = tuple[Note, ...]((note[0].upper() + note[1:], "warn") for note in connected.notes)
    if connected.backend.base_url == current.base_url:
        connected.backend.close()
        return None, notes
    current.close()
    return connected.backend, notes


def relabelled(waiting: Continuation, agent: Agent) -> Continuation:
    """``waiting`` written, with its next message, as a file that names ``agent``."""
    template = replace(waiting.template, agent=agent.name, agent_name=Path(agent.path).stem)
    return replace(waiting, template=template)
