"""The event loop that runs the coroutines of asynchronous clients (obstore's GETs): one thread per process.

A request is then a coroutine on this loop rather than a Python thread blocked in a call: no thread to wake and
switch to per request, and as many requests in flight as wanted for the price of a coroutine each. The loop's
thread is a daemon, made on first use in each process (a forked child makes its own: the parent's thread does not
exist in it).
"""

from __future__ import annotations

import asyncio
import os
import threading

__all__ = ["io_loop"]

_LOCK = threading.Lock()
_LOOP: tuple[int, asyncio.AbstractEventLoop] | None = None


def _after_fork_in_child() -> None:
    global _LOCK
    _LOCK = threading.Lock()  # a parent thread may have held it at the fork


os.register_at_fork(after_in_child=_after_fork_in_child)


def io_loop() -> asyncio.AbstractEventLoop:
    """The I/O event loop of this process, running in a daemon thread of its own (started on the first call)."""
    global _LOOP
    found = _LOOP
    if found is not None and found[0] == os.getpid():
        return found[1]
    with _LOCK:
        found = _LOOP
        if found is None or found[0] != os.getpid():
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="deltacells-io-loop", daemon=True)
            thread.start()
            found = _LOOP = (os.getpid(), loop)
    return found[1]
