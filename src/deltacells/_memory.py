"""Output arrays in memory the kernel can back with huge pages: fewer page faults for large reads.

A fresh array is mapped page by page as it is first written, and each 4 KiB page costs a fault (on the
2-core virtual machine of the benchmarks, about 1.3 microseconds: a one-thread full read of the Visium
matrix, 1.07M nonzeros, took 6.5 ms when its output arrays faulted 1,100 times, 5.1 ms when they came on
huge pages). numpy asks for transparent huge pages on
arrays of 4 MiB and more (``madvise(MADV_HUGEPAGE)``), but only the 2 MiB-aligned stretches of an array can be
backed by them; :func:`empty` places large arrays on such a boundary, so that one fault maps 2 MiB.
"""

from __future__ import annotations

import threading

import numpy as np
from numpy.typing import DTypeLike

__all__ = ["HUGE_PAGE", "MAX_SCRATCH_BYTES", "empty", "empty_pair", "scratch"]

#: Size and alignment of a transparent huge page on x86-64 and most arm64 kernels.
HUGE_PAGE = 2 * 2**20

#: numpy advises huge pages from this size on (``numpy/_core/src/multiarray/alloc.c``).
_NUMPY_HUGE_MIN = 4 * 2**20


def empty(n: int, dtype: DTypeLike) -> np.ndarray:
    """``np.empty(n, dtype)``, starting on a huge-page boundary when it is large enough to be backed by them.

    The array is a view of a buffer up to one huge page longer (its ``base``); the pages of that slack are
    never written, so they are never mapped.
    """
    dtype = np.dtype(dtype)
    nbytes = n * dtype.itemsize
    if nbytes < _NUMPY_HUGE_MIN:
        return np.empty(n, dtype=dtype)
    buffer = np.empty(n + HUGE_PAGE // dtype.itemsize, dtype=dtype)
    gap = -buffer.ctypes.data % HUGE_PAGE
    if gap % dtype.itemsize:  # numpy aligns data to 16 bytes: only an odd-sized dtype can land here
        return np.empty(n, dtype=dtype)
    start = gap // dtype.itemsize
    return buffer[start : start + n]


def empty_pair(n: int, first: DTypeLike, second: DTypeLike) -> tuple[np.ndarray, np.ndarray]:
    """Two arrays of ``n`` items (of dtypes ``first`` and ``second``) in one allocation, as :func:`empty` places it.

    A decoded tile's indices and counts, about 3 MB each for 2,048 cells of 368 nonzeros: apart, each is below
    the size numpy advises huge pages for, and is mapped a 4 KiB page at a fault when the allocator hands out
    fresh memory; together they are above it. (Whether the allocator hands out fresh memory or recycles what
    the last tile freed depends on the process's history: where it recycles, both ways cost the same.)

    The arrays are views of one buffer (``base``): keep them for as long as each other, as a tile's arrays
    are. scipy copies an array that is a view of less than half its base, so they are not for a matrix that
    must hold them without a copy.
    """
    first, second = np.dtype(first), np.dtype(second)
    split = -(-n * first.itemsize // 64) * 64  # the second array as aligned as the first, up to a cache line
    buffer = empty(split + n * second.itemsize, np.uint8)
    return buffer[: n * first.itemsize].view(first), buffer[split : split + n * second.itemsize].view(second)


#: Scratch arrays larger than this are not kept for the next use (a freak chunk must not pin memory).
MAX_SCRATCH_BYTES = 64 * 2**20

_local = threading.local()


def scratch(slot: str, n: int, dtype: DTypeLike) -> np.ndarray:
    """``n`` items of the calling thread's scratch array ``slot``: reused from call to call, contents undefined.

    For arrays that live within one call (a chunk decoded before its rows are copied out): a fresh array each
    time would be mapped page by page again, at a fault a page (see the module's note). The result is valid
    until this thread asks for the same ``slot`` again.
    """
    dtype = np.dtype(dtype)
    arrays = getattr(_local, "arrays", None)
    if arrays is None:
        arrays = _local.arrays = {}
    key = (slot, dtype)
    array = arrays.get(key)
    if array is None or array.shape[0] < n:
        array = np.empty(max(n, 2 * array.shape[0]) if array is not None else n, dtype=dtype)
        if array.nbytes <= MAX_SCRATCH_BYTES:
            arrays[key] = array
        else:
            arrays.pop(key, None)
    return array[:n]
