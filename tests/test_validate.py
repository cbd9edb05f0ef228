"""``deltacells.validate.validate_dataset``: every problem of a dataset found and reported, never a crash."""

from __future__ import annotations

import io
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import deltacells
from deltacells.datasets import synthetic_counts
from deltacells.validate import Problem, ValidationReport, validate_dataset

CONFORMANCE = Path(__file__).resolve().parents[2] / "shared" / "conformance" / "datasets"

needs_conformance = pytest.mark.skipif(not (CONFORMANCE / "complete").is_dir(), reason="no conformance datasets")


@pytest.fixture(autouse=True)
def _no_default_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Validation never localizes obs: the default cache must stay empty."""
    stray = tmp_path_factory.mktemp("default-cache")
    monkeypatch.setenv("DELTACELLS_CACHE", str(stray))
    yield
    assert not any(stray.iterdir()), f"something was written to the default obs cache: {list(stray.iterdir())}"


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small dataset: 5 tiles of 100 cells, obs in 3 shards of 2 tiles, gene order, var names and table."""
    path = tmp_path_factory.mktemp("pristine") / "ds"
    adata = synthetic_counts(460, 80, seed=2)
    deltacells.write_deltacells(adata, path, tile_size=100, n_chunks=3, obs_tiles_per_file=2, level=3, progress=False)
    return path


@pytest.fixture
def ds(pristine: Path, tmp_path: Path) -> Path:
    """A fresh copy of the small dataset, to damage."""
    return Path(shutil.copytree(pristine, tmp_path / "ds"))


def _manifest(path: Path) -> dict:
    return json.loads((path / "manifest.json").read_text())


def _write_manifest(path: Path, doc: dict) -> None:
    (path / "manifest.json").write_text(json.dumps(doc, indent=1))


def _objects(report: ValidationReport) -> list[str]:
    return [p.object for p in report.problems]


def _find(report: ValidationReport, obj: str, fragment: str) -> Problem:
    for problem in report.problems:
        if problem.object == obj and fragment in problem.message:
            return problem
    pytest.fail(f"no problem on {obj} mentioning {fragment!r}; got:\n{report}")


# ---------------------------------------------------------------------- valid datasets


def test_written_dataset_is_ok(pristine):
    report = validate_dataset(pristine)
    assert report.ok, str(report)
    assert report.problems == []
    m = deltacells.open_dataset(pristine).manifest
    assert (report.n_tiles, report.tiles_checked) == (5, 5)
    assert (report.n_shards, report.shards_checked) == (3, 3)
    assert report.nnz_checked == m.nnz
    assert report.bytes_checked == int(m.tile_bytes.sum())
    assert "no problems" in str(report)


@needs_conformance
def test_conformance_complete_is_ok():
    report = validate_dataset(CONFORMANCE / "complete")
    assert report.ok, str(report)
    assert report.tiles_checked == 11
    assert report.shards_checked == 4


@needs_conformance
@pytest.mark.parametrize(
    ("name", "obj", "fragment"),
    [
        ("missing_tile", "tiles/tile_000001.dct", "missing"),
        ("counts_inconsistent", "manifest.json", "n_cells"),
        ("obs_shard_tampered", "obs/obs_0000.parquet", "SHA-256"),
        ("tile_cells_wrong", "manifest.json", "tile_cells"),
        ("version_1", "manifest.json", "version"),
        ("wrong_format", "manifest.json", "format"),
        ("no_manifest", "manifest.json", "missing"),
    ],
)
def test_conformance_broken(name, obj, fragment):
    report = validate_dataset(CONFORMANCE / name)
    assert not report.ok
    _find(report, obj, fragment)


@needs_conformance
def test_strict_manifest_failure_still_checks_the_tiles():
    """tile_cells_wrong fails the strict manifest parse; the tiles and shards are still checked against it."""
    report = validate_dataset(CONFORMANCE / "tile_cells_wrong")
    assert report.tiles_checked == 11
    _find(report, "tiles/tile_000010.dct", "holds 40 cells but manifest.json field tile_cells[10] says 256")
    _find(report, "obs/obs_0003.parquet", "row group 1 (tile 10) has 40 rows")
    # The fingerprint covers tile_cells, so it no longer matches either.
    _find(report, "obs/schema.json", "obs_fingerprint")


@needs_conformance
def test_unknown_version_is_one_problem():
    report = validate_dataset(CONFORMANCE / "version_1")
    assert len(report.problems) == 1
    assert report.tiles_checked == 0


def test_missing_path_is_one_problem(tmp_path):
    report = validate_dataset(tmp_path / "nope")
    assert _objects(report) == ["manifest.json"]
    assert "does not exist" in report.problems[0].message


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '"a string"', ""])
def test_unparseable_manifest_is_one_problem(ds, text):
    (ds / "manifest.json").write_text(text)
    report = validate_dataset(ds)
    assert _objects(report) == ["manifest.json"]
    assert report.tiles_checked == 0


# ---------------------------------------------------------------------- tiles


def test_flipped_byte_is_a_crc_problem(ds):
    tile = ds / "tiles" / "tile_000002.dct"
    blob = bytearray(tile.read_bytes())
    blob[-3] ^= 0xFF
    tile.write_bytes(bytes(blob))
    report = validate_dataset(ds)
    assert _objects(report) == ["tiles/tile_000002.dct"]
    assert "CRC-32" in report.problems[0].message
    assert report.tiles_checked == 5
    # the nonzero count covers every tile the manifest lists (the damaged one by the manifest's count)
    assert report.nnz_checked == deltacells.open_dataset(ds).manifest.nnz


def test_truncated_tile_is_a_tile_bytes_problem(ds):
    tile = ds / "tiles" / "tile_000001.dct"
    blob = tile.read_bytes()
    tile.write_bytes(blob[:-5])
    report = validate_dataset(ds)
    problem = _find(report, "tiles/tile_000001.dct", "tile_bytes[1]")
    assert f"size is {len(blob) - 5} bytes" in problem.message
    assert set(_objects(report)) == {"tiles/tile_000001.dct"}


def test_every_problem_is_listed(ds):
    """Several defects at once: all are reported, in check order, not just the first."""
    tile = ds / "tiles" / "tile_000000.dct"
    blob = bytearray(tile.read_bytes())
    blob[100] ^= 0x01
    tile.write_bytes(bytes(blob))
    (ds / "tiles" / "tile_000003.dct").unlink()
    shard = ds / "obs" / "obs_0001.parquet"
    shard.write_bytes(shard.read_bytes() + b"junk")
    report = validate_dataset(ds)
    _find(report, "tiles/tile_000000.dct", "CRC-32")
    _find(report, "tiles/tile_000003.dct", "missing")
    _find(report, "obs/obs_0001.parquet", "obs_shard_bytes[1]")
    _find(report, "obs/obs_0001.parquet", "SHA-256")
    assert report.tiles_checked == 4
    assert len(report.problems) >= 4
    assert str(report).count("\n  ") == len(report.problems)


def test_tile_swapped_for_another(ds):
    """A valid tile in the wrong place: right CRC, wrong size, cells and nonzeros for the manifest."""
    last = (ds / "tiles" / "tile_000004.dct").read_bytes()  # 60 cells, not 100
    (ds / "tiles" / "tile_000001.dct").write_bytes(last)
    report = validate_dataset(ds)
    _find(report, "tiles/tile_000001.dct", "tile_bytes[1]")
    _find(report, "tiles/tile_000001.dct", "holds 60 cells but manifest.json field tile_cells[1] says 100")
    _find(report, "tiles/tile_000001.dct", "tile_nnz[1]")


def test_manifest_counts_against_tiles(ds):
    doc = _manifest(ds)
    doc["tile_nnz"][2] += 1
    doc["n_genes"] += 1
    _write_manifest(ds, doc)
    report = validate_dataset(ds)
    _find(report, "tiles/tile_000002.dct", "tile_nnz[2]")
    for t in range(5):
        _find(report, f"tiles/tile_{t:06d}.dct", "n_genes")


def test_lenient_manifest_reports_every_field(ds):
    doc = _manifest(ds)
    doc["n_cells"] += 7
    doc["n_chunks"] = "eight"
    del doc["metadata"]
    _write_manifest(ds, doc)
    report = validate_dataset(ds)
    _find(report, "manifest.json", "n_cells")
    _find(report, "manifest.json", "n_chunks")
    _find(report, "manifest.json", "metadata")
    assert report.tiles_checked == 5  # the tiles were still checked, and are fine
    assert set(_objects(report)) == {"manifest.json"}


def test_stray_tile_and_shard(ds):
    shutil.copy(ds / "tiles" / "tile_000000.dct", ds / "tiles" / "tile_000005.dct")
    shutil.copy(ds / "obs" / "obs_0000.parquet", ds / "obs" / "obs_0003.parquet")
    report = validate_dataset(ds)
    _find(report, "tiles/tile_000005.dct", "not listed")
    _find(report, "obs/obs_0003.parquet", "not listed")


@pytest.mark.parametrize("threads", [1, 3])
def test_threads_give_the_same_report(ds, threads):
    for t in (1, 3):
        tile = ds / "tiles" / f"tile_{t:06d}.dct"
        blob = bytearray(tile.read_bytes())
        blob[-1] ^= 0x10
        tile.write_bytes(bytes(blob))
    report = validate_dataset(ds, threads=threads)
    assert _objects(report) == ["tiles/tile_000001.dct", "tiles/tile_000003.dct"]


def test_progress_bar(ds, capsys):
    assert validate_dataset(ds, progress=True).ok
    err = capsys.readouterr().err
    assert "tiles" in err
    assert "5/5" in err


# ---------------------------------------------------------------------- sidecars


@pytest.mark.parametrize(
    "order",
    [np.zeros(80, dtype="<i4"), np.r_[1:81].astype("<i4"), np.r_[-1, 1:80].astype("<i4")],
    ids=["repeats", "reaches n_genes", "negative"],
)
def test_gene_order_not_a_permutation(ds, order):
    buffer = io.BytesIO()
    np.save(buffer, order)
    (ds / "gene_order.npy").write_bytes(buffer.getvalue())
    report = validate_dataset(ds)
    assert _objects(report) == ["gene_order.npy"]
    assert "permutation" in report.problems[0].message


def test_gene_order_wrong_dtype_and_length(ds):
    buffer = io.BytesIO()
    np.save(buffer, np.arange(79, dtype=np.int64))
    (ds / "gene_order.npy").write_bytes(buffer.getvalue())
    report = validate_dataset(ds)
    _find(report, "gene_order.npy", "int32")
    _find(report, "gene_order.npy", "shape")


def test_gene_order_garbage(ds):
    (ds / "gene_order.npy").write_bytes(b"not an npy file")
    _find(validate_dataset(ds), "gene_order.npy", "not a readable .npy")


def test_var_names_and_var_table_lengths(ds):
    names = (ds / "var_names.txt").read_text().splitlines()
    (ds / "var_names.txt").write_text("\n".join(names[:-2]) + "\n")
    var = pq.read_table(ds / "var.parquet")
    pq.write_table(var.slice(0, 70), ds / "var.parquet")
    report = validate_dataset(ds)
    _find(report, "var_names.txt", "78 lines")
    _find(report, "var.parquet", "70 rows")


def test_flags_against_files(ds):
    (ds / "var_names.txt").unlink()
    doc = _manifest(ds)
    doc["has_gene_order"] = False
    _write_manifest(ds, doc)
    report = validate_dataset(ds)
    _find(report, "var_names.txt", "missing, but manifest.json field has_var_names is true")
    _find(report, "gene_order.npy", "present, but manifest.json field has_gene_order is false")
    assert len(report.problems) == 2


# ---------------------------------------------------------------------- obs


def test_obs_schema_edited(ds):
    """Schema text changed: the fingerprint no longer matches, and the shards no longer match the schema."""
    schema = json.loads((ds / "obs" / "schema.json").read_text())
    schema["columns"][1]["name"] = "renamed"
    (ds / "obs" / "schema.json").write_text(json.dumps(schema, indent=1))
    report = validate_dataset(ds)
    _find(report, "obs/schema.json", "obs_fingerprint")
    for shard in range(3):
        _find(report, f"obs/obs_{shard:04d}.parquet", "obs/schema.json lists")


def test_obs_schema_malformed(ds):
    (ds / "obs" / "schema.json").write_text('{"format": "deltacells-obs", "version": 9, "columns": []}')
    report = validate_dataset(ds)
    _find(report, "obs/schema.json", "version")
    _find(report, "obs/schema.json", "obs_fingerprint")


def test_obs_shard_layout_and_codes(ds):
    """A shard rewritten with the wrong row groups and an out-of-range category code (hashes updated)."""
    import hashlib

    from deltacells.format import obs_fingerprint

    path = ds / "obs" / "obs_0001.parquet"
    table = pq.read_table(path)
    codes = table.column("cell_type").to_numpy().copy()
    codes[3] = 99
    table = table.set_column(table.schema.get_field_index("cell_type"), "cell_type", pa.array(codes, pa.int8()))
    pq.write_table(table, path, row_group_size=table.num_rows)  # one row group for two tiles
    doc = _manifest(ds)
    blob = path.read_bytes()
    doc["obs_shard_bytes"][1] = len(blob)
    doc["obs_shard_sha256"][1] = hashlib.sha256(blob).hexdigest()
    doc["obs_fingerprint"] = obs_fingerprint(
        (ds / "obs" / "schema.json").read_text(), doc["tile_cells"], doc["obs_shard_sha256"]
    )
    _write_manifest(ds, doc)
    report = validate_dataset(ds)
    _find(report, "obs/obs_0001.parquet", "1 row groups, expected 2")
    _find(report, "obs/obs_0001.parquet", "category code 99")
    assert set(_objects(report)) == {"obs/obs_0001.parquet"}


def test_obs_shard_missing_and_not_parquet(ds):
    (ds / "obs" / "obs_0000.parquet").unlink()
    (ds / "obs" / "obs_0002.parquet").write_bytes(b"PAR1 nonsense")
    report = validate_dataset(ds)
    _find(report, "obs/obs_0000.parquet", "missing")
    _find(report, "obs/obs_0002.parquet", "not a readable parquet file")
    assert report.shards_checked == 2


# ---------------------------------------------------------------------- the report


def test_report_to_dict_is_json(ds):
    (ds / "tiles" / "tile_000004.dct").unlink()
    doc = validate_dataset(ds).to_dict()
    assert json.loads(json.dumps(doc)) == doc
    assert doc["ok"] is False
    assert doc["problems"] == [
        {"object": "tiles/tile_000004.dct", "message": "tile 4 of 5 is missing from the dataset"}
    ]
    assert set(doc) == {
        "path",
        "ok",
        "n_tiles",
        "n_shards",
        "tiles_checked",
        "shards_checked",
        "nnz_checked",
        "bytes_checked",
        "problems",
        "staging",
    }
    assert doc["staging"] == []


def test_problem_str():
    assert str(Problem("tiles/tile_000001.dct", "missing")) == "tiles/tile_000001.dct: missing"
