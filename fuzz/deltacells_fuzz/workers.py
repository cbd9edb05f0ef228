"""The workers: fuzz one target in this process, with the random engine or with atheris (libFuzzer).

The supervisor (:mod:`deltacells_fuzz.supervisor`) starts each worker as ``fuzz_decode.py --worker
<target>`` in the environment of :func:`~deltacells_fuzz.targets.target_environment`. A worker saves the
inputs of new findings to the corpus directory itself; what kills it (a crash, a hang) is left to the
supervisor, which reads the input being run from ``--current``.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ._tilebytes import fix_tile
from .corpus import corpus_name, known_signatures, signature
from .mutators import make_mutator
from .oracles import TileOracle, make_oracle
from .seeds import seeds_for
from .targets import DEFAULT_CORPUS, JIT_MODULES


def warm_up(oracle: Callable[[bytes], str], seeds: list[bytes]) -> None:
    """Run every seed twice (numba compiles or loads the kernels the first time) and check that none fails.

    Raises
    ------
    RuntimeError
        If a seed fails the property: the harness, not the target, would be at fault.
    """
    for data in seeds:
        with contextlib.suppress(Exception):
            oracle(data)
    for i, data in enumerate(seeds):
        try:
            oracle(data)
        except Exception as exc:
            msg = f"seed {i} fails its oracle: {type(exc).__name__}: {exc}"
            raise RuntimeError(msg) from exc


def _status(path: Path | None, stats: dict[str, Any]) -> None:
    if path is not None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(stats))
        os.replace(tmp, path)


def random_worker(
    target: str,
    seconds: float,
    seed: int,
    corpus_out: Path,
    *,
    current: Path | None = None,
    status: Path | None = None,
    timeout: float = 10.0,
    min_execs: int = 0,
) -> dict[str, Any]:
    """Fuzz ``target`` for ``seconds`` (after warming up) in this process; return the statistics.

    Parameters
    ----------
    target
        One of :data:`TARGETS`.
    seconds
        Fuzzing time.
    seed
        Seed of the mutations (the run is deterministic for a seed, up to how many inputs fit in the time).
    corpus_out
        Where failing inputs are saved.
    current
        A file that holds the input being run (read by the supervisor if this process dies).
    status
        A file where the statistics are written every second.
    timeout
        Seconds one input may take before the process dumps its stack and exits.
    min_execs
        Run at least this many inputs whatever the time.

    Returns
    -------
    dict
        Inputs executed, time, outcomes (checks reached), findings.
    """
    faulthandler.enable()
    rng = random.Random(seed)
    oracle = make_oracle(target)
    seeds = seeds_for(target)
    mutator = make_mutator(target, seeds)
    pool = list(seeds)
    outcomes: Counter[str] = Counter()
    harness_errors: Counter[str] = Counter()
    findings: dict[str, dict[str, Any]] = {}
    known = known_signatures(DEFAULT_CORPUS) | known_signatures(corpus_out)
    corpus_out.mkdir(parents=True, exist_ok=True)
    fd = os.open(current, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644) if current else None
    warm_up(oracle, seeds)
    if isinstance(oracle, TileOracle):  # the figures of the warm-up include numba's compilation
        oracle.max_peak = oracle.max_peak_ratio = oracle.skipped = oracle.transient = 0
    admit = 2 * max(len(x) for x in seeds) + 65536  # keep the parents small: mutations stack and grow inputs
    stats: dict[str, Any] = {"target": target, "engine": "random", "seed": seed, "execs": 0, "seconds": 0.0}
    _status(status, stats)  # the supervisor knows that warming up went well
    start = last_status = time.monotonic()
    deadline = start + seconds
    execs = 0
    while time.monotonic() < deadline or execs < min_execs:
        parent = rng.choice(pool)
        try:
            cross = rng.random() < 0.1
            data = mutator.crossover(parent, rng.choice(pool), rng) if cross else mutator.mutate(parent, rng)
        except Exception as exc:  # a bug of the harness: count it, do not let it stop the run
            harness_errors[f"{type(exc).__name__}: {exc}"[:200]] += 1
            continue
        if fd is not None:
            os.ftruncate(fd, 0)
            os.pwrite(fd, data, 0)
        faulthandler.dump_traceback_later(timeout, exit=True)
        try:
            outcome = oracle(data)
        except Exception as exc:
            sig = signature(target, exc)
            outcome = f"FINDING {sig}"
            entry = findings.get(sig)
            if entry is None:
                name = corpus_name(target, sig, data)
                new = name.rsplit("-", 1)[0] not in known
                if new:
                    (corpus_out / name).write_bytes(data)
                findings[sig] = entry = {
                    "signature": sig,
                    "file": str(corpus_out / name) if new else None,
                    "known": not new,
                    "message": f"{type(exc).__name__}: {exc}"[:300],
                    "count": 0,
                }
            entry["count"] += 1
        finally:
            faulthandler.cancel_dump_traceback_later()
        execs += 1
        if outcome not in outcomes and len(pool) < 2000 and len(data) <= admit:
            pool.append(data)  # a new outcome: this input reached a check no parent had reached
        outcomes[outcome] += 1
        now = time.monotonic()
        if now - last_status > 1.0:
            last_status = now
            stats.update(execs=execs, seconds=now - start, findings=list(findings.values()))
            _status(status, stats)
    stats.update(
        execs=execs,
        seconds=time.monotonic() - start,
        outcomes=dict(outcomes.most_common()),
        findings=list(findings.values()),
        pool=len(pool),
        harness_errors=dict(harness_errors),
    )
    if isinstance(oracle, TileOracle):
        stats.update(
            skipped=oracle.skipped,
            transient=oracle.transient,
            max_peak=oracle.max_peak,
            max_peak_to_bound=oracle.max_peak_ratio,
        )
    _status(status, stats)
    return stats


def atheris_worker(
    target: str, seconds: float, seed: int, corpus_out: Path, *, timeout: float, rss_limit_mb: int
) -> None:
    """Run libFuzzer (through atheris) on ``target`` with the structure-aware mutator; never returns."""
    import atheris

    exclude = [] if os.environ.get("NUMBA_DISABLE_JIT") == "1" else list(JIT_MODULES)
    with atheris.instrument_imports(include=["deltacells"], exclude=exclude):
        import deltacells  # (instrumented for coverage)
        import deltacells.obs  # (imported lazily by the package: instrument it too)

        # deltacells may import a module on the first use of one of its names: use the targets' names here
        _ = (deltacells.decode_tile, deltacells.encode_tile, deltacells.Manifest, deltacells.obs.ObsSchema)
    oracle = make_oracle(target)
    seeds = seeds_for(target)
    warm_up(oracle, seeds)  # numba compiles (or loads) the kernels now, not inside a measured input
    mutator = make_mutator(target, seeds)
    findings: dict[str, int] = {}
    known = known_signatures(DEFAULT_CORPUS) | known_signatures(corpus_out)
    corpus_out.mkdir(parents=True, exist_ok=True)
    counts = {"execs": 0}

    def test_one_input(data: bytes) -> None:
        counts["execs"] += 1
        before = getattr(oracle, "transient", 0)
        try:
            oracle(data)
        except Exception as exc:
            sig = signature(target, exc)
            if sig not in findings:
                name = corpus_name(target, sig, data)
                if name.rsplit("-", 1)[0] not in known:
                    (corpus_out / name).write_bytes(data)
                    print(f"FINDING {sig} -> {corpus_out / name}: {type(exc).__name__}: {exc}"[:400], flush=True)
                else:
                    print(f"KNOWN {sig}: {type(exc).__name__}: {exc}"[:300], flush=True)
            findings[sig] = findings.get(sig, 0) + 1
        if getattr(oracle, "transient", 0) != before:
            print(f"TRANSIENT {oracle.transient}", flush=True)  # an allocation above the bound, not repeated

    def custom_mutator(data: bytes, max_size: int, mutation_seed: int) -> bytes:
        rng = random.Random(mutation_seed)
        if rng.random() < 0.25:
            out = atheris.Mutate(data, max_size)
            if target.startswith("tile") and rng.random() < 0.5:
                out = fix_tile(out)
        else:
            out = mutator.mutate(data, rng)
        return out[:max_size]

    def custom_crossover(a: bytes, b: bytes, max_size: int, mutation_seed: int) -> bytes:
        return mutator.crossover(a, b, random.Random(mutation_seed))[:max_size]

    corpus_dir = Path(tempfile.mkdtemp(prefix=f"fuzz-{target}-"))
    for i, s in enumerate(seeds):
        (corpus_dir / f"seed{i:03d}").write_bytes(s)
    args = [
        sys.argv[0],
        str(corpus_dir),
        f"-max_total_time={max(1, round(seconds))}",
        f"-timeout={max(1, round(timeout))}",
        f"-rss_limit_mb={rss_limit_mb}",
        f"-artifact_prefix={corpus_out}/{target}-",
        f"-seed={seed + 1}",
        "-max_len=1048576",
        "-print_final_stats=1",
    ]
    atheris.Setup(args, test_one_input, custom_mutator=custom_mutator, custom_crossover=custom_crossover)
    atheris.Fuzz()
