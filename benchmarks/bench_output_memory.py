"""What memory new to a process costs a read's output: the ways of getting it, in fresh processes and after reads.

A full read of 100,000 Visium cells writes an output of about 300 MB (int32 indices and float32 counts of 37 M
nonzeros) that the process never had: every page is mapped and zeroed by the kernel as it is first written.
This measures the ways ``deltacells._memory`` could get that memory, each writing ``--mb`` megabytes with two
threads (half each, as the decoding threads fill a read's output), wall and CPU time (``getrusage``, all
threads; page faults and zeroing are system time):

* ``np.empty``: numpy's allocation, which advises transparent huge pages on arrays of 4 MiB and more
  (``madvise(MADV_HUGEPAGE)``; with THP ``defrag=madvise``, faults may compact memory synchronously);
* ``mmap shared``: an anonymous ``MAP_SHARED`` mapping (how deltacells mapped outputs before: shmem pages);
* ``mmap private``: an anonymous ``MAP_PRIVATE`` mapping, pages faulted as they are written;
* ``mmap private, MAP_POPULATE``: mapped in bulk by the ``mmap`` call, before the writes;
* ``mmap private, populated by the threads``: each thread maps its half with ``madvise(MADV_POPULATE_WRITE)``
  (Linux 5.14), then writes it: what ``deltacells._memory.populate`` does on the decoding threads;
* ``mmap private, huge pages``: advised ``MADV_HUGEPAGE`` and populated;
* ``deltacells._memory.empty``: what deltacells does (in a fresh process: a new mapping, populated by the
  threads; after a read: the mapping the previous output released, reused).

Two settings: ``fresh process`` (one interpreter per measurement, the memory the first allocation of that size
in a process; the median of ``--runs``) and ``again`` (in one process, after ``--runs`` allocations of the same
size written and freed: what the reads after the first get; the median). The machine's THP settings are
recorded. Usage::

    python benchmarks/bench_output_memory.py --json docs/_data/output-memory.json   # about 2 minutes
    python benchmarks/bench_output_memory.py --quick                                 # CI: 64 MB, 2 runs
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from _record import now, write_json

#: The ways, in the order of the table.
WAYS = (
    "np.empty",
    "mmap shared",
    "mmap private",
    "mmap private, MAP_POPULATE",
    "mmap private, populated by the threads",
    "mmap private, huge pages",
    "deltacells._memory.empty",
)

#: One measurement: argv = way, megabytes, rounds (0: one allocation in this fresh process; k: k allocations,
#: the median after the first); prints {"wall": s, "cpu": s}.
CHILD = r"""
import json, mmap, resource, statistics, sys, time
from concurrent.futures import ThreadPoolExecutor
import numpy as np
from deltacells import _memory

way, nbytes, rounds = sys.argv[1], int(float(sys.argv[2]) * 2**20), int(sys.argv[3])
PRIVATE = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
POPULATE_WRITE = 23


def allocate():
    if way == "np.empty":
        return np.empty(nbytes, np.uint8), None
    if way == "mmap shared":
        return np.frombuffer(mmap.mmap(-1, nbytes), np.uint8), None
    if way == "mmap private":
        return np.frombuffer(mmap.mmap(-1, nbytes, flags=PRIVATE), np.uint8), None
    if way == "mmap private, MAP_POPULATE":
        return np.frombuffer(mmap.mmap(-1, nbytes, flags=PRIVATE | mmap.MAP_POPULATE), np.uint8), None
    if way == "mmap private, populated by the threads":
        mapping = mmap.mmap(-1, nbytes, flags=PRIVATE)
        return np.frombuffer(mapping, np.uint8), mapping
    if way == "mmap private, huge pages":
        mapping = mmap.mmap(-1, nbytes, flags=PRIVATE)
        mapping.madvise(mmap.MADV_HUGEPAGE)
        mapping.madvise(POPULATE_WRITE)
        return np.frombuffer(mapping, np.uint8), None
    array = _memory.empty(nbytes, np.uint8)
    return array, "deltacells"


POOL = ThreadPoolExecutor(2)  # the decoding threads


def fill(array, populate):
    half = (array.shape[0] // 2 // mmap.PAGESIZE) * mmap.PAGESIZE
    parts = [(0, half), (half, array.shape[0])]
    if populate == "deltacells":
        _memory.populate([array], POOL)  # as a read: a new mapping's pages mapped by the threads, ahead of the
        populate = None  # writes queued after them; a reused mapping: nothing to do

    def write(lo, hi):
        if populate is not None:
            populate.madvise(POPULATE_WRITE, lo, hi - lo)
        array[lo:hi] = 7

    for future in [POOL.submit(write, *part) for part in parts]:
        future.result()


def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


samples = []
for k in range(max(1, rounds)):
    began, spent = time.perf_counter(), cpu()
    array, populate = allocate()
    fill(array, populate)
    samples.append((time.perf_counter() - began, cpu() - spent))
    del array, populate
kept = samples[1:] if rounds > 1 else samples
print(json.dumps({"wall": statistics.median(s[0] for s in kept), "cpu": statistics.median(s[1] for s in kept)}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=300.0, help="megabytes written (a 100,000-cell read: 300)")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="64 MB, 2 runs")
    parser.add_argument("--json", type=Path, help="write the results here (docs/_data/output-memory.json)")
    args = parser.parse_args()
    started = now()
    mb, runs = (64.0, 2) if args.quick else (args.mb, args.runs)
    fresh: dict[str, list[dict[str, float]]] = {way: [] for way in WAYS}
    for k in range(runs):  # the ways interleaved, so that a change of load hits them alike
        for way in WAYS if k % 2 == 0 else WAYS[::-1]:
            fresh[way].append(_child(way, mb, 0))
    again = {way: _child(way, mb, runs + 1) for way in WAYS}
    doc: dict[str, Any] = {
        "mb": mb,
        "runs": runs,
        "threads": 2,
        "thp": _thp(),
        "ways": {
            way: {
                "fresh process": {key: statistics.median(s[key] for s in fresh[way]) for key in ("wall", "cpu")},
                "again": again[way],
            }
            for way in WAYS
        },
    }
    _print(doc)
    write_json(args.json, doc, started=started, quick=args.quick)


def _child(way: str, mb: float, rounds: int) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, way, str(mb), str(rounds)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _thp() -> dict[str, str]:
    """The kernel's transparent huge page settings (the selected value of each), where it has them."""
    settings = {}
    for name in ("enabled", "defrag"):
        path = Path("/sys/kernel/mm/transparent_hugepage") / name
        if path.exists():
            text = path.read_text(encoding="ascii")
            settings[name] = text[text.index("[") + 1 : text.index("]")] if "[" in text else text.strip()
    return settings


def _print(doc: dict[str, Any]) -> None:
    print(f"{doc['mb']:.0f} MB written by 2 threads, medians of {doc['runs']} (THP {doc['thp']}), ms:")
    print(f"  {'way':42s} {'fresh wall':>11s} {'fresh cpu':>10s} {'again wall':>11s} {'again cpu':>10s}")
    for way, found in doc["ways"].items():
        fresh, again = found["fresh process"], found["again"]
        cells = (fresh["wall"], fresh["cpu"], again["wall"], again["cpu"])
        print(f"  {way:42s} " + " ".join(f"{value * 1000:10.0f} " for value in cells))


if __name__ == "__main__":
    main()
