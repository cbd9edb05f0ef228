"""The conformance datasets of the independent implementation: ``complete`` localizes to the expected obs."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from obs_testlib import DATASETS, CountingStore

from deltacells import FormatError
from deltacells.format import Manifest, ObsSchema, obs_fingerprint
from deltacells.obs import ObsStore

if not (DATASETS / "complete").is_dir():
    pytest.skip(f"conformance datasets not found at {DATASETS}", allow_module_level=True)


def _open(name: str, cache_dir: Path, *, verify: bool = True) -> ObsStore:
    store = CountingStore(DATASETS / name)
    return ObsStore(store, Manifest.from_json(store.read("manifest.json")), cache_dir=cache_dir, verify=verify)


@pytest.fixture(scope="module")
def expected() -> pd.DataFrame:
    """complete.expected_obs.parquet as pandas reads it, ``_index`` made the (unnamed) index."""
    frame = pd.read_parquet(DATASETS / "complete.expected_obs.parquet")
    return frame.set_index("_index").rename_axis(None)


def test_schema_and_fingerprint_match_the_manifest(tmp_path: Path) -> None:
    obs = _open("complete", tmp_path)
    text = (DATASETS / "complete" / "obs" / "schema.json").read_text(encoding="utf-8")
    assert obs_fingerprint(text, obs.manifest.tile_cells.tolist(), obs.manifest.obs_shard_sha256) == (
        obs.manifest.obs_fingerprint
    )
    schema = ObsSchema.from_json(text)
    assert schema.names[0] == "_index"
    assert obs.columns == ["cell_type", "n_counts", "pct_mito", "is_doublet", "donor", "note"]
    assert [c.kind for c in schema.columns] == [
        "string",
        "category",
        "numeric",
        "numeric",
        "bool",
        "category",
        "string",
    ]


def test_complete_localizes_to_the_expected_obs(tmp_path: Path, expected: pd.DataFrame) -> None:
    obs = _open("complete", tmp_path)
    frame = obs.to_dataframe()
    # Same values, missing values and dtypes as pandas' own reading of the expected parquet: categoricals with
    # the vocabulary (and its dtype) of the schema, int64, float64 with NaN, bool, and strings in the default
    # string dtype of the running pandas (object with None in pandas 2, str with NaN in pandas 3).
    pd.testing.assert_frame_equal(frame, expected, check_exact=True)
    for name in ("cell_type", "donor"):
        assert frame[name].cat.categories.dtype == expected[name].cat.categories.dtype
        assert (
            list(frame[name].cat.categories)
            == json.loads((DATASETS / "complete" / "obs" / "schema.json").read_text())["columns"][
                obs.schema.names.index(name)
            ]["categories"]
        )
        assert frame[name].isna().sum() == expected[name].isna().sum()
    assert frame["cell_type"].isna().any() and frame["pct_mito"].isna().any() and frame["note"].isna().any()
    # the cache holds one Arrow file per column, read back without touching the dataset again
    store = obs.store
    assert store.shard_reads() == obs.manifest.n_obs_shards
    again = _open("complete", tmp_path)
    pd.testing.assert_frame_equal(again.to_dataframe(), expected, check_exact=True)
    assert again.store.shard_reads() == 0 and not again.store.ranged


@pytest.mark.parametrize("column", ["cell_type", "pct_mito", "note", "is_doublet"])
def test_single_columns_by_ranged_reads(tmp_path: Path, expected: pd.DataFrame, column: str) -> None:
    obs = _open("complete", tmp_path, verify=False)
    series = obs.read_column(column)
    pd.testing.assert_series_equal(series, expected[column], check_exact=True)
    assert obs.store.shard_reads() == 0, "verify=False must never read whole shards"
    # the column and _index are fetched together: per shard, one ranged read of the tail (the footer) and at
    # most one of the coalesced column chunks (none when the tail holds them), never one read per chunk
    shards = [f"obs/obs_{i:04d}.parquet" for i in range(obs.manifest.n_obs_shards)]
    assert set(obs.store.ranged) == set(shards) and all(obs.store.ranged[s] <= 2 for s in shards)


def test_tampered_shard_fails_with_sha256(tmp_path: Path) -> None:
    obs = _open("obs_shard_tampered", tmp_path)
    assert obs.columns  # the schema itself is intact
    with pytest.raises(FormatError, match=r"obs_0000\.parquet.*SHA-256"):
        obs.localize(["cell_type"])
    assert not list(obs.directory.glob("*.arrow")), "nothing may be cached from a shard that failed its check"
    with pytest.raises(FormatError, match="SHA-256"):
        obs.to_dataframe()
