"""``python -m chatloop.cli``: the same as the ``chatloop`` command."""

from __future__ import annotations

import sys

from chatloop.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
