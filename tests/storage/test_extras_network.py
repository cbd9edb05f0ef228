"""The AnnData's other elements (``anndata.zarr``) in a bucket: written before the manifest, opened without a LIST.

moto's S3 server behind a :class:`~tests.servers.proxy.RecordingProxy` (fixture ``s3_proxy``): the tests count
requests, never time them.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("aiohttp")
pytest.importorskip("moto.server")
pytest.importorskip("s3fs")

from tests.servers import ProxiedS3Bucket

import deltacells
from deltacells.datasets import synthetic_counts

pytestmark = pytest.mark.timeout(120)


def test_extras_in_a_bucket(s3_proxy: ProxiedS3Bucket, tmp_path) -> None:
    adata = synthetic_counts(300, 40, seed=2)
    adata.obsm["X_pca"] = np.random.default_rng(0).random((300, 4)).astype(np.float32)
    adata.uns["note"] = "kept"
    url = f"{s3_proxy.url}/ds"
    deltacells.write_deltacells(adata, url, storage_options=s3_proxy.storage_options, progress=False)
    puts = [r.path for r in s3_proxy.proxy.requests(method="PUT")]
    assert any("/anndata.zarr/" in p for p in puts)
    assert puts[-1].endswith("/ds/manifest.json")  # the extras are written before the manifest

    s3_proxy.proxy.reset()
    got = deltacells.read_deltacells(url, storage_options=s3_proxy.storage_options, cache_dir=tmp_path / "cache")
    records = s3_proxy.proxy.requests()
    assert all(r.method == "GET" and "list-type" not in r.query for r in records), records  # no LIST, no HEAD
    extras = [r.path.partition("/anndata.zarr/")[2] for r in records if "/anndata.zarr/" in r.path]
    # .zgroup, .zattrs, .zmetadata (every element's metadata in one read; in either order, zarr's versions
    # differ), then a GET per chunk read, each object once
    assert sorted(extras[:3]) == [".zattrs", ".zgroup", ".zmetadata"]
    assert sorted(extras[3:]) == ["obsm/X_pca/0.0", "uns/note/0"]
    np.testing.assert_array_equal(got.obsm["X_pca"], adata.obsm["X_pca"])
    assert got.uns["note"] == "kept"
