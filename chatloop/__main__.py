"""The ``chatloop`` console script and ``python -m chatloop``.

``chatloop --version`` is answered here, before the command line module (and
argparse) load, so it costs little more than the interpreter's own start;
everything else goes to ``chatloop.cli.main``.
"""

from __future__ import annotations

import sys

from chatloop import __version__


def main() -> int:
    """Entry point: the exit code of the command."""
    if sys.argv[1:] == ["--version"]:
        print(f"chatloop {__version__}")
        return 0
    from chatloop.cli import main as run

    return run()


if __name__ == "__main__":
    sys.exit(main())
