"""Output arrays that are mapped fresh from the kernel, never through a huge-page compaction stall.

A read's output arrays (a full read of 100,000 cells: 300 MB) are new memory, mapped page by page as the
decoding threads first write them. numpy advises transparent huge pages on every array of 4 MiB and more
(``madvise(MADV_HUGEPAGE)``); where the kernel's THP ``defrag`` setting is ``madvise`` (a common default),
a fault in such an array compacts memory synchronously to find a free 2 MiB page. Measured on the 2-core
machine of the benchmarks (Linux 6.18, ``enabled=madvise``, ``defrag=madvise``; 300 MB touched once per
page): 36 ms when huge pages were free, 350 to 790 ms when they had to be compacted (the first large read of
a process, and one read in three after it), against 120 ms of 4 KiB faults spread over the decoding
threads. A full read of that matrix in a fresh process took 0.39 to 0.53 s with huge pages and 0.22 s
without, and repeated reads 0.19 to 0.27 s against 0.20 to 0.21 s. So :func:`empty` maps large arrays
itself, anonymous and unadvised (the system's default for memory nobody advised: huge pages only where THP
is ``always``), and they are unmapped when the last array viewing them is freed.
"""

from __future__ import annotations

import mmap
import threading

import numpy as np
from numpy.typing import DTypeLike

__all__ = ["MAPPED_MIN_BYTES", "MAX_SCRATCH_BYTES", "empty", "empty_pair", "scratch"]

#: Arrays of this size and more are mapped by :func:`empty` (numpy advises huge pages from this size on,
#: ``numpy/_core/src/multiarray/alloc.c``); smaller ones come from numpy's allocator.
MAPPED_MIN_BYTES = 4 * 2**20


def empty(n: int, dtype: DTypeLike) -> np.ndarray:
    """``np.empty(n, dtype)``; at :data:`MAPPED_MIN_BYTES` and more, on memory of its own, not advised huge pages.

    A large array's ``base`` is the anonymous :class:`mmap.mmap` holding it (zeroed by the kernel as its pages
    are first written, released with the array).
    """
    dtype = np.dtype(dtype)
    nbytes = n * dtype.itemsize
    if nbytes < MAPPED_MIN_BYTES:
        return np.empty(n, dtype=dtype)
    return np.frombuffer(_mapping(nbytes), dtype=dtype, count=n)


def _mapping(nbytes: int) -> mmap.mmap:
    """``nbytes`` of fresh anonymous memory (a function of its own, so that tests can count large allocations)."""
    return mmap.mmap(-1, nbytes)


def empty_pair(n: int, first: DTypeLike, second: DTypeLike) -> tuple[np.ndarray, np.ndarray]:
    """Two arrays of ``n`` items (of dtypes ``first`` and ``second``) in one allocation from :func:`empty`.

    A decoded tile's indices and counts, about 3 MB each for 2,048 cells of 368 nonzeros: one allocation for
    both, so that one mapping holds them (and one release frees them).

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
