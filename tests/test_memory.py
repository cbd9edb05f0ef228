"""``deltacells._memory``: huge-page-aligned output arrays and per-thread scratch arrays."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from deltacells._memory import HUGE_PAGE, MAX_SCRATCH_BYTES, empty, scratch


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
