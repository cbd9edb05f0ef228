"""``CellLoader`` with torch: tensor outputs, a ``DataLoader`` with worker processes, and torch.distributed.

Run by ``nox -s tests_torch`` (the main suite has no torch: this whole file is skipped there). The oracle is
the AnnData that was written: every batch's X must be the rows of its ``index``, and the batches of a
``DataLoader`` must be the loader's own batches, each once per epoch whatever the workers.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import anndata as ad  # noqa: E402
import numpy as np  # noqa: E402
from scipy import sparse  # noqa: E402

import deltacells  # noqa: E402
from deltacells import Batch, CellLoader  # noqa: E402
from deltacells.datasets import synthetic_counts  # noqa: E402
from deltacells.loader import CellDataset  # noqa: E402

#: torch rebuilds a sparse tensor received from a DataLoader worker without saying whether to check it, and warns
#: (torch/multiprocessing/reductions.py); the loader makes its tensors with check_invariants=False, silently.
pytestmark = pytest.mark.filterwarnings("ignore:Sparse invariant checks are implicitly disabled:UserWarning")

N_CELLS, N_GENES, TILE_SIZE = 3000, 60, 256
BATCH = 128  # 24 batches of 3000 cells; 23 with drop_last


@pytest.fixture(autouse=True)
def _no_default_cache(no_default_cache: None) -> None:
    """Every test here must pass ``cache_dir=`` (and so must the worker processes)."""


@pytest.fixture(scope="module")
def source() -> ad.AnnData:
    return synthetic_counts(N_CELLS, N_GENES, seed=5)


@pytest.fixture(scope="module")
def path(source: ad.AnnData, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("torch-loader") / "cells.deltacells"
    deltacells.write_deltacells(source, out, tile_size=TILE_SIZE, n_chunks=4, progress=False)
    return out


def loader(path, tmp_path, **options) -> CellLoader:
    return CellLoader(path, batch_size=BATCH, cache_dir=tmp_path / "cache", **options)


def rows(source: ad.AnnData, index: np.ndarray) -> np.ndarray:
    return np.asarray(sparse.csr_matrix(source.X)[index].toarray(), dtype=np.float32)


def batch_set(batches) -> list[tuple[int, ...]]:
    """The batches' cells, each batch a tuple, in a fixed order (workers interleave their batches)."""
    return sorted(tuple(batch.index.tolist()) for batch in batches)


# ---------------------------------------------------------------------- outputs


@pytest.mark.parametrize("output", ["torch", "torch_sparse"])
def test_tensor_outputs_hold_the_rows(source, path, tmp_path, output):
    batches = list(loader(path, tmp_path, output=output))
    assert len(batches) == 24
    for batch in batches:
        assert isinstance(batch.X, torch.Tensor) and batch.X.dtype == torch.float32
        assert batch.X.layout == (torch.strided if output == "torch" else torch.sparse_csr)
        assert tuple(batch.X.shape) == (len(batch), N_GENES)
        dense = batch.X if output == "torch" else batch.X.to_dense()
        np.testing.assert_array_equal(dense.numpy(), rows(source, batch.index))


def test_to_torch_is_an_iterable_dataset(path, tmp_path):
    load = loader(path, tmp_path)
    dataset = load.to_torch()
    assert isinstance(dataset, torch.utils.data.IterableDataset) and isinstance(dataset, CellDataset)
    assert dataset.loader is load and len(dataset) == len(load)
    assert batch_set(dataset) == batch_set(load)
    dataset.set_epoch(3)
    assert load.epoch == 3


def test_batches_pass_through_the_dataloader_unchanged(source, path, tmp_path):
    """batch_size=None: torch's default_convert and pin_memory=False leave each Batch as the loader made it."""
    load = loader(path, tmp_path, output="numpy", obs_columns=["cell_type"])
    expected = list(load)
    got = list(load.dataloader(pin_memory=False))
    assert len(got) == len(expected)
    for batch, want in zip(got, expected, strict=True):
        assert type(batch) is Batch
        assert isinstance(batch.X, np.ndarray) and isinstance(batch.index, np.ndarray)  # no tensors made
        assert isinstance(batch.obs["cell_type"], np.ndarray)
        np.testing.assert_array_equal(batch.index, want.index)
        np.testing.assert_array_equal(batch.X, want.X)
        np.testing.assert_array_equal(batch.obs["cell_type"], want.obs["cell_type"])


# ---------------------------------------------------------------------- worker processes


@pytest.mark.parametrize(("context", "output"), [("fork", "torch_sparse"), ("spawn", "torch")])
def test_workers_yield_every_batch_once(source, path, tmp_path, context, output):
    load = loader(path, tmp_path, output=output, obs_columns=["donor"])
    direct = list(load)  # also starts this process's decoding threads before a fork
    batches = load.dataloader(num_workers=2, multiprocessing_context=context)
    assert len(batches) == len(load) == 24
    got = list(batches)
    assert all(type(batch) is Batch for batch in got)
    assert batch_set(got) == batch_set(direct)  # each batch once, made as the loader makes it
    seen = np.concatenate([batch.index for batch in got])
    np.testing.assert_array_equal(np.sort(seen), np.arange(N_CELLS))
    donors = source.obs["donor"].cat.codes.to_numpy()
    for batch in got[:3]:
        dense = batch.X if output == "torch" else batch.X.to_dense()
        np.testing.assert_array_equal(dense.numpy(), rows(source, batch.index))
        np.testing.assert_array_equal(batch.obs["donor"], donors[batch.index])


@pytest.mark.filterwarnings("ignore:This DataLoader will create 3 worker processes:UserWarning")  # 2 CPUs
@pytest.mark.parametrize("num_workers", [2, 3])
def test_workers_with_drop_last_yield_full_batches(path, tmp_path, num_workers):
    load = loader(path, tmp_path, drop_last=True, seed=7)
    batches = load.dataloader(num_workers=num_workers, multiprocessing_context="fork")
    assert len(batches) == len(load) == N_CELLS // BATCH
    got = list(batches)
    assert [len(batch) for batch in got] == [BATCH] * (N_CELLS // BATCH)
    assert batch_set(got) == batch_set(load)


def test_set_epoch_reaches_the_workers(path, tmp_path):
    """Workers made at each iter() get the loader as it is then."""
    load = loader(path, tmp_path)
    epochs = []
    for epoch in (0, 1):
        load.set_epoch(epoch)
        epochs.append(batch_set(list(load)))
    batches = load.dataloader(num_workers=2, multiprocessing_context="fork")
    for epoch in (0, 1, 0):
        load.set_epoch(epoch)
        assert batch_set(batches) == epochs[epoch]
    assert epochs[0] != epochs[1]


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_set_epoch_reaches_persistent_workers(path, tmp_path, context):
    """Workers kept between epochs read the epoch the main process set, from memory they share with it."""
    load = loader(path, tmp_path)
    epochs = {}
    for epoch in (0, 1, 2):
        load.set_epoch(epoch)
        epochs[epoch] = batch_set(list(load))
    load.set_epoch(0)
    persistent = load.dataloader(num_workers=2, multiprocessing_context=context, persistent_workers=True)
    for epoch in (0, 1, 2, 1):
        load.set_epoch(epoch)
        assert batch_set(persistent) == epochs[epoch], epoch
    assert len({frozenset(batches) for batches in epochs.values()}) == 3
    pickle.loads(pickle.dumps(load))  # the shared epoch is dropped when the loader is pickled otherwise


# ---------------------------------------------------------------------- resuming with workers

RESUME_WITH_WORKERS = """
import json, sys
from deltacells import CellLoader
path, cache, state, num_workers = sys.argv[1:]
load = CellLoader(path, batch_size=128, seed=4, cache_dir=cache)
load.load_state_dict(json.loads(state))
batches = load.dataloader(num_workers=int(num_workers), multiprocessing_context="spawn") if int(num_workers) else load
print(json.dumps([b.index.tolist() for b in batches]))
"""


@pytest.mark.parametrize("resumed_with", [2, 0, 3])
def test_a_state_taken_under_workers_resumes_in_a_new_process(path, tmp_path, resumed_with):
    """The DataLoader's batches are counted as the training loop gets them; the rest comes with any workers."""
    load = loader(path, tmp_path, seed=4)
    load.set_epoch(2)
    batches = load.dataloader(num_workers=2, multiprocessing_context="fork")
    uninterrupted = [b.index.tolist() for b in batches]
    assert load.state_dict()["batches_done"] == len(uninterrupted) == 24
    for step, _batch in enumerate(batches, start=1):
        if step == 9:
            break
    state = load.state_dict()
    assert (state["epoch"], state["batches_done"], state["workers"]) == (2, 9, 2)
    done = subprocess.run(
        [sys.executable, "-c", RESUME_WITH_WORKERS, str(path), str(tmp_path / "cache"), json.dumps(state),
         str(resumed_with)],
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    assert json.loads(done.stdout.strip().splitlines()[-1]) == uninterrupted[9:]


def test_a_state_loaded_reaches_persistent_workers(path, tmp_path):
    load = loader(path, tmp_path, seed=4)
    load.set_epoch(1)
    persistent = load.dataloader(num_workers=2, multiprocessing_context="fork", persistent_workers=True)
    uninterrupted = [b.index.tolist() for b in persistent]
    state = {**load.state_dict(), "batches_done": 5}
    load.set_epoch(0)
    assert [b.index.tolist() for b in persistent] != uninterrupted
    load.load_state_dict(state)  # the workers, started before, take it up at the next iteration
    assert [b.index.tolist() for b in persistent] == uninterrupted[5:]
    assert load.state_dict()["batches_done"] == len(uninterrupted)
    assert [b.index.tolist() for b in persistent] == uninterrupted  # iterated again: the epoch from its start


# ---------------------------------------------------------------------- torch.distributed

RANK = """
import json, sys
import torch.distributed as dist
from deltacells import CellLoader
path, cache, rendezvous, rank = sys.argv[1:]
dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=int(rank), world_size=2)
try:
    load = CellLoader(path, batch_size=100, seed=2, cache_dir=cache)  # no rank/world_size: torch.distributed's
    print(json.dumps({"shard": [load.rank, load.world_size], "cells": [b.index.tolist() for b in load]}))
finally:
    dist.destroy_process_group()
"""


def test_ranks_of_torch_distributed_share_the_cells(path, tmp_path):
    args = [str(path), str(tmp_path / "cache"), str(tmp_path / "rendezvous")]
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo"}  # the ranks talk over the loopback interface only
    procs = [
        subprocess.Popen([sys.executable, "-c", RANK, *args, str(rank)], stdout=subprocess.PIPE, text=True, env=env)
        for rank in range(2)
    ]
    outs = []
    try:
        for proc in procs:
            stdout, _ = proc.communicate(timeout=120)
            assert proc.returncode == 0
            outs.append(json.loads(stdout.strip().splitlines()[-1]))
    finally:
        for proc in procs:  # one rank failed: the other waits for it at the rendezvous
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert [out["shard"] for out in outs] == [[0, 2], [1, 2]]
    cells = [np.concatenate(out["cells"]) for out in outs]
    assert np.intersect1d(cells[0], cells[1]).shape[0] == 0
    np.testing.assert_array_equal(np.sort(np.concatenate(cells)), np.arange(N_CELLS))


# ---------------------------------------------------------------------- a collection of datasets


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_a_collection_through_workers_gives_each_cell_once(tmp_path, context):
    """Three datasets read as one (their genes joined): across two ranks, each with two workers, every cell once."""
    rng = np.random.default_rng(3)
    studies, paths = [], []
    for k, n in enumerate((700, 500, 400)):
        study = synthetic_counts(n, 50, seed=k)
        study.var_names = [f"G{g}" for g in rng.permutation(60)[:50]]
        study.obs_names = [f"s{k}-{i}" for i in range(n)]
        path = tmp_path / f"study{k}.deltacells"
        deltacells.write_deltacells(study, path, tile_size=128, progress=False)
        studies.append(study)
        paths.append(path)
    expected = sparse.csr_matrix(ad.concat(studies, join="inner").X, dtype=np.float32)
    seen = []
    for rank in range(2):
        load = CellLoader(
            paths, batch_size=64, rank=rank, world_size=2, obs_columns=["dataset"], cache_dir=tmp_path / "cache"
        )
        for batch in load.dataloader(num_workers=2, multiprocessing_context=context):
            np.testing.assert_array_equal(batch.X.toarray(), expected[batch.index].toarray())
            np.testing.assert_array_equal(batch.obs["dataset"], np.searchsorted([700, 1200], batch.index, side="right"))
            seen.append(batch.index)
    np.testing.assert_array_equal(np.sort(np.concatenate(seen)), np.arange(1600))
