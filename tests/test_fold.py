"""`chatloop sessions` folds a compact/resume chain into one line; --expand lists
every file; numbers mean the same either way (in process, through cli.main)."""

from __future__ import annotations

import json

import pytest

from chatloop.cli import main
from chatloop.store.store import Store
from tests.fakes import STRUCTURED, FakeBackend
from tests.hosts import chat


def listing(capsys: pytest.CaptureFixture[str], *args: str) -> list[str]:
    assert main(["sessions", *args]) == 0
    return capsys.readouterr().out.splitlines()


def test_a_chain_is_one_line_with_its_length_and_forks_stay_apart(
    store: Store, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:  # fmt: skip
    monkeypatch.chdir(store.cwd)
    session, _ = chat(store, FakeBackend(default=STRUCTURED))
    session.send("first part about compost")
    session.compact()
    session.send("second part")
    session.compact()
    session.send("third part")
    session.close()
    alone, _ = chat(store, FakeBackend(default=STRUCTURED))
    alone.send("a lone question")
    alone.close()
    brancher, _ = chat(store, FakeBackend(default=STRUCTURED))
    assert brancher.resume("2", fork=True)  # 2: the chain's last file
    brancher.send("a branch of it")
    brancher.close()

    expanded = listing(capsys, "--expand")
    assert len(expanded) == 5 and not any("chain of" in line for line in expanded)
    folded = listing(capsys)
    assert len(folded) == 3, (folded, expanded)
    (chain,) = [line for line in folded if "[chain of 3]" in line]
    (fork,) = [line for line in folded if "[fork after query 1]" in line]
    (lone,) = [line for line in folded if "a lone question" in line]
    assert "chain of" not in fork + lone
    # the same number and handle for the same session, folded or not
    assert chain.replace(" [chain of 3]", "") in expanded
    assert fork in expanded and lone in expanded
    assert len(json.loads("\n".join(listing(capsys, "--json")))) == 3
    assert len(json.loads("\n".join(listing(capsys, "--json", "--expand")))) == 5
    limited = listing(capsys, "--limit", "2")
    assert len(limited) == 3 and limited[-1].startswith("… 1 older")
