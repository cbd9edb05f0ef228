"""What every benchmark records beside its figures, and where a run may write them.

The documentation quotes the figures of the JSON files in ``docs/_data`` (``docs/_ext/figures.py``), which
``nox -s bench`` rewrites with full runs. A ``--quick`` run (CI, or trying the code) measures too little to be
quoted: :func:`write_json` never lets it replace a file of ``docs/_data``, and writes it to a temporary folder
instead. Every JSON carries the command that wrote it, when it started, whether it was ``--quick``, and the
machine and Python it ran on (:func:`stamp`).
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: The committed results the documentation quotes.
DOCS_DATA = ROOT / "docs" / "_data"
#: The committed results and the plots drawn from them: a ``--quick`` run writes into neither.
COMMITTED = (DOCS_DATA, ROOT / "docs" / "_static")
#: Where a ``--quick`` run asked to write into :data:`COMMITTED` writes instead.
QUICK_DIR = Path(tempfile.gettempdir()) / "deltacells-bench-quick"

# Every benchmark, and every interpreter it starts, reads bytecode from ``__pycache__`` as an installed package
# does (pip compiles it): with ``PYTHONDONTWRITEBYTECODE``, set on some machines (this project's CI among them),
# each fresh process compiles the modules it imports from source, 0.1-0.2 s that a user never pays, counted in
# every first call of a fresh process (opening a million cells: 0.45 s instead of 0.33 s).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False


def now() -> str:
    """The time, in UTC, as the JSON files record when a run started (``2026-12-02T06:48:12+00:00``)."""
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def shown(path: str | os.PathLike[str]) -> str:
    """``path`` as the JSON files record it: an absolute path relative to the repository (``../baseline/...``),
    or ``ELSEWHERE/<name>`` for one outside the repository and its siblings (a scratch directory).

    No path of the machine a benchmark ran on goes into the repository.
    """
    text = os.fspath(path)
    if not os.path.isabs(text):
        return text
    relative = os.path.relpath(text, ROOT)
    if relative.startswith(f"..{os.sep}..{os.sep}") or relative == f"..{os.sep}..":
        return f"ELSEWHERE/{os.path.basename(text)}"  # outside the repository and its siblings: a scratch place
    return relative


def command(argv: list[str] | None = None) -> str:
    """How this process was started (``argv``: its arguments), every path relative to the repository.

    ``python benchmarks/x.py --baseline ../baseline/.venv/bin/python``.
    """
    script = Path(sys.argv[0]).resolve()
    name = str(script.relative_to(ROOT)) if script.is_relative_to(ROOT) else script.name
    args = " ".join(shown(arg) for arg in (sys.argv[1:] if argv is None else argv))
    return f"python {name} {args}".rstrip()


def machine() -> dict[str, Any]:
    """The machine and Python of this run: CPUs, memory, platform, load average."""
    info: dict[str, Any] = {
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                info["memory_gb"] = round(int(line.split()[1]) * 1024 / 2**30, 1)
    except OSError:
        pass
    if hasattr(os, "getloadavg"):
        info["load_average"] = [round(x, 2) for x in os.getloadavg()]
    return info


def stamp(doc: dict[str, Any], *, started: str, quick: bool) -> dict[str, Any]:
    """``doc`` with the run's facts added where it has none: command, started, finished, quick, machine, python."""
    facts = {
        "command": command(),
        "started": started,
        "finished": now(),
        "quick": quick,
        "machine": machine(),
        "python": platform.python_version(),
    }
    return {**{k: v for k, v in facts.items() if k not in doc}, **doc}


def output_path(path: Path, *, quick: bool) -> Path:
    """Where to write ``path`` (a file or a folder of plots): a ``--quick`` run never writes into :data:`COMMITTED`."""
    if quick and any(path.resolve().is_relative_to(place.resolve()) for place in COMMITTED):
        moved = QUICK_DIR / path.name
        print(f"--quick: writing {moved}, not {path} (the figures the documentation quotes come from full runs)")
        return moved
    return path


def write_json(path: Path | None, doc: dict[str, Any], *, started: str, quick: bool, **dumps: Any) -> Path | None:
    """Write ``doc``, stamped (:func:`stamp`), as JSON to ``path`` (see :func:`output_path`); ``None``: nowhere.

    Returns the file written, or ``None``.
    """
    if path is None:
        return None
    target = output_path(path, quick=quick)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(stamp(doc, started=started, quick=quick), indent=1, **dumps) + "\n")
    print(f"wrote {target}")
    return target
