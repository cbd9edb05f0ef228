"""The supervisor: run a target's workers one after the other for the time given, and collect their results.

A worker that dies (killed by a signal, or by faulthandler after ``--timeout`` seconds on one input) is a
finding: its last input is saved to the corpus, and a new worker (another seed) goes on for the time left.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .corpus import corpus_name, known_signatures
from .targets import DEFAULT_CORPUS, SCRIPT, target_environment


def _run_worker(command: list[str], env: dict[str, str], limit: float) -> tuple[int, str]:
    with tempfile.TemporaryFile("w+") as err:
        process = subprocess.Popen(command, env=env, stdout=err, stderr=subprocess.STDOUT, text=True)
        try:
            code = process.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            process.kill()
            code = process.wait()
        err.seek(0)
        return code, err.read()


def supervise(
    target: str,
    seconds: float,
    seed: int,
    corpus_out: Path,
    *,
    engine: str,
    timeout: float,
    rss_limit_mb: int,
    min_execs: int = 0,
) -> dict[str, Any]:
    """Fuzz ``target`` in worker subprocesses for ``seconds``, restarting a worker that dies."""
    workdir = Path(tempfile.mkdtemp(prefix=f"fuzz-{target}-"))
    current, status = workdir / "current", workdir / "status.json"
    env = target_environment(target)
    total: dict[str, Any] = {
        "target": target,
        "engine": engine,
        "execs": 0,
        "seconds": 0.0,
        "findings": [],
        "outcomes": {},
        "restarts": 0,
    }
    known = known_signatures(DEFAULT_CORPUS) | known_signatures(corpus_out)
    left = seconds
    attempt = 0
    while (left > 0.5 or attempt == 0) and attempt < 20:  # one worker at least (--min-execs)
        command = [
            sys.executable,
            str(SCRIPT),
            "--worker",
            target,
            "--seconds",
            f"{left:.2f}",
            "--seed",
            str(seed + 1000 * attempt),
            "--corpus-out",
            str(corpus_out),
            "--engine",
            engine,
            "--timeout",
            str(timeout),
            "--rss-limit-mb",
            str(rss_limit_mb),
            "--min-execs",
            str(min_execs if attempt == 0 else 0),
            "--current",
            str(current),
            "--status",
            str(status),
        ]
        status.unlink(missing_ok=True)
        began = time.monotonic()
        code, output = _run_worker(command, env, left + 300 + 4 * timeout)
        wall = time.monotonic() - began
        stats = json.loads(status.read_text()) if status.exists() else {}
        total["execs"] += int(stats.get("execs", 0))
        total["seconds"] += float(stats.get("seconds", 0.0))
        total["findings"] += stats.get("findings", [])
        for key, value in stats.get("outcomes", {}).items():
            total["outcomes"][key] = total["outcomes"].get(key, 0) + value
        for key in ("skipped", "transient", "max_peak", "max_peak_to_bound", "pool"):
            if key in stats:
                total[key] = max(total.get(key, 0), stats[key])
        if engine == "atheris":
            total.update(_libfuzzer_stats(output))
            total["findings"] += [
                {"signature": line.split()[1], "file": line.split()[3].rstrip(":"), "known": False, "message": line}
                for line in output.splitlines()
                if line.startswith("FINDING ")
            ]
            total["findings"] += [
                {"signature": line.split()[1].rstrip(":"), "file": None, "known": True, "message": line}
                for line in output.splitlines()
                if line.startswith("KNOWN ")
            ]
            artifacts = re.findall(r"Test unit written to (\S+)", output)
            total["findings"] += [
                {"signature": "libfuzzer-" + Path(a).name.split("-")[1], "file": a, "known": False, "message": ""}
                for a in artifacts
            ]
            total["seconds"] += wall
            transient = [int(line.split()[1]) for line in output.splitlines() if line.startswith("TRANSIENT ")]
            total["transient"] = total.get("transient", 0) + max(transient, default=0)
            if code == 0 or not artifacts:
                if code != 0:
                    total["worker_error"] = output[-3000:]
                break
        elif code == 0:
            break
        elif not stats or (code > 0 and "Timeout (" not in output):
            total["worker_error"] = output[-3000:]  # a problem of the harness (or of its start), not a finding
            break
        else:  # killed by a signal (a crash), or by faulthandler after --timeout seconds on one input (a hang)
            kind = "timeout" if "Timeout (" in output else f"signal{-code}"
            data = current.read_bytes() if current.exists() else b""
            sig = f"crash-{kind}"
            name = corpus_name(target, sig, data)
            new = name.rsplit("-", 1)[0] not in known
            if new:
                corpus_out.mkdir(parents=True, exist_ok=True)
                (corpus_out / name).write_bytes(data)
            total["findings"].append(
                {"signature": sig, "file": str(corpus_out / name), "known": not new, "message": output[-1500:]}
            )
            total["restarts"] += 1
        left = seconds - total["seconds"]
        attempt += 1
    return total


def _libfuzzer_stats(output: str) -> dict[str, Any]:
    stats: dict[str, Any] = {}
    for line in output.splitlines():
        match = re.search(r"cov: (\d+) ft: (\d+) corp: (\d+)/", line)
        if match:
            stats.update(edges=int(match[1]), features=int(match[2]), corpus_units=int(match[3]))
        match = re.match(r"stat::(\w+):\s+(\d+)", line)
        if match:
            stats[match[1]] = int(match[2])
    if "number_of_executed_units" in stats:
        stats["libfuzzer_execs"] = stats["number_of_executed_units"]
    return stats
