"""Sessions for tests, lint, type checks and benchmarks: ``nox -s tests``, ``nox -s lint``, ``nox -s typecheck``,
``nox -s bench``."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import nox

PROJECT = nox.project.load_toml()
PYTHONS = ["3.11", "3.13"]  # the oldest and newest Pythons we support (anndata 0.12 / 0.13)

nox.options.default_venv_backend = "uv|virtualenv"
nox.options.sessions = ["lint", "tests"]
# The sessions run on the interpreters of this machine, or fail: a missing Python is an error (not a
# skipped session and a zero exit status), and neither nox nor uv downloads one.
nox.options.error_on_missing_interpreters = True
nox.options.download_python = "never"  # nox >= 2025.02; older ones ignore it (uv's variables below suffice)

#: uv's settings for the sessions' environments: system interpreters only, never a download. They apply to
#: the uv that nox runs (it inherits this process's environment) unless already set in the environment.
UV_ENV = {"UV_PYTHON_DOWNLOADS": "never", "UV_PYTHON_PREFERENCE": "only-system"}
for _name, _value in UV_ENV.items():
    os.environ.setdefault(_name, _value)


def pyenv_bin_dir(version: str) -> Path | None:
    """The ``bin`` directory of the newest pyenv install of ``version`` ("3.13": 3.13.x), or None."""
    root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    found = []
    for candidate in root.glob(f"{version}.*"):
        patch = candidate.name.removeprefix(f"{version}.")
        if patch.isdigit() and (candidate / "bin" / "python").exists():
            found.append((int(patch), candidate / "bin"))
    return max(found)[1] if found else None


def find_pythons(versions: list[str]) -> None:
    """Put pyenv's ``pythonX.Y`` on PATH for the versions that are not on it, or only as pyenv shims.

    A pyenv shim runs only the versions that PYENV_VERSION (or a ``.python-version``) selects; nox would
    find no interpreter behind it, while pyenv has one under ``$PYENV_ROOT/versions/X.Y.Z/bin``.
    """
    shims = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "shims"
    for version in versions:
        found = shutil.which(f"python{version}")
        if found is not None and Path(found).parent != shims:
            continue
        bin_dir = pyenv_bin_dir(version)
        if bin_dir is not None:
            os.environ["PATH"] = os.pathsep.join([str(bin_dir), os.environ.get("PATH", "")])


find_pythons(PYTHONS)


@nox.session(python=PYTHONS)
def tests(session: nox.Session) -> None:
    """Run the test suite (pass pytest options after ``--``)."""
    session.install("-e.", *nox.project.dependency_groups(PROJECT, "test"))
    session.run("pytest", "-n", "auto", *session.posargs)


@nox.session(python=PYTHONS[0])
def tests_slow(session: nox.Session) -> None:
    """Run the tests marked ``slow`` alone (writers killed mid-write, fuzzing, pages of the docs pasted whole...).

    The README's test command leaves them out (``-m "not slow"``: about 5 minutes on 2 cores); they take about 5
    more, and are not specific to a Python version. CI runs both.
    """
    session.install("-e.", *nox.project.dependency_groups(PROJECT, "test"))
    session.run("pytest", "-n", "auto", "-m", "slow", *session.posargs)


#: The least share of ``src/deltacells``'s statements the test suite must run (``nox -s coverage``): the figure
#: measured when the session was added, rounded down, so that a change that leaves code untested fails.
COVERAGE_MIN = 92

#: The least share of each package's statements the tests must run (``nox -s coverage``): each first-level subpackage
#: of ``deltacells`` (``core``, ``io``, ...) and its top-level modules together, so that a well-tested package does
#: not hide an untested one in the total.
PACKAGE_COVERAGE_MIN = 90

#: What :func:`package_coverage` calls the modules directly under ``src/deltacells``.
TOP_LEVEL = "deltacells (top level)"


@nox.session(python=PYTHONS[-1])
def coverage(session: nox.Session) -> None:
    """Measure which statements of ``src/deltacells`` the tests run, and fail under :data:`COVERAGE_MIN` percent.

    Two passes add up: the test suite without the slow tests (under ``sys.monitoring``, cheap on Python
    3.12+), then the tests of the kernels with numba's JIT off, so that coverage sees the kernels' Python
    source run (compiled, it never runs as Python). Processes the tests start (dask workers, DataLoader
    workers, killed writers) are not measured. The report lists the files under 100%; ``coverage.json`` holds
    the figures. Then each package must reach :data:`PACKAGE_COVERAGE_MIN` percent: the session fails naming
    every one that does not (:func:`packages_under`).
    """
    session.install("-e.", *nox.project.dependency_groups(PROJECT, "test", "coverage"))
    session.run("coverage", "erase")
    session.run(
        "pytest", "-n", "auto", "-m", "not slow", "--cov=deltacells", "--cov-report=", *session.posargs,
        env={"COVERAGE_CORE": "sysmon"},
    )  # fmt: skip
    session.run(
        "pytest", "-n", "auto", *KERNEL_TESTS, "--cov=deltacells", "--cov-append", "--cov-report=",
        env={"NUMBA_DISABLE_JIT": "1", "COVERAGE_CORE": "sysmon"},
    )  # fmt: skip
    session.run("coverage", "json", "-q", "-o", "coverage.json")
    session.run("coverage", "report", f"--fail-under={COVERAGE_MIN}")
    under = packages_under(Path("coverage.json"), PACKAGE_COVERAGE_MIN)
    if under:
        session.error(f"packages under {PACKAGE_COVERAGE_MIN}% of their statements run: {'; '.join(under)}")


def package_coverage(report: dict) -> dict[str, tuple[int, int]]:
    """``{package: (statements run, statements)}`` from a ``coverage json`` report, for each package of deltacells.

    A package is a first-level subpackage of ``deltacells`` (``deltacells/core/_dataset.py``: ``core``); the
    modules directly in ``deltacells`` are one package, :data:`TOP_LEVEL`. Files outside ``deltacells`` are left out.
    """
    totals: dict[str, tuple[int, int]] = {}
    for name, data in report["files"].items():
        parts = Path(name).parts
        if "deltacells" not in parts:
            continue
        inside = parts[parts.index("deltacells") + 1 :]
        package = inside[0] if len(inside) > 1 else TOP_LEVEL
        run, statements = totals.get(package, (0, 0))
        summary = data["summary"]
        totals[package] = (run + summary["covered_lines"], statements + summary["num_statements"])
    return totals


def packages_under(path: Path, minimum: float) -> list[str]:
    """The packages (:func:`package_coverage`) of the ``coverage json`` report at ``path`` under ``minimum`` percent.

    Each as ``"name: 87.5% (350 of 400 statements)"``, in name order; empty when every package reaches it.
    """
    under = []
    for package, (run, statements) in sorted(package_coverage(json.loads(path.read_text())).items()):
        percent = 100.0 * run / statements if statements else 100.0
        if percent < minimum:
            under.append(f"{package}: {percent:.1f}% ({run} of {statements} statements)")
    return under


#: The tests that run every numba kernel (``coverage``'s second pass, with the JIT off).
KERNEL_TESTS = ["tests/codec", "tests/tiles/test_gather_sorted.py", "tests/tiles/test_gather_vectorised.py"]


#: The torch of ``tests_torch``: a CPU build of it for Python 3.11 lies in this machine's pip find-links.
TORCH = "torch==2.13.0"


@nox.session(python=PYTHONS[0], venv_backend="virtualenv", default=False)
def tests_torch(session: nox.Session) -> None:
    """Run the torch tests (``tests/torch``: outputs, DataLoader workers, torch.distributed) with torch installed.

    Installed with pip, not uv: pip finds the CPU build of torch that this machine keeps on disk (for Python
    3.11 only), where uv would download a CUDA build of several GB. The main test suite stays torch-free.
    """
    session.install("-e.", *nox.project.dependency_groups(PROJECT, "test"), TORCH)
    session.run("pytest", "tests/torch", *session.posargs)


@nox.session(python=PYTHONS[-1])
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check."""
    session.install("ruff")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session(python=PYTHONS[-1])
def typecheck(session: nox.Session) -> None:
    """mypy --strict on src/deltacells, as ``[tool.mypy]`` in pyproject.toml configures it (options after ``--``).

    On the newest Python only: the stubs of the ``typecheck`` group are pandas 3's, and anndata 0.12 (the one
    Python 3.11 gets) ships no type annotations.
    """
    session.install("-e.", *nox.project.dependency_groups(PROJECT, "typecheck"))
    session.run("mypy", *session.posargs)


#: The real data of the benchmarks (beside the repository; ``$DELTACELLS_VISIUM`` elsewhere).
VISIUM = os.environ.get("DELTACELLS_VISIUM", "../shared/data/visium-cytassist")

#: The atlas sizes of ``bench_scale``'s full run (3.5 GB of disk), and the one also written as h5ad.
SCALE_SIZES = ["--sizes", "2M,20M,100M", "--h5ad-sizes", "2M"]

#: What ``nox -s bench`` runs: each benchmark, the JSON of ``docs/_data`` its full run rewrites (None: it writes
#: none; the documentation quotes nothing of it) and the options of that full run, with how long it takes on the
#: 2-core machine of ``docs/performance.md``. A script listed twice runs once with ``--quick``.
BENCHMARKS: list[tuple[str, str | None, list[str]]] = [
    ("bench_decode", "decode-visium.json", ["--visium", VISIUM, "--repeat", "9"]),  # 2 minutes
    ("bench_decode", "decode-30k.json", ["--visium", VISIUM, "--resample", "30000", "--repeat", "9"]),  # 4 minutes
    ("bench_import", "import.json", []),  # 1 minute
    ("bench_gene_order", "gene-order.json", []),  # 5 minutes
    ("bench_output_memory", "output-memory.json", []),  # 2 minutes
    ("bench_row_sort", "row-sort.json", []),
    ("bench_levels", "levels.json", ["--knob-levels", "6", "--sample-tiles", "4"]),  # 6 minutes
    ("bench_convert", "convert.json", []),  # 3 minutes
    ("bench_anndata", "anndata.json", []),  # 15 minutes
    ("bench_object_storage", "object-storage.json", []),  # 5 minutes
    ("bench_s3_clients", "s3-clients.json", ["--cells", "1000000"]),  # 10 minutes (the scan goal: 490 tiles)
    ("bench_tile_cache", "tile-cache.json", []),  # 2 minutes
    ("bench_scale", "scale.json", [*SCALE_SIZES, "--fractions", "0.0001", "0.001", "--repeat", "1"]),  # 2 hours
    ("bench_atlas_idioms", "atlas-idioms.json", ["--cells", "10M"]),  # 20 minutes
    ("bench_open", "open.json", []),  # 10 minutes (--baseline <another checkout's python> for before/after)
    ("bench_extras", "extras.json", ["--atlas-cells", "2M"]),  # 5 minutes
    ("bench_collection", "collection.json", []),  # 15 minutes
    ("bench_collection_open", "collection-open.json", ["--datasets", "1000", "--latency", "0.03"]),  # 3 minutes
    ("bench_append", None, []),
    ("bench_dask", "dask.json", []),  # 5 minutes
    ("bench_atlas_read", "atlas-read.json", []),  # 5 minutes
]
#: The benchmarks with sessions of their own (their peers' environments), which ``nox -s bench`` runs after its own,
#: with the options after ``--`` that rewrite their JSON and plots (about 13 and 15 minutes).
PEER_BENCHMARKS = {
    **{f"bench_cold_start-{version}": [] for version in PYTHONS},  # 8 minutes each
    "bench_peers": ["--json", "docs/_data/peers.json", "--plots", "docs/_static/peers"],
    "bench_loader": ["--rounds", "3", "--json", "docs/_data/loader.json", "--plots", "docs/_static/loader"],
}


def rewrite_readme(session: nox.Session) -> None:
    """Rewrite the figures of README.md from docs/_data (``docs/_ext/readme_figures.py``)."""
    session.run("python", "docs/_ext/readme_figures.py", "--write")


@nox.session(python=PYTHONS[0], default=False)
def bench(session: nox.Session) -> None:
    """Run the benchmarks and rewrite the figures the documentation quotes (docs/_data, then README.md).

    ``nox -s bench`` runs every benchmark of ``BENCHMARKS`` with its full options (about four hours on the
    2-core machine, two of them ``bench_scale``), each writing its JSON into docs/_data, then the sessions
    ``bench_cold_start`` (on each Python), ``bench_peers`` and ``bench_loader`` likewise; README.md's figures are
    rewritten from the new JSON.
    ``-- bench_scale bench_dask`` runs only those. ``-- --quick`` runs each once, small, for its code alone:
    the JSON goes to this session's temporary folder (a quick run never writes into docs/_data) and README.md is
    only checked.
    """
    session.install("-e.", *nox.project.dependency_groups(PROJECT, "test"))  # moto and s3fs for object storage
    quick = "--quick" in session.posargs
    chosen = [arg.removesuffix(".py") for arg in session.posargs if arg != "--quick"]
    known = {script for script, _, _ in BENCHMARKS} | set(PEER_BENCHMARKS)
    if set(chosen) - known:
        session.error(f"unknown benchmarks {sorted(set(chosen) - known)}: choose among {sorted(known)}")
    out = Path(session.create_tmp())
    done: set[str] = set()
    for script, data, full in BENCHMARKS:
        if (chosen and script not in chosen) or (quick and script in done):
            continue
        done.add(script)
        if quick:
            args = ["--quick", *(["--json", str(out / data)] if data else [])]
        else:
            args = [*full, *(["--json", f"docs/_data/{data}"] if data else [])]
        session.run("python", f"benchmarks/{script}.py", *args)
    for name, args in PEER_BENCHMARKS.items():
        if not chosen or name in chosen:
            session.notify(name, ["--quick", "--json", str(out / f"{name}.json")] if quick else args)
    if quick:
        session.run("python", "docs/_ext/readme_figures.py", "--check")
    else:
        rewrite_readme(session)


@nox.session(python=PYTHONS[0], default=False)
def docs(session: nox.Session) -> None:
    """Build the HTML documentation with warnings as errors, executing every page's notebook (myst-nb).

    Pages are read by a process per CPU (``-j auto``), each executing its notebooks: on 2 cores 5.2 minutes
    where one process took 7.2 (this machine). Every notebook runs afresh (``nb_execution_mode=force``): the
    execution cache of ``docs/conf.py`` is one SQLite file, which processes writing at once can find locked
    (as in scipy/scipy#22383); a plain ``sphinx-build`` of ``docs`` keeps using it.
    """
    session.install("-e.", *nox.project.dependency_groups(PROJECT, "doc"))
    strict = ["-W", "-n", "--keep-going"]
    parallel = ["-j", "auto", "-D", "nb_execution_mode=force"]
    session.run("sphinx-build", *strict, *parallel, "-b", "html", "docs", "docs/_build/html", *session.posargs)


@nox.session(python=PYTHONS[0], default=False)
def tutorials(session: nox.Session) -> None:
    """Execute the tutorials top to bottom outside Sphinx (tutorials/execute.py: jupytext + nbclient)."""
    session.install("-e.", *nox.project.dependency_groups(PROJECT, "doc"))
    session.run("python", "tutorials/execute.py", "--out", session.create_tmp(), *session.posargs)


@nox.session(python=PYTHONS[0], default=False)
def fuzz(session: nox.Session) -> None:
    """Coverage-guided fuzzing of decode_tile, Manifest.from_json and ObsSchema.from_json (atheris).

    ``nox -s fuzz`` fuzzes for 120 s; ``nox -s fuzz -- 600`` (or ``-- --seconds 600``) for ten minutes; other
    options go to ``fuzz/fuzz_decode.py`` (``--targets``, ``--jobs``...). Inputs that break the property are
    saved to ``tests/reliability/corpus/``, which the test suite replays.
    """
    session.install("-e.", "atheris")
    args = list(session.posargs)
    if args and not args[0].startswith("-"):
        args = ["--seconds", *args]
    if "--seconds" not in args:
        args = ["--seconds", "120", *args]
    session.run("python", "fuzz/fuzz_decode.py", "--engine", "atheris", *args)


#: Where ``nox -s bench_cold_start`` writes each Python's results.
COLD_START_JSON = {"3.11": "docs/_data/cold-start-3.11.json", "3.13": "docs/_data/cold-start-3.13.json"}


@nox.session(python=PYTHONS, default=False)
def bench_cold_start(session: nox.Session) -> None:
    """A fresh process's first reads, numba's cache warm and cold (``benchmarks/bench_cold_start.py``).

    On each supported Python (numba keeps a cache per version), into ``docs/_data/cold-start-<version>.json``;
    ``-- --quick`` for a small run that writes no JSON there.
    """
    session.install("-e.", *nox.project.dependency_groups(PROJECT, "test"))
    if "--quick" in session.posargs:
        session.run("python", "benchmarks/bench_cold_start.py", "--quick")
    else:
        session.run("python", "benchmarks/bench_cold_start.py", "--json", COLD_START_JSON[str(session.python)])


@nox.session(python=PYTHONS[-1], default=False)
def bench_peers(session: nox.Session) -> None:
    """Benchmark deltacells against its peers (h5ad, zarr, TileDB-SOMA, zstd alone); ``-- --quick`` for CI.

    The peers come from ``benchmarks/peers-requirements.txt``, in this environment only (never a runtime
    dependency). Runs on the newest supported Python with tiledbsoma wheels (3.13). Options after ``--`` go to
    ``benchmarks/bench_peers.py`` (``--sizes visium,100k,1M --json docs/_data/peers.json --plots
    docs/_static/peers``).
    """
    session.install("-e.", "-r", "benchmarks/peers-requirements.txt")
    session.run("python", "benchmarks/bench_peers.py", *session.posargs)
    if "--quick" not in session.posargs and "docs/_data/peers.json" in session.posargs:
        rewrite_readme(session)


#: pip, not uv, for bench_loader: pip follows this machine's pip configuration, whose local index has torch's CPU
#: build (uv would take PyPI's, a CUDA build of several GB).
@nox.session(python=PYTHONS[0], venv_backend="virtualenv", default=False)
def bench_loader(session: nox.Session) -> None:
    """Benchmark deltacells.CellLoader against annbatch, scDataset, tiledbsoma-ml and a naive loop; ``-- --quick``.

    The peers come from ``benchmarks/loader-requirements.txt``, in benchmark environments only (never a runtime
    dependency): this session's (Python 3.11: torch's CPU build, scDataset, tiledbsoma-ml) and a second one
    beside it on Python 3.13 for annbatch (which needs 3.12 or later); ``bench_loader.py`` runs each loader in
    an interpreter that has it (``--python``). Options after ``--`` go to ``benchmarks/bench_loader.py``
    (``--json docs/_data/loader.json --plots docs/_static/loader``).
    """
    requirements = "benchmarks/loader-requirements.txt"
    session.install("-e.", "-r", requirements, *nox.project.dependency_groups(PROJECT, "test"))  # + moto, s3fs
    other = Path(session.virtualenv.location).with_name(Path(session.virtualenv.location).name + "-annbatch")
    import sys  # nox's interpreter, whose environment has uv (pip install nox uv)

    uv = shutil.which("uv") or str(Path(sys.executable).with_name("uv"))
    session.run_install(uv, "venv", "--quiet", "--allow-existing", "--python", PYTHONS[-1], str(other), external=True)
    other_python = str(other / "bin" / "python")
    session.run_install(
        uv, "pip", "install", "--quiet", "--python", other_python, "-e.", "-r", requirements, external=True
    )
    session.run("python", "benchmarks/bench_loader.py", "--python", other_python, *session.posargs)
    if "--quick" not in session.posargs and "docs/_data/loader.json" in session.posargs:
        rewrite_readme(session)
