"""The ``chatloop`` command, thin over the library: each command parses, calls,
prints; no command decides anything a chat would decide differently.

- ``parser``: every option and subcommand, declared once; the split of a
  command line into a subcommand or a one-shot question.
- ``main``: the entry point and the one error boundary (exit codes).
- ``chat``: a new chat, a continued one, a one-shot question.
- ``listing``: ``sessions``, ``show``, ``search``, ``tree``, ``export``.
- ``maintenance``: ``import``, ``reseal``, ``reindex``, ``doctor``.
- ``wiring``: the settings, store and index every command starts from.
"""

from __future__ import annotations

from chatloop.cli.main import main
from chatloop.cli.parser import COMMANDS, LIST_LIMIT, build_parser, split_prompt

__all__ = ["COMMANDS", "LIST_LIMIT", "build_parser", "main", "split_prompt"]
