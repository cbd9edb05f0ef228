"""``read_deltacells(s3_url, chunks="tiles", storage_options=...)`` computed on a cluster of worker processes.

A ``LocalCluster`` of two worker processes reads a dataset from moto's S3 server: each block's task carries the
store's URL and ``storage_options`` (endpoint, credentials, region), and the workers open the dataset themselves.
Their environment holds no AWS credentials or endpoint (removed before each test), so the options alone reach
the server.
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
from tests.servers import S3Bucket  # noqa: E402

import deltacells  # noqa: E402
from deltacells.datasets import synthetic_counts  # noqa: E402

pytestmark = pytest.mark.timeout(180)

N_CELLS, N_GENES, TILE_SIZE = 1_000, 60, 128
TILE_CELLS = (128,) * 7 + (104,)


@pytest.fixture(scope="module")
def source() -> ad.AnnData:
    return synthetic_counts(N_CELLS, N_GENES, seed=5)


def _on_the_workers():
    """The functions run on the workers, made here so that they pickle by value (workers cannot import tests)."""

    def clean_environment() -> dict[str, str | None]:
        """No AWS variable (credentials, endpoint, profile, region), no network proxy, no s3fs instance cached.

        Nothing on the machine may give botocore credentials either. Returns what AWS_ACCESS_KEY_ID and
        AWS_ENDPOINT_URL are left.
        """
        import os

        import s3fs

        for name in list(os.environ):
            if name.startswith(("AWS_", "FSSPEC_S3")) or name.lower() in ("http_proxy", "https_proxy", "all_proxy"):
                del os.environ[name]
        os.environ["AWS_CONFIG_FILE"] = os.environ["AWS_SHARED_CREDENTIALS_FILE"] = os.devnull
        os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
        os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost"
        s3fs.S3FileSystem.clear_instance_cache()
        return {name: os.environ.get(name) for name in ("AWS_ACCESS_KEY_ID", "AWS_ENDPOINT_URL")}

    def opened_here() -> list[str]:
        """The URLs of the datasets this worker's blocks opened."""
        from deltacells.io import _dask

        return [dataset.store.url for dataset in _dask._open.values()]

    return clean_environment, opened_here


CLEAN_ENVIRONMENT, OPENED_HERE = _on_the_workers()


@pytest.fixture
def dataset_url(s3_bucket: S3Bucket, source: ad.AnnData, client) -> str:
    """``source`` written to the bucket; the workers' environment cleaned (they then open nothing yet)."""
    url = f"{s3_bucket.url}/ds"
    deltacells.write_deltacells(
        source, url, storage_options=s3_bucket.storage_options, tile_size=TILE_SIZE, progress=False
    )
    left = client.run(CLEAN_ENVIRONMENT)
    assert len(left) == 2
    assert all(values == {"AWS_ACCESS_KEY_ID": None, "AWS_ENDPOINT_URL": None} for values in left.values())
    return url


def _read(url: str, s3_bucket: S3Bucket, tmp_path: Path, **options) -> ad.AnnData:
    return deltacells.read_deltacells(
        url, storage_options=s3_bucket.storage_options, cache_dir=tmp_path / "cache", threads=1, **options
    )


def test_x_computed_on_the_workers(dataset_url, s3_bucket, source, tmp_path, client):
    adata = _read(dataset_url, s3_bucket, tmp_path, chunks="tiles")
    X = adata.X
    assert isinstance(X, da.Array) and X.chunks == (TILE_CELLS, (N_GENES,))
    expected = sparse.csr_matrix(source.X)  # in the dtype written

    got = client.compute(X).result()
    assert isinstance(got, sparse.csr_matrix) and got.dtype == source.X.dtype
    np.testing.assert_array_equal(got.toarray(), expected.toarray())
    opened = client.run(OPENED_HERE)
    assert sum(len(urls) for urls in opened.values()) >= 1  # the workers read the tiles themselves
    assert all(urls in ([], [dataset_url]) for urls in opened.values())

    rows = adata[adata.obs["cell_type"] == "type_B"].X.compute()  # the client is dask's default scheduler
    np.testing.assert_array_equal(rows.toarray(), expected[(source.obs["cell_type"] == "type_B").to_numpy()].toarray())


def test_per_gene_sums_on_the_workers(dataset_url, s3_bucket, source, tmp_path, client):
    X = _read(dataset_url, s3_bucket, tmp_path, chunks=300).X
    assert X.chunks[0] == (256, 256, 256, 232)  # 300 cells: 2 tiles a block

    def gene_sums(block):  # dask's own X.sum(axis=0) passes keepdims=, which scipy.sparse lacks (dask#11880)
        return np.asarray(block.sum(axis=0), dtype=np.float64).reshape(1, -1)

    sums = X.map_blocks(gene_sums, chunks=((1,) * X.numblocks[0], (N_GENES,)), dtype=np.float64, meta=np.empty((0, 0)))
    got = client.compute(sums.sum(axis=0)).result()
    np.testing.assert_array_equal(got, np.asarray(source.X.sum(axis=0), dtype=np.float64).ravel())
