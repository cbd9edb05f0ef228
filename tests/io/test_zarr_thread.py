"""zarr's coroutines on the calling thread (``zarr_on_this_thread``): the same objects, other threads untouched."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
import zarr
import zarr.storage

from deltacells.io._zarr_thread import _CallingThread, zarr_on_this_thread


class _ThreadsStore(zarr.storage.MemoryStore):
    """A store in memory that records the threads its writes ran on."""

    def __init__(self) -> None:
        self.objects: dict[str, Any] = {}
        super().__init__(self.objects)
        self.threads: set[int] = set()

    async def set(self, key: str, value: Any, byte_range: Any = None) -> None:
        self.threads.add(threading.get_ident())
        await super().set(key, value)


def _write(store: _ThreadsStore) -> dict[str, bytes]:
    import anndata as ad

    group = zarr.open_group(store, mode="w", zarr_format=2)
    ad.io.write_elem(group, "array", np.arange(1000, dtype=np.float32).reshape(100, 10))
    ad.io.write_elem(group, "uns", {"text": "a", "number": 3, "names": np.array(["x", "yz"], dtype=object)})
    zarr.consolidate_metadata(store, zarr_format=2)
    return {key: value.to_bytes() for key, value in store.objects.items()}


def test_the_coroutines_run_on_the_calling_thread_and_write_the_same_objects() -> None:
    here, zarrs = _ThreadsStore(), _ThreadsStore()
    with zarr_on_this_thread():
        inline = _write(here)
    assert here.threads == {threading.get_ident()}
    expected = _write(zarrs)
    assert threading.get_ident() not in zarrs.threads  # outside the block: zarr's own I/O thread
    assert inline == expected


def test_other_threads_use_zarrs_own_thread_meanwhile() -> None:
    others = _ThreadsStore()
    with zarr_on_this_thread(), ThreadPoolExecutor(1) as pool:
        pool.submit(_write, others).result()
        worker = pool.submit(threading.get_ident).result()
        assert _write(_ThreadsStore())  # and this thread's still run here
    assert worker not in others.threads


def test_nested_blocks_and_a_running_event_loop_leave_zarr_as_it_is() -> None:
    store = _ThreadsStore()
    with zarr_on_this_thread(), zarr_on_this_thread():
        _write(store)
    assert store.threads == {threading.get_ident()}

    async def in_a_loop() -> set[int]:  # a notebook's thread runs a loop: zarr's own thread does the work
        inner = _ThreadsStore()
        with zarr_on_this_thread():
            _write(inner)
        return inner.threads

    assert threading.get_ident() not in asyncio.run(in_a_loop())


def test_the_codecs_executor_runs_each_function_on_the_submitting_thread() -> None:
    executor = _CallingThread(max_workers=1)
    assert executor.submit(threading.get_ident).result() == threading.get_ident()
    failed = executor.submit(divmod, 1, 0)
    assert failed.done()
    with pytest.raises(ZeroDivisionError):
        failed.result()
