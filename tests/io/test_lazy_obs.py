"""A lazy obs (xarray-backed ``Dataset2D``): the switch, what users do with it, and what it reads."""

from __future__ import annotations

import pickle
from pathlib import Path

import anndata as ad
import numpy as np
import pandas as pd
import pytest

import deltacells
from deltacells.datasets import synthetic_counts
from deltacells.io import _read
from deltacells.obs import ObsStore

pytest.importorskip("xarray")
from anndata.experimental.backed import Dataset2D


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[ad.AnnData, Path]:
    adata = synthetic_counts(1500, 120, seed=3)
    path = tmp_path_factory.mktemp("lazy-obs") / "ds.deltacells"
    deltacells.write_deltacells(adata, path, progress=False, tile_size=128)
    return adata, path


def _read_lazy(path: Path, cache_dir: Path, **options: object) -> ad.AnnData:
    return deltacells.read_deltacells(path, cache_dir=cache_dir, lazy_obs=True, **options)


def test_switch_by_size(written: tuple[ad.AnnData, Path], cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, path = written
    assert isinstance(deltacells.read_deltacells(path, cache_dir=cache_dir).obs, pd.DataFrame)
    monkeypatch.setattr(_read, "LAZY_OBS_MIN_CELLS", 1000)
    assert isinstance(deltacells.read_deltacells(path, cache_dir=cache_dir).obs, Dataset2D)
    assert isinstance(deltacells.read_deltacells(path, cache_dir=cache_dir, lazy_obs=False).obs, pd.DataFrame)
    with pytest.raises(TypeError, match="lazy_obs"):
        deltacells.read_deltacells(path, cache_dir=cache_dir, lazy_obs="yes")


def test_opening_reads_no_obs(written: tuple[ad.AnnData, Path], cache_dir: Path) -> None:
    _, path = written
    lazy = _read_lazy(path, cache_dir)
    assert lazy.obs_names.equals(pd.RangeIndex(lazy.n_obs, name="cell"))
    assert not list(cache_dir.rglob("*.arrow")), "no column is localized before it is used"
    text = repr(lazy)
    for column in ("cell_type", "donor", "total_counts", "pct_mito"):
        assert column in text


def test_mask_view_to_memory_matches_eager(written: tuple[ad.AnnData, Path], cache_dir: Path) -> None:
    original, path = written
    lazy = _read_lazy(path, cache_dir)
    mask = lazy.obs["cell_type"] == "type_B"
    view = lazy[mask]
    assert view.is_view
    got = view.to_memory()
    expected = original[(original.obs["cell_type"] == "type_B").to_numpy()].copy()
    assert isinstance(got.obs, pd.DataFrame)
    pd.testing.assert_frame_equal(got.obs, expected.obs, check_index_type=False)
    assert got.obs_names.tolist() == expected.obs_names.tolist()
    assert (expected.X.astype(np.float32) != got.X).nnz == 0
    eager = deltacells.read_deltacells(path, cache_dir=cache_dir)
    pd.testing.assert_frame_equal(got.obs, eager[eager.obs["cell_type"] == "type_B"].to_memory().obs)


def test_names_read_only_for_the_subset(
    written: tuple[ad.AnnData, Path], cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original, path = written
    asked: dict[str, list[int]] = {}
    take = ObsStore.take

    def recording_take(self: ObsStore, name: str, cells: np.ndarray | None = None) -> object:
        asked.setdefault(name, []).append(-1 if cells is None else len(cells))
        return take(self, name, cells)

    monkeypatch.setattr(ObsStore, "take", recording_take)
    lazy = _read_lazy(path, cache_dir)
    cells = np.array([5, 700, 701, 1499])
    got = lazy[cells].to_memory()
    assert asked["_index"] == [4]
    assert got.obs_names.tolist() == original.obs_names[cells].tolist()


def test_column_memory_is_codes(written: tuple[ad.AnnData, Path], cache_dir: Path) -> None:
    _, path = written
    lazy = _read_lazy(path, cache_dir)
    column = lazy.obs["cell_type"]
    assert isinstance(column, pd.Series)
    assert column.cat.codes.dtype.itemsize == 1
    assert isinstance(lazy.obs.index, pd.RangeIndex)  # the whole atlas: cell numbers, no name read


def test_obs_columns_and_names_options(written: tuple[ad.AnnData, Path], cache_dir: Path) -> None:
    original, path = written
    lazy = _read_lazy(path, cache_dir, obs_columns=["donor"], obs_names=False)
    assert list(lazy.obs.columns) == ["donor"]
    got = lazy[[3, 4]].to_memory()
    assert got.obs_names.tolist() == ["3", "4"]
    assert got.obs["donor"].tolist() == original.obs["donor"].iloc[[3, 4]].tolist()


def test_read_obs_adds_lazy_columns(written: tuple[ad.AnnData, Path], cache_dir: Path) -> None:
    original, path = written
    lazy = _read_lazy(path, cache_dir, obs_columns=[])
    frame = deltacells.read_obs(lazy, ["pct_mito"])
    np.testing.assert_array_equal(frame["pct_mito"].to_numpy(), original.obs["pct_mito"].to_numpy())
    assert "pct_mito" in lazy.obs.columns
    np.testing.assert_array_equal(lazy[[0, 9]].to_memory().obs["pct_mito"], original.obs["pct_mito"].iloc[[0, 9]])


def test_pickle(written: tuple[ad.AnnData, Path], cache_dir: Path) -> None:
    original, path = written
    lazy = pickle.loads(pickle.dumps(_read_lazy(path, cache_dir)))
    got = lazy[lazy.obs["donor"] == "donor_1"].to_memory()
    assert got.n_obs == int((original.obs["donor"] == "donor_1").sum())


def test_scanpy_plot_on_a_subset(written: tuple[ad.AnnData, Path], cache_dir: Path) -> None:
    sc = pytest.importorskip("scanpy")
    import matplotlib

    matplotlib.use("Agg")
    _, path = written
    lazy = _read_lazy(path, cache_dir)
    subset = lazy[lazy.obs["donor"] == "donor_0"].to_memory()
    sc.pl.violin(subset, "total_counts", groupby="cell_type", show=False)


def test_dataset_without_obs(tmp_path: Path, cache_dir: Path) -> None:
    from deltacells.core import DatasetWriter

    path = tmp_path / "no-obs.deltacells"
    with DatasetWriter(path, 10, tile_size=16) as writer:
        writer.write(synthetic_counts(50, 10, seed=1).X)
    lazy = _read_lazy(path, cache_dir)
    assert lazy.obs.shape[0] == 50
    assert list(lazy.obs.columns) == []  # the names (``_index``) are the true index, not a column
    assert lazy[[1, 2]].to_memory().obs_names.tolist() == ["1", "2"]


def test_write_deltacells_from_a_lazy_obs(written: tuple[ad.AnnData, Path], cache_dir: Path, tmp_path: Path) -> None:
    original, path = written
    lazy = _read_lazy(path, cache_dir)
    subset = lazy[lazy.obs["cell_type"] == "type_C"]
    deltacells.write_deltacells(subset, tmp_path / "copy", progress=False, obs_columns=["donor", "cell_type"])
    got = deltacells.read_deltacells(tmp_path / "copy", cache_dir=cache_dir)
    expected = original[(original.obs["cell_type"] == "type_C").to_numpy()]
    assert got.obs_names.tolist() == expected.obs_names.tolist()
    assert list(got.obs.columns) == ["donor", "cell_type"]
    assert got.obs["donor"].tolist() == expected.obs["donor"].tolist()
    with pytest.raises(KeyError, match="nothing"):
        deltacells.write_deltacells(lazy, tmp_path / "bad", progress=False, obs_columns=["nothing"])


def test_dtype_is_known_before_reading(written: tuple[ad.AnnData, Path], cache_dir: Path) -> None:
    original, path = written
    lazy = _read_lazy(path, cache_dir)
    assert list(lazy.obs.dtypes["cell_type"].categories) == list(original.obs["cell_type"].cat.categories)
    assert lazy.obs.dtypes["pct_mito"] == original.obs["pct_mito"].dtype
    assert "cell_type" in repr(lazy.obs)
    assert not list(cache_dir.rglob("*.arrow"))


@pytest.mark.parametrize("codes", [[0, 2, 2, -1], [1, 1], [-1, -1], [0, 1, 2, 3]])
def test_unused_categories_dropped_as_pandas_does(codes: list[int]) -> None:
    from deltacells.io._lazy_obs._backend import without_unused_categories

    values = pd.Categorical.from_codes(np.array(codes, dtype=np.int8), categories=["d", "a", "c", "b"], ordered=True)
    got, expected = without_unused_categories(values), values.remove_unused_categories()
    assert list(got.categories) == list(expected.categories)  # in their order, not sorted
    np.testing.assert_array_equal(got.codes, expected.codes)
    assert got.ordered and got.codes.dtype == expected.codes.dtype


def test_selection_never_builds_the_whole_range(written: tuple[ad.AnnData, Path], cache_dir: Path) -> None:
    original, path = written
    lazy = _read_lazy(path, cache_dir)
    coordinate = lazy.obs.ds.indexes["cell"]

    def numbers(view: ad.AnnData) -> list[int]:  # the cell numbers a view's lazy obs holds
        return view.obs.ds.indexes["cell"].tolist()

    view = lazy[np.array([3, 1, 1400])]
    assert numbers(view) == [3, 1, 1400]
    assert view.obs_names.tolist() == original.obs_names[[3, 1, 1400]].tolist()
    assert "_data" not in coordinate._cache  # pandas caches the arange it builds for range_index[array]
    mask = np.zeros(lazy.n_obs, dtype=bool)
    mask[[7, 9]] = True
    assert numbers(lazy[mask]) == [7, 9]
    assert numbers(lazy[-1:]) == [lazy.n_obs - 1]
    assert numbers(lazy[np.array([-1])]) == [lazy.n_obs - 1]
    with pytest.raises(IndexError):
        lazy[np.array([lazy.n_obs])].obs  # noqa: B018


def test_damaged_cache_array_is_reported_for_the_tiles_used(written: tuple[ad.AnnData, Path], cache_dir: Path) -> None:
    import pyarrow as pa

    from deltacells.errors import FormatError

    _, path = written
    lazy = _read_lazy(path, cache_dir)
    obs_store = lazy.obs.source.obs_store
    chunks, _ = obs_store._chunks("_index")
    good = chunks[1]
    offsets = np.frombuffer(good.buffers()[1], dtype=np.int32)[: len(good) + 1].copy()
    offsets[5] = offsets[-1] + 100  # past the end of the values
    chunks[1] = pa.StringArray.from_buffers(len(good), pa.py_buffer(offsets.tobytes()), good.buffers()[2])
    assert obs_store.take("_index", np.array([0])).tolist() == ["cell_0000000"]  # tile 0 is fine
    with pytest.raises(FormatError, match="tile 1"):
        obs_store.take("_index", np.array([130]))  # tile 1 (tiles of 128 cells)
