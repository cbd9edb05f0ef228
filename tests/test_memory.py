"""``deltacells._memory``: huge-page-aligned output arrays and per-thread scratch arrays."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from deltacells._memory import HUGE_PAGE, MAX_SCRATCH_BYTES, empty, empty_pair, scratch


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float32, np.float64])
def test_large_arrays_start_on_a_huge_page(dtype: type) -> None:
    n = 5 * 2**20 // np.dtype(dtype).itemsize
    array = empty(n, dtype)
    assert array.shape == (n,) and array.dtype == dtype
    assert array.ctypes.data % HUGE_PAGE == 0
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
    assert (b.ctypes.data - a.ctypes.data) % 64 == 0  # as aligned as the first (a cache line on a huge page)
    a[:] = 3
    b[:] = 5
    assert (a == 3).all() and (b == 5).all()  # neither overlaps the other
    if n * (a.itemsize + b.itemsize) >= 4 * 2**20:  # numpy advises huge pages from 4 MiB
        assert a.ctypes.data % HUGE_PAGE == 0


def test_a_decoded_tile_holds_its_arrays_in_one_allocation() -> None:
    import deltacells

    n = 2**19  # 4 MiB of indices and counts
    blob = deltacells.encode_tile(np.array([0, n]), np.arange(n), np.ones(n, dtype=np.int64), n, level=1)
    tile = deltacells.decode_tile(blob)
    assert tile.indices.ctypes.data % HUGE_PAGE == 0
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
