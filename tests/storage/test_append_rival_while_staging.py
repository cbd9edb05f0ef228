"""An append whose dataset is grown by another writer while it stages its objects (S3, moto's server).

The rival's commit rewrites the obs shard that this append reads after its cells: that read no longer matches the
manifest this append started from, which is another writer's commit, not damage. The append starts again from
the new version (``commit_retries``), or, with no retry left, raises ``CommitConflictError``; either way the
dataset holds the rival's cells, and this append's only once it committed.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import sparse
from tests.servers import S3Bucket
from tests.servers.appenders import batch

import deltacells
from deltacells.core import AppendRequest, append_cells, open_dataset
from deltacells.errors import CommitConflictError, FormatError
from deltacells.storage import open_store
from deltacells.validate import validate_dataset

BASE, RIVAL, OURS, TILE = 20, 10, 7, 16


def _request(url: str, options: dict) -> tuple[AppendRequest, np.ndarray, list[bool]]:
    """Our cells (``batch(900, OURS)``), their counts, and the passes over their blocks (whether a rival committed).

    The first pass lets a rival append ``RIVAL`` cells first.
    """
    ours = batch(900, OURS)
    matrix = sparse.csr_matrix(ours.X)
    passes: list[bool] = []

    def blocks():
        rival = not passes
        passes.append(rival)
        if rival:
            deltacells.write_deltacells(
                batch(500, RIVAL), url, append=True, progress=False, storage_options=options
            )  # another writer commits now, between our read of the manifest and our read of the obs shard
        yield matrix

    request = AppendRequest(n_cells=OURS, blocks=blocks, columns=np.arange(matrix.shape[1]), obs=ours.obs)
    return request, matrix.toarray(), passes


@pytest.fixture
def dataset(s3_bucket: S3Bucket) -> tuple[str, dict]:
    url, options = f"{s3_bucket.url}/ds", s3_bucket.storage_options
    deltacells.write_deltacells(
        batch(0, BASE), url, tile_size=TILE, reorder_genes=False, progress=False, storage_options=options
    )
    return url, options


def test_the_append_starts_again_after_the_rivals_commit(dataset: tuple[str, dict]) -> None:
    url, options = dataset
    request, ours, passes = _request(url, options)
    manifest = append_cells(open_store(url, options), request)
    assert passes == [True, False]  # the blocks were read again, on the new version
    assert manifest.n_cells == BASE + RIVAL + OURS
    grown = open_dataset(url, storage_options=options)
    np.testing.assert_array_equal(grown.read_rows(slice(BASE + RIVAL, None)).toarray(), ours)
    names = deltacells.read_deltacells(url, storage_options=options).obs_names
    assert list(names[BASE : BASE + RIVAL]) == [f"cell{500 + i}" for i in range(RIVAL)]
    assert list(names[BASE + RIVAL :]) == [f"cell{900 + i}" for i in range(OURS)]
    report = validate_dataset(url, storage_options=options)
    assert report.ok, report.problems


def test_without_retries_the_conflict_is_raised_and_only_the_rivals_cells_are_added(dataset: tuple[str, dict]) -> None:
    url, options = dataset
    request, _, passes = _request(url, options)
    with pytest.raises(CommitConflictError, match="another writer committed first, 1 time") as raised:
        append_cells(open_store(url, options), request, commit_retries=0)
    conflict = raised.value.__cause__
    assert isinstance(conflict, CommitConflictError) and "while this append read" in str(conflict)
    assert isinstance(conflict.__cause__, FormatError)  # the stale read that told of the rival's commit
    assert passes == [True]
    assert open_dataset(url, storage_options=options).n_cells == BASE + RIVAL
