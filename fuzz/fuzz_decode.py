#!/usr/bin/env python
"""Bounded, structure-aware fuzzing of the deltacells decoders: ``python fuzz/fuzz_decode.py --help``.

The fuzzer is the package :mod:`deltacells_fuzz` beside this script (Python puts the script's directory on
``sys.path``); its command line is documented in :mod:`deltacells_fuzz.cli`.
"""

from __future__ import annotations

import sys

from deltacells_fuzz.cli import main

if __name__ == "__main__":
    sys.exit(main())
