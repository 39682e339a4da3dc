"""chatloop: a terminal chat loop for local LLM agents.

Sessions are markdown files with YAML front matter that read back losslessly
(see docs/format.md). This package keeps its import light: nothing heavy is
imported here, so ``chatloop --version`` stays fast.
"""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["__version__"]
