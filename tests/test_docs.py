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
