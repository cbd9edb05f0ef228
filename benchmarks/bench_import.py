"""Start-up cost: ``import deltacells``, ``deltacells --help`` and ``deltacells info`` against ``import anndata``.

Each command runs in a fresh process, ``--repeat`` times after one warm-up (warm page cache); the minimum
wall time is reported, with the ratio to ``python -c "import anndata"`` measured in the same run. Usage::

    python benchmarks/bench_import.py --json docs/_data/import.json   # 7 runs of each
    python benchmarks/bench_import.py --quick    # 2 runs of each
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _record import now, write_json


def best_of(command: list[str], repeat: int) -> float:
    subprocess.run(command, check=True, capture_output=True)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True)
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="2 runs of each")
    parser.add_argument("--json", type=Path, help="write the figures here (docs/_data/import.json)")
    args = parser.parse_args()
    started = now()
    repeat = 2 if args.quick else args.repeat

    work = Path(tempfile.mkdtemp(prefix="deltacells-bench-import-"))
    try:
        import deltacells
        from deltacells.datasets import synthetic_counts

        dataset = work / "small.deltacells"
        deltacells.write_deltacells(synthetic_counts(2000, 500), dataset, progress=False)
        cli = [sys.executable, "-m", "deltacells.cli"]
        commands = {
            'python -c "pass"': [sys.executable, "-c", "pass"],
            'python -c "import anndata"': [sys.executable, "-c", "import anndata"],
            'python -c "import deltacells"': [sys.executable, "-c", "import deltacells"],
            "deltacells --help": [*cli, "--help"],
            "deltacells info DATASET": [*cli, "info", str(dataset)],
        }
        times = {name: best_of(command, repeat) for name, command in commands.items()}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    anndata_time = times['python -c "import anndata"']
    print(f"start-up, best of {repeat} fresh processes (Python {sys.version.split()[0]})")
    for name, seconds in times.items():
        print(f"  {name:32s} {seconds * 1000:7.0f} ms   {seconds / anndata_time:5.2f}x import anndata")
    doc = {"repeat": repeat, "seconds": times}
    write_json(args.json, doc, started=started, quick=args.quick)


if __name__ == "__main__":
    main()
