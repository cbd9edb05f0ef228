"""manifest.json: round trips, every inconsistency rejected with a FormatError naming the field, has_* vs files."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from deltacells import FormatError, Manifest
from deltacells.core import open_dataset
from deltacells.errors import MissingObjectError
from deltacells.format import FORMAT_NAME, FORMAT_VERSION
from deltacells.validate import validate_dataset

REQUIRED = (
    "n_cells",
    "n_genes",
    "tile_size",
    "tile_cells",
    "tile_nnz",
    "tile_bytes",
    "n_chunks",
    "zstd_level",
    "has_gene_order",
    "has_var_names",
    "has_var_table",
    "has_obs",
    "metadata",
)
OBS_FIELDS = ("obs_tiles_per_file", "obs_shard_bytes", "obs_shard_sha256", "obs_fingerprint")
SHA_A = "0123456789abcdef" * 4
SHA_B = "fedcba9876543210" * 4


def base_doc() -> dict[str, Any]:
    """A valid manifest: 25 cells in tiles of 10, 10, 5 over 7 genes (the last tile full: 35 nonzeros)."""
    return {
        "format": "deltacells-dataset",
        "version": 2,
        "n_cells": 25,
        "n_genes": 7,
        "tile_size": 10,
        "tile_cells": [10, 10, 5],
        "tile_nnz": [12, 0, 35],
        "tile_bytes": [300, 200, 400],
        "n_chunks": 8,
        "zstd_level": 19,
        "has_gene_order": True,
        "has_var_names": False,
        "has_var_table": False,
        "has_obs": False,
        "metadata": {"source": "test", "nested": {"a": [1, 2.5, None, "é"]}},
    }


def obs_doc() -> dict[str, Any]:
    """A valid manifest with obs: 3 tiles, 2 per shard, so 2 shards."""
    doc = base_doc()
    doc.update(
        has_obs=True,
        obs_tiles_per_file=2,
        obs_shard_bytes=[1000, 500],
        obs_shard_sha256=[SHA_A, SHA_B],
        obs_fingerprint="0123456789abcdef01234567",
    )
    return doc


# ---------------------------------------------------------------------------------------------- valid manifests


def test_constants():
    assert FORMAT_NAME == "deltacells-dataset"
    assert FORMAT_VERSION == 2


def test_round_trip_dict():
    doc = base_doc()
    m = Manifest.from_dict(copy.deepcopy(doc))
    assert m.to_dict() == doc
    assert list(m.to_dict())[:2] == ["format", "version"]
    assert m.n_cells == 25
    assert m.n_genes == 7
    assert m.tile_size == 10
    assert m.n_tiles == 3
    assert m.nnz == 47
    np.testing.assert_array_equal(m.tile_cells, [10, 10, 5])
    np.testing.assert_array_equal(m.limits, [10, 20, 25])
    np.testing.assert_array_equal(m.starts, [0, 10, 20])
    assert m.has_gene_order
    assert not m.has_var_names
    assert m.n_obs_shards == 0
    assert m.metadata == doc["metadata"]


def test_round_trip_json():
    m = Manifest.from_dict(obs_doc())
    text = m.to_json()
    assert text.endswith("\n")
    assert json.loads(text) == obs_doc()
    again = Manifest.from_json(text)
    assert again.to_dict() == obs_doc()
    assert Manifest.from_json(text.encode()).to_dict() == obs_doc()
    assert again.n_obs_shards == 2
    assert again.obs_shard_sha256 == (SHA_A, SHA_B)
    assert again.obs_tiles_per_file == 2


def test_unknown_keys_are_kept():
    doc = base_doc()
    doc["written_by"] = {"tool": "something", "version": "9"}
    m = Manifest.from_dict(doc)
    assert m.extra == {"written_by": {"tool": "something", "version": "9"}}
    assert m.to_dict() == doc


def test_zero_cell_manifest_is_valid():
    doc = base_doc()
    doc.update(n_cells=0, tile_cells=[], tile_nnz=[], tile_bytes=[])
    m = Manifest.from_dict(doc)
    assert m.n_tiles == 0
    assert m.nnz == 0
    assert m.limits.shape == (0,)
    assert m.to_dict() == doc


def test_zero_cell_manifest_with_obs_is_valid():
    doc = base_doc()
    doc.update(
        n_cells=0,
        tile_cells=[],
        tile_nnz=[],
        tile_bytes=[],
        has_obs=True,
        obs_tiles_per_file=1000,
        obs_shard_bytes=[],
        obs_shard_sha256=[],
        obs_fingerprint="a" * 24,
    )
    assert Manifest.from_dict(doc).n_obs_shards == 0


def test_single_partial_tile_and_boundaries_are_valid():
    doc = base_doc()
    doc.update(n_cells=3, n_genes=2**31, tile_cells=[3], tile_nnz=[3 * 2**31], tile_bytes=[64])
    m = Manifest.from_dict(doc)
    assert m.n_genes == 2**31
    assert m.tile_nnz[0] == 3 * 2**31


# ---------------------------------------------------------------------------------------------- rejections


def _set(**changes: Any):
    def mutate(doc: dict[str, Any]) -> None:
        doc.update(changes)

    return mutate


def _drop(name: str):
    def mutate(doc: dict[str, Any]) -> None:
        del doc[name]

    return mutate


BAD = [
    # format and version
    pytest.param(base_doc, _set(format="something-else"), "format", id="format-other"),
    pytest.param(base_doc, _set(format="DELTACELLS-DATASET"), "format", id="format-case"),
    pytest.param(base_doc, _drop("format"), "format", id="format-missing"),
    pytest.param(base_doc, _set(version=1), "version", id="version-1"),
    pytest.param(base_doc, _set(version=3), "version", id="version-3"),
    pytest.param(base_doc, _set(version="2"), "version", id="version-str"),
    pytest.param(base_doc, _set(version=True), "version", id="version-true"),
    pytest.param(base_doc, _set(version=None), "version", id="version-null"),
    pytest.param(base_doc, _drop("version"), "version", id="version-missing"),
    # missing required fields
    *[pytest.param(base_doc, _drop(name), rf"\b{name}\b", id=f"missing-{name}") for name in REQUIRED],
    # wrongly typed or out of range scalars
    pytest.param(base_doc, _set(n_cells="25"), "n_cells", id="n_cells-str"),
    pytest.param(base_doc, _set(n_cells=25.0), "n_cells", id="n_cells-float"),
    pytest.param(base_doc, _set(n_cells=-1), "n_cells", id="n_cells-negative"),
    pytest.param(base_doc, _set(n_genes=0), "n_genes", id="n_genes-0"),
    pytest.param(base_doc, _set(n_genes=2**31 + 1), "n_genes", id="n_genes-too-big"),
    pytest.param(base_doc, _set(n_genes=True), "n_genes", id="n_genes-bool"),
    pytest.param(base_doc, _set(tile_size=0), "tile_size", id="tile_size-0"),
    pytest.param(base_doc, _set(tile_size=10.0), "tile_size", id="tile_size-float"),
    pytest.param(base_doc, _set(n_chunks=-1), "n_chunks", id="n_chunks-negative"),
    pytest.param(base_doc, _set(n_chunks=None), "n_chunks", id="n_chunks-null"),
    pytest.param(base_doc, _set(zstd_level="19"), "zstd_level", id="zstd_level-str"),
    pytest.param(base_doc, _set(has_gene_order=1), "has_gene_order", id="has_gene_order-int"),
    pytest.param(base_doc, _set(has_var_names=0), "has_var_names", id="has_var_names-int"),
    pytest.param(base_doc, _set(has_var_table="false"), "has_var_table", id="has_var_table-str"),
    pytest.param(base_doc, _set(has_obs=None), "has_obs", id="has_obs-null"),
    pytest.param(base_doc, _set(metadata=[]), "metadata", id="metadata-list"),
    pytest.param(base_doc, _set(metadata="x"), "metadata", id="metadata-str"),
    pytest.param(base_doc, _set(metadata=None), "metadata", id="metadata-null"),
    # per-tile lists: type, length, entries
    pytest.param(base_doc, _set(tile_cells="10,10,5"), "tile_cells", id="tile_cells-str"),
    pytest.param(base_doc, _set(tile_cells={"0": 10}), "tile_cells", id="tile_cells-object"),
    pytest.param(base_doc, _set(tile_nnz=[12, 0]), "tile_nnz", id="tile_nnz-short"),
    pytest.param(base_doc, _set(tile_nnz=[12, 0, 35, 0]), "tile_nnz", id="tile_nnz-long"),
    pytest.param(base_doc, _set(tile_bytes=[300, 200]), "tile_bytes", id="tile_bytes-short"),
    pytest.param(base_doc, _set(tile_bytes=[300, 200, 400, 1]), "tile_bytes", id="tile_bytes-long"),
    pytest.param(base_doc, _set(tile_cells=[10, 10.0, 5]), "tile_cells", id="tile_cells-float-entry"),
    pytest.param(base_doc, _set(tile_cells=[10, "10", 5]), "tile_cells", id="tile_cells-str-entry"),
    pytest.param(base_doc, _set(tile_cells=[10, 10, None]), "tile_cells", id="tile_cells-null-entry"),
    pytest.param(base_doc, _set(tile_nnz=[12, False, 35]), "tile_nnz", id="tile_nnz-bool-entry"),
    pytest.param(base_doc, _set(tile_bytes=[300, True, 400]), "tile_bytes", id="tile_bytes-bool-entry"),
    pytest.param(
        base_doc,
        _set(tile_cells=[True] * 25, tile_nnz=[0] * 25, tile_bytes=[64] * 25, tile_size=1),
        "tile_cells",
        id="tile_cells-bools",
    ),
    pytest.param(base_doc, _set(tile_nnz=[12, -1, 35]), r"tile_nnz\[1\]", id="tile_nnz-negative"),
    pytest.param(base_doc, _set(tile_bytes=[300, 63, 400]), r"tile_bytes\[1\]", id="tile_bytes-below-header"),
    pytest.param(base_doc, _set(tile_bytes=[300, 2**63, 400]), r"tile_bytes\[1\]", id="tile_bytes-2^63"),
    pytest.param(base_doc, _set(tile_cells=[10, -10, 25]), r"tile_cells", id="tile_cells-negative"),
    # counts that disagree
    pytest.param(base_doc, _set(n_cells=26), "n_cells", id="sum-below-n_cells"),
    pytest.param(base_doc, _set(n_cells=24), "n_cells", id="sum-above-n_cells"),
    pytest.param(base_doc, _set(tile_cells=[10, 9, 6]), r"tile_cells\[1\]", id="non-last-tile-short"),
    pytest.param(base_doc, _set(tile_cells=[11, 9, 5]), r"tile_cells\[0\]", id="non-last-tile-long"),
    pytest.param(
        base_doc,
        _set(n_cells=30, tile_cells=[10, 10, 10, 0], tile_nnz=[12, 0, 35, 0], tile_bytes=[300, 200, 400, 64]),
        r"tile_cells\[3\]",
        id="last-tile-empty",
    ),
    pytest.param(
        base_doc,
        _set(tile_cells=[10, 15], tile_nnz=[12, 0], tile_bytes=[300, 200]),
        r"tile_cells\[1\]",
        id="last-tile-above-tile_size",
    ),
    pytest.param(
        base_doc,
        _set(tile_cells=[25], tile_nnz=[12], tile_bytes=[300]),
        r"tile_cells\[0\]",
        id="only-tile-above-tile_size",
    ),
    pytest.param(
        base_doc,
        _set(n_cells=0, tile_cells=[0], tile_nnz=[0], tile_bytes=[64]),
        r"tile_cells\[0\]",
        id="zero-cells-one-empty-tile",
    ),
    pytest.param(base_doc, _set(tile_nnz=[71, 0, 35]), r"tile_nnz\[0\]", id="tile_nnz-above-cells-x-genes"),
    pytest.param(base_doc, _set(tile_nnz=[12, 0, 36]), r"tile_nnz\[2\]", id="tile_nnz-last-above-cells-x-genes"),
    # obs fields
    *[pytest.param(obs_doc, _drop(name), name, id=f"obs-missing-{name}") for name in OBS_FIELDS],
    pytest.param(obs_doc, _set(obs_tiles_per_file=0), "obs_tiles_per_file", id="obs_tiles_per_file-0"),
    pytest.param(obs_doc, _set(obs_tiles_per_file=2.0), "obs_tiles_per_file", id="obs_tiles_per_file-float"),
    pytest.param(obs_doc, _set(obs_tiles_per_file=1), "obs_shard_bytes", id="obs-1-per-file-needs-3-shards"),
    pytest.param(obs_doc, _set(obs_tiles_per_file=3), "obs_shard_bytes", id="obs-3-per-file-needs-1-shard"),
    pytest.param(obs_doc, _set(obs_shard_bytes=[1000]), "obs_shard_bytes", id="obs_shard_bytes-short"),
    pytest.param(obs_doc, _set(obs_shard_bytes=[1000, 0]), r"obs_shard_bytes\[1\]", id="obs_shard_bytes-0"),
    pytest.param(obs_doc, _set(obs_shard_sha256=[SHA_A]), "obs_shard_sha256", id="obs_shard_sha256-short"),
    pytest.param(obs_doc, _set(obs_shard_sha256=[SHA_A, SHA_B, SHA_A]), "obs_shard_sha256", id="sha256-long"),
    pytest.param(obs_doc, _set(obs_shard_sha256=SHA_A), "obs_shard_sha256", id="obs_shard_sha256-str"),
    pytest.param(obs_doc, _set(obs_shard_sha256=[SHA_A, SHA_B.upper()]), r"obs_shard_sha256\[1\]", id="sha256-upper"),
    pytest.param(obs_doc, _set(obs_shard_sha256=[SHA_A[:-1], SHA_B]), r"obs_shard_sha256\[0\]", id="sha256-63"),
    pytest.param(obs_doc, _set(obs_shard_sha256=[SHA_A + "0", SHA_B]), r"obs_shard_sha256\[0\]", id="sha256-65"),
    pytest.param(obs_doc, _set(obs_shard_sha256=[SHA_A, "g" * 64]), r"obs_shard_sha256\[1\]", id="sha256-not-hex"),
    pytest.param(obs_doc, _set(obs_shard_sha256=[SHA_A, None]), r"obs_shard_sha256\[1\]", id="sha256-null"),
    pytest.param(obs_doc, _set(obs_fingerprint="0" * 23), "obs_fingerprint", id="fingerprint-23"),
    pytest.param(obs_doc, _set(obs_fingerprint="0" * 25), "obs_fingerprint", id="fingerprint-25"),
    pytest.param(obs_doc, _set(obs_fingerprint="ABCDEF" * 4), "obs_fingerprint", id="fingerprint-upper"),
    pytest.param(obs_doc, _set(obs_fingerprint="z" * 24), "obs_fingerprint", id="fingerprint-not-hex"),
    pytest.param(obs_doc, _set(obs_fingerprint=None), "obs_fingerprint", id="fingerprint-null"),
    pytest.param(obs_doc, _set(obs_fingerprint=0), "obs_fingerprint", id="fingerprint-int"),
]


@pytest.mark.parametrize(("make", "mutate", "field"), BAD)
def test_inconsistent_manifest_rejected(make, mutate, field):
    doc = make()
    Manifest.from_dict(copy.deepcopy(doc))  # the unmodified document is valid
    mutate(doc)
    with pytest.raises(FormatError, match=field) as info:
        Manifest.from_dict(doc, where="somewhere/manifest.json")
    assert str(info.value).startswith("somewhere/manifest.json: ")
    with pytest.raises(FormatError, match=field):
        Manifest.from_json(json.dumps(doc))


def test_version_float_rejected():
    doc = base_doc()
    doc["version"] = 2.0
    with pytest.raises(FormatError, match="version"):
        Manifest.from_dict(doc)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="empty"),
        pytest.param("{", id="truncated"),
        pytest.param("{'format': 'deltacells-dataset'}", id="single-quotes"),
        pytest.param(b"\xff\xfe{}", id="not-utf8"),
        pytest.param("deltacells", id="word"),
    ],
)
def test_non_json_rejected(text):
    with pytest.raises(FormatError, match="not valid JSON"):
        Manifest.from_json(text, where="x/manifest.json")


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        pytest.param("[]", "list", id="list"),
        pytest.param("2", "int", id="number"),
        pytest.param("null", "NoneType", id="null"),
        pytest.param('"deltacells-dataset"', "str", id="string"),
    ],
)
def test_json_not_an_object_rejected(text, kind):
    with pytest.raises(FormatError, match=rf"JSON object.*{kind}"):
        Manifest.from_json(text)


def test_truncated_real_manifest_rejected():
    text = Manifest.from_dict(base_doc()).to_json()
    with pytest.raises(FormatError, match="not valid JSON"):
        Manifest.from_json(text[: len(text) // 2])


# ---------------------------------------------------------------------------------------------- has_* vs files


@pytest.fixture
def flagged_dataset(write_dataset, make_counts) -> Path:
    """A small dataset with gene_order.npy and var_names.txt (no var table, no obs)."""
    counts = make_counts(12, 6, seed=3)
    order = np.array([5, 0, 4, 1, 3, 2])
    path = write_dataset(counts, tile_size=5, gene_order=order, var_names=[f"g{i}" for i in range(6)])
    return Path(path)


def _edit_manifest(path: Path, **changes: Any) -> None:
    doc = json.loads((path / "manifest.json").read_text())
    doc.update(changes)
    (path / "manifest.json").write_text(json.dumps(doc))


def test_flagged_dataset_opens(flagged_dataset):
    ds = open_dataset(flagged_dataset)
    m = ds.manifest
    assert (m.has_gene_order, m.has_var_names, m.has_var_table, m.has_obs) == (True, True, False, False)


@pytest.mark.parametrize(
    ("changes", "remove", "create", "flag", "state"),
    [
        pytest.param({"has_gene_order": False}, None, None, "has_gene_order", "present", id="gene_order-unflagged"),
        pytest.param({}, "gene_order.npy", None, "has_gene_order", "missing", id="gene_order-deleted"),
        pytest.param({"has_var_names": False}, None, None, "has_var_names", "present", id="var_names-unflagged"),
        pytest.param({}, "var_names.txt", None, "has_var_names", "missing", id="var_names-deleted"),
        pytest.param({"has_var_table": True}, None, None, "has_var_table", "missing", id="var_table-flagged"),
        pytest.param({}, None, "var.parquet", "has_var_table", "present", id="var_table-unflagged"),
        pytest.param(
            {
                "has_obs": True,
                "obs_tiles_per_file": 1000,
                "obs_shard_bytes": [10],
                "obs_shard_sha256": [SHA_A],
                "obs_fingerprint": "b" * 24,
            },
            None,
            None,
            "has_obs",
            "missing",
            id="obs-flagged",
        ),
        pytest.param({}, None, "obs/schema.json", "has_obs", "present", id="obs-unflagged"),
    ],
)
def test_flags_must_match_files(flagged_dataset, changes, remove, create, flag, state):
    if changes:
        _edit_manifest(flagged_dataset, **changes)
    if remove:
        (flagged_dataset / remove).unlink()
    if create:
        (flagged_dataset / create).parent.mkdir(exist_ok=True)
        (flagged_dataset / create).write_bytes(b"{}")
    # Opening lists nothing (a LIST per 1,000 objects on a bucket): validation compares the flags with the files.
    open_dataset(flagged_dataset)
    report = validate_dataset(flagged_dataset)
    assert any(re.search(rf"{state}, but manifest\.json field {flag} is \w+", p.message) for p in report.problems), str(
        report
    )


@pytest.mark.parametrize(
    ("remove", "read"),
    [
        pytest.param("gene_order.npy", lambda ds: ds.gene_permutation(), id="gene_order"),
        pytest.param("var_names.txt", lambda ds: ds.var_names(), id="var_names"),
        pytest.param("tiles/tile_000000.dct", lambda ds: ds.read_rows(slice(0, 1)), id="tile"),
    ],
)
def test_promised_object_missing_is_named_when_read(flagged_dataset, remove, read):
    """An object the manifest promises and that is gone: opening succeeds, reading it names it."""
    (flagged_dataset / remove).unlink()
    ds = open_dataset(flagged_dataset)
    with pytest.raises(MissingObjectError, match=re.escape(remove.rsplit("/", 1)[-1])):
        read(ds)


def test_obs_flag_without_obs_fields_rejected(flagged_dataset):
    _edit_manifest(flagged_dataset, has_obs=True)
    with pytest.raises(FormatError, match="obs_tiles_per_file"):
        open_dataset(flagged_dataset)


def test_manifest_errors_name_the_dataset(flagged_dataset):
    _edit_manifest(flagged_dataset, n_cells=13)
    with pytest.raises(FormatError, match=rf"{flagged_dataset}/manifest\.json: .*n_cells"):
        open_dataset(flagged_dataset)


def test_corrupt_manifest_json_rejected(flagged_dataset):
    (flagged_dataset / "manifest.json").write_bytes(b'{"format": "deltacells-dataset", "ver')
    with pytest.raises(FormatError, match="not valid JSON"):
        open_dataset(flagged_dataset)
