"""The writer's word that the obs names are unique, and the reader that takes it instead of anndata's check."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

import deltacells
from deltacells.datasets import synthetic_counts
from deltacells.format import OBS_NAMES_UNIQUE, obs_names_unique, with_obs_names_unique
from deltacells.obs import write_obs
from deltacells.storage import open_store

NOT_UNIQUE = "Observation names are not unique"  # anndata's warning


def _metadata(path: Path) -> dict:
    return json.loads((path / "manifest.json").read_text())["metadata"]


def _read_warnings(path: Path, cache: Path, **kwargs) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        deltacells.read_deltacells(path, cache_dir=cache, **kwargs)
    return [str(w.message) for w in caught]


def test_flag_helpers() -> None:
    assert not obs_names_unique({}) and not obs_names_unique(None) and not obs_names_unique({"deltacells": "x"})
    assert not obs_names_unique({"deltacells": {OBS_NAMES_UNIQUE: "true"}})  # only the JSON true counts
    flagged = with_obs_names_unique({"mine": 1, "deltacells": {"anndata": {}}}, True)
    assert flagged == {"mine": 1, "deltacells": {"anndata": {}, OBS_NAMES_UNIQUE: True}}
    assert obs_names_unique(flagged)
    assert with_obs_names_unique(flagged, False) == {"mine": 1, "deltacells": {"anndata": {}}}
    assert with_obs_names_unique({"deltacells": {OBS_NAMES_UNIQUE: True}}, False) == {}


def test_write_obs_says_whether_the_stored_names_are_unique(tmp_path: Path) -> None:
    cells = np.array([2, 2])
    unique = pd.DataFrame({"x": np.arange(4)}, index=["a", "b", "c", "d"])
    assert write_obs(open_store(tmp_path / "u"), unique, cells).names_unique
    repeated = pd.DataFrame({"x": np.arange(4)}, index=["a", "b", "a", "d"])
    assert not write_obs(open_store(tmp_path / "r"), repeated, cells).names_unique
    # labels of other types are stored as text: 1 and "1" are the same name once stored
    mixed = pd.DataFrame({"x": np.arange(4)}, index=pd.Index([1, "1", 2, 3], dtype=object))
    assert not write_obs(open_store(tmp_path / "m"), mixed, cells).names_unique


def test_writer_records_unique_names_and_reader_does_not_warn(tmp_path: Path) -> None:
    src = synthetic_counts(300, 20, seed=1)
    deltacells.write_deltacells(src, tmp_path / "ds", tile_size=64, progress=False, metadata={"mine": 1})
    assert _metadata(tmp_path / "ds")["deltacells"][OBS_NAMES_UNIQUE] is True
    assert _metadata(tmp_path / "ds")["mine"] == 1
    assert not [m for m in _read_warnings(tmp_path / "ds", tmp_path / "cache") if NOT_UNIQUE in m]
    adata = deltacells.read_deltacells(tmp_path / "ds", cache_dir=tmp_path / "cache")
    assert adata.obs_names.is_unique and list(adata.obs_names) == list(src.obs_names)


def test_repeated_names_are_not_flagged_and_anndata_warns(tmp_path: Path) -> None:
    src = synthetic_counts(300, 20, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # anndata's own warning, when the names are set
        src.obs_names = [f"c{i % 150}" for i in range(300)]
    deltacells.write_deltacells(src, tmp_path / "ds", tile_size=64, progress=False)
    assert not obs_names_unique(_metadata(tmp_path / "ds"))
    assert [m for m in _read_warnings(tmp_path / "ds", tmp_path / "cache") if NOT_UNIQUE in m]


def test_the_reader_takes_the_writers_word(tmp_path: Path) -> None:
    """A manifest that says the names are unique is believed: anndata does not hash them again.

    (This one lies, so that the test can see the check skipped; without the flag anndata warns.)
    """
    src = synthetic_counts(200, 20, seed=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        src.obs_names = ["same"] * 200
    deltacells.write_deltacells(src, tmp_path / "ds", tile_size=64, progress=False)
    assert [m for m in _read_warnings(tmp_path / "ds", tmp_path / "c1") if NOT_UNIQUE in m]
    manifest = json.loads((tmp_path / "ds" / "manifest.json").read_text())
    manifest["metadata"] = with_obs_names_unique(manifest["metadata"], True)
    (tmp_path / "ds" / "manifest.json").write_text(json.dumps(manifest))
    assert not [m for m in _read_warnings(tmp_path / "ds", tmp_path / "c2") if NOT_UNIQUE in m]


def test_default_names_need_no_check_and_var_names_are_still_checked(tmp_path: Path) -> None:
    src = synthetic_counts(200, 6, seed=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        src.obs_names = ["same"] * 200
        src.var_names = ["a", "b", "a", "c", "d", "e"]
        deltacells.write_deltacells(src, tmp_path / "ds", tile_size=64, progress=False)
    messages = _read_warnings(tmp_path / "ds", tmp_path / "c", obs_names=False)
    assert not [m for m in messages if NOT_UNIQUE in m]  # "0" .. "n-1"
    assert [m for m in messages if "Variable names are not unique" in m]  # anndata still checks var


def test_an_append_keeps_the_flag(tmp_path: Path) -> None:
    src = synthetic_counts(300, 20, seed=1)
    deltacells.write_deltacells(src[:200].copy(), tmp_path / "ds", tile_size=64, progress=False)
    deltacells.write_deltacells(src[200:].copy(), tmp_path / "ds", append=True, progress=False)
    assert obs_names_unique(_metadata(tmp_path / "ds"))
    adata = deltacells.read_deltacells(tmp_path / "ds", cache_dir=tmp_path / "cache")
    assert list(adata.obs_names) == list(src.obs_names)
