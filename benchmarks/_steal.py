"""CPU time the hypervisor gave to other guests while a benchmark ran ("steal" in ``/proc/stat``).

On a virtual machine, a busy neighbour takes CPU time from this one without showing in the load average: over
four loader epochs on the project's 2-core benchmark machine, 30% of the CPU time was stolen, and the epochs
took twice as long as in a quiet hour. A timing taken then cannot be compared with one taken on a quiet host, so
the benchmarks record, next to each timing, the share of the machine's CPU time stolen while it ran.
"""

from __future__ import annotations

import contextlib

#: The fields of the ``cpu`` line of ``/proc/stat`` that add up to the machine's time (guest time is already in
#: user time): user, nice, system, idle, iowait, irq, softirq, steal.
_FIELDS = 8
_STEAL = 7


def cpu_ticks() -> tuple[int, int] | None:
    """``(steal, total)`` CPU ticks since boot, summed over the CPUs; ``None`` without ``/proc/stat`` (not Linux)."""
    with contextlib.suppress(OSError, ValueError, IndexError), open("/proc/stat", encoding="ascii") as f:
        fields = f.readline().split()
        if fields[0] == "cpu":
            values = [int(v) for v in fields[1 : 1 + _FIELDS]]
            return (values[_STEAL] if len(values) > _STEAL else 0), sum(values)
    return None


def steal_share(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    """The share of the machine's CPU time stolen between two :func:`cpu_ticks` (``None`` if not known)."""
    if before is None or after is None or after[1] <= before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1])
