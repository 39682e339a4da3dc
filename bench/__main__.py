"""``python -m bench`` is ``python -m bench.run``: every figure (``--quick`` for CI's)."""

from __future__ import annotations

import sys

from bench.run import main

if __name__ == "__main__":
    sys.exit(main())
