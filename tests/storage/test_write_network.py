"""Writing a dataset to S3 through a recording proxy: PUTs overlap, one per object, the manifest last.

The bucket lives on moto's S3 server behind :class:`~tests.servers.proxy.RecordingProxy` (fixture
``s3_proxy``), whose latency makes concurrent PUTs overlap and whose faults make one PUT fail. The tests assert
request counts and orders, never durations.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("aiohttp")
pytest.importorskip("moto.server")
s3fs = pytest.importorskip("s3fs")

import anndata as ad  # noqa: E402 - after the skips
from tests.servers import ProxiedS3Bucket  # noqa: E402

import deltacells  # noqa: E402
from deltacells.datasets import synthetic_counts  # noqa: E402

pytestmark = pytest.mark.timeout(120)

N_CELLS, N_GENES, TILE = 2_000, 60, 100
N_TILES = N_CELLS // TILE  # 20
SIDECARS = ("gene_order.npy", "var_names.txt", "var.parquet", "obs/schema.json", "obs/obs_0000.parquet")


@pytest.fixture(scope="module")
def adata() -> ad.AnnData:
    """2,000 synthetic cells x 60 genes (20 tiles of 100 cells), with obs and var."""
    return synthetic_counts(N_CELLS, N_GENES, seed=0)


def _direct(bucket: ProxiedS3Bucket) -> Any:
    """An s3fs filesystem that reaches the server directly (not through the proxy, not in its log)."""
    return s3fs.S3FileSystem(**bucket.direct_storage_options, skip_instance_cache=True)


def _write(adata: ad.AnnData, bucket: ProxiedS3Bucket, **options: Any) -> None:
    deltacells.write_deltacells(
        adata, f"{bucket.url}/ds", storage_options=bucket.storage_options, tile_size=TILE, level=1,
        progress=False, threads=2, **options,
    )  # fmt: skip


def _key(record_path: str, bucket: ProxiedS3Bucket) -> str:
    """The object key of a logged request, relative to the dataset (``/bucket/ds/tiles/x`` -> ``tiles/x``)."""
    return record_path.removeprefix(f"/{bucket.name}/ds/")


def test_tile_puts_overlap_once_each_manifest_last(s3_proxy: ProxiedS3Bucket, adata: ad.AnnData) -> None:
    proxy = s3_proxy.proxy
    proxy.latency = 0.05
    _write(adata, s3_proxy)

    puts = proxy.requests(method="PUT")
    keys = [_key(record.path, s3_proxy) for record in puts]
    tiles = [key for key in keys if key.startswith("tiles/")]
    assert sorted(tiles) == [f"tiles/tile_{i:06d}.dct" for i in range(N_TILES)], "not exactly one PUT per tile"
    assert keys[-1] == "manifest.json", f"the last PUT is {keys[-1]}, not the manifest"
    assert keys.count("manifest.json") == 1
    assert sorted(keys) == sorted([*tiles, *SIDECARS, "manifest.json"]), "an object was PUT more than once"
    assert all(record.status == 200 for record in puts), [(r.path, r.status) for r in puts if r.status != 200]
    assert proxy.max_in_flight > 1, "the PUTs never overlapped"
    assert proxy.count("POST") == 0, "a multipart upload for an object this small"
    print(f"{len(puts)} PUTs ({len(tiles)} tiles), {proxy.count()} requests, max in flight {proxy.max_in_flight}")

    fs = _direct(s3_proxy)
    assert fs.exists(f"{s3_proxy.name}/ds/manifest.json")
    back = deltacells.read_deltacells(f"{s3_proxy.url}/ds", storage_options=s3_proxy.direct_storage_options)
    assert back.shape == adata.shape
    assert list(back.obs_names) == list(adata.obs_names)


def test_forbidden_tile_put_fails_without_manifest(s3_proxy: ProxiedS3Bucket, adata: ad.AnnData) -> None:
    proxy = s3_proxy.proxy
    proxy.latency = 0.05
    fault = proxy.add_fault("/ds/tiles/tile_000003.dct", status=403, method="PUT")
    with pytest.raises(PermissionError, match=r"tiles/tile_000003\.dct"):
        _write(adata, s3_proxy)

    assert fault.hits == 1, "the refused PUT was retried"
    assert proxy.count("PUT", path_contains="/ds/manifest.json") == 0
    assert proxy.count("PUT", path_contains="/ds/tiles/") <= N_TILES
    fs = _direct(s3_proxy)
    fs.invalidate_cache()
    assert not fs.exists(f"{s3_proxy.name}/ds/manifest.json")
    assert f"{s3_proxy.name}/ds/manifest.json" not in fs.find(s3_proxy.name)


def test_transient_tile_put_is_retried(s3_proxy: ProxiedS3Bucket, adata: ad.AnnData) -> None:
    proxy = s3_proxy.proxy
    fault = proxy.add_fault("/ds/tiles/tile_000005.dct", status=503, method="PUT", times=1)
    _write(adata, s3_proxy)

    assert fault.hits == 1
    assert proxy.count("PUT", path_contains="/ds/tiles/tile_000005.dct") == 2
    assert proxy.count("PUT", path_contains="/ds/tiles/") == N_TILES + 1
    keys = [_key(record.path, s3_proxy) for record in proxy.requests(method="PUT")]
    assert keys[-1] == "manifest.json"
    assert _direct(s3_proxy).exists(f"{s3_proxy.name}/ds/manifest.json")
