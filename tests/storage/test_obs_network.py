"""Localizing obs columns from a real S3 server (moto) through the recording proxy: requests counted.

A column costs a few requests per shard (its footer, then its chunks coalesced), sent together, not one request
per column chunk one after the other; checking a shard reads it once, in concurrent blocks. The proxy's
latency only makes concurrency observable: the tests assert counts and bytes, never durations.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("aiohttp")
pytest.importorskip("moto.server")
pytest.importorskip("s3fs")

import anndata as ad
from tests.servers import ProxiedS3Bucket
from tests.servers.datasets import obs_adata

import deltacells
from deltacells.format import Manifest
from deltacells.obs import ObsStore, _ranges
from deltacells.storage import BaseStore, open_store

pytestmark = pytest.mark.timeout(120)

N_TILES = 200
TILE = 50
PER_FILE = 50  # 4 shards of ~80 KB: more than the read of the tail, so the column chunks are fetched too
LATENCY = 0.05
SHARDS = "/obs/obs_"


def _write(adata: ad.AnnData, url: str, storage_options: dict[str, Any] | None = None) -> None:
    deltacells.write_deltacells(
        adata, url, storage_options=storage_options, tile_size=TILE, obs_tiles_per_file=PER_FILE, progress=False
    )


@pytest.fixture(scope="module")
def local_copy(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ad.AnnData]:
    """The dataset written once to a local directory."""
    adata = obs_adata(N_TILES, TILE)
    root = tmp_path_factory.mktemp("obs-network") / "ds"
    _write(adata, str(root))
    return root, adata


def _ready(bucket: ProxiedS3Bucket, manifest: Manifest) -> Manifest:
    """``manifest``, once the proxy's log is cleared and its latency set."""
    assert manifest.n_obs_shards == N_TILES // PER_FILE
    bucket.proxy.reset()
    bucket.proxy.latency = LATENCY
    return manifest


@pytest.fixture
def written(s3_proxy: ProxiedS3Bucket) -> tuple[ProxiedS3Bucket, ad.AnnData, Manifest]:
    """The dataset written to the bucket through the proxy with ``write_deltacells``."""
    adata = obs_adata(N_TILES, TILE)
    _write(adata, s3_proxy.url, s3_proxy.storage_options)
    return s3_proxy, adata, _ready(s3_proxy, Manifest.from_json(_store(s3_proxy).read("manifest.json")))


@pytest.fixture
def uploaded(
    s3_proxy: ProxiedS3Bucket, local_copy: tuple[Path, ad.AnnData]
) -> tuple[ProxiedS3Bucket, ad.AnnData, Manifest]:
    """The obs of the dataset (``manifest.json`` and ``obs/``: all an ObsStore reads) put on the server directly."""
    root, adata = local_copy
    for path in [root / "manifest.json", *sorted((root / "obs").iterdir())]:
        s3_proxy.server.put_object(s3_proxy.name, path.relative_to(root).as_posix(), path.read_bytes())
    return s3_proxy, adata, _ready(s3_proxy, Manifest.from_json((root / "manifest.json").read_text()))


def _store(bucket: ProxiedS3Bucket) -> BaseStore:
    return open_store(bucket.url, bucket.storage_options)


def _shard_log(bucket: ProxiedS3Bucket) -> list[Any]:
    return bucket.proxy.requests(path_contains=SHARDS)


def _assert_column(frame_or_series: pd.Series, adata: ad.AnnData, name: str) -> None:
    np.testing.assert_array_equal(np.asarray(frame_or_series, dtype=object), np.asarray(adata.obs[name], dtype=object))


@pytest.mark.parametrize("name", ["n_counts", "cell_type", "donor"])
def test_one_column_costs_requests_per_shard_not_per_chunk(
    uploaded: tuple[ProxiedS3Bucket, ad.AnnData, Manifest], tmp_path: Path, name: str
) -> None:
    bucket, adata, manifest = uploaded
    obs = ObsStore(_store(bucket), manifest, cache_dir=tmp_path, verify=False)
    obs.localize(name)
    log = _shard_log(bucket)
    n_shards = manifest.n_obs_shards
    # per shard: the tail (footer), then the column chunks before it coalesced (it used to be one GET per
    # chunk, one at a time: 204 here)
    assert {r.method for r in log} == {"GET"}, "no HEAD: the sizes come from the manifest"
    assert all(r.range is not None and r.status == 206 for r in log)
    assert len(log) <= 2 * n_shards
    assert sum(r.bytes for r in log) <= sum(manifest.obs_shard_bytes)
    assert bucket.proxy.max_in_flight > 1, "the shards' requests are sent together"
    bucket.proxy.latency = 0
    _assert_column(obs.read_column(name), adata, name)


def test_verify_reads_each_shard_once_in_concurrent_blocks(
    uploaded: tuple[ProxiedS3Bucket, ad.AnnData, Manifest], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    block = 32 * 1024
    monkeypatch.setattr(_ranges, "VERIFY_BLOCK", block)
    bucket, adata, manifest = uploaded
    obs = ObsStore(_store(bucket), manifest, cache_dir=tmp_path, verify=True)
    obs.localize(["cell_type", "pct"])
    log = _shard_log(bucket)
    assert {r.method for r in log} == {"GET"}
    for shard, size in enumerate(manifest.obs_shard_bytes):
        records = [r for r in log if r.path.endswith(f"/obs/obs_{shard:04d}.parquet")]
        assert len(records) == math.ceil(size / block), "the blocks, and no second fetch for the columns"
        assert sum(r.bytes for r in records) == size
    assert bucket.proxy.max_in_flight > 1
    # the shards are verified now: another column costs their footers and chunks only
    bucket.proxy.reset()
    obs.localize("n_counts")
    assert len(_shard_log(bucket)) <= 2 * manifest.n_obs_shards
    bucket.proxy.latency = 0
    for name in ("cell_type", "pct", "n_counts"):
        _assert_column(obs.read_column(name), adata, name)


def test_read_deltacells_localizes_obs_with_few_requests(
    written: tuple[ProxiedS3Bucket, ad.AnnData, Manifest], tmp_path: Path
) -> None:
    bucket, adata, manifest = written
    got = deltacells.read_deltacells(
        bucket.url, storage_options=bucket.storage_options, cache_dir=tmp_path, obs_columns=["cell_type", "donor"]
    )
    log = _shard_log(bucket)
    # verify_obs=True: each shard read whole once (one block of VERIFY_BLOCK), its columns decoded from memory
    assert len(log) == manifest.n_obs_shards
    assert sum(r.bytes for r in log) == sum(manifest.obs_shard_bytes)
    assert bucket.proxy.max_in_flight > 1
    assert list(got.obs_names) == list(adata.obs_names)
    for name in ("cell_type", "donor"):
        _assert_column(got.obs[name], adata, name)
    # a second reader on the same node finds the columns in the cache
    bucket.proxy.reset()
    again = deltacells.read_deltacells(
        bucket.url, storage_options=bucket.storage_options, cache_dir=tmp_path, obs_columns=["cell_type", "donor"]
    )
    assert _shard_log(bucket) == []
    pd.testing.assert_frame_equal(again.obs, got.obs)
