"""``CellLoader`` on a dataset on disk: the batches' rows, cells and obs, shards, resuming, outputs and errors.

The oracle is the AnnData that was written: every batch's X must be the rows of its ``index``.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

import anndata as ad
import numpy as np
import pytest
from scipy import sparse

import deltacells
from deltacells import Batch, CellLoader
from deltacells.core import Dataset
from deltacells.datasets import synthetic_counts
from deltacells.errors import InvalidTypeError, InvalidValueError
from deltacells.loader._order import epoch_order

N_CELLS, N_GENES, TILE_SIZE = 3000, 80, 256


@pytest.fixture(autouse=True)
def _no_default_cache(no_default_cache: None) -> None:
    """Every test here must pass ``cache_dir=``."""


@pytest.fixture(scope="module")
def source() -> ad.AnnData:
    return synthetic_counts(N_CELLS, N_GENES, seed=11)


@pytest.fixture(scope="module")
def path(source: ad.AnnData, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("loader") / "cells.deltacells"
    deltacells.write_deltacells(source, out, tile_size=TILE_SIZE, n_chunks=4, progress=False)
    return out


def loader(path, tmp_path, **options) -> CellLoader:
    return CellLoader(path, cache_dir=tmp_path / "cache", **options)


def rows(source: ad.AnnData, index: np.ndarray) -> np.ndarray:
    return np.asarray(sparse.csr_matrix(source.X)[index].toarray(), dtype=np.float32)


def epoch_indices(batches: list[Batch]) -> list[list[int]]:
    return [batch.index.tolist() for batch in batches]


# ---------------------------------------------------------------------- what the batches hold


def test_batches_hold_the_rows_of_their_cells(source, path, tmp_path):
    load = loader(path, tmp_path, batch_size=200, obs_columns=["cell_type", "total_counts"])
    batches = list(load)
    assert len(batches) == len(load) == 15
    seen = np.concatenate([b.index for b in batches])
    np.testing.assert_array_equal(np.sort(seen), np.arange(N_CELLS))  # every cell once
    assert not np.array_equal(seen, np.arange(N_CELLS))  # shuffled
    categories = np.asarray(load.obs_categories["cell_type"], dtype=object)
    for batch in batches:
        assert isinstance(batch.X, sparse.csr_matrix) and batch.X.dtype == np.float32
        assert batch.X.shape == (len(batch), N_GENES) and batch.index.dtype == np.int64
        np.testing.assert_array_equal(batch.X.toarray(), rows(source, batch.index))
        np.testing.assert_array_equal(
            categories[batch.obs["cell_type"]], source.obs["cell_type"].to_numpy()[batch.index]
        )
        np.testing.assert_array_equal(batch.obs["total_counts"], source.obs["total_counts"].to_numpy()[batch.index])


def test_obs_frame_names_the_categories_of_the_codes(source, path, tmp_path):
    """``obs_frame``: a batch's obs as pandas, categorical codes as their categories, the cells as the index."""
    import pandas as pd

    load = loader(path, tmp_path, batch_size=300, obs_columns=["donor", "total_counts", "cell_type"])
    batch = next(iter(load))
    frame = load.obs_frame(batch)
    assert list(frame.columns) == ["donor", "total_counts", "cell_type"]
    np.testing.assert_array_equal(frame.index, batch.index)
    expected = source.obs.iloc[batch.index]
    for name in ("donor", "cell_type"):
        assert isinstance(frame[name].dtype, pd.CategoricalDtype)
        assert tuple(frame[name].cat.categories) == load.obs_categories[name]
        np.testing.assert_array_equal(frame[name].astype(str), expected[name].astype(str))
        np.testing.assert_array_equal(frame[name].cat.codes, batch.obs[name])
    np.testing.assert_array_equal(frame["total_counts"], expected["total_counts"])
    assert loader(path, tmp_path, batch_size=300).obs_frame(Batch(batch.X, batch.index)).shape == (300, 0)


def test_a_collections_dataset_column_holds_codes_of_the_dataset_names(source, tmp_path):
    """For a collection, ``obs["dataset"]`` is a categorical column like the others: codes of the datasets' names."""
    import pandas as pd

    paths = []
    for name, cells in (("lung", slice(0, 1000)), ("liver", slice(1000, 1600)), ("blood", slice(1600, 3000))):
        paths.append(tmp_path / f"{name}.deltacells")
        deltacells.write_deltacells(source[cells], paths[-1], tile_size=TILE_SIZE, progress=False)
    load = CellLoader(paths, batch_size=500, obs_columns=["dataset", "cell_type"], cache_dir=tmp_path / "cache")
    assert load.obs_categories["dataset"] == ("lung", "liver", "blood")
    names = np.repeat(["lung", "liver", "blood"], [1000, 600, 1400])
    frames = []
    for batch in load:
        assert batch.obs["dataset"].dtype.kind == "i"  # codes, as for cell_type: a model's labels
        np.testing.assert_array_equal(
            np.asarray(load.obs_categories["dataset"])[batch.obs["dataset"]], names[batch.index]
        )
        frames.append(load.obs_frame(batch))
    counts = pd.concat(frames)["dataset"].value_counts()
    assert counts.to_dict() == {"blood": 1400, "lung": 1000, "liver": 600}


def test_batches_of_a_window_share_one_allocation_uncopied(source, path, tmp_path):
    """A window's batches are slices of two arrays (no fresh pages per batch), which scipy must not copy."""
    batches = list(loader(path, tmp_path, batch_size=100, buffer_size=1000))
    first, second = batches[0].X, batches[1].X
    assert first.indices.base is not None and first.indices.base is second.indices.base
    assert first.data.base is second.data.base
    assert not np.shares_memory(first.indices, second.indices)
    for batch in batches[:3]:
        batch.X.check_format(full_check=True)  # a valid canonical CSR...
        np.testing.assert_array_equal(batch.X.toarray(), rows(source, batch.index))  # ...of the right rows
    first.data[:] = -1  # writing one batch leaves the others alone
    np.testing.assert_array_equal(second.toarray(), rows(source, batches[1].index))


def test_batches_mix_cells_of_many_tiles(path, tmp_path):
    batch = next(iter(loader(path, tmp_path, batch_size=256, block_size=16)))
    assert np.unique(batch.index // TILE_SIZE).shape[0] >= 6


def test_without_shuffle_in_dataset_order(path, tmp_path):
    batches = list(loader(path, tmp_path, batch_size=1000, shuffle=False))
    assert epoch_indices(batches) == [list(range(1000)), list(range(1000, 2000)), list(range(2000, 3000))]


def test_drop_last(path, tmp_path):
    batches = list(loader(path, tmp_path, batch_size=700, drop_last=True))
    assert [len(b) for b in batches] == [700] * 4
    assert [len(b) for b in loader(path, tmp_path, batch_size=700)] == [700] * 4 + [200]


def test_stored_gene_order_is_the_stored_columns(source, path, tmp_path):
    order = deltacells.open_dataset(path).gene_permutation()
    batch = next(iter(loader(path, tmp_path, gene_order="stored", batch_size=64)))
    np.testing.assert_array_equal(batch.X.toarray(), rows(source, batch.index)[:, order])


@pytest.mark.parametrize("output", ["scipy", "numpy"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_outputs(source, path, tmp_path, output, dtype):
    batch = next(iter(loader(path, tmp_path, output=output, dtype=dtype, batch_size=50)))
    X = batch.X if output == "numpy" else batch.X.toarray()
    assert isinstance(batch.X, np.ndarray if output == "numpy" else sparse.csr_matrix)
    assert X.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(X, rows(source, batch.index))


@pytest.mark.parametrize("gene_order", ["original", "stored"])
def test_dense_and_sparse_outputs_agree(path, tmp_path, gene_order):
    """Rows made dense are not sorted by column first (cheaper); the sparse ones are canonical."""
    sparse_batches = list(loader(path, tmp_path, batch_size=300, gene_order=gene_order))
    dense_batches = list(loader(path, tmp_path, batch_size=300, gene_order=gene_order, output="numpy"))
    for got, want in zip(dense_batches, sparse_batches, strict=True):
        assert want.X.has_canonical_format
        np.testing.assert_array_equal(got.index, want.index)
        np.testing.assert_array_equal(got.X, want.X.toarray())


# ---------------------------------------------------------------------- blocks


@pytest.mark.parametrize("cells", [None, np.arange(N_CELLS) % 3 != 0])
def test_blocks_follow_the_chunks_and_each_is_decoded_once(path, tmp_path, cells):
    load = loader(path, tmp_path, batch_size=128, cells=cells)
    assert load.block_size == "chunk"
    ds = load.dataset
    starts = ds.chunk_starts()
    assert starts.shape[0] == ds.n_tiles * 4 + 1  # 4 chunks a tile: the blocks' edges
    for epoch in range(2):
        load.set_epoch(epoch)
        seen = np.concatenate([b.index for b in load])
        np.testing.assert_array_equal(np.sort(seen), np.arange(N_CELLS)[cells if cells is not None else slice(None)])
        assert ds.chunks_decoded == (epoch + 1) * ds.n_tiles * 4  # each chunk once an epoch
    block = np.searchsorted(starts, seen, side="right")  # the chunk of each cell, in the order yielded
    runs = np.flatnonzero(np.diff(block)) + 1
    assert np.unique(block).shape[0] == ds.n_tiles * 4  # cells of every chunk
    assert runs.shape[0] > ds.n_tiles * 4  # shuffled within windows, not chunk by chunk


def test_blocks_of_cells(path, tmp_path):
    load = loader(path, tmp_path, batch_size=128, block_size=TILE_SIZE, buffer_size=TILE_SIZE)
    batch = next(iter(load))
    assert load.block_size == TILE_SIZE
    assert np.unique(batch.index // TILE_SIZE).shape[0] == 1  # a window is one tile


# ---------------------------------------------------------------------- sources and selections


def test_every_kind_of_source_gives_the_same_batches(path, tmp_path):
    expected = epoch_indices(list(loader(path, tmp_path, batch_size=300, seed=4)))
    adata = deltacells.read_deltacells(path, cache_dir=tmp_path / "cache")
    for source in (str(path), deltacells.open_dataset(path), adata):
        assert epoch_indices(list(CellLoader(source, batch_size=300, seed=4, cache_dir=tmp_path / "cache"))) == expected


def test_a_view_selects_its_cells_and_genes(source, path, tmp_path):
    adata = deltacells.read_deltacells(path, cache_dir=tmp_path / "cache")
    mask = (adata.obs["cell_type"] == adata.obs["cell_type"].iloc[0]).to_numpy()
    genes = [5, 2, 40, 41]
    view = adata[mask, genes]
    batches = list(CellLoader(view, batch_size=100, obs_columns=["cell_type"]))  # the AnnData's cache_dir
    seen = np.concatenate([b.index for b in batches])
    np.testing.assert_array_equal(np.sort(seen), np.flatnonzero(mask))
    for batch in batches:
        np.testing.assert_array_equal(batch.X.toarray(), rows(source, batch.index)[:, genes])
        assert set(batch.obs["cell_type"].tolist()) == {batch.obs["cell_type"][0]}


@pytest.mark.parametrize(
    "cells", [np.arange(100, 2100, 3), slice(10, 1500), np.arange(N_CELLS) % 4 == 0, [7, 7, 3, 2999]]
)
def test_cells_select_a_set(path, tmp_path, cells):
    expected = np.unique(np.arange(N_CELLS)[cells])
    seen = np.concatenate([b.index for b in loader(path, tmp_path, cells=cells, batch_size=128)])
    np.testing.assert_array_equal(np.sort(seen), expected)


def test_no_obs_is_read_unless_asked(path, tmp_path):
    list(loader(path, tmp_path, batch_size=1000))
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("*.arrow"))


# ---------------------------------------------------------------------- epochs, shards, resuming


def test_epochs_and_seeds(path, tmp_path):
    load = loader(path, tmp_path, batch_size=500)
    first = epoch_indices(list(load))
    assert epoch_indices(list(load)) == first  # the same epoch again, as torch's samplers
    load.set_epoch(1)
    second = epoch_indices(list(load))
    assert second != first and sorted(np.concatenate(second).tolist()) == list(range(N_CELLS))
    assert epoch_indices(list(loader(path, tmp_path, batch_size=500, seed=1))) != first


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("world_size", [2, 3])
def test_ranks_share_the_cells(path, tmp_path, world_size, drop_last):
    per_rank = [
        list(loader(path, tmp_path, batch_size=128, rank=rank, world_size=world_size, drop_last=drop_last))
        for rank in range(world_size)
    ]
    seen = np.concatenate([b.index for batches in per_rank for b in batches])
    assert np.unique(seen).shape[0] == seen.shape[0]
    if drop_last:
        assert len({len(batches) for batches in per_rank}) == 1
        assert all(len(b) == 128 for batches in per_rank for b in batches)
    else:
        np.testing.assert_array_equal(np.sort(seen), np.arange(N_CELLS))


RESUME = """
import json, sys
from deltacells import CellLoader
path, cache, state = sys.argv[1:]
load = CellLoader(path, batch_size=96, seed=3, cache_dir=cache, obs_columns=["donor"])
load.load_state_dict(json.loads(state))
print(json.dumps([(b.index.tolist(), b.obs["donor"].tolist(), float(b.X.sum())) for b in load]))
"""


def test_resume_mid_epoch_in_a_new_process(path, tmp_path):
    load = loader(path, tmp_path, batch_size=96, seed=3, obs_columns=["donor"])
    load.set_epoch(2)
    full = [[b.index.tolist(), b.obs["donor"].tolist(), float(b.X.sum())] for b in load]
    interrupted = iter(load)
    for _ in range(13):
        next(interrupted)
    state = json.dumps(load.state_dict())  # plain JSON: saved with a checkpoint
    done = subprocess.run(
        [sys.executable, "-c", RESUME, str(path), str(tmp_path / "cache"), state],
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    assert json.loads(done.stdout) == full[13:]


def worker_batches(load: CellLoader, n_workers: int, monkeypatch: pytest.MonkeyPatch) -> list[list[Batch]]:
    """Each ``DataLoader`` worker's batches, its copy of the loader iterated as if in worker ``j`` of ``n_workers``."""
    parts = []
    for worker in range(n_workers):
        copy = pickle.loads(pickle.dumps(load))
        monkeypatch.setattr("deltacells.loader._loader._torch_worker", lambda worker=worker: (worker, n_workers))
        parts.append(list(copy))
    monkeypatch.undo()
    return parts


def taken_in_turn(parts: list[list[Batch]]) -> list[Batch]:
    """What a torch ``DataLoader`` gives from iterable workers: one item of each in turn, skipping the spent ones."""
    queues = [list(part) for part in parts]
    out = []
    while any(queues):
        out.extend(queue.pop(0) for queue in queues if queue)
    return out


@pytest.mark.parametrize(("workers", "resumed_with"), [(2, 0), (2, 2), (3, 2), (3, 3), (2, 4)])
def test_resume_an_epoch_given_by_workers(path, tmp_path, monkeypatch, workers, resumed_with):
    """Workers take contiguous shares, given in turn; a state counts in that order, and resumes it with any workers."""
    load = loader(path, tmp_path, batch_size=96, seed=3)
    load.set_epoch(1)
    plain = list(load)  # the plan's order, one share
    given = taken_in_turn(worker_batches(load, workers, monkeypatch))
    expected, _ = epoch_order(len(plain), workers)
    assert epoch_indices(given) == epoch_indices([plain[i] for i in expected])

    state = {**load.state_dict(), "batches_done": 7, "workers": workers}  # as the DataLoader's count would say
    resumed = loader(path, tmp_path, batch_size=96, seed=3)
    resumed.load_state_dict(json.loads(json.dumps(state)))
    if resumed_with == 0:
        rest = list(resumed)
        assert resumed.state_dict()["batches_done"] == len(plain)
    else:
        rest = taken_in_turn(worker_batches(resumed, resumed_with, monkeypatch))
    assert epoch_indices(rest) == epoch_indices(given[7:])
    rows_of = {tuple(b.index.tolist()): b.X.toarray() for b in plain}
    assert all(np.array_equal(b.X.toarray(), rows_of[tuple(b.index.tolist())]) for b in rest)


@pytest.mark.parametrize(("workers", "resumed_with"), [(3, 2), (2, 4), (3, 0)])
def test_resumed_with_other_workers_each_cell_is_read_once(path, tmp_path, monkeypatch, workers, resumed_with):
    """Processes that take every few batches of a share read the cells of those batches only, not the share's."""
    load = loader(path, tmp_path, batch_size=32, seed=5, buffer_size=256)
    state = {**load.state_dict(), "batches_done": 5, "workers": workers}
    resumed = loader(path, tmp_path, batch_size=32, seed=5, buffer_size=256)
    resumed.load_state_dict(state)
    read: list[int] = []
    real = Dataset.read_row_batches

    def counted(self, index, *args, **kwargs):
        read.extend(np.asarray(index).tolist())
        return real(self, index, *args, **kwargs)

    monkeypatch.setattr(Dataset, "read_row_batches", counted)
    if resumed_with == 0:
        rest = list(resumed)
    else:
        rest = [b for part in worker_batches(resumed, resumed_with, monkeypatch) for b in part]
    given = np.concatenate([b.index for b in rest])
    assert sorted(read) == sorted(given.tolist())  # every cell given was read, and no other
    assert given.shape[0] == load.n_cells - 5 * 32


def test_a_state_counts_in_the_order_it_was_started_with(path, tmp_path):
    load = loader(path, tmp_path, batch_size=96)
    assert load.state_dict()["workers"] == 1
    load.load_state_dict({**load.state_dict(), "batches_done": 3, "workers": 4})
    assert load.state_dict()["workers"] == 4
    assert len(list(load)) == len(load) - 3  # the rest of the epoch, given by four shares read in turn here
    assert load.state_dict() == {**load.state_dict(), "batches_done": len(load), "workers": 4}
    list(load)  # a new iteration starts the epoch again, in the order of this process
    assert load.state_dict()["workers"] == 1
    with pytest.raises(InvalidValueError, match="workers"):
        load.load_state_dict({**load.state_dict(), "workers": 0})


def test_a_state_from_other_settings_is_refused(path, tmp_path):
    state = loader(path, tmp_path, batch_size=96).state_dict()
    with pytest.raises(InvalidValueError, match="other settings"):
        loader(path, tmp_path, batch_size=97).load_state_dict(state)
    with pytest.raises(InvalidValueError, match="state_dict"):
        loader(path, tmp_path).load_state_dict({"epoch": 1})


def test_the_loader_pickles_to_its_settings(path, tmp_path):
    load = loader(path, tmp_path, batch_size=300, obs_columns=["donor"])
    list(load)
    data = pickle.dumps(load)
    assert len(data) < 20_000
    again = pickle.loads(data)
    assert epoch_indices(list(again)) == epoch_indices(list(load))


# ---------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"batch_size": 0}, InvalidValueError, "batch_size"),
        ({"batch_size": 2.5}, InvalidTypeError, "batch_size"),
        ({"output": "jax"}, InvalidValueError, "output must be one of"),
        ({"obs_columns": "donor"}, InvalidTypeError, "list of column names"),
        ({"obs_columns": ["nope"]}, KeyError, "nope"),
        ({"rank": 1}, InvalidValueError, "both rank and world_size"),
        ({"rank": 2, "world_size": 2}, InvalidValueError, "rank must be"),
        ({"gene_order": "sorted"}, InvalidValueError, "gene_order"),
        ({"seed": -1}, InvalidValueError, "seed"),
        ({"block_size": "tile"}, InvalidValueError, "block_size must be 'chunk'"),
        ({"block_size": 0}, InvalidValueError, "block_size"),
    ],
)
def test_bad_arguments(path, tmp_path, options, error, match):
    with pytest.raises(error, match=match):
        loader(path, tmp_path, **options)


def test_a_dataloader_out_of_order_is_refused(path, tmp_path):
    load = loader(path, tmp_path)
    with pytest.raises(InvalidValueError, match="in_order=False"):  # refused before torch is needed
        load.dataloader(num_workers=2, in_order=False)


def test_a_source_of_another_kind(tmp_path):
    with pytest.raises(InvalidTypeError, match="source must be"):
        CellLoader(np.zeros((3, 3)), cache_dir=tmp_path)


@pytest.mark.parametrize("damage", ["missing", "corrupt"])
def test_a_broken_tile_stops_the_epoch_with_an_error_naming_it(source, tmp_path, damage):
    """A tile gone or altered after the loader was made: the epoch raises the format's error naming it."""
    from deltacells.errors import FormatError, MissingObjectError
    from deltacells.format import tile_path

    out = tmp_path / "broken.deltacells"
    deltacells.write_deltacells(source, out, tile_size=TILE_SIZE, n_chunks=4, progress=False)
    load = loader(out, tmp_path, batch_size=100)
    tile = out / tile_path(3)
    if damage == "missing":
        tile.unlink()
    else:
        blob = bytearray(tile.read_bytes())
        blob[-100] ^= 0xFF
        tile.write_bytes(bytes(blob))
    with pytest.raises(MissingObjectError if damage == "missing" else FormatError, match=r"tile_000003|tile 3"):
        list(load)
