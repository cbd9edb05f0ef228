"""Several processes localizing into one cache at once: identical data, each column fetched and written once."""

from __future__ import annotations

import collections
import multiprocessing
from pathlib import Path

import numpy as np
import pandas as pd
from obs_testlib import localize_in_process, sample_frame, write_obs_dataset

N_PROCESSES = 4
GROUPS = [["cell_type", "n_counts", "note"], ["n_counts", "pct", "flag"]]


def test_processes_share_the_cache(tmp_path: Path) -> None:
    frame = sample_frame(2000, seed=7)
    dataset = write_obs_dataset(tmp_path / "ds", frame, 64, obs_tiles_per_file=4)
    n_shards = dataset.manifest.n_obs_shards
    assert n_shards == 8
    cache = tmp_path / "cache"
    log = tmp_path / "log.txt"
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(N_PROCESSES)
    outputs = [tmp_path / f"out{i}.pkl" for i in range(N_PROCESSES)]
    processes = [
        context.Process(
            target=localize_in_process,
            args=(
                str(dataset.root),
                dataset.manifest.to_json(),
                str(cache),
                GROUPS[i % 2],
                barrier,
                str(log),
                str(outputs[i]),
            ),
        )
        for i in range(N_PROCESSES)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=120)
    errors = [p.with_name(p.name + ".err").read_text() for p in outputs if p.with_name(p.name + ".err").exists()]
    assert not errors, errors[0]
    assert [p.exitcode for p in processes] == [0] * N_PROCESSES

    for i, path in enumerate(outputs):
        pd.testing.assert_frame_equal(pd.read_pickle(path), frame[GROUPS[i % 2]], check_exact=True)

    events = [line.split(" ", 2) for line in log.read_text().splitlines()]
    renamed = collections.Counter(name for _, what, name in events if what == "replace" and name.endswith(".arrow"))
    expected_files = {f"{name}.arrow" for name in ["_index", *GROUPS[0], *GROUPS[1]]}
    assert renamed == dict.fromkeys(expected_files, 1), "each column file is written exactly once"
    whole = collections.Counter(name for _, what, name in events if what == "read" and name.endswith(".parquet"))
    assert whole == {f"obs_{s:04d}.parquet": 1 for s in range(n_shards)}, "each shard is read whole (checked) once"
    ranged = collections.Counter(name for _, what, name in events if what == "range" and name.endswith(".parquet"))
    # the first process to get the lock fetches its columns; the first of the other group fetches the rest
    # from the (now verified) shards with ranged reads (one per shard: so small a shard fits in the read of its
    # tail, for the footer); everyone else finds every column in the cache
    assert ranged == {f"obs_{s:04d}.parquet": 1 for s in range(n_shards)}
    files = sorted(p.name for p in (cache / dataset.manifest.obs_fingerprint / "obs").iterdir())
    assert [f for f in files if f.endswith(".tmp")] == []
    assert set(files) >= expected_files | {"verified.json", "schema.json"}
    assert np.all(frame.index == pd.read_pickle(outputs[0]).index)
