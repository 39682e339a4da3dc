"""The layers of docs/architecture.md hold, from the code's own imports.

A module may import its own layer or lower ones: config/errors/ids, then
format, then store and backends, then chat, then ui, then cli. Only ui/
imports rich or prompt_toolkit; only store/ and the CLI's streaming commands
open session files (not checked here: docs/durability.md says where).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "chatloop"
LAYER = {
    "config": 0,
    "errors": 0,
    "ids": 0,
    "format": 1,
    "store": 2,
    "backends": 2,
    "chat": 3,
    "ui": 4,
    "cli": 5,
}
TERMINAL = ("rich", "prompt_toolkit")


def part_of(module: str) -> str | None:
    """The layer name of ``chatloop.x.y`` (``x``), None for anything outside chatloop."""
    bits = module.split(".")
    return bits[1] if bits[0] == "chatloop" and len(bits) > 1 else None


def imports(path: Path) -> list[tuple[str, int]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append((node.module, node.lineno))
            found += [(f"{node.module}.{a.name}", node.lineno) for a in node.names]
    return found


def test_no_module_imports_a_layer_above_its_own() -> None:
    wrong = []
    checked = 0
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        own = part_of(".".join(rel.parts))
        if own not in LAYER:  # chatloop/__init__.py, and agents shipped as package data
            continue
        checked += 1
        for name, line in imports(path):
            other = part_of(name)
            if other in LAYER and LAYER[other] > LAYER[own]:
                wrong.append(f"{rel}:{line} imports {name} ({other} is above {own})")
            if own != "ui" and name.split(".")[0] in TERMINAL:
                wrong.append(f"{rel}:{line} imports {name}: only ui/ talks to the terminal")
    assert checked >= 30  # the walk really saw the package
    assert wrong == []
