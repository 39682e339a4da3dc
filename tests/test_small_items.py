"""Issue 31's smaller items, each through the installed program."""

from __future__ import annotations

from chatloop.format import Message
from chatloop.store.store import Store
from tests.conftest import T0, new_meta
from tests.pty_driver import run


def test_a_multi_line_title_is_listed_on_one_line(store: Store) -> None:
    title = "first line\nsecond line\r\nthird\u2028fourth\tfifth"
    with store.create(new_meta(title=title)) as writer:
        writer.append(Message.create("user", T0, text="hello"))
        writer.finalize()
    for args in (("sessions",), ("show", "1")):
        done = run(*args, home=store.root, cwd=store.cwd)
        assert done.returncode == 0, done.stderr
        lines = [line for line in done.stdout.splitlines() if "first line" in line]
        assert lines and all("second line third fourth fifth" in line for line in lines), (
            args,
            done.stdout,
        )
