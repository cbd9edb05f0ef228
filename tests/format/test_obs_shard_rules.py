"""The rules of obs shards and of the commit entry (``deltacells.format``), checker by checker.

Each checker gets a shard or entry a real writer made, then the same with one thing changed: it yields no
problem for the first and exactly the problem naming the object and field at fault for the second.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import deltacells
from deltacells.datasets import synthetic_counts
from deltacells.format import (
    Manifest,
    ManifestFields,
    ObsSchema,
    Problem,
    check_codes,
    check_fingerprint,
    check_shard_bytes,
    check_shard_layout,
    collect,
    commit_of,
    shard_tiles,
)


def problems(checker) -> tuple[list[Problem], object]:
    found: list[Problem] = []
    result = collect(checker, found.append)
    return found, result


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("shards") / "ds.deltacells"
    adata = synthetic_counts(130, 20, seed=3)  # tiles of 32: 5 tiles, obs 2 tiles a shard: 3 shards
    deltacells.write_deltacells(adata, path, tile_size=32, obs_tiles_per_file=2, progress=False)
    return path


def fields_of(path: Path) -> ManifestFields:
    return Manifest.from_json((path / "manifest.json").read_text()).to_fields()


def test_shard_tiles(written: Path) -> None:
    fields = fields_of(written)
    assert [shard_tiles(fields, s) for s in range(3)] == [range(2), range(2, 4), range(4, 5)]


def test_the_fingerprint(written: Path) -> None:
    fields = fields_of(written)
    text = (written / "obs/schema.json").read_text()
    assert problems(check_fingerprint(text, fields))[0] == []
    (problem,), _ = problems(check_fingerprint(text + " ", fields))
    assert problem.object == "obs/schema.json"
    assert "obs_fingerprint" in problem.message and "do not belong to this manifest" in problem.message


def test_shard_bytes(written: Path) -> None:
    fields = fields_of(written)
    blob = (written / "obs/obs_0001.parquet").read_bytes()
    assert problems(check_shard_bytes(blob, 1, fields))[0] == []
    (sized, hashed), _ = problems(check_shard_bytes(blob + b"x", 1, fields))
    assert sized.object == hashed.object == "obs/obs_0001.parquet"
    assert "obs_shard_bytes[1]" in sized.message and "obs_shard_sha256[1]" in hashed.message
    flipped = bytearray(blob)
    flipped[len(blob) // 2] ^= 0xFF
    (only,), _ = problems(check_shard_bytes(bytes(flipped), 1, fields))
    assert "SHA-256" in only.message and "modified or damaged" in only.message


def test_the_last_shards_mismatch_hints_at_an_append(written: Path) -> None:
    fields = fields_of(written)
    blob = (written / "obs/obs_0002.parquet").read_bytes()
    found, _ = problems(check_shard_bytes(blob + b"x", 2, fields))
    assert all("open it again" in p.message for p in found)


def _shard(written: Path, index: int) -> pq.ParquetFile:
    return pq.ParquetFile(io.BytesIO((written / f"obs/obs_{index:04d}.parquet").read_bytes()))


def test_shard_layout(written: Path) -> None:
    fields = fields_of(written)
    schema = ObsSchema.from_json((written / "obs/schema.json").read_text())
    found, ok = problems(check_shard_layout(_shard(written, 0), 0, schema, fields))
    assert (found, ok) == ([], True)

    table = _shard(written, 0).read()
    one_group = io.BytesIO()
    pq.write_table(table, one_group, row_group_size=len(table))
    (groups, rows), ok = problems(check_shard_layout(pq.ParquetFile(one_group), 0, schema, fields))
    assert ok and groups.object == rows.object == "obs/obs_0000.parquet"
    assert "1 row groups, expected 2" in groups.message and "row group 0 (tile 0) has 64 rows" in rows.message

    renamed = io.BytesIO()
    pq.write_table(table.rename_columns([f"x{i}" for i in range(table.num_columns)]), renamed, row_group_size=32)
    found, ok = problems(check_shard_layout(pq.ParquetFile(renamed), 0, schema, fields))
    assert not ok and "lists" in found[0].message

    uneven = io.BytesIO()
    pq.write_table(table, uneven, row_group_size=20)  # 64 rows: groups of 20, 20, 20, 4
    found, _ = problems(check_shard_layout(pq.ParquetFile(uneven), 0, schema, fields))
    assert any("row group 0 (tile 0) has 20 rows" in p.message and "tile_cells[0]" in p.message for p in found)


def test_codes_in_and_out_of_range(written: Path) -> None:
    schema = ObsSchema.from_json((written / "obs/schema.json").read_text())
    column = next(c for c in schema.columns if c.categories)
    n = len(column.categories)
    codes = pa.array(np.array([-1, 0, n - 1], dtype=np.int8))
    assert problems(check_codes(column, codes, "obs/obs_0000.parquet", ""))[0] == []
    assert problems(check_codes(column, pa.array([None, None], pa.int8()), "o", ""))[0] == []
    (high,), _ = problems(check_codes(column, pa.array(np.array([0, n], dtype=np.int8)), "o", "row group 1: "))
    assert high.object == "o" and f"category code {n}, outside -1 .. {n - 1}" in high.message
    assert high.message.startswith("row group 1: ")
    (low,), _ = problems(check_codes(column, pa.array(np.array([-2], dtype=np.int8)), "o", ""))
    assert "category code -2" in low.message


@pytest.mark.parametrize(
    ("entry", "field"),
    [
        ([], "is not a JSON object"),
        ({"version": -1, "id": "ab"}, ".version is -1"),
        ({"version": True, "id": "ab"}, ".version is True"),
        ({"version": 1, "id": "XYZ"}, ".id is 'XYZ'"),
        ({"version": 1, "id": "ab", "staging": "elsewhere", "objects": []}, ".staging is 'elsewhere'"),
        ({"version": 1, "id": "ab", "staging": ".deltacells-append-ab", "objects": ["../x"]}, ".objects"),
        ({"version": 1, "id": "ab", "staging": ".deltacells-append-ab", "objects": "tiles"}, ".objects"),
        ({"version": 1, "id": "ab", "objects": []}, ".staging is None"),
    ],
)
def test_a_malformed_commit_entry_names_its_field(entry: object, field: str) -> None:
    (problem,), commit = problems(commit_of({"deltacells": {"commit": entry}}))
    assert commit.version == 0 and not commit.pending and problem.object == "manifest.json" and field in problem.message


def test_commit_entries_done_and_pending() -> None:
    found, done = problems(commit_of({"deltacells": {"commit": {"version": 3, "id": "9f"}}}))
    assert found == [] and done.version == 3 and not done.pending
    entry = {"version": 4, "id": "a0", "staging": ".deltacells-append-a0", "objects": ["tiles/tile_000001.dct"]}
    found, pending = problems(commit_of({"deltacells": {"commit": entry}}))
    assert found == [] and pending.pending and pending.objects == ("tiles/tile_000001.dct",)
    assert pending.done().to_dict() == {"version": 4, "id": "a0"}
    assert pending.to_dict() == entry
