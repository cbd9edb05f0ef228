"""Fuzzing of the decoders (``fuzz/deltacells_fuzz``): its oracles, a short run, and the regression corpus.

* the oracles accept the seeds and catch decoders that misbehave (so a clean fuzzing run means something);
* a bounded run (random engine, a fixed seed, about 20 s) must find nothing that is not already a known,
  reported bug in ``corpus/``; it must also reach the deep checks of the decoder (the kernels' errors),
  which it can only do because it makes the CRC right on half of its inputs;
* every input in ``corpus/`` is replayed: each one found a bug (all fixed since: they are regression tests;
  an input of a bug still open would be a strict expected failure naming the bug, see ``OPEN_BUGS``);
* minimal hand-made reproducers of the same bugs.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from reliability_lib import FUZZ_DIR, FUZZ_SCRIPT

import deltacells
from deltacells import FormatError, Manifest
from deltacells.codec import DecodedTile
from deltacells.format import ObsSchema

CORPUS = Path(__file__).parent / "corpus"

#: Corpus inputs of bugs still open in src: replayed as strict expected failures naming the bug. (None now:
#: when fuzzing finds a new one, add its input to corpus/ and its signature here, with the reason.)
OPEN_BUGS: dict[str, str] = {}

#: Corpus inputs of bugs the fuzzer found and src has fixed since (commits ffd61c1, c2c022d): regression tests.
FIXED_BUGS: dict[str, str] = {
    "manifest-property_manifest_limits": "n_cells was unbounded: tile_cells adding up to >= 2^63 made limits wrap",
    "manifest-ValueError_from_json": "Manifest.from_json let json.loads' ValueError (> 4300 digits) escape",
    "manifest-RecursionError_from_json": "Manifest.from_json let RecursionError (deep nesting) escape",
    "manifest-property_manifest_n_cells_sum": "tile_cells summed in int64 wrapped around to n_cells",
    "schema-ValueError_from_json": "ObsSchema.from_json let json.loads' ValueError (> 4300 digits) escape",
    "schema-RecursionError_from_json": "ObsSchema.from_json let RecursionError (deep nesting) escape",
    "schema-TypeError__check_arrow_type": "ObsSchema.from_json raised TypeError for a list or object arrow_type",
    "schema-UnicodeEncodeError_arrow_schema": "ObsSchema.from_json accepted a column name with a lone surrogate",
}


def load_fuzzer() -> ModuleType:
    """The package ``deltacells_fuzz``, imported from ``fuzz/`` (which the script has on ``sys.path`` too)."""
    if str(FUZZ_DIR) not in sys.path:
        sys.path.insert(0, str(FUZZ_DIR))
    return importlib.import_module("deltacells_fuzz")


@pytest.fixture(scope="module")
def fuzz() -> ModuleType:
    return load_fuzzer()


# ---------------------------------------------------------------------------------------------- the oracles


def test_seeds_pass_the_oracles(fuzz: ModuleType) -> None:
    for target in ("tile", "manifest", "schema"):
        oracle = fuzz.make_oracle(target)
        seeds = fuzz.seeds_for(target)
        assert len(seeds) >= 4
        fuzz.warm_up(oracle, seeds)  # raises if a seed fails its oracle
    tile = fuzz.make_oracle("tile")
    for blob in fuzz.seeds_for("tile"):
        assert tile(blob) == "ok", "every seed tile is valid"


DECODE = deltacells.decode_tile  # the real one (the tests below replace deltacells.decode_tile)


def _valid_tile() -> bytes:
    indptr = np.array([0, 2, 2, 5])
    return deltacells.encode_tile(indptr, np.array([1, 7, 0, 3, 9]), np.array([1, 2, 70_000, 4, 5]), n_genes=10)


def _bad_indices(blob: bytes, **_: Any) -> DecodedTile:
    tile = DECODE(blob)
    indices = tile.indices.copy()
    indices[0] = tile.n_genes
    return DecodedTile(tile.indptr, indices, tile.data, tile.n_genes)


def _unsorted(blob: bytes, **_: Any) -> DecodedTile:
    tile = DECODE(blob)
    return DecodedTile(tile.indptr, tile.indices[[1, 0, 2, 3, 4]], tile.data, tile.n_genes)


def _zero_count(blob: bytes, **_: Any) -> DecodedTile:
    tile = DECODE(blob)
    return DecodedTile(tile.indptr, tile.indices, tile.data * 0, tile.n_genes, tile.inexact_in_float32)


def _greedy(blob: bytes, **_: Any) -> DecodedTile:
    scratch = np.ones(16 * 2**20, dtype=np.uint8)  # allocated on the strength of nothing in the blob
    assert scratch.sum()
    return DECODE(blob)


def _key_error(blob: bytes, **_: Any) -> DecodedTile:
    missing = "n_cells"
    raise KeyError(missing)


def _anonymous_error(blob: bytes, **_: Any) -> DecodedTile:
    anonymous = "header field n_genes is 0"  # names no object
    raise FormatError(anonymous)


@pytest.mark.parametrize(
    ("decoder", "expected"),
    [
        (_bad_indices, "csr-index-range"),
        (_unsorted, "csr-index-order"),
        (_zero_count, "csr-counts"),
        (_greedy, "allocation"),
        (_anonymous_error, "message"),
        (_key_error, KeyError),
    ],
)
def test_tile_oracle_catches_broken_decoders(
    fuzz: ModuleType, monkeypatch: pytest.MonkeyPatch, decoder: Any, expected: Any
) -> None:
    oracle = fuzz.make_oracle("tile")
    blob = _valid_tile()
    assert oracle(blob) == "ok"
    monkeypatch.setattr(deltacells, "decode_tile", decoder)
    kind = expected if isinstance(expected, type) else fuzz.PropertyViolation
    with pytest.raises(kind) as info:
        oracle(blob)
    if not isinstance(expected, type):
        assert info.value.kind.startswith(expected)


def test_allocation_bound_is_tight(fuzz: ModuleType) -> None:
    """A large valid tile uses most of its bound: the bound leaves no room for a hidden extra copy."""
    n = 4 * 2**20
    blob = deltacells.encode_tile(np.array([0, n]), np.arange(n), np.ones(n, dtype=np.int64), 2**31, level=1)
    oracle = fuzz.make_oracle("tile")
    oracle.max_peak_ratio = 0.0
    assert oracle(blob) == "ok"
    assert 0.9 <= oracle.max_peak_ratio <= 1.0, oracle.max_peak_ratio


def test_manifest_and_schema_oracles_catch_inconsistent_results(
    fuzz: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    manifest = fuzz.make_oracle("manifest")
    good = fuzz.manifest_seeds()[-1]
    assert manifest(good) == "ok"
    real = Manifest.from_json

    def lenient(text: Any, **kwargs: Any) -> Manifest:
        m = real(text, **kwargs)
        object.__setattr__(m, "n_cells", m.n_cells + 1)
        return m

    monkeypatch.setattr(Manifest, "from_json", lenient)
    with pytest.raises(fuzz.PropertyViolation, match="n_cells"):
        manifest(good)
    schema = fuzz.make_oracle("schema")
    monkeypatch.setattr(ObsSchema, "from_json", classmethod(lambda cls, text, **_: 42))
    with pytest.raises(AttributeError):
        schema(fuzz.schema_seeds()[-1])


# ---------------------------------------------------------------------------------------------- a short run


@pytest.mark.slow
def test_short_fuzzing_run(tmp_path: Path) -> None:
    """~16 s of fuzzing on two workers per target; nothing new may turn up, and the deep checks are reached."""
    report = tmp_path / "report.json"
    command = [
        sys.executable, str(FUZZ_SCRIPT), "--engine", "random", "--seconds", "16", "--jobs", "2",
        "--seed", "1", "--min-execs", "1200", "--corpus-out", str(tmp_path / "found"), "--json", str(report),
    ]  # fmt: skip
    run = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, f"fuzzing found something new (inputs in {tmp_path / 'found'}):\n{run.stdout}"
    stats = json.loads(report.read_text())["targets"]
    tile = stats["tile"]
    # at least 1200 inputs per worker whatever the machine (and the Python): the first 2 x 1200 of seed 1 are
    # the same everywhere, and they reach every check below (the rarest three times) and 48 outcomes
    assert tile["execs"] >= 2400 and stats["manifest"]["execs"] >= 2400 and stats["schema"]["execs"] >= 2400
    outcomes = " | ".join(tile["outcomes"])
    for check in (
        "CRC-#",
        "header field n_chunks",
        "chunks must be contiguous",
        "the zstd frame declares",
        "a decoded gene index reaches n_genes",
        "a stored count of #",
        "exception position",
    ):
        assert check in outcomes, f"the fuzzer never reached the check {check!r}"
    assert len(tile["outcomes"]) >= 40
    assert tile["max_peak_to_bound"] <= 1.0
    print(run.stdout)


# ---------------------------------------------------------------------------------------------- the corpus


def _corpus_params() -> list[Any]:
    params = []
    for path in sorted(CORPUS.glob("*")):
        bug = OPEN_BUGS.get(path.name.rsplit("-", 1)[0])
        marks = [pytest.mark.xfail(strict=True, reason=bug)] if bug else []
        params.append(pytest.param(path.name, marks=marks, id=path.name))
    return params


@pytest.fixture(scope="module")
def replayed(fuzz: ModuleType) -> dict[str, dict[str, Any]]:
    """Every corpus input through its oracle, in a subprocess (with numba's bounds checks, as fuzzed)."""
    files = sorted(str(p) for p in CORPUS.glob("*"))
    run = subprocess.run(
        [sys.executable, str(FUZZ_SCRIPT), "--replay", *files],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=fuzz.target_environment("tile"),
    )
    assert run.stdout.strip().startswith("["), f"the replay crashed ({run.returncode}):\n{run.stderr[-3000:]}"
    return {r["file"]: r for r in json.loads(run.stdout)}


def test_corpus_files_are_named_for_known_bugs() -> None:
    names = {p.name.rsplit("-", 1)[0] for p in CORPUS.glob("*")}
    assert names == set(OPEN_BUGS) | set(FIXED_BUGS), "every corpus input names its bug (and the other way round)"


@pytest.mark.parametrize("name", _corpus_params())
def test_corpus_input(replayed: dict[str, dict[str, Any]], name: str) -> None:
    result = replayed[name]
    assert result["ok"], f"{name}: {result['outcome']}"


# ---------------------------------------------------------------------------------------------- minimal reproducers


def _manifest(**fields: Any) -> str:
    doc = {
        "format": "deltacells-dataset", "version": 2, "n_cells": 3, "n_genes": 5, "tile_size": 2,
        "tile_cells": [2, 1], "tile_nnz": [0, 0], "tile_bytes": [64, 64], "n_chunks": 1, "zstd_level": 1,
        "has_gene_order": False, "has_var_names": False, "has_var_table": False, "has_obs": False, "metadata": {},
    }  # fmt: skip
    return json.dumps({**doc, **fields})


def _schema(column: dict[str, Any]) -> str:
    return json.dumps({"format": "deltacells-obs", "version": 1, "columns": [column]})


BIG = 2**63 - 1


@pytest.mark.parametrize(
    ("parse", "text"),
    [
        pytest.param(Manifest.from_json, _manifest()[:-1] + ', "x": 1' + "0" * 4300 + "}", id="manifest-long-int"),
        pytest.param(Manifest.from_json, "[" * 100_000, id="manifest-deep"),
        pytest.param(
            Manifest.from_json,
            _manifest(n_cells=0, tile_size=BIG, tile_cells=[BIG, BIG, 2], tile_nnz=[0] * 3, tile_bytes=[64] * 3),
            id="manifest-int64-wrap",
        ),
        pytest.param(
            ObsSchema.from_json, '{"format": "deltacells-obs", "version": 1' + "0" * 4300 + "}", id="schema-long-int"
        ),
        pytest.param(ObsSchema.from_json, "[" * 100_000, id="schema-deep"),
        pytest.param(
            ObsSchema.from_json,
            _schema({"name": "n", "kind": "numeric", "arrow_type": ["int64"], "categories": None}),
            id="schema-unhashable-type",
        ),
        pytest.param(
            ObsSchema.from_json,
            _schema({"name": "c", "kind": "category", "arrow_type": {}, "categories": []}),
            id="schema-unhashable-code-type",
        ),
        pytest.param(
            ObsSchema.from_json,
            _schema({"name": "\ud800", "kind": "bool", "arrow_type": "bool", "categories": None}),
            id="schema-lone-surrogate",
        ),
        pytest.param(
            Manifest.from_json,
            _manifest(
                n_cells=2**63 + 1, tile_size=2**62, tile_cells=[2**62, 2**62, 1], tile_nnz=[0] * 3, tile_bytes=[64] * 3
            ),
            id="manifest-n_cells-beyond-int64",
        ),
    ],
)
def test_minimal_reproducer(parse: Any, text: str) -> None:
    """Each raises FormatError, or gives a result that is consistent and usable."""
    try:
        result = parse(text)
    except FormatError:
        return
    if isinstance(result, Manifest):
        cells = [int(c) for c in result.tile_cells]
        assert [int(x) for x in result.limits] == [sum(cells[: i + 1]) for i in range(len(cells))]
        assert result.n_cells == sum(cells)
    else:
        result.arrow_schema()
