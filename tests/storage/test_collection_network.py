"""A collection of datasets in a bucket: opened with their manifests and gene tables fetched concurrently.

moto's S3 server behind a :class:`~tests.servers.proxy.RecordingProxy` (fixture ``s3_proxy``) with 20 ms of
latency, to make concurrency observable: requests are counted, never timed.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("aiohttp")
pytest.importorskip("moto.server")
pytest.importorskip("s3fs")

from scipy import sparse
from tests.servers import ProxiedS3Bucket

import deltacells
from deltacells.datasets import synthetic_counts

pytestmark = pytest.mark.timeout(180)

N_DATASETS = 12


def test_a_collection_in_a_bucket(s3_proxy: ProxiedS3Bucket, tmp_path) -> None:
    rng = np.random.default_rng(0)
    studies, urls = [], []
    for k in range(N_DATASETS):
        adata = synthetic_counts(80, 30, seed=k)
        adata.var_names = [f"G{g}" for g in rng.permutation(40)[:30]]
        adata.obs_names = [f"s{k}-{i}" for i in range(80)]
        url = f"{s3_proxy.url}/study{k:02d}"
        deltacells.write_deltacells(adata, url, storage_options=s3_proxy.direct_storage_options, progress=False)
        studies.append(adata)
        urls.append(url)
    import anndata as ad

    expected = ad.concat(studies, join="outer")
    s3_proxy.proxy.reset()
    s3_proxy.proxy.latency = 0.02
    got = deltacells.read_deltacells(
        urls, join="outer", storage_options=s3_proxy.storage_options, cache_dir=tmp_path / "cache"
    )
    records = s3_proxy.proxy.requests()
    assert all(r.method == "GET" and "list-type" not in r.query for r in records), records  # no LIST, no HEAD
    manifests = [r.path for r in records if r.path.endswith("/manifest.json")]
    assert sorted(manifests) == sorted(f"/{url.split('://', 1)[1]}/manifest.json" for url in urls)  # once each
    assert s3_proxy.proxy.max_in_flight > 1  # fetched concurrently
    assert list(got.var_names) == list(expected.var_names)
    assert list(got.obs_names) == list(expected.obs_names)
    orders = [r.path for r in records if r.path.endswith("/gene_order.npy")]
    assert orders == [f"/{urls[0].split('://', 1)[1]}/gene_order.npy"]  # only the first's order decides the join
    s3_proxy.proxy.latency = 0.0
    cells = rng.choice(got.n_obs, 100)
    want = sparse.csr_matrix(expected.X, dtype=np.float32)
    assert (got.X[cells] != want[cells]).nnz == 0
    assert (got.X[:] != want).nnz == 0


def test_the_small_reads_of_many_datasets_are_in_flight_together(s3_proxy: ProxiedS3Bucket, tmp_path) -> None:
    """Opening a collection on S3 (obstore) starts every dataset's manifest and gene table together: more requests
    in flight than the tile reads' bound (32), each object read once, one round of requests for them all."""
    pytest.importorskip("obstore")
    n = 40
    urls = []
    for k in range(n):
        adata = synthetic_counts(20, 10, seed=k)
        url = f"{s3_proxy.url}/tiny{k:02d}"
        deltacells.write_deltacells(
            adata, url, storage_options=s3_proxy.direct_storage_options, progress=False, obs_columns=[]
        )
        urls.append(url)
    s3_proxy.proxy.reset()
    s3_proxy.proxy.latency = 0.05
    got = deltacells.read_deltacells(
        urls, storage_options=s3_proxy.storage_options, obs_columns=[], index_unique="-", cache_dir=tmp_path
    )
    assert got.n_obs == 20 * n
    paths = sorted(r.path.rsplit("/", 1)[-1] for r in s3_proxy.proxy.requests())
    assert paths.count("manifest.json") == paths.count("var.parquet") == n  # each once
    assert s3_proxy.proxy.max_in_flight > 32


def test_a_collection_names_the_dataset_without_a_manifest(s3_proxy: ProxiedS3Bucket, tmp_path) -> None:
    url = f"{s3_proxy.url}/present"
    deltacells.write_deltacells(
        synthetic_counts(20, 10, seed=0), url, storage_options=s3_proxy.direct_storage_options, progress=False
    )
    with pytest.raises(deltacells.errors.DatasetNotFoundError, match="absent: no manifest.json"):
        deltacells.read_deltacells(
            [url, f"{s3_proxy.url}/absent"], storage_options=s3_proxy.storage_options, cache_dir=tmp_path
        )
