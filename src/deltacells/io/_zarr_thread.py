"""zarr's coroutines run on the calling thread while anndata writes into a group in memory: no thread hop a call.

zarr's synchronous API (``Group.create_array``, ``Array.__setitem__``, an ``attrs`` update...) hands each call
to an event loop on zarr's own I/O thread and waits for it: a round trip between two threads a call, and
anndata makes several an array (is the key there, create, get, set, get and update the attributes twice). For
a group in memory nothing in those coroutines waits on I/O, so :func:`zarr_on_this_thread` has zarr run them
on an event loop of the calling thread instead, for as long as the block lasts (the codecs too, which zarr
hands to a thread of the loop's executor): zarr's ``sync`` (the one function its synchronous API calls) is
replaced once (``deltacells._internals.replace_zarr_sync``: ``zarr.core.sync`` is zarr's internal) by one that does
so for the threads inside such a block and calls zarr's own for every other thread.

Nothing changes where the replacement cannot be made (a zarr without ``zarr.core.sync.sync``) or where the
calling thread already runs an event loop (a notebook's): zarr's own thread runs the coroutines, as always.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from deltacells import _internals

__all__ = ["zarr_on_this_thread"]

_T = TypeVar("_T")

_LOCAL = threading.local()
_LOCK = threading.Lock()
_installed: list[bool] = []  # [True] once zarr's sync is replaced, [False] if it cannot be


@contextlib.contextmanager
def zarr_on_this_thread() -> Iterator[None]:
    """Within the block, zarr's synchronous calls made by this thread run their coroutines on this thread.

    Only for zarr objects whose store needs no other event loop (a :class:`zarr.storage.MemoryStore`): a
    store bound to zarr's loop (fsspec's asynchronous filesystems) must not be used inside the block.
    """
    if getattr(_LOCAL, "loop", None) is not None or _running_loop() or not _install():
        yield  # already inside such a block, or zarr's own thread it is
        return
    loop = asyncio.new_event_loop()
    loop.set_default_executor(_CallingThread(max_workers=1))  # the codecs, which zarr runs with to_thread
    _LOCAL.loop = loop
    try:
        yield
    finally:
        _LOCAL.loop = None
        loop.close()


class _CallingThread(ThreadPoolExecutor):
    """An executor that runs each function at once on the thread that submits it: no thread is started.

    zarr hands each chunk's compression to a thread (``asyncio.to_thread``) so that its event loop goes on
    meanwhile; inside the block nothing else waits on the loop, and a hop there and back a chunk is all it costs.
    """

    def submit(self, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> Future[_T]:
        """``fn(*args, **kwargs)`` run now; its result (or its exception) in a finished future."""
        future: Future[_T] = Future()
        try:
            result = fn(*args, **kwargs)
        except Exception as exc:  # given to whoever awaits the future, as a thread's would be
            future.set_exception(exc)
        else:
            future.set_result(result)
        return future


def _running_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _install() -> bool:
    """Replace zarr's ``sync`` (once) by :func:`_sync_here` around it; False when zarr has no such function."""
    with _LOCK:
        if not _installed:
            _installed.append(_internals.replace_zarr_sync(_sync_here))
        return _installed[0]


def _sync_here(original: Callable[..., Any]) -> Callable[..., Any]:
    """A ``sync`` that runs the coroutine on this thread's loop inside :func:`zarr_on_this_thread`, else zarr's."""

    def sync(coro: Coroutine[Any, Any, Any], loop: asyncio.AbstractEventLoop | None = None, **kwargs: Any) -> Any:
        here: asyncio.AbstractEventLoop | None = getattr(_LOCAL, "loop", None)
        if here is None or loop is not None:
            return original(coro, loop=loop, **kwargs)
        return here.run_until_complete(coro)

    sync.__wrapped__ = original  # type: ignore[attr-defined]
    return sync
