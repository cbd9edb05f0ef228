"""The decoder's kernels as its callers call them: numba's once loaded, numpy's until then.

Each function here runs the kernel of its name from ``deltacells.codec._kernels`` (compiled by numba) when
``deltacells._kernel_loading.compiled_kernels()`` says so, else its numpy version from
``deltacells.codec._vectorised`` (the first such call starts loading numba's kernels in the background).
Kernels that run only on rare input (exceptions of the format's escapes) have no numpy version: they wait for
the compiled ones.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

from deltacells._kernel_loading import compiled_kernels, load_compiled_kernels
from deltacells.codec import _vectorised

__all__ = [
    "apply_gap_exceptions",
    "apply_value_exceptions",
    "chunk_table_ok",
    "decode_chunk",
    "map_columns",
    "read_only",
    "sort_rows",
]


def chunk_table_ok(*args: Any) -> bool:
    """``chunk_table_ok`` (see ``deltacells.codec._kernels``)."""
    return bool(_kernels().chunk_table_ok(*args))


def decode_chunk(*args: Any) -> tuple[int, int]:
    """``decode_chunk`` (see ``deltacells.codec._kernels``)."""
    found: tuple[int, int] = _kernels().decode_chunk(*args)  # the module's kernel, or its numpy version
    return found


def sort_rows(*args: Any) -> None:
    """``sort_rows`` (see ``deltacells.codec._kernels``)."""
    _kernels().sort_rows(*args)


def apply_value_exceptions(*args: Any) -> tuple[int, int]:
    """``apply_value_exceptions``, compiled (see ``deltacells.codec._kernels``)."""
    found: tuple[int, int] = _compiled().apply_value_exceptions(*args)
    return found


def apply_gap_exceptions(*args: Any) -> tuple[int, int]:
    """``apply_gap_exceptions``, compiled (see ``deltacells.codec._kernels``)."""
    found: tuple[int, int] = _compiled().apply_gap_exceptions(*args)
    return found


def map_columns(*args: Any) -> None:
    """``map_columns``, compiled (see ``deltacells.codec._kernels``)."""
    _compiled().map_columns(*args)


def read_only(array: np.ndarray) -> np.ndarray:
    """``array``, or a read-only view of it: what a kernel that only reads an argument is given.

    numba compiles a kernel once per type of its arguments, and a writable array is not of the type of a
    read-only one: the same kernel called with the view of a tile's bytes (read-only) and with a fresh array
    (writable) would be compiled twice, a second or so each on a machine with no cache yet, and loaded twice
    from the cache in every process. Callers pass inputs through this, so that each kernel has one type of
    them.
    """
    if not array.flags.writeable:
        return array
    view = array.view()
    view.flags.writeable = False
    return view


def _kernels() -> ModuleType:
    if compiled_kernels():
        from deltacells.codec import _kernels  # numba loads on the loading thread, not on import

        return _kernels
    return _vectorised


def _compiled() -> ModuleType:
    load_compiled_kernels()
    from deltacells.codec import _kernels

    return _kernels
