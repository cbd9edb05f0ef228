"""The noxfile: sessions run on this machine's interpreters, and a missing one is an error, not a skip."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOXFILE = ROOT / "noxfile.py"

needs_nox = pytest.mark.skipif(importlib.util.find_spec("nox") is None, reason="nox is not installed")


@pytest.fixture
def noxfile(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The noxfile loaded as a module; the environment variables and nox.options it sets are restored after."""
    import nox
    import nox.registry

    monkeypatch.setattr(nox.registry, "_REGISTRY", {})  # the sessions are registered anew at each load
    for name in ("UV_PYTHON_DOWNLOADS", "UV_PYTHON_PREFERENCE", "PATH"):
        if name in os.environ:
            monkeypatch.setenv(name, os.environ[name])  # recorded, so restored after the test
        else:
            monkeypatch.delenv(name, raising=False)
    for name in ("default_venv_backend", "sessions", "error_on_missing_interpreters", "download_python"):
        if hasattr(nox.options, name):
            monkeypatch.setattr(nox.options, name, getattr(nox.options, name))
    monkeypatch.chdir(ROOT)  # nox.project.load_toml() reads ./pyproject.toml
    spec = importlib.util.spec_from_file_location("deltacells_noxfile", NOXFILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@needs_nox
def test_missing_interpreters_are_errors(noxfile):
    import nox

    assert nox.options.error_on_missing_interpreters is True
    assert nox.options.download_python == "never"
    assert os.environ["UV_PYTHON_DOWNLOADS"] == "never"
    assert os.environ["UV_PYTHON_PREFERENCE"] == "only-system"
    assert noxfile.PYTHONS == ["3.11", "3.13"]


@needs_nox
def test_pyenv_versions_are_found(noxfile, tmp_path, monkeypatch):
    """A version that pyenv holds but that is not on PATH gets the newest pyenv install's bin directory."""
    for patch in ("2", "10"):
        bin_dir = tmp_path / "versions" / f"3.97.{patch}" / "bin"
        bin_dir.mkdir(parents=True)
        (bin_dir / "python").write_text("")
    (tmp_path / "versions" / "3.97.x").mkdir()  # not a release: ignored
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path))
    assert noxfile.pyenv_bin_dir("3.97") == tmp_path / "versions" / "3.97.10" / "bin"
    assert noxfile.pyenv_bin_dir("3.98") is None
    noxfile.find_pythons(["3.97", "3.98"])
    assert os.environ["PATH"].split(os.pathsep)[0] == str(tmp_path / "versions" / "3.97.10" / "bin")


@needs_nox
def test_a_missing_interpreter_fails_the_run(tmp_path):
    """nox on an interpreter that does not exist exits non-zero (outside CI, where nox would skip by default)."""
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "NOX_DEFAULT_VENV_BACKEND", "NOX_DOWNLOAD_PYTHON")}
    args = ["-f", NOXFILE, "--envdir", tmp_path / "nox", "--force-python", "3.99", "-s", "lint", "--no-install"]
    proc = subprocess.run(
        [sys.executable, "-m", "nox", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        env=env,
        cwd=ROOT,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    assert "3.99 not found" in output, output
    assert "skipped" not in output, output


@needs_nox
def test_packages_under_the_coverage_floor_are_named(noxfile, tmp_path):
    """Each first-level package of deltacells (and its top-level modules, as one) against the per-package floor."""
    import json

    def summary(run: int, statements: int) -> dict:
        return {"summary": {"covered_lines": run, "num_statements": statements}}

    report = {
        "files": {
            "src/deltacells/core/_dataset.py": summary(80, 100),
            "src/deltacells/core/_writer.py": summary(10, 20),  # core: 90 of 120, 75%
            "src/deltacells/io/_read.py": summary(90, 100),  # io: exactly 90%, not under
            "src/deltacells/io/_lazy_obs/_frame.py": summary(9, 10),  # a sub-subpackage counts for io
            "src/deltacells/_memory.py": summary(40, 50),
            "src/deltacells/errors.py": summary(4, 10),  # top level: 44 of 60
            "src/deltacells/testing/__init__.py": summary(0, 0),  # no statement: never under
            "tests/helper.py": summary(0, 10),  # outside deltacells: left out
        }
    }
    path = tmp_path / "coverage.json"
    path.write_text(json.dumps(report))
    assert noxfile.package_coverage(report) == {
        "core": (90, 120),
        "io": (99, 110),
        noxfile.TOP_LEVEL: (44, 60),
        "testing": (0, 0),
    }
    assert noxfile.packages_under(path, 90) == [
        "core: 75.0% (90 of 120 statements)",
        f"{noxfile.TOP_LEVEL}: 73.3% (44 of 60 statements)",
    ]
    assert noxfile.packages_under(path, 70) == []
    assert noxfile.PACKAGE_COVERAGE_MIN == 90
