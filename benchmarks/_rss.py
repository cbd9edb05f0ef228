"""Resident memory of the running process (Linux), for the benchmarks that measure peak memory."""

from __future__ import annotations

import contextlib
import gc


def status(field: str) -> int:
    """A ``Vm*`` field of ``/proc/self/status``, in bytes (0 where there is none: not Linux)."""
    with contextlib.suppress(OSError), open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def trim() -> None:
    """Collect garbage, then ``malloc_trim(0)`` (glibc), so that RSS counts memory in use only."""
    import ctypes
    import ctypes.util

    gc.collect()
    with contextlib.suppress(OSError, AttributeError, TypeError):
        ctypes.CDLL(ctypes.util.find_library("c")).malloc_trim(0)


def reset_peak() -> bool:
    """Reset the peak RSS (VmHWM) to the current RSS; False where the kernel does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
    except OSError:
        return False
    return True
