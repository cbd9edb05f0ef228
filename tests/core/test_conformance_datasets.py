"""The conformance datasets made by an independent implementation: the complete one reads, broken copies fail."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy import sparse

from deltacells import FormatError
from deltacells.core import open_dataset
from deltacells.errors import DatasetNotFoundError, MissingObjectError

CONFORMANCE = Path(__file__).resolve().parents[3] / "shared" / "conformance"
DATASETS = CONFORMANCE / "datasets"

if not (DATASETS / "complete").is_dir():
    pytest.skip(f"conformance datasets not found at {DATASETS}", allow_module_level=True)


@pytest.fixture(scope="module")
def expected_original() -> sparse.csr_matrix:
    """X of ``complete`` in the ORIGINAL (source) column order."""
    npz = np.load(DATASETS / "complete.expected.npz")
    shape = tuple(int(x) for x in npz["shape"])
    return sparse.csr_matrix((npz["X_data"], npz["X_indices"], npz["X_indptr"]), shape=shape)


@pytest.fixture(scope="module")
def complete():
    return open_dataset(DATASETS / "complete")


@pytest.fixture(scope="module")
def expected(complete, expected_original) -> np.ndarray:
    """X of ``complete`` in the dataset's column order (dense int64)."""
    order = complete.gene_permutation()
    assert order is not None
    return expected_original.toarray().astype(np.int64)[:, order]


def test_complete_manifest(complete, expected_original):
    assert complete.shape == expected_original.shape == (2600, 1200)
    assert complete.n_tiles == 11
    assert complete.manifest.n_chunks == 4
    assert complete.manifest.has_obs
    assert complete.manifest.metadata == {"source": "conformance"}
    assert complete.manifest.nnz == expected_original.nnz


def test_complete_gene_order_is_a_permutation(complete):
    order = complete.gene_permutation()
    assert order.dtype == np.int32
    np.testing.assert_array_equal(np.sort(order), np.arange(complete.n_genes))
    assert not np.array_equal(order, np.arange(complete.n_genes)), "the conformance data is reordered"


def test_complete_reads_expected_x(complete, expected, assert_csr_equals):
    assert_csr_equals(complete.read_rows(), expected, np.float32)  # no dtype recorded: float32


def test_complete_reads_expected_x_int64_single_thread(expected, assert_csr_equals):
    ds = open_dataset(DATASETS / "complete", threads=1, tile_cache_bytes=0)
    assert_csr_equals(ds.read_rows(dtype=np.int64), expected, np.int64)
    assert ds.tiles_decoded == ds.n_tiles


def test_complete_random_rows(complete, expected, assert_csr_equals):
    rows = np.random.default_rng(1).integers(-2600, 2600, size=500)
    assert_csr_equals(complete.read_rows(rows, dtype=np.int32), expected[rows], np.int32)


def test_complete_iter_tiles(complete, expected):
    seen = []
    for t, tile in complete.iter_tiles():
        lo, hi = complete.tile_range(t)
        np.testing.assert_array_equal(tile.to_csr(np.int64).toarray(), expected[lo:hi])
        seen.append(t)
    assert seen == list(range(11))


def test_complete_var_names(complete):
    text = (DATASETS / "complete" / "var_names.txt").read_text(encoding="utf-8")
    names = complete.var_names()
    assert names == text.splitlines()
    assert len(names) == complete.n_genes


def test_complete_var_names_follow_gene_order(complete):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    var = pd.read_parquet(DATASETS / "complete.expected_var.parquet")
    assert complete.var_names() == [str(x) for x in var.index[complete.gene_permutation()]]


def _open_and_read(path: Path) -> None:
    open_dataset(path, tile_cache_bytes=0).read_rows()


@pytest.mark.parametrize(
    ("name", "match", "kind"),
    [
        pytest.param("counts_inconsistent", r"n_cells", FormatError, id="counts_inconsistent"),
        pytest.param("missing_tile", r"tile_000001\.dct", MissingObjectError, id="missing_tile"),
        pytest.param("no_manifest", r"manifest\.json", DatasetNotFoundError, id="no_manifest"),
        pytest.param("tile_cells_wrong", r"tile_cells", FormatError, id="tile_cells_wrong"),
        pytest.param("version_1", r"version", FormatError, id="version_1"),
        pytest.param("wrong_format", r"format", FormatError, id="wrong_format"),
    ],
)
def test_broken_copies_raise_format_error(name, match, kind):
    path = DATASETS / name
    assert path.is_dir()
    with pytest.raises(FormatError, match=match) as info:
        _open_and_read(path)
    assert isinstance(info.value, kind)
    assert isinstance(info.value, ValueError)


def test_obs_shard_tampered_still_reads_x(expected, assert_csr_equals):
    # The tampered shard matters only once obs is localized (a later issue); X must be unaffected.
    ds = open_dataset(DATASETS / "obs_shard_tampered")
    assert_csr_equals(ds.read_rows(), expected, np.float32)


def test_complete_rows_read_past_the_cache(complete, expected, assert_csr_equals):
    """The training loader's reads: each chunk holding a wanted cell decoded once, shuffled rows, repeats."""
    rows = np.random.default_rng(2).permutation(2600)[:900]
    rows = np.concatenate([rows, rows[:5]])
    ds = open_dataset(DATASETS / "complete", threads=2)
    assert_csr_equals(ds.read_rows_uncached(rows, dtype=np.int64), expected[rows], np.int64)
    assert len(ds.cache) == 0


def test_complete_chunk_starts_are_the_tiles_chunks(complete):
    starts = open_dataset(DATASETS / "complete").chunk_starts()
    want = [complete.tile_range(t)[0] + b for t, tile in complete.iter_tiles() for b in tile.chunk_bounds[:-1]]
    np.testing.assert_array_equal(starts, [*want, complete.n_cells])


@pytest.mark.parametrize(
    ("name", "match", "kind"),
    [
        pytest.param("missing_tile", r"tile_000001\.dct", MissingObjectError, id="missing_tile"),
        pytest.param("tile_cells_wrong", r"tile_cells", FormatError, id="tile_cells_wrong"),
    ],
)
def test_broken_copies_refuse_chunk_starts(name, match, kind):
    with pytest.raises(FormatError, match=match) as info:
        open_dataset(DATASETS / name).chunk_starts()
    assert isinstance(info.value, kind)
