"""anndata's own tests of its backed sparse matrices, run with deltacells' lazy X in place of anndata's (slow).

anndata's ``tests/test_backed_sparse.py`` is not part of its wheel, so this test needs anndata's test folder at
the tag of the installed anndata, named by ``$DELTACELLS_ANNDATA_TESTS`` (it skips without it), e.g.::

    git clone --depth 1 --branch 0.12.19 https://github.com/scverse/anndata ../anndata-0.12.19
    DELTACELLS_ANNDATA_TESTS=../anndata-0.12.19/tests pytest -m slow tests/io/test_anndata_backed_sparse_suite.py

(or ``pip download anndata==X.Y.Z --no-deps --no-binary :all:``, unpacked: the source distribution has the tests).
The suite runs in a pytest of its own in that folder, with ``anndata_suite_plugin`` (beside this file), which
swaps anndata's CSR datasets for deltacells' and says which tests used one.

Every test that used a deltacells X passes, ``test_backed_sizeof`` too: an AnnData's size with its data on disk is
its size in memory, as anndata counts its own backed arrays (their arrays' bytes, not the bytes stored).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

#: anndata's tests that a deltacells X fails, with the reason (see the module docstring): none.
EXPECTED_FAILURES: dict[str, str] = {}


@pytest.mark.slow
def test_anndata_backed_sparse_suite_with_a_deltacells_x(tmp_path: Path) -> None:
    folder = os.environ.get("DELTACELLS_ANNDATA_TESTS")
    if not folder or not (Path(folder) / "test_backed_sparse.py").is_file():
        pytest.skip("set DELTACELLS_ANNDATA_TESTS to anndata's tests/ folder at the installed anndata's tag")
    report = tmp_path / "report.json"
    (tmp_path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    command = [sys.executable, "-m", "pytest", "-q", "-c", str(tmp_path / "pytest.ini"), "--rootdir", folder]
    command += ["-p", "anndata_suite_plugin", "-p", "no:cacheprovider", "--import-mode=importlib", "-W", "ignore"]
    if _has_xdist():
        command += ["-n", "2"]
    environment = {**os.environ, "DELTACELLS_SUITE_REPORT": str(report)}
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), environment.get("PYTHONPATH")]))
    done = subprocess.run(
        [*command, str(Path(folder) / "test_backed_sparse.py")],
        cwd=folder,
        env=environment,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert report.is_file(), done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads(report.read_text(encoding="utf-8"))
    ours = summary["deltacells"]
    print({group: {outcome: len(ids) for outcome, ids in outcomes.items()} for group, outcomes in summary.items()})
    failed = ours.get("failed", []) + ours.get("error", [])
    unexpected = [test for test in failed if test.split("[")[0] not in EXPECTED_FAILURES]
    assert not unexpected, f"anndata's tests that fail with a deltacells X: {unexpected}\n{done.stdout[-3000:]}"
    assert len(ours.get("passed", [])) > 100
    theirs = summary["anndata"]  # anndata's own CSC and dense datasets: the test file matches the installed anndata
    assert not theirs.get("failed") and not theirs.get("error"), done.stdout[-3000:]


def _has_xdist() -> bool:
    try:
        import xdist  # noqa: F401
    except ImportError:
        return False
    return True
