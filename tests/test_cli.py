from __future__ import annotations

import numpy as np
from click.testing import CliRunner

import deltacells as dc
from deltacells.cli import main


def test_demo_runs_and_keeps_dataset(tmp_path):
    out = tmp_path / "demo.deltacells"
    result = CliRunner().invoke(
        main, ["demo", "--cells", "700", "--genes", "300", "--tile-size", "128", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "identical to the source: True" in result.output
    assert "identical: True" in result.output
    ds = dc.open_dataset(out)
    assert ds.shape == (700, 300)
    assert ds.n_tiles == 6
    assert ds.manifest.metadata["source"] == "deltacells demo"
    # Genes were written by decreasing totals.
    totals = np.asarray(ds.read_rows(dtype=np.int64).sum(axis=0)).ravel()
    assert np.all(np.diff(totals) <= 0)


def test_help_and_version():
    runner = CliRunner()
    assert "demo" in runner.invoke(main, ["--help"]).output
    result = runner.invoke(main, ["--version"])
    assert result.exit_code == 0
    assert dc.__version__ in result.output
