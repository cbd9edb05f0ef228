"""``deltacells._memory``: large output arrays on memory of their own, and per-thread scratch arrays."""

from __future__ import annotations

import mmap
import threading

import numpy as np
import pytest

from deltacells import _memory
from deltacells._memory import MAPPED_MIN_BYTES, MAX_SCRATCH_BYTES, empty, empty_pair, scratch


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float32, np.float64])
def test_large_arrays_are_mapped_unadvised(dtype: type) -> None:
    n = 5 * 2**20 // np.dtype(dtype).itemsize
    array = empty(n, dtype)
    assert array.shape == (n,) and array.dtype == dtype
    assert len(_mapping_of(array)) == array.nbytes  # a mapping of its own, all of it
    assert not _advised_huge(array)
    assert array.flags.c_contiguous and array.flags.writeable
    array[:] = 7  # all of it is usable
    assert int(array[-1]) == 7


def test_small_arrays_are_plain() -> None:
    array = empty(1000, np.float32)
    assert array.shape == (1000,) and array.flags.owndata


@pytest.mark.parametrize("n", [0, 1, 17, 3 * 2**19])  # 3 * 2^19: each 6 MiB apart, on a huge page together
@pytest.mark.parametrize(("first", "second"), [(np.int32, np.int32), (np.int32, np.float64), (np.int64, np.float32)])
def test_pairs_are_two_arrays_of_one_allocation(n: int, first: type, second: type) -> None:
    a, b = empty_pair(n, first, second)
    assert a.shape == b.shape == (n,) and a.dtype == first and b.dtype == second
    assert a.flags.c_contiguous and b.flags.c_contiguous and a.flags.writeable and b.flags.writeable
    assert not np.shares_memory(a, b)
    assert (b.ctypes.data - a.ctypes.data) % 64 == 0  # as aligned as the first (a cache line)
    a[:] = 3
    b[:] = 5
    assert (a == 3).all() and (b == 5).all()  # neither overlaps the other
    if n * (a.itemsize + b.itemsize) >= MAPPED_MIN_BYTES:
        assert _mapping_of(a) is _mapping_of(b) and not _advised_huge(a)


def test_a_decoded_tile_holds_its_arrays_in_one_allocation() -> None:
    import deltacells

    n = 2**19  # 4 MiB of indices and counts
    blob = deltacells.encode_tile(np.array([0, n]), np.arange(n), np.ones(n, dtype=np.int64), n, level=1)
    tile = deltacells.decode_tile(blob)
    assert _mapping_of(tile.indices) is _mapping_of(tile.data)
    assert tile.indices.base is tile.data.base
    np.testing.assert_array_equal(tile.indices, np.arange(n))
    np.testing.assert_array_equal(tile.data, 1)


def test_scratch_is_reused_per_thread_and_slot() -> None:
    first = scratch("test a", 100, np.int32)
    again = scratch("test a", 50, np.int32)
    assert again.shape == (50,) and np.shares_memory(first, again)
    assert not np.shares_memory(first, scratch("test b", 100, np.int32))
    assert not np.shares_memory(first, scratch("test a", 100, np.float32))  # one per dtype
    grown = scratch("test a", 1000, np.int32)
    assert grown.shape == (1000,)

    other: list[np.ndarray] = []
    thread = threading.Thread(target=lambda: other.append(scratch("test a", 100, np.int32)))
    thread.start()
    thread.join()
    assert not np.shares_memory(other[0], scratch("test a", 100, np.int32))


def test_huge_scratch_is_not_kept() -> None:
    n = MAX_SCRATCH_BYTES // 4 + 1
    big = scratch("test huge", n, np.int32)
    assert big.shape == (n,)
    assert not np.shares_memory(big, scratch("test huge", 10, np.int32))


def test_large_arrays_are_released_with_their_last_view() -> None:
    import gc
    import weakref

    array = empty(MAPPED_MIN_BYTES, np.uint8)
    mapping = weakref.ref(_mapping_of(array))
    view = array[10:20]
    del array
    gc.collect()
    assert mapping() is not None  # a view keeps it
    del view
    gc.collect()
    assert mapping() is None


def test_large_allocations_go_through_one_function(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[int] = []
    real = _memory._mapping
    monkeypatch.setattr(_memory, "_mapping", lambda nbytes: asked.append(nbytes) or real(nbytes))
    empty(MAPPED_MIN_BYTES // 4, np.float32)
    empty(MAPPED_MIN_BYTES // 4 - 1, np.float32)
    assert asked == [MAPPED_MIN_BYTES]


def _mapping_of(array: np.ndarray) -> mmap.mmap:
    """The anonymous mapping that holds ``array`` (through views and numpy's memoryview of the mapping)."""
    base = array.base
    while base is not None and not isinstance(base, mmap.mmap):
        base = base.obj if isinstance(base, memoryview) else base.base
    assert isinstance(base, mmap.mmap), f"{array.dtype}[{array.shape}] is not on a mapping of its own"
    return base


def _advised_huge(array: np.ndarray) -> bool:
    """Whether the kernel's map of this process marks some memory of ``array`` as advised huge pages (``hg``)."""
    start, end = array.ctypes.data, array.ctypes.data + array.nbytes
    advised = inside = False
    with open("/proc/self/smaps", encoding="ascii") as smaps:
        for line in smaps:
            fields = line.split()
            if "-" in fields[0] and len(fields) >= 5:
                low, high = (int(x, 16) for x in fields[0].split("-"))
                inside = low < end and start < high
            elif inside and fields[0] == "VmFlags:":
                advised |= "hg" in fields[1:]
    return advised
