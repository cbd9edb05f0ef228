"""Conversion on a cluster into a bucket: the workers PUT the tiles, the client writes the manifest, last.

A ``LocalCluster`` of two worker processes encodes the tiles of a dask-backed AnnData and stores them on moto's
S3 server (behind the recording proxy); the client process is not allowed to write a tile at all.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("aiohttp")
pytest.importorskip("moto.server")
pytest.importorskip("s3fs")
da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")

import anndata as ad  # noqa: E402 - after the skips
import numpy as np  # noqa: E402
from scipy import sparse  # noqa: E402
from tests.servers import ProxiedS3Bucket  # noqa: E402

import deltacells  # noqa: E402
from deltacells.datasets import synthetic_counts  # noqa: E402
from deltacells.storage import BaseStore  # noqa: E402

pytestmark = pytest.mark.timeout(180)

N_CELLS, N_GENES, TILE = 1_200, 50, 100


def test_workers_put_the_tiles_the_client_the_manifest_last(
    s3_proxy: ProxiedS3Bucket, client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = synthetic_counts(N_CELLS, N_GENES, seed=2)
    adata = ad.AnnData(
        X=da.from_array(sparse.csr_matrix(source.X), chunks=(250, N_GENES), asarray=False),
        obs=source.obs,
        var=source.var,
    )
    for store_class in set(_subclasses(BaseStore)):
        original = store_class.write

        def write(self, path, data, _original=original):
            assert not path.startswith("tiles/"), f"the client process wrote {path}: the workers should"
            return _original(self, path, data)

        monkeypatch.setattr(store_class, "write", write)

    url = f"{s3_proxy.url}/ds"
    deltacells.write_deltacells(adata, url, storage_options=s3_proxy.storage_options, tile_size=TILE, progress=False)

    puts = [record.path.removeprefix(f"/{s3_proxy.name}/ds/") for record in s3_proxy.proxy.requests(method="PUT")]
    tiles = sorted(key for key in puts if key.startswith("tiles/"))
    assert tiles == [f"tiles/tile_{i:06d}.dct" for i in range(N_CELLS // TILE)]  # each tile once
    assert puts[-1] == "manifest.json" and puts.count("manifest.json") == 1

    back = deltacells.read_deltacells(url, storage_options=s3_proxy.storage_options, cache_dir=tmp_path / "cache")
    got = back.X.to_memory()
    np.testing.assert_array_equal(got.toarray(), np.asarray(source.X.toarray(), dtype=np.float32))
    assert list(back.obs_names) == list(source.obs_names)


def _subclasses(cls: type) -> list[type]:
    found = []
    for sub in cls.__subclasses__():
        found += [sub, *_subclasses(sub)]
    return found
