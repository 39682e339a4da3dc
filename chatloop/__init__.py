"""chatloop: a terminal chat loop for local LLM agents.

Sessions are markdown files with YAML front matter that read back losslessly
(see docs/format.md). This package keeps its import light: nothing heavy is
imported here, so ``chatloop --version`` stays fast.
"""

from __future__ import annotations

__version__ = "0.1.0"
# The name on the package index: `chatloop` there is another project. The import
# package and the command stay `chatloop`.
DISTRIBUTION = "chatloop-local"
__all__ = ["DISTRIBUTION", "__version__"]
