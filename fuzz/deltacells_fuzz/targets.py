"""What is fuzzed, and where: the targets, their shares of the time, caps, paths and worker environment.

:data:`JIT_MODULES` (the modules numba compiles) is the one list to update when the kernels move.
"""

from __future__ import annotations

import os
from pathlib import Path

#: The repository (``fuzz/deltacells_fuzz/targets.py`` is two levels down).
ROOT = Path(__file__).resolve().parents[2]
#: The command-line script; workers run as ``python fuzz_decode.py --worker <target> ...``.
SCRIPT = Path(__file__).resolve().parents[1] / "fuzz_decode.py"
DEFAULT_CORPUS = ROOT / "tests" / "reliability" / "corpus"
CONFORMANCE = ROOT.parent / "shared" / "conformance"

TARGETS = ("tile", "tile-nojit", "manifest", "schema")
WEIGHTS = {"tile": 0.5, "tile-nojit": 0.1, "manifest": 0.2, "schema": 0.2}
EXTENSIONS = {"tile": "dct", "tile-nojit": "dct", "manifest": "json", "schema": "json"}

#: Inputs whose frames declare more than this many bytes in all are not decoded (counted as skipped):
#: decoding them is legitimate (see :func:`~deltacells_fuzz._tilebytes.tile_budget`) but slow, and tells
#: nothing new.
MAX_DECLARED = 64 * 2**20
NOJIT_MAX_DECLARED = 64 * 2**10

#: Modules numba compiles: never rewritten by atheris's instrumentation while the JIT is on.
JIT_MODULES = ("deltacells.codec._kernels", "deltacells.dataset._gather")


def target_environment(target: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a worker for ``target`` runs in (numba bounds checks on, or the JIT off).

    Parameters
    ----------
    target
        One of :data:`TARGETS`.
    base
        The environment to start from (default: this process's).

    Returns
    -------
    dict
        The environment variables.
    """
    env = dict(os.environ if base is None else base)
    cache = Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "deltacells-fuzz" / "numba-boundscheck"
    if target == "tile-nojit":
        env["NUMBA_DISABLE_JIT"] = "1"
    else:
        env["NUMBA_BOUNDSCHECK"] = "1"
        env["NUMBA_CACHE_DIR"] = str(cache)  # kernels compiled with bounds checks, never mixed with the others
    env.setdefault("DELTACELLS_THREADS", "2")
    return env
