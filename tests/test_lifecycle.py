"""The lifecycle (``chat.lifecycle``) is the only code that assigns a session's state
and its unsaved queue; its transitions and its queue on their own."""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

import pytest

from chatloop.chat.lifecycle import Lifecycle
from chatloop.chat.state import Closing, Fresh, Open
from chatloop.errors import StoreError
from chatloop.format import Message, SessionMeta
from chatloop.store.store import Store
from tests.conftest import T0

CHATLOOP = Path(__file__).resolve().parent.parent / "chatloop"
OWNER = CHATLOOP / "chat" / "lifecycle.py"
# the picker's ``state`` is its own view's (``ui.picker._State``), not a session's
OTHERS = {CHATLOOP / "ui" / "picker.py"}


def assigned(tree: ast.AST, names: set[str]) -> list[int]:
    """The lines of ``tree`` that assign (or delete, or augment) an attribute or a
    subscript of an attribute named one of ``names``."""

    def named(target: ast.expr) -> bool:
        if isinstance(target, ast.Subscript):
            target = target.value
        if isinstance(target, ast.Tuple | ast.List):
            return any(named(t) for t in target.elts)
        return isinstance(target, ast.Attribute) and target.attr in names

    lines = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign | ast.Delete):
            targets = list(node.targets)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        if any(named(t) for t in targets):
            lines.append(node.lineno)
    return lines


def test_no_module_but_the_lifecycle_assigns_a_state_or_the_queue() -> None:
    found = {}
    for path in sorted(CHATLOOP.rglob("*.py")):
        if path == OWNER:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = {"_queue"} if path in OTHERS else {"state", "_state", "_queue"}
        lines = assigned(tree, names)
        if lines:
            found[str(path.relative_to(CHATLOOP))] = lines
    assert found == {}
    assert assigned(ast.parse(OWNER.read_text(encoding="utf-8")), {"_state", "_queue"})


def test_an_assignment_in_a_method_is_found() -> None:
    code = "class A:\n    def f(self):\n        self.state = 1\n        x.y._queue[0:0] = []\n"
    assert assigned(ast.parse(code), {"state", "_queue"}) == [3, 4]


def test_open_closing_and_back(store: Store) -> None:
    meta = SessionMeta(id="", created=T0, updated=T0, agent="a", model="m")
    writer = store.create(meta)
    life = Lifecycle()
    assert isinstance(life.state, Fresh)
    with pytest.raises(ValueError, match="only an open session"):
        life.closing()
    life.open(writer, previous="the summary", chain_base=40)
    life.revise("the model's summary")
    was = life.closing()
    assert isinstance(life.state, Closing) and life.state.previous == "the model's summary"
    life.reopen(was)
    assert life.state == Open(writer, "the model's summary", (), 40)
    life.fresh()
    assert isinstance(life.state, Fresh)
    writer.close()


class Refusing:
    """A writer whose disk fills after ``room`` messages."""

    def __init__(self, room: int) -> None:
        self.room = room
        self.last_message: Message | None = None

    def append(self, message: Message) -> None:
        if self.room == 0:
            raise StoreError("No space left on device")
        self.room -= 1
        self.last_message = message


def test_the_queue_keeps_order_and_writes_each_message_once() -> None:
    first, second, third = (Message.create("user", T0, text=t) for t in ("a", "b", "c"))
    life = Lifecycle()
    assert life.hold(first) == 1 and life.hold(second) == 2
    full = Refusing(1)
    with pytest.raises(StoreError):
        life.write(full)  # type: ignore[arg-type]
    assert life.queued == (second,)
    held = life.take_all()
    life.hold(third)
    life.put_back(held)
    assert life.queued == (second, third)
    ack = Message.create("assistant", T0, text="ok")
    life.hold_first(ack)
    assert life.write(Refusing(3)) == 3 and life.queued == ()  # type: ignore[arg-type]
    life.hold(first)
    life.drop(first)
    life.hold(second)
    life.written(1)
    assert life.queued == ()


def test_an_addition_is_written_after_what_is_queued_or_not_kept_at_all() -> None:
    typed, recalled = (Message.create("user", T0, text=t) for t in ("typed", "recalled"))
    life = Lifecycle()
    life.hold(typed)
    assert not life.record(recalled, Refusing(1))  # type: ignore[arg-type]
    assert life.queued == ()  # what was typed got written; the addition left no trace
    life.hold(typed)
    assert not life.record(recalled, Refusing(0))  # type: ignore[arg-type]
    assert life.queued == (typed,)  # still in hand, in order, without the addition
    roomy = Refusing(2)
    assert life.record(recalled, roomy)  # type: ignore[arg-type]
    assert life.queued == () and roomy.last_message is recalled


def test_what_the_state_means_is_told_by_the_lifecycle(store: Store) -> None:
    """The views of the state (``writer``, ``previous``, ``prefix``, ``chain_base``,
    ``messages``) for each state, without a session."""
    from chatloop.chat import builders, chain
    from chatloop.chat.agent import load_agent
    from chatloop.chat.meter import Meter
    from tests.fakes import FakeBackend
    from tests.hosts import AGENTS, TEST_SETTINGS

    meta = SessionMeta(id="", created=T0, updated=T0, agent="a", model="m")
    parent = chain.Parent(Path("/sessions/p1.md"), replace(meta, id="p1"), "the summary")
    history = (Message.create("user", T0, text="earlier"),)
    life = Lifecycle()
    typed = Message.create("user", T0, text="typed ahead")
    life.hold(typed)
    assert (life.writer, life.previous, life.prefix, life.chain_base) == (None, None, (), 0)
    assert life.messages() == [typed]
    life.wait(builders.with_history(parent, history, meta, ()))
    assert life.previous == "the summary" and life.prefix == history
    agent = load_agent(AGENTS / "simple_sally.py")
    sizes = Meter.of(FakeBackend(window=32_000), agent, TEST_SETTINGS).sizes()
    waiting = builders.from_summary(parent, "the summary", meta, (), sizes, T0)
    life.wait(waiting)
    assert life.previous == "the summary" and life.prefix == ()
    assert life.messages() == [waiting.preview, typed]  # what it will write, then typed
    with store.create(meta) as writer:
        said = Message.create("user", T0, text="said")
        writer.append(said)
        life.open(writer, "the summary", history, chain_base=40)
        assert life.writer is writer and life.prefix == history and life.chain_base == 40
        assert life.messages() == [said, typed]
        life.closing()
        assert life.writer is writer and life.previous == "the summary"
        assert life.prefix == () and life.chain_base == 0


def test_what_a_state_says_of_itself(store: Store) -> None:
    from chatloop.chat import builders, chain
    from chatloop.chat.state import Waiting, status

    def phase(messages: list[Message]) -> str:
        return f"{len(messages)} prepared"

    assert status(Fresh(), 10, phase) == status(Fresh(), 0, phase)
    assert status(Fresh(), 10, phase).phase == "fresh"
    meta = SessionMeta(id="", created=T0, updated=T0, agent="a", model="m")
    parent = chain.Parent(Path("/sessions/p1.md"), replace(meta, id="p1"), "the summary")
    waiting = status(Waiting(builders.with_history(parent, (), meta, ())), 10, phase)
    assert (waiting.phase, waiting.continues, waiting.how) == ("waiting", "p1", "its whole history")
    with store.create(replace(meta, parent_id="p1")) as writer:
        writer.append(Message.create("user", T0, text="said"))
        opened = status(Open(writer, chain_base=40), 10, phase)
        assert (opened.phase, opened.continues, opened.chain_tokens) == ("open", "p1", 50)
        assert opened.prepared == "1 prepared" and opened.path == writer.path
        closing = status(Closing(writer), 10, phase)
        assert (closing.phase, closing.chain_tokens, closing.prepared) == ("closing", 0, "")
    with store.create(meta) as alone:
        assert status(Open(alone, chain_base=40), 10, phase).chain_tokens == 0  # no chain
