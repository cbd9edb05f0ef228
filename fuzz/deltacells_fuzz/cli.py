"""Bounded, structure-aware fuzzing of the deltacells decoders.

Targets
-------
``tile``
    :func:`deltacells.decode_tile`, with numba's bounds checking forced on (``NUMBA_BOUNDSCHECK=1``, own
    cache directory), so that an out-of-range index in a kernel raises instead of corrupting memory.
``tile-nojit``
    The same with ``NUMBA_DISABLE_JIT=1``: the kernels run as Python, so atheris also sees their branches.
``manifest``
    :meth:`deltacells.Manifest.from_json`.
``schema``
    :meth:`deltacells.obs.ObsSchema.from_json`.

Property checked on every input: the call returns a valid result (for a tile, a CSR matrix with int64
``indptr`` that starts at 0, never decreases and ends at nnz, int32 ``indices`` in ``[0, n_genes)``
increasing within each cell, int32 ``data >= 1``, agreeing with the header and re-encodable; for a
manifest or schema, an object whose invariants hold with exact integers and that survives a JSON round
trip) or raises :class:`deltacells.FormatError` naming the object -- no other exception, no crash, no hang
(per-input timeout), and no allocation beyond what the input justifies (see
:func:`~deltacells_fuzz._tilebytes.tile_budget`).

Engines
-------
``atheris``
    Coverage-guided (libFuzzer) with a structure-aware custom mutator; needs ``pip install atheris``.
``random``
    No dependency: the same mutators, guided by the *outcome* of each input (an input that reaches a new
    check -- a new error message template -- joins the pool of parents). Deterministic for a seed.
``auto``
    atheris when importable, else random.

Every input runs in a worker subprocess. An input that fails the property is saved to ``--corpus-out``
(default ``tests/reliability/corpus``) as ``<target>-<signature>-<sha1>.<ext>``, one per signature; a
worker killed by a signal or by the per-input timeout has its last input saved by the supervisor.

Examples
--------
``python fuzz/fuzz_decode.py --seconds 120``
    Fuzz for two minutes, shares of the time per target.
``python fuzz/fuzz_decode.py --replay tests/reliability/corpus/*``
    Run the oracles on saved inputs (exit status 1 if any still fails).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any

from .corpus import replay
from .supervisor import supervise
from .targets import DEFAULT_CORPUS, TARGETS, WEIGHTS
from .workers import atheris_worker, random_worker


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=120.0, help="fuzzing time in all (default 120)")
    parser.add_argument("--targets", default=None, help=f"comma-separated, of {', '.join(TARGETS)}")
    parser.add_argument("--engine", choices=("auto", "atheris", "random"), default="auto")
    parser.add_argument("--jobs", type=int, default=1, help="workers per target, run at once (different seeds)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--corpus-out", type=Path, default=DEFAULT_CORPUS, help="where failing inputs are saved")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per input before it counts as a hang")
    parser.add_argument("--rss-limit-mb", type=int, default=4096)
    parser.add_argument("--min-execs", type=int, default=0, help="random engine: at least this many inputs")
    parser.add_argument("--json", type=Path, default=None, help="write the statistics here")
    parser.add_argument("--replay", type=Path, nargs="*", default=None, help="run the oracles on saved inputs")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--current", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--status", type=Path, default=None, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def _engine(name: str) -> str:
    if name != "auto":
        return name
    try:
        import atheris  # noqa: F401
    except ImportError:
        return "random"
    return "atheris"


def main(argv: list[str] | None = None) -> int:
    """Command line entry point; returns the exit status (1 if a new failing input was found)."""
    args = _parse(argv)
    if args.worker:
        if args.engine == "atheris":
            atheris_worker(
                args.worker, args.seconds, args.seed, args.corpus_out, timeout=args.timeout,
                rss_limit_mb=args.rss_limit_mb,
            )  # fmt: skip
            return 0
        with contextlib.suppress(ValueError, OSError):
            import resource

            limit = args.rss_limit_mb * 2**20
            resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
        random_worker(
            args.worker, args.seconds, args.seed, args.corpus_out, current=args.current, status=args.status,
            timeout=args.timeout, min_execs=args.min_execs,
        )  # fmt: skip
        return 0
    if args.replay is not None:
        results = replay(args.replay)
        print(json.dumps(results, indent=1))
        return int(any(not r["ok"] for r in results))

    engine = _engine(args.engine)
    default = [t for t in TARGETS if engine == "atheris" or t != "tile-nojit"]
    targets = args.targets.split(",") if args.targets else default
    unknown = set(targets) - set(TARGETS)
    if unknown:
        print(f"unknown targets {sorted(unknown)}; choose among {TARGETS}", file=sys.stderr)
        return 2
    weights = {t: WEIGHTS[t] for t in targets}
    scale = sum(weights.values())
    report: dict[str, Any] = {"engine": engine, "seconds": args.seconds, "jobs": args.jobs, "targets": {}}
    began = time.monotonic()
    from concurrent.futures import ThreadPoolExecutor

    for target in targets:
        share = args.seconds * weights[target] / scale
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            runs = list(
                pool.map(
                    lambda job, t=target, s=share: supervise(
                        t, s, args.seed + 7919 * job, args.corpus_out, engine=engine, timeout=args.timeout,
                        rss_limit_mb=args.rss_limit_mb, min_execs=args.min_execs,
                    ),
                    range(args.jobs),
                )
            )  # fmt: skip
        merged = runs[0]
        for other in runs[1:]:
            for key in ("execs", "restarts", "libfuzzer_execs", "transient"):
                merged[key] = merged.get(key, 0) + other.get(key, 0)
            merged["findings"] += other["findings"]
            for key, value in other.get("outcomes", {}).items():
                merged["outcomes"][key] = merged["outcomes"].get(key, 0) + value
            for key in ("edges", "features", "corpus_units", "max_peak", "max_peak_to_bound", "skipped"):
                if key in other:
                    merged[key] = max(merged.get(key, 0), other[key])
        merged["seconds_per_job"] = share
        report["targets"][target] = merged
    report["wall_seconds"] = time.monotonic() - began
    _print_report(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, default=str))
    new = [f for t in report["targets"].values() for f in t["findings"] if not f.get("known")]
    errors = [t for t in report["targets"].values() if "worker_error" in t]
    return 1 if new or errors else 0


def _print_report(report: dict[str, Any]) -> None:
    print(f"engine {report['engine']}, {report['jobs']} job(s) per target, {report['wall_seconds']:.1f} s wall")
    for target, stats in report["targets"].items():
        execs = stats.get("libfuzzer_execs") or stats["execs"]
        seconds = max(stats.get("seconds", 0.0), 1e-9)
        line = f"  {target:10s} {execs:9d} inputs"
        if report["engine"] == "random":
            line += f" ({execs / seconds:,.0f}/s)"
            line += f", {len(stats.get('outcomes', {}))} distinct outcomes (checks reached)"
        else:
            line += f", cov {stats.get('edges', '?')} edges / {stats.get('features', '?')} features"
            line += f", corpus {stats.get('corpus_units', '?')}"
        if "max_peak_to_bound" in stats:
            line += f", peak/bound {stats['max_peak_to_bound']:.3f}"
        if stats.get("transient"):
            line += f", {stats['transient']} first-run allocation(s) above the bound not repeated"
        print(line)
        for finding in stats["findings"]:
            tag = "known" if finding.get("known") else "NEW"
            print(f"    {tag} {finding['signature']}: {finding.get('file') or ''}")
            if not finding.get("known"):
                print("      " + str(finding.get("message", ""))[:300].replace("\n", "\n      "))
        if "worker_error" in stats:
            print("    worker error:\n" + stats["worker_error"])
