"""``python -m deltacells_fuzz`` (with ``fuzz/`` on ``sys.path``): the same as ``python fuzz/fuzz_decode.py``."""

from __future__ import annotations

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
