"""``deltacells._memory``: large output arrays on memory of their own (reused once released), and scratch arrays."""

from __future__ import annotations

import gc
import mmap
import os
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from deltacells import _memory
from deltacells._memory import (
    MAPPED_MIN_BYTES,
    MAX_SCRATCH_BYTES,
    drop_released,
    empty,
    empty_pair,
    populate,
    released_bytes,
    scratch,
)


@pytest.fixture(autouse=True)
def nothing_released() -> Iterator[None]:
    """Each test starts with no released mapping to reuse (those of earlier tests would be)."""
    drop_released()
    yield
    drop_released()


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

    array = empty(MAPPED_MIN_BYTES, np.uint8)
    mapping = _mapping_of(array)
    view = array[10:20]
    del array
    gc.collect()
    assert released_bytes() == 0  # a view keeps it
    del view
    gc.collect()
    assert released_bytes() == len(mapping) and not mapping.closed  # kept for the next array


def test_large_allocations_go_through_one_function(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[int] = []
    real = _memory._mapping
    monkeypatch.setattr(_memory, "_mapping", lambda nbytes: asked.append(nbytes) or real(nbytes))
    empty(MAPPED_MIN_BYTES // 4, np.float32)
    empty(MAPPED_MIN_BYTES // 4 - 1, np.float32)
    assert asked == [MAPPED_MIN_BYTES]


@pytest.mark.skipif(not _memory.REUSE, reason="mappings are unmapped when released here")
def test_a_released_mapping_serves_the_next_array_of_about_its_size(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[int] = []
    real = _memory._mapping
    monkeypatch.setattr(_memory, "_mapping", lambda nbytes: asked.append(nbytes) or real(nbytes))
    n = 3 * MAPPED_MIN_BYTES // 4
    first = empty(n, np.float32)
    first[:] = 5
    address = first.ctypes.data
    del first
    again = empty(n - 1000, np.int32)  # another dtype, a little smaller: the same memory
    assert again.ctypes.data == address and again.shape == (n - 1000,) and again.dtype == np.int32
    assert len(asked) == 1 and released_bytes() == 0
    again[:] = 7
    assert (again == 7).all()
    other = empty(n, np.float32)  # the released one is in use: a new mapping
    assert not np.shares_memory(again, other) and len(asked) == 2
    del again
    small = empty(n // 2, np.float32)  # far smaller than the released one: mapped anew, the large one kept
    assert len(asked) == 3 and small.ctypes.data != address and released_bytes() >= 4 * n


@pytest.mark.skipif(not _memory.REUSE, reason="mappings are unmapped when released here")
def test_released_mappings_are_bounded_in_bytes_and_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_memory, "MAX_RELEASED_BYTES", 3 * MAPPED_MIN_BYTES)
    arrays = [empty(MAPPED_MIN_BYTES, np.uint8) for _ in range(3)]
    mappings = [_mapping_of(array) for array in arrays]
    for k in range(3):  # released in this order, the first the oldest
        arrays[k] = None
    assert released_bytes() == 3 * MAPPED_MIN_BYTES
    big = empty(2 * MAPPED_MIN_BYTES, np.uint8)  # fits none: the oldest released go, to stay within the bound
    assert released_bytes() == MAPPED_MIN_BYTES
    assert [m.closed for m in mappings] == [True, True, False]
    del big
    assert released_bytes() == 3 * MAPPED_MIN_BYTES
    monkeypatch.setattr(_memory, "RELEASED_SECONDS", 0.0)
    empty(10, np.uint8)  # small: no mapping, and no cleaning up either
    assert released_bytes() == 3 * MAPPED_MIN_BYTES
    fresh = empty(MAPPED_MIN_BYTES, np.uint8)  # the next large one drops those released too long ago
    assert released_bytes() == 0 and mappings[2].closed and not _mapping_of(fresh).closed


@pytest.mark.skipif(not _memory.REUSE, reason="mappings are unmapped when released here")
def test_a_released_mapping_is_advised_free_only_once_it_stayed_unused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kept as it is for HOT_SECONDS (the next read writes it at full speed), then advised MADV_FREE by a thread."""
    advised: list[int] = []
    real = mmap.mmap.madvise

    class Recording(mmap.mmap):
        def madvise(self, option: int, *args: int) -> None:
            if option == mmap.MADV_FREE:
                advised.append(id(self))
            real(self, option, *args)

    monkeypatch.setattr(
        _memory, "_mapping", lambda nbytes: Recording(-1, nbytes, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    )
    monkeypatch.setattr(_memory, "HOT_SECONDS", 0.2)
    _memory.drop_released()
    first = empty(MAPPED_MIN_BYTES, np.uint8)
    first[:] = 1
    mapping = _mapping_of(first)
    del first
    again = empty(MAPPED_MIN_BYTES, np.uint8)  # at once: the same mapping, never advised
    assert _mapping_of(again) is mapping and advised == []
    del again
    deadline = time.monotonic() + 10
    while not advised and time.monotonic() < deadline:
        time.sleep(0.05)
    assert advised == [id(mapping)]  # once it stayed unused
    last = empty(MAPPED_MIN_BYTES, np.uint8)  # advised, still reused (its pages, or zeroed ones)
    assert _mapping_of(last) is mapping
    del last
    _memory.drop_released()


def test_a_mapping_larger_than_the_bound_is_unmapped_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_memory, "MAX_RELEASED_BYTES", MAPPED_MIN_BYTES)
    array = empty(2 * MAPPED_MIN_BYTES, np.uint8)
    mapping = _mapping_of(array)
    del array
    assert mapping.closed and released_bytes() == 0


def test_threads_never_get_memory_in_use() -> None:
    """Arrays allocated and freed on many threads at once: no two live arrays share memory, none is lost."""

    def work(seed: int) -> bool:
        rng = np.random.default_rng(seed)
        mine = []
        for _ in range(30):
            n = int(rng.integers(MAPPED_MIN_BYTES // 4, MAPPED_MIN_BYTES // 2))
            array = empty(n, np.int32)
            array[:] = seed
            mine.append(array)
            if len(mine) > 3:
                gone = mine.pop(int(rng.integers(len(mine))))
                if not (gone == seed).all():  # another thread wrote into it
                    return False
        return all((array == seed).all() for array in mine)

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(work, range(16)))


#: Run in a fresh interpreter (the test process's own fork handlers stay out of it): exits 0 when a forked child's
#: writes into an inherited large array stay the child's, and the child reuses nothing its parent released.
FORK = """
import os, numpy as np
from deltacells._memory import MAPPED_MIN_BYTES, REUSE, empty, released_bytes
array = empty(MAPPED_MIN_BYTES, np.uint8)
array[:] = 1
released = empty(MAPPED_MIN_BYTES, np.uint8)
del released
assert released_bytes() > 0 or not REUSE
pid = os.fork()
if pid == 0:
    array[:] = 2
    os._exit(0 if released_bytes() == 0 and (array == 2).all() else 3)
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0, "the child"
assert (array == 1).all(), "the child wrote into its parent's array"
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_forked_child_writes_its_own_copy() -> None:
    """Private mappings: a child's writes into an inherited array stay in the child (``MAP_SHARED``, as mapped
    before, made them its parent's too), and the child does not reuse what its parent released."""
    import subprocess

    done = subprocess.run([sys.executable, "-c", FORK], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="MADV_POPULATE_WRITE and smaps are Linux's")
@pytest.mark.parametrize("with_pool", [False, True])
def test_populate_maps_the_pages_of_new_mappings_and_keeps_contents(with_pool: bool) -> None:
    n = 3 * MAPPED_MIN_BYTES
    gc.collect()  # an earlier test's arrays freed now would be released, and reused below
    drop_released()
    array = empty(n, np.uint8)
    assert _resident(array) == 0
    array[: 2 * _memory._PAGE] = 9  # written before: kept
    with ThreadPoolExecutor(2) as pool:
        populate([array, array[10:]], pool if with_pool else None)
    if _memory._POPULATE_WRITE is None:  # a kernel before 5.14: pages fault as written
        pytest.skip("this kernel has no MADV_POPULATE_WRITE")
    assert _resident(array) == n
    assert (array[: 2 * _memory._PAGE] == 9).all() and not array[2 * _memory._PAGE :].any()
    small = np.ones(10)
    populate([small])  # numpy's memory: nothing to do


def _mapping_of(array: np.ndarray) -> mmap.mmap:
    """The anonymous mapping that holds ``array`` (through its views)."""
    block = _memory._block_of(array)
    assert block is not None, f"{array.dtype}[{array.shape}] is not on a mapping of its own"
    return block.mapping


def _resident(array: np.ndarray) -> int:
    """Bytes of ``array`` the kernel has mapped pages for (``/proc/self/pagemap``: its pages' "present" bits).

    Its own pages only: the kernel merges adjacent anonymous mappings of the same flags into one entry of
    ``smaps``, whose ``Rss`` would count a neighbour's pages too.
    """
    page = _memory._PAGE
    first, last = array.ctypes.data // page, (array.ctypes.data + array.nbytes - 1) // page
    with open("/proc/self/pagemap", "rb") as pagemap:
        pagemap.seek(first * 8)
        entries = np.frombuffer(pagemap.read((last - first + 1) * 8), dtype="<u8")
    present = (entries >> np.uint64(63)) & np.uint64(1)
    return int(present.sum()) * page


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


def test_a_process_holding_large_arrays_at_exit_exits() -> None:
    """Arrays still alive when the interpreter exits are freed during its finalization, where no thread starts
    (a thread's ``start`` then waits forever): their release must not need one."""
    import subprocess

    code = (
        "from deltacells._memory import empty\n"
        "class Holder: pass\n"
        "holder = Holder(); holder.arrays = [empty(2**23, 'u1') for _ in range(3)]; holder.me = holder\n"
        "for array in holder.arrays: array[:] = 1\n"  # a cycle: freed by the collector of the exit, none before
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
