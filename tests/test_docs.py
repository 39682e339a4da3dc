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
