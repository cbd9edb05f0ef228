"""``validate_dataset`` on objects that exist but cannot be read, or are not what their name says.

An object that is a directory, an obs folder that is a file, a schema that is not UTF-8, a row group whose pages
are damaged, a URL no filesystem knows: each is one problem naming the object at fault, never an exception, and
the rest of the dataset is still checked.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import deltacells
from deltacells.datasets import synthetic_counts
from deltacells.validate import ValidationReport, validate_dataset

N_CELLS, N_GENES, TILE = 300, 40, 128  # 3 tiles, one obs shard


@pytest.fixture(autouse=True)
def _no_default_cache(no_default_cache: None) -> None:
    """Validation never localizes obs: the default cache stays empty."""


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("unreadable") / "ds"
    deltacells.write_deltacells(synthetic_counts(N_CELLS, N_GENES, seed=4), path, tile_size=TILE, progress=False)
    return path


@pytest.fixture
def ds(pristine: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(pristine, tmp_path / "ds"))


def _as_directory(path: Path) -> None:
    """Replace the file ``path`` with an empty directory of the same name."""
    path.unlink()
    path.mkdir()


def _messages(report: ValidationReport) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for problem in report.problems:
        found.setdefault(problem.object, []).append(problem.message)
    return found


def test_the_pristine_copy_is_valid(ds: Path) -> None:
    report = validate_dataset(ds)
    assert report.ok, report.problems
    assert (report.tiles_checked, report.shards_checked) == (3, 1)


def test_a_tile_that_is_a_directory_is_one_problem_and_the_others_are_checked(ds: Path) -> None:
    _as_directory(ds / "tiles" / "tile_000001.dct")
    report = validate_dataset(ds, threads=1)
    assert list(_messages(report)) == ["tiles/tile_000001.dct"]
    (message,) = _messages(report)["tiles/tile_000001.dct"]
    assert "IsADirectoryError" in message
    assert report.tiles_checked == 2  # tiles 0 and 2 read and decoded
    assert report.shards_checked == 1


def test_a_manifest_that_is_a_directory_is_the_only_problem(ds: Path) -> None:
    _as_directory(ds / "manifest.json")
    report = validate_dataset(ds)
    assert [(p.object, "IsADirectoryError" in p.message) for p in report.problems] == [("manifest.json", True)]
    assert report.tiles_checked == 0


def test_an_unknown_url_scheme_is_a_problem_not_an_exception() -> None:
    report = validate_dataset("nosuchscheme://bucket/ds")
    assert not report.ok
    (problem,) = report.problems
    assert problem.object == "manifest.json"
    assert "nosuchscheme" in problem.message


def test_an_obs_schema_that_is_a_directory(ds: Path) -> None:
    _as_directory(ds / "obs" / "schema.json")
    report = validate_dataset(ds)
    messages = _messages(report)
    assert any("IsADirectoryError" in m for m in messages["obs/schema.json"])
    assert report.shards_checked == 1  # the shard is still read (its columns then checked against nothing)
    assert report.tiles_checked == 3


def test_an_obs_schema_that_is_not_utf8(ds: Path) -> None:
    (ds / "obs" / "schema.json").write_bytes(b"\xff\xfe{}")
    report = validate_dataset(ds)
    (message,) = _messages(report)["obs/schema.json"]
    assert message.startswith("not UTF-8 text")


def test_a_missing_obs_schema_is_reported_once(ds: Path) -> None:
    (ds / "obs" / "schema.json").unlink()
    report = validate_dataset(ds)
    assert _messages(report)["obs/schema.json"] == ["missing, but manifest.json field has_obs is true"]


def test_an_obs_folder_that_is_a_file(ds: Path) -> None:
    """``obs`` cannot be listed: its schema is missing and its shard unreadable, each reported by name."""
    shutil.rmtree(ds / "obs")
    (ds / "obs").write_text("not a folder")
    report = validate_dataset(ds)
    messages = _messages(report)
    assert set(messages) == {"obs/schema.json", "obs/obs_0000.parquet"}
    assert any("missing" in m for m in messages["obs/schema.json"])
    assert any("NotADirectoryError" in m for m in messages["obs/obs_0000.parquet"])
    assert report.shards_checked == 0


def test_an_obs_shard_that_is_a_directory(ds: Path) -> None:
    _as_directory(ds / "obs" / "obs_0000.parquet")
    report = validate_dataset(ds)
    (message,) = _messages(report)["obs/obs_0000.parquet"]
    assert "IsADirectoryError" in message
    assert report.shards_checked == 0


def test_a_row_group_with_damaged_pages_is_reported_with_its_tile(ds: Path) -> None:
    """The footer still parses, so each row group is read: the damaged one is named, with the tile it holds."""
    shard = ds / "obs" / "obs_0000.parquet"
    meta = pq.ParquetFile(shard).metadata
    assert meta.num_row_groups == 3  # one per tile
    group = meta.row_group(1)
    chunks = [group.column(c) for c in range(group.num_columns)]
    starts = [c.dictionary_page_offset or c.data_page_offset for c in chunks]
    start, end = min(starts), max(s + c.total_compressed_size for s, c in zip(starts, chunks, strict=True))
    blob = bytearray(shard.read_bytes())
    blob[start:end] = b"\x07" * (end - start)
    shard.write_bytes(bytes(blob))
    report = validate_dataset(ds)
    messages = _messages(report)["obs/obs_0000.parquet"]
    assert any("SHA-256" in m or "sha256" in m for m in messages)  # the bytes no longer match the manifest
    assert any(m.startswith("row group 1 (tile 1): cannot be read") for m in messages), messages
    assert not any(m.startswith(("row group 0", "row group 2")) for m in messages)


def test_an_empty_dataset_is_valid(tmp_path: Path) -> None:
    path = tmp_path / "empty"
    deltacells.write_deltacells(synthetic_counts(10, N_GENES)[:0].copy(), path, progress=False)
    report = validate_dataset(path)
    assert report.ok, report.problems
    assert (report.n_tiles, report.tiles_checked, report.shards_checked) == (0, 0, 0)
    assert json.loads((path / "manifest.json").read_text())["n_cells"] == 0
