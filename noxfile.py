"""Sessions for tests, lint and benchmarks: ``nox -s tests``, ``nox -s lint``, ``nox -s bench``."""

from __future__ import annotations

import nox

PROJECT = nox.project.load_toml()
PYTHONS = ["3.11", "3.13"]  # the oldest and newest Pythons we support (anndata 0.12 / 0.13)

nox.options.default_venv_backend = "uv|virtualenv"
nox.options.sessions = ["lint", "tests"]


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


@nox.session(python=PYTHONS[-1])
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check."""
    session.install("ruff")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session(python=PYTHONS[0], default=False)
def bench(session: nox.Session) -> None:
    """Run the benchmark scripts (timings are printed, never asserted)."""
    session.install("-e.")
    session.run("python", "benchmarks/bench_decode.py", *session.posargs)
    session.run("python", "benchmarks/bench_import.py", *(["--quick"] if "--quick" in session.posargs else []))


@nox.session(python=PYTHONS[0], default=False)
def docs(session: nox.Session) -> None:
    """Build the HTML documentation with warnings as errors, executing every tutorial (myst-nb)."""
    session.install("-e.", *nox.project.dependency_groups(PROJECT, "doc"))
    session.run("sphinx-build", "-W", "-n", "--keep-going", "-b", "html", "docs", "docs/_build/html", *session.posargs)


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
