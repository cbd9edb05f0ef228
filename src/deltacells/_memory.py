"""Large output arrays on anonymous mappings of their own, reused once released; per-thread scratch arrays.

A read's output arrays (a full read of 100,000 cells: 300 MB) are large, and memory new to a process costs
more to write the first time than the decoding that fills it: every 4 KiB page faults, and the kernel zeroes
it. ``benchmarks/bench_output_memory.py`` measures the ways of getting it (300 MB written by two threads, CPU
time, medians of two runs of 5 and 7 on the 2-core benchmark machine: a Firecracker VM, Linux 6.18, THP
``enabled=madvise``, ``defrag=madvise``, free page reporting of 8 MiB blocks to the host):

==============================================  ==================  ========================================
memory                                          in a fresh process  again, after reads in the same process
==============================================  ==================  ========================================
``mmap(MAP_SHARED)`` (before: shmem pages)      230 ms              225 ms
``mmap(MAP_PRIVATE)``, faulted as written       165 ms              155 ms
``MAP_PRIVATE``, ``MAP_POPULATE`` (in bulk)     115-125 ms          105-115 ms
``MAP_PRIVATE``, populated by the threads       115-120 ms          100-125 ms
``np.empty`` (numpy advises huge pages)         40-310 ms           35 ms
huge pages advised, populated                   150-315 ms          35 ms
:func:`empty` (populated; then reused)          120 ms              20-30 ms
==============================================  ==================  ========================================

Huge pages are the cheapest to fault when the kernel has them free, and the dearest when it has not (it
compacts memory synchronously where ``defrag`` is ``madvise``; on this VM the host must also back again the
large blocks the guest reported free): from one fresh process to the next, 40 to 310 ms, and reads of an
earlier measurement paid 0.35 to 0.8 s in a fresh process and one read in three after it.
So :func:`empty` maps large arrays itself, anonymous, private and unadvised (the system's default for memory
nobody advised: huge pages only where THP is ``always``), and keeps the mapping when the last array viewing it
is freed, to give it to the next array of about its size: reads after the first write memory already
mapped, which costs no fault at all (a full read of those 100,000 cells, one core: 370 ms of CPU time before,
205 after). A new mapping's pages are mapped in bulk, ``madvise(MADV_POPULATE_WRITE)`` on the decoding threads
(:func:`populate`), ahead of the decoding. A released mapping is kept as it is for :data:`HOT_SECONDS`, then
advised ``MADV_FREE`` (by a thread of its own, if no array took it meanwhile): the kernel may then take its pages
back whenever it needs memory (it hands out zeroed pages again, faulting as new), so the memory kept for long
is never memory the system lacks. Not at once: ``MADV_FREE`` marks every page clean and old, and the first
write of each page after it costs the processor a page walk to mark it again (300 MB written by the decoding
kernel, one core: 77 ms into memory advised ``MADV_FREE``, 57 ms into memory written before; the reads of a
loop, an epoch or a benchmark's rounds follow each other within seconds). Released mappings are kept up to
:data:`MAX_RELEASED_BYTES` in all, and for :data:`RELEASED_SECONDS` at most (checked whenever a large array is
allocated); where ``MADV_FREE`` or private mappings do not exist (not Linux, macOS or a BSD), mappings are
unmapped when released.

Private mappings also keep a forked child's writes its own: a ``MAP_SHARED`` output (as mapped before) was
shared with every child forked after it was made (a ``DataLoader`` worker writing into an inherited matrix
wrote into its parent's). A forked child drops the mappings released in its parent.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import DTypeLike

if TYPE_CHECKING:
    from collections.abc import Iterable
    from concurrent.futures import Executor

__all__ = [
    "MAPPED_MIN_BYTES",
    "MAX_RELEASED_BYTES",
    "HOT_SECONDS",
    "MAX_SCRATCH_BYTES",
    "RELEASED_SECONDS",
    "drop_released",
    "empty",
    "empty_pair",
    "populate",
    "released_bytes",
    "scratch",
]

#: Arrays of this size and more are mapped by :func:`empty` (numpy advises huge pages from this size on,
#: ``numpy/_core/src/multiarray/alloc.c``); smaller ones come from numpy's allocator.
MAPPED_MIN_BYTES = 4 * 2**20

#: A released mapping serves an array of at least this share of its size (a smaller array maps anew).
REUSE_MIN_SHARE = 0.75

#: Seconds a released mapping is kept for the next array before it is unmapped.
RELEASED_SECONDS = 60.0

#: Seconds a released mapping is kept as it is (its pages the process's) before it is advised ``MADV_FREE``.
HOT_SECONDS = 5.0


def _max_released_bytes() -> int:
    """An eighth of the machine's memory (1 GiB where it is unknown)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 8
    except (AttributeError, ValueError, OSError):  # pragma: no cover - not POSIX
        return 2**30


#: The released mappings kept for reuse hold at most this many bytes in all.
MAX_RELEASED_BYTES = _max_released_bytes()

#: Whether released mappings are kept: private anonymous mappings, and a way to give their pages back lazily.
REUSE = hasattr(mmap, "MAP_PRIVATE") and hasattr(mmap, "MADV_FREE")

_PAGE = mmap.PAGESIZE


def empty(n: int, dtype: DTypeLike) -> np.ndarray:
    """``np.empty(n, dtype)``; at :data:`MAPPED_MIN_BYTES` and more, on an anonymous mapping of its own.

    A large array's memory is a private anonymous mapping, not advised huge pages (see the module's note):
    one released by earlier arrays when one of about the size is kept, else a new one. It is released when
    the last array viewing it is freed. Its contents are undefined, as ``np.empty``'s.
    """
    dtype = np.dtype(dtype)
    nbytes = n * dtype.itemsize
    if nbytes < MAPPED_MIN_BYTES:
        return np.empty(n, dtype=dtype)
    return np.asarray(_Lease(_take(nbytes), n, dtype))


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


def released_bytes() -> int:
    """Bytes of the released mappings kept for the next large arrays."""
    return sum(block.size for block in list(_released))


def drop_released() -> None:
    """Unmap every released mapping kept for reuse (the next large arrays map anew)."""
    with _lock:
        dropped = list(_released)
        _released.clear()
    for block in dropped:
        block.close()


def populate(arrays: Iterable[np.ndarray], pool: Executor | None = None) -> None:
    """Map the pages of the new mappings under ``arrays`` in bulk, before they are written (Linux 5.14+).

    For the output arrays of a read, about to be written by its decoding threads: each 4 KiB page written
    first faults on its own, and ``madvise(MADV_POPULATE_WRITE)`` maps runs of them in one call, for about
    three quarters of the time (see the module's note), without the GIL. Only mappings no array wrote yet are
    populated (a mapping released by an earlier array has its pages); their contents stay as they are, so
    the arrays may be written meanwhile. With ``pool``, the work is cut into pieces of at least
    :data:`POPULATE_PIECE_BYTES` submitted to it (before the read's decoding tasks, which then find their
    pages mapped), and this returns at once; without, it is done before this returns. Elsewhere than Linux,
    and on kernels without ``MADV_POPULATE_WRITE``, nothing is done: pages fault as they are written.
    """
    if _POPULATE_WRITE is None:
        return
    blocks: dict[int, _Block] = {}
    for array in arrays:
        block = _block_of(array)
        if block is not None and not block.populated:
            block.populated = True
            blocks[id(block)] = block
    for block in blocks.values():
        n_pieces = max(1, min(POPULATE_PIECES, block.size // POPULATE_PIECE_BYTES))
        step = -(-block.size // n_pieces // _PAGE) * _PAGE
        for start in range(0, block.size, step):
            length = min(step, block.size - start)
            if pool is None:
                _populate_piece(block.mapping, start, length)
            else:
                pool.submit(_populate_piece, block.mapping, start, length)


#: :func:`populate` cuts a mapping in this many pieces at most (tasks for the decoding threads)...
POPULATE_PIECES = 8

#: ...of at least this size.
POPULATE_PIECE_BYTES = 8 * 2**20

#: ``MADV_POPULATE_WRITE`` (Linux 5.14 and later, 23; Python's ``mmap`` has no name for it), or None elsewhere.
_POPULATE_WRITE: int | None = getattr(mmap, "MADV_POPULATE_WRITE", 23 if sys.platform.startswith("linux") else None)


def _populate_piece(mapping: mmap.mmap, start: int, length: int) -> None:
    """``madvise(MADV_POPULATE_WRITE)`` on bytes ``[start, start + length)`` of ``mapping`` (which releases the GIL)."""
    global _POPULATE_WRITE
    option = _POPULATE_WRITE
    if option is None or mapping.closed:
        return
    try:
        mapping.madvise(option, start, length)
    except (OSError, ValueError):  # a kernel before 5.14 (EINVAL); or the mapping closed meanwhile
        if not mapping.closed:
            _POPULATE_WRITE = None  # not asked again in this process


def _block_of(array: np.ndarray) -> _Block | None:
    """The mapping of :func:`empty` under ``array`` (through its views), or None (numpy's memory)."""
    base: Any = array
    while isinstance(base, np.ndarray):
        base = base.base
    return base.block if isinstance(base, _Lease) else None


@dataclass(eq=False)
class _Block:
    """An anonymous mapping, where it starts in memory, whether its pages are mapped, since when it is released."""

    mapping: mmap.mmap
    size: int
    address: int
    populated: bool = False
    released_at: float = field(default=0.0)
    advised: bool = False

    def close(self) -> None:
        self.mapping.close()


def _mapping(nbytes: int) -> mmap.mmap:
    """``nbytes`` of fresh anonymous memory (a function of its own, so that tests can count large allocations)."""
    if hasattr(mmap, "MAP_PRIVATE"):
        return mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    return mmap.mmap(-1, nbytes)  # pragma: no cover - Windows: an anonymous mapping of the paging file


def _take(nbytes: int) -> _Block:
    """A mapping of at least ``nbytes``: a released one of about that size, else a new one."""
    now = time.monotonic()
    stale: list[_Block] = []
    chosen = None
    with _lock:
        # Appended by _Lease.__del__ without the lock (a list's append is atomic): scanned by index, popped by
        # index, only under the lock.
        k = 0
        while k < len(_released):
            block = _released[k]
            if now - block.released_at > RELEASED_SECONDS:
                stale.append(_released.pop(k))
                continue
            if chosen is None and nbytes <= block.size and nbytes >= REUSE_MIN_SHARE * block.size:
                chosen = _released.pop(k)
                continue
            k += 1
        if chosen is None:
            # The mappings kept no longer fit the arrays asked for: make room for this one among them.
            total = sum(block.size for block in _released)
            while _released and total + nbytes > MAX_RELEASED_BYTES:
                oldest = _released.pop(0)
                total -= oldest.size
                stale.append(oldest)
    for block in stale:
        block.close()
    if REUSE:
        _start_advising()
    if chosen is not None:
        return chosen
    size = -(-nbytes // _PAGE) * _PAGE
    mapping = _mapping(size)
    probe = np.frombuffer(mapping, dtype=np.uint8, count=1)  # where the mapping starts (the view is dropped,
    address = probe.ctypes.data  # so that nothing exports the mapping's buffer when it is closed)
    del probe
    return _Block(mapping, size, address)


def _release(block: _Block) -> None:
    """Keep a mapping no array uses any more for the next arrays (its pages given back lazily later), or unmap it.

    Called by ``_Lease.__del__``: whenever the garbage collector runs, on any thread, and at interpreter exit. So
    it takes no lock and starts no thread (at exit a new thread never starts, and its ``start`` waits forever):
    the mapping is appended to :data:`_released` (a list's append is atomic), which the advising thread, started
    by :func:`_take`, looks at.
    """
    if not REUSE or block.size > MAX_RELEASED_BYTES:
        block.close()
        return
    block.released_at = time.monotonic()
    block.populated = True  # (unless the kernel takes pages back once advised: those fault again, as new ones)
    block.advised = False
    _released.append(block)


def _start_advising() -> None:
    """Start the thread that advises ``MADV_FREE`` on mappings released :data:`HOT_SECONDS` ago, unless it runs.

    Called when a mapping is taken (never from a finalizer); a daemon thread, once per process (a forked child
    starts its own).
    """
    global _advisor
    if _advisor is not None and _advisor.is_alive():
        return
    with _advisor_lock:
        if _advisor is None or not _advisor.is_alive():
            thread = threading.Thread(target=_advise_forever, name="deltacells-memory", daemon=True)
            thread.start()
            _advisor = thread


def _advise_forever() -> None:
    """The advising thread: every half of :data:`HOT_SECONDS`, advise the mappings released that long ago."""
    while True:
        time.sleep(HOT_SECONDS / 2)
        _advise_released()


def _advise_released() -> None:
    """Advise ``MADV_FREE`` on the mappings released at least :data:`HOT_SECONDS` ago (once each)."""
    now = time.monotonic()
    with _lock:
        for block in _released:  # (appended to by finalizers meanwhile: a list's iterator takes those in too)
            if block.advised or now - block.released_at < HOT_SECONDS:
                continue
            with contextlib.suppress(OSError, ValueError):  # a kernel without MADV_FREE (before Linux 4.5)
                block.mapping.madvise(mmap.MADV_FREE)  # the kernel may take the pages back; writes keep the others
            block.advised = True


class _Lease:
    """The base of an array made by :func:`empty`: its mapping, handed back when the array's last view is freed."""

    __slots__ = ("__array_interface__", "block")

    def __init__(self, block: _Block, n: int, dtype: np.dtype) -> None:
        self.block = block
        self.__array_interface__: dict[str, Any] = {
            "shape": (n,),
            "typestr": dtype.str,
            "data": (block.address, False),
            "version": 3,
        }

    def __del__(self) -> None:
        _release(self.block)


_lock = threading.Lock()
_released: list[_Block] = []  # oldest first
_advisor_lock = threading.Lock()
_advisor: threading.Thread | None = None  # advises MADV_FREE on mappings released HOT_SECONDS ago


def _after_fork_in_child() -> None:
    global _lock, _advisor_lock, _advisor
    _lock = threading.Lock()
    _advisor_lock = threading.Lock()
    _advisor = None  # (the parent's thread is not the child's)
    _released.clear()  # the parent's (copy-on-write here: writing them would copy every page)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


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
