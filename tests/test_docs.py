"""The documentation names everything there is: every subcommand and every REPL
``/command`` in README.md, every front-matter key in docs/format.md. Each list is
taken from the code that declares it, so a new command or key without its words
fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from chatloop.cli import COMMANDS, build_parser
from chatloop.format.front_matter import KNOWN_KEYS
from chatloop.ui.commands import TABLE

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
FORMAT = (ROOT / "docs" / "format.md").read_text(encoding="utf-8")

# what each subcommand needs besides its name to be parsed at all
REQUIRED = {"search": ["words"], "import": ["path"]}


def test_the_subcommands_are_the_parsers() -> None:
    """``COMMANDS`` is what ``build_parser`` parses and what ``--help`` lists."""
    parser = build_parser()
    for name in COMMANDS:
        args = parser.parse_args([name, *REQUIRED.get(name, [])])
        assert args.command == name
    listed = re.findall(r"^ {4}([a-z]+)(?: |$)", parser.format_help(), re.MULTILINE)
    assert tuple(listed) == COMMANDS
    with pytest.raises(SystemExit):  # (argparse says so on stderr)
        parser.parse_args(["no-such-command"])


@pytest.mark.parametrize("name", COMMANDS)
def test_every_subcommand_is_in_the_readme(name: str) -> None:
    assert re.search(rf"`chatloop {name}\b", README), f"README.md never shows chatloop {name}"


@pytest.mark.parametrize("name", [name for spec in TABLE for name in (spec.name, *spec.aliases)])
def test_every_repl_command_is_in_the_readme(name: str) -> None:
    assert re.search(rf"(?<![\w/])/{name}\b", README), f"README.md never names /{name}"


@pytest.mark.parametrize("key", KNOWN_KEYS)
def test_every_front_matter_key_is_in_the_format_doc(key: str) -> None:
    # as a table's `key`, or as its nested keys' `key.part`
    assert re.search(rf"`{key}[`.]", FORMAT), f"docs/format.md never describes {key}"


def test_every_timing_in_the_readme_says_where_it_was_measured() -> None:
    """Issue 46: each paragraph of README.md that gives a time in seconds or minutes says
    how it was measured (a bench script, CI's run, or the machine and its load), and
    every script it names exists; the quick subset it names is a registered marker."""
    # a time something took (not a setting's value: "a server that hangs (60 s)")
    timing = re.compile(
        r"\b(?:took|takes|about|in under|later|back at the shell)\b[^.]*?\b\d[\d.,-]* ?"
        r"(?:s|seconds|minutes)\b|\b\d[\d.,-]* ?(?:s|seconds|minutes) (?:later|in runs)"
    )
    source = re.compile(r"bench/\w+\.py|\bCI\b|idle|busy|load of|measured")
    text = re.sub(r"```.*?```", "", README, flags=re.DOTALL)  # (sample output: no claims)
    prose = [p for p in text.split("\n\n") if not p.lstrip().startswith("|")]
    unsourced = [p for p in prose if timing.search(p) and not source.search(p)]
    assert unsourced == [], unsourced
    assert sum(bool(timing.search(p)) for p in prose) >= 3  # (the check sees the claims)
    for script in set(re.findall(r"bench/\w+\.py", README)):
        assert (ROOT / script).is_file(), script
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert 'python -m pytest -m "not e2e"' in README and '"e2e: ' in pyproject


# ---------------------------------------------------------------- where things live
CHATLOOP = ROOT / "chatloop"
PACKAGES = ("cli", "ui", "chat", "store", "backends", "format")
ARCHITECTURE = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
# names the docs use that are not chatloop's own: rich's ``Text``
FOREIGN = {"Text"}


def _code_map() -> str:
    """README.md's code map: the paragraph that begins ``Code map``."""
    start = README.index("Code map")
    end = README.find("\n\n", start)
    return README[start : end if end != -1 else len(README)]


def _modules_named(text: str) -> list[str]:
    """Every ``pkg/module.py`` path ``text`` names (with or without ``chatloop/``)."""
    pattern = rf"(?<![\w/])(?:chatloop/)?((?:{'|'.join(PACKAGES)})/\w+\.py)"
    return sorted(set(re.findall(pattern, text)))


def _defined() -> tuple[set[str], dict[str, set[str]]]:
    """Every name chatloop's modules bind at their top level, and each class's
    attributes (methods, fields, what its methods assign to ``self``)."""
    import ast

    names: set[str] = set()
    classes: dict[str, set[str]] = {}
    for path in CHATLOOP.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Assign):
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            own = classes.setdefault(node.name, set())
            for item in ast.walk(node):
                if isinstance(item, ast.FunctionDef):
                    own.add(item.name)
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    own.add(item.target.id)
                elif isinstance(item, ast.Attribute) and isinstance(item.ctx, ast.Store):
                    own.add(item.attr)
    return names, classes


def _resolves(dotted: str) -> bool:
    """True when ``dotted`` (``chat.chain.summarize``, ``format.Plain``,
    ``store.writer``) names a module of chatloop or a name in one (a class's attribute
    included)."""
    import importlib

    parts = dotted.removeprefix("chatloop.").split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module("chatloop." + ".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            if not hasattr(found, name):
                inside = [
                    v for v in vars(found).values() if isinstance(v, type) and hasattr(v, name)
                ]
                if not inside:
                    return False
                found = inside[0]
            found = getattr(found, name)
        return True
    return False


def test_every_module_the_readme_code_map_names_exists() -> None:
    folder, missing = CHATLOOP, []
    for token in re.findall(r"`([^`]+)`", _code_map()):
        name = token.rstrip("/").split("/")[-1]
        if token.endswith("/") and name in PACKAGES:
            folder = CHATLOOP / name
        elif token.endswith("/") and (folder / name).is_dir():  # a package inside
            folder = folder / name
        elif re.fullmatch(r"\w+\.py", token):
            # in the package named last (or the one around it, after a package inside),
            # or the bottom layer (config.py, errors.py)
            homes = (folder, folder.parent, CHATLOOP)
            missing += [] if any((home / token).exists() for home in homes) else [token]
    assert missing == []


@pytest.mark.parametrize("doc", ["README.md", "docs/architecture.md", "docs/durability.md"])
def test_every_module_path_the_docs_name_exists(doc: str) -> None:
    text = (ROOT / doc).read_text(encoding="utf-8")
    assert [p for p in _modules_named(text) if not (CHATLOOP / p).exists()] == []


def test_every_public_name_the_architecture_names_exists() -> None:
    import builtins

    names, classes = _defined()
    missing = []
    for token in sorted(set(re.findall(r"`([^`\s()]+)(?:\(\))?`", ARCHITECTURE))):
        token = token.rstrip(":")
        head, _, rest = token.partition(".")
        if re.search(r"\.(db|json|md|py|yaml)$", token):
            continue  # a file's name
        if head in PACKAGES or head == "chatloop":
            known = _resolves(token)
        elif re.fullmatch(r"[A-Z][A-Za-z]+", head) and not head.isupper():
            known = head in names or head in FOREIGN or hasattr(builtins, head)
            known = known and (not rest or rest.split(".")[0] in classes.get(head, set()))
        elif re.fullmatch(r"[a-z_]+", head) and rest:
            # a module named alone: ``sharing.step_back``, ``writer.finalize``
            homes = [p for p in PACKAGES if (CHATLOOP / p / f"{head}.py").exists()]
            known = not homes or any(_resolves(f"{p}.{token}") for p in homes)
        else:
            continue
        if not known:
            missing.append(token)
    assert missing == []


def test_every_sub_package_is_in_the_wheel() -> None:
    """pyproject.toml lists the packages by hand (its package-dir mapping turns
    setuptools' discovery off): every folder of ``chatloop/`` with an ``__init__.py``
    is listed, or the installed program fails to import (a wheel without
    ``chatloop.ui.commands`` did)."""
    import tomllib

    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = {
        ".".join(init.parent.relative_to(ROOT).parts) for init in CHATLOOP.rglob("__init__.py")
    }
    assert found and found - listed == set(), found - listed
