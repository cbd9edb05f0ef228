"""Local paths are resolved when a dataset is opened: relative paths survive pickling and are never recorded."""

from __future__ import annotations

import pickle

import numpy as np

import deltacells
from deltacells.datasets import synthetic_counts


def test_relative_path_survives_pickling_and_is_never_written_out(tmp_path, monkeypatch):
    src = synthetic_counts(120, 30, seed=2)
    monkeypatch.chdir(tmp_path)
    deltacells.write_deltacells(src, "rel.deltacells", tile_size=32, progress=False)
    adata = deltacells.read_deltacells("rel.deltacells", cache_dir=tmp_path / "cache")
    assert adata.X.dataset.url == str(tmp_path / "rel.deltacells")
    blob = pickle.dumps(adata.X)
    monkeypatch.chdir(tmp_path.parent)  # another working directory, as a worker process may have
    clone = pickle.loads(blob)
    np.testing.assert_array_equal(clone[[5, 100]].toarray(), src.X[[5, 100]].toarray())
    adata.write_h5ad(tmp_path / "out.h5ad")
    import anndata as ad

    assert dict(ad.read_h5ad(tmp_path / "out.h5ad").uns) == {}  # no path of this machine in what is written
    assert str(tmp_path).encode() not in (tmp_path / "out.h5ad").read_bytes()
