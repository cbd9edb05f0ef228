"""Tampered datasets through the AnnData read paths: a clear error naming the object, on every access.

(tests/core/test_reader.py covers the same defects through ``Dataset.read_rows``; here they are met the
way users meet them: ``read_deltacells(...)[...].X``, ``adata.X[...]``, ``to_memory()``, converting the
dataset again, and ``read_obs``.)
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import deltacells
from deltacells import FormatError
from deltacells.datasets import synthetic_counts
from deltacells.errors import DatasetNotFoundError

TILE = 64  # 640 cells: 10 tiles; obs shards of 3 tiles: 4 shards


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tamper") / "ds"
    adata = synthetic_counts(640, 50, seed=8)
    deltacells.write_deltacells(adata, root, tile_size=TILE, obs_tiles_per_file=3, level=1, progress=False)
    return root


@pytest.fixture
def dataset(pristine: Path, tmp_path: Path) -> Path:
    root = tmp_path / "ds"
    shutil.copytree(pristine, root)
    return root


def flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x20
    path.write_bytes(bytes(data))


def x_reads(root: Path, cache: Path) -> dict[str, Callable[[], Any]]:
    """Every way of reading X that touches tile 3 (cells 192 .. 255)."""
    adata = deltacells.read_deltacells(root, cache_dir=cache)  # lazy: nothing decoded yet
    return {
        "adata[...].X": lambda: adata[200:210].X,
        "adata.X[...]": lambda: adata.X[[5, 250, 600]],
        "view.to_memory()": lambda: adata[adata.obs_names[190:260]].to_memory(),
        "X.to_memory()": lambda: adata.X.to_memory(),
        "genes too": lambda: adata[::7, ::3].X,
        "convert again": lambda: deltacells.write_deltacells(adata, root.parent / "copy", progress=False),
    }


@pytest.mark.parametrize(
    ("damage", "match"),
    [
        pytest.param(lambda tile: flip(tile, 200), r"CRC-32 of the payload is 0x[0-9a-f]{8}", id="crc"),
        pytest.param(lambda tile: flip(tile, -1), r"CRC-32 of the payload", id="crc-last-byte"),
        pytest.param(
            lambda tile: tile.write_bytes(tile.read_bytes() + b"\0" * 8),
            r"size is \d+ bytes but manifest\.json field tile_bytes\[3\] says \d+",
            id="size-longer",
        ),
        pytest.param(
            lambda tile: tile.write_bytes(tile.read_bytes()[:-8]),
            r"size is \d+ bytes but manifest\.json field tile_bytes\[3\] says \d+",
            id="size-shorter",
        ),
    ],
)
def test_tampered_tile(dataset: Path, tmp_path: Path, damage: Callable[[Path], None], match: str) -> None:
    tile = dataset / "tiles" / "tile_000003.dct"
    damage(tile)
    where = re.escape(f"{dataset}/tiles/tile_000003.dct: ")
    for read in x_reads(dataset, tmp_path / "cache").values():
        for _ in range(2):  # the error comes again: nothing half-decoded is kept
            with pytest.raises(FormatError, match=where + match):
                read()
    adata = deltacells.read_deltacells(dataset, cache_dir=tmp_path / "cache")
    assert adata[: TILE * 3].X.shape == (192, 50) and adata[256:].X.nnz > 0, "the other tiles still read"
    with pytest.raises(DatasetNotFoundError):
        deltacells.open_dataset(dataset.parent / "copy")  # the conversion that failed left no dataset


def test_missing_tile_names_it(dataset: Path, tmp_path: Path) -> None:
    (dataset / "tiles" / "tile_000003.dct").unlink()
    adata = deltacells.read_deltacells(dataset, cache_dir=tmp_path / "cache")
    with pytest.raises(FormatError, match=re.escape(f"{dataset}/tiles/tile_000003.dct: tile 3 of 10 is missing")):
        adata[200:210].X  # noqa: B018


@pytest.mark.parametrize(
    ("damage", "match"),
    [
        pytest.param(
            lambda shard: flip(shard, 100),
            r"obs/obs_0001\.parquet: SHA-256 is [0-9a-f]{64} but manifest\.json field obs_shard_sha256\[1\] says "
            r"[0-9a-f]{64}; the shard was modified or damaged",
            id="sha256",
        ),
        pytest.param(
            lambda shard: shard.write_bytes(shard.read_bytes()[:-1]),
            r"obs/obs_0001\.parquet: size is \d+ bytes but manifest\.json field obs_shard_bytes\[1\] says \d+",
            id="size",
        ),
        pytest.param(
            lambda shard: shutil.copyfile(shard.with_name("obs_0003.parquet"), shard),
            r"obs/obs_0001\.parquet: size is \d+ bytes but manifest\.json field obs_shard_bytes\[1\]",
            id="another-shard",
        ),
    ],
)
def test_tampered_obs_shard(dataset: Path, tmp_path: Path, damage: Callable[[Path], None], match: str) -> None:
    damage(dataset / "obs" / "obs_0001.parquet")
    cache = tmp_path / "cache"
    where = re.escape(str(dataset) + "/") + match
    with pytest.raises(FormatError, match=where):
        deltacells.read_deltacells(dataset, cache_dir=cache)  # all obs columns are read at open
    with pytest.raises(FormatError, match=where):
        deltacells.read_obs(dataset, ["donor"], cache_dir=cache)
    adata = deltacells.read_deltacells(dataset, cache_dir=cache, obs_columns=[], obs_names=False)
    assert adata.X[:5].shape == (5, 50), "X does not need obs"
    for _ in range(2):  # and again: a failed fetch leaves nothing behind that would be served
        with pytest.raises(FormatError, match=where):
            deltacells.read_obs(adata, ["cell_type"])
    columns = [p.name for p in cache.rglob("*") if p.suffix in (".arrow", ".tmp")]
    assert columns == [], "no column of a tampered obs is cached"
