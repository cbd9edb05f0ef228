"""Sessions for tests, lint and benchmarks: ``nox -s tests``, ``nox -s lint``, ``nox -s bench``."""

from __future__ import annotations

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


@nox.session(python=PYTHONS[-1])
def tests_nojit(session: nox.Session) -> None:
    """Run the codec tests with numba's JIT off, so that coverage sees the kernels."""
    session.install("-e.", *nox.project.dependency_groups(PROJECT, "test"))
    session.run("pytest", "tests/codec", *session.posargs, env={"NUMBA_DISABLE_JIT": "1"})


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


@nox.session(python=PYTHONS[0], default=False)
def bench(session: nox.Session) -> None:
    """Run the benchmark scripts (timings are printed, never asserted); ``-- --quick`` for a small run."""
    session.install("-e.", *nox.project.dependency_groups(PROJECT, "test"))  # moto and s3fs for object storage
    quick = ["--quick"] if "--quick" in session.posargs else []
    others = [arg for arg in session.posargs if arg != "--quick"]
    session.run("python", "benchmarks/bench_decode.py", *(quick or others))
    for script in (
        "bench_import",
        "bench_gene_order",
        "bench_row_sort",
        "bench_object_storage",
        "bench_tile_cache",
        "bench_scale",
        "bench_atlas_idioms",
        "bench_extras",
        "bench_collection",
        "bench_collection_open",
        "bench_append",
        "bench_dask",
    ):
        session.run("python", f"benchmarks/{script}.py", *quick)


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
