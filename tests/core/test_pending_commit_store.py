"""``PendingCommitStore``: a dataset whose last commit is pending, its objects read from the staging prefix.

It is a store like any other (the conformance suite, with no commit object staged and with some), and its own
contract: a commit's object reads from ``<staging>/<path>`` while it is there and from its place once moved,
the same bytes either way, for whole reads, ranges, sizes, existence and listings.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from deltacells.core import PendingCommitStore
from deltacells.storage import FsspecStore
from deltacells.testing.store import StoreTests

STAGING = ".deltacells-append-0123abcd"
OBJECTS = ("tiles/tile_000003.dct", "obs/obs_0001.parquet", "anndata.zarr/v2")


class TestPendingCommitStoreNothingStaged(StoreTests):
    """With the commit's objects nowhere staged, every call is the inner store's."""

    @pytest.fixture
    def store(self, tmp_path: Path) -> PendingCommitStore:
        return PendingCommitStore(FsspecStore(tmp_path / "root"), STAGING, OBJECTS)


class TestPendingCommitStoreInMemory(StoreTests):
    @pytest.fixture
    def store(self, memory_url: str) -> PendingCommitStore:
        return PendingCommitStore(FsspecStore(memory_url), STAGING, OBJECTS)


@pytest.fixture
def staged(tmp_path: Path) -> tuple[FsspecStore, PendingCommitStore]:
    inner = FsspecStore(tmp_path / "root")
    inner.write("tiles/tile_000003.dct", b"old last tile")  # the place: the version before the commit
    inner.write(f"{STAGING}/tiles/tile_000003.dct", b"the completed last tile")
    inner.write(f"{STAGING}/obs/obs_0001.parquet", b"new shard")
    inner.write(f"{STAGING}/anndata.zarr/v2/zarr.json", b"{}")
    inner.write("tiles/tile_000000.dct", b"a tile no commit names")
    return inner, PendingCommitStore(inner, STAGING, OBJECTS)


def test_a_staged_object_reads_from_the_staging_prefix(staged: tuple[FsspecStore, PendingCommitStore]) -> None:
    inner, store = staged
    assert store.read("tiles/tile_000003.dct") == b"the completed last tile"
    assert store.read("tiles/tile_000003.dct", 4, 13) == b"completed"
    assert store.size("tiles/tile_000003.dct") == len(b"the completed last tile")
    assert store.read("anndata.zarr/v2/zarr.json") == b"{}"  # under a prefix the commit names
    assert store.exists("obs/obs_0001.parquet") and not inner.exists("obs/obs_0001.parquet")
    assert store.list("obs") == ["obs_0001.parquet"]
    assert store.read("tiles/tile_000000.dct") == b"a tile no commit names"


def test_once_moved_it_reads_from_its_place(staged: tuple[FsspecStore, PendingCommitStore]) -> None:
    inner, store = staged
    inner.replace(f"{STAGING}/tiles/tile_000003.dct", "tiles/tile_000003.dct")
    inner.replace(f"{STAGING}/obs/obs_0001.parquet", "obs/obs_0001.parquet")
    assert store.read("tiles/tile_000003.dct") == b"the completed last tile"
    assert store.size("obs/obs_0001.parquet") == len(b"new shard")
    assert store.list("tiles") == ["tile_000000.dct", "tile_000003.dct"]
    inner.move(f"{STAGING}/anndata.zarr/v2", "anndata.zarr/v2")
    inner.delete(STAGING)
    assert store.read("anndata.zarr/v2/zarr.json") == b"{}"
    assert store.list("") == ["anndata.zarr", "obs", "tiles"]
    assert store.fsspec_location("tiles/tile_000003.dct")[0].endswith("root/tiles/tile_000003.dct")


def test_it_pickles_to_its_parts(staged: tuple[FsspecStore, PendingCommitStore]) -> None:
    _, store = staged
    again = pickle.loads(pickle.dumps(store))
    assert (again.staging, again.objects, again.url) == (store.staging, store.objects, store.url)
    assert again.read("tiles/tile_000003.dct") == b"the completed last tile"
