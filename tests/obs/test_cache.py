"""The local obs cache: where it lives, what it holds, integrity checks, damaged files, locking, pickling, errors."""

from __future__ import annotations

import itertools
import json
import os
import pickle
import threading
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from filelock import FileLock
from obs_testlib import CountingStore, ObsDataset, manifest_for, refresh_manifest, sample_frame

from deltacells import FormatError
from deltacells.errors import MissingObjectError, ObsCacheError
from deltacells.obs import ObsStore, column_file_name, resolve_cache_dir

TILE = 4  # sample_frame(30) in tiles of 4: 8 tiles
PER_FILE = 3  # 3 shards
#: The shards; each is so small that the one ranged read of its tail (for the footer) holds it whole.
SHARDS = [f"obs/obs_{i:04d}.parquet" for i in range(3)]


@pytest.fixture
def dataset(write_obs_dataset: Callable[..., ObsDataset]) -> ObsDataset:
    return write_obs_dataset(sample_frame(30), TILE, obs_tiles_per_file=PER_FILE)


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "cache"


def _file(obs: ObsStore, name: str) -> Path:
    return obs.directory / column_file_name(name)


# ---------------------------------------------------------------------- layout of the cache


def test_cache_layout_and_files(dataset: ObsDataset, cache: Path) -> None:
    obs = dataset.open(cache)
    obs.localize(["cell_type", "pct"])
    directory = cache / dataset.manifest.obs_fingerprint / "obs"
    assert obs.directory == directory
    assert {p.name for p in directory.glob("*.arrow")} == {"cell_type.arrow", "pct.arrow"}
    assert not list(directory.glob("*.tmp"))
    with pa.memory_map(str(directory / "cell_type.arrow")) as source:
        reader = pa.ipc.open_file(source)
        assert reader.schema.names == ["cell_type"] and reader.schema.field(0).type == pa.int8()  # the codes
        assert reader.num_record_batches == dataset.manifest.n_tiles
        rows = [reader.get_batch(i).num_rows for i in range(reader.num_record_batches)]
        assert rows == dataset.tile_cells.tolist()
    verified = json.loads((directory / "verified.json").read_text())
    assert verified["shards"] == {str(i): sha for i, sha in enumerate(dataset.manifest.obs_shard_sha256)}


def test_a_shard_in_memory_is_read_in_one_call_not_a_row_group_at_a_time(
    dataset: ObsDataset, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    row_group_reads: list[int] = []
    read_row_group = pq.ParquetFile.read_row_group

    def counted(self: pq.ParquetFile, i: int, *args: object, **kwargs: object) -> pa.Table:
        row_group_reads.append(i)
        return read_row_group(self, i, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", counted)
    obs = dataset.open(cache)
    frame = obs.to_dataframe()
    assert row_group_reads == []
    pd.testing.assert_frame_equal(frame, dataset.frame)
    with pa.memory_map(str(_file(obs, "cell_type"))) as source:  # still one record batch per tile
        reader = pa.ipc.open_file(source)
        rows = [reader.get_batch(i).num_rows for i in range(reader.num_record_batches)]
    assert rows == dataset.tile_cells.tolist()


def test_column_file_names() -> None:
    assert column_file_name("a/b") == "a%2Fb.arrow"
    assert column_file_name("x y") == "x%20y.arrow"
    assert column_file_name("%") == "%25.arrow"
    assert column_file_name("ü") == f"{urllib.parse.quote('ü', safe='')}.arrow" == "%C3%BC.arrow"
    long = column_file_name("n" * 300)
    assert len(long) < 255 and long != column_file_name("n" * 301)


def test_second_reader_reads_nothing_from_the_store(dataset: ObsDataset, cache: Path) -> None:
    first = dataset.open(cache)
    frame = first.to_dataframe()
    assert first.store.shard_reads() == dataset.manifest.n_obs_shards  # each shard read whole, once
    second = dataset.open(cache)
    pd.testing.assert_frame_equal(second.to_dataframe(), frame)
    assert second.store.reads == {} and second.store.ranged == {}, "not even obs/schema.json (kept in the cache)"


def test_verified_shards_are_not_read_whole_again(dataset: ObsDataset, cache: Path) -> None:
    first = dataset.open(cache)
    first.localize(["n_counts"])
    assert first.store.shard_reads() == 3 and first.store.ranged == {}
    second = dataset.open(cache)
    pd.testing.assert_series_equal(second.read_column("pct"), dataset.frame["pct"])
    assert second.store.shard_reads() == 0, "verified.json says the shards were checked"
    assert second.store.ranged == dict.fromkeys(SHARDS, 1)  # one ranged read per shard (pct and _index)
    # without the record, shards are checked again (read whole once each)
    (second.directory / "verified.json").write_text("{not json")
    third = dataset.open(cache)
    third.localize(["flag"])
    assert third.store.shard_reads() == 3 and third.store.ranged == {}
    assert json.loads((third.directory / "verified.json").read_text())["shards"].keys() == {"0", "1", "2"}


def test_same_store_object_localizes_later_columns_with_ranged_reads(dataset: ObsDataset, cache: Path) -> None:
    obs = dataset.open(cache)
    obs.localize("note")
    obs.localize(["note"])  # already there: nothing happens
    assert obs.store.shard_reads() == 3 and obs.store.ranged == {}
    obs.localize(["flag", "pct"])
    assert obs.store.shard_reads() == 3 and obs.store.ranged == dict.fromkeys(SHARDS, 1)


def test_verify_false_never_reads_whole_shards(dataset: ObsDataset, cache: Path) -> None:
    obs = dataset.open(cache, verify=False)
    pd.testing.assert_frame_equal(obs.to_dataframe(), dataset.frame)
    assert obs.store.shard_reads() == 0 and obs.store.ranged == dict.fromkeys(SHARDS, 1)
    assert not (obs.directory / "verified.json").exists()


# ---------------------------------------------------------------------- damaged cache files


def _write_ipc(path: Path, batches: list[pa.RecordBatch], schema: pa.Schema) -> None:
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
        for batch in batches:
            writer.write_batch(batch)


def _read_batches(path: Path) -> list[pa.RecordBatch]:
    # from a copy in memory, never a memory map: the file is rewritten in place next
    reader = pa.ipc.open_file(pa.BufferReader(path.read_bytes()))
    return [reader.get_batch(i) for i in range(reader.num_record_batches)]


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _drop_last_batch(path: Path) -> None:
    batches = _read_batches(path)
    _write_ipc(path, batches[:-1], batches[0].schema)


def _one_batch(path: Path) -> None:
    batches = _read_batches(path)
    table = pa.Table.from_batches(batches).combine_chunks()
    _write_ipc(path, table.to_batches(), table.schema)


def _shifted_rows(path: Path) -> None:
    # as many batches and rows as expected, but not tile_cells[t] rows in each batch
    batches = _read_batches(path)
    table = pa.Table.from_batches(batches).combine_chunks()
    sizes = [TILE + 1, *[TILE] * (len(batches) - 3)]
    sizes += [table.num_rows - sum(sizes) - 1, 1]
    offsets = np.cumsum([0, *sizes])
    parts = [table.slice(a, b - a).combine_chunks().to_batches()[0] for a, b in itertools.pairwise(offsets)]
    _write_ipc(path, parts, table.schema)


def _foreign(path: Path) -> None:
    path.write_bytes(b"this is not an arrow file, just something else with the same name")


def _empty(path: Path) -> None:
    path.write_bytes(b"")


def _renamed(path: Path) -> None:
    renamed = [pa.record_batch(b.columns, names=["other"]) for b in _read_batches(path)]
    _write_ipc(path, renamed, renamed[0].schema)


def _retyped(path: Path) -> None:
    cast = [pa.record_batch([b.column(0).cast(pa.int32())], names=b.schema.names) for b in _read_batches(path)]
    _write_ipc(path, cast, cast[0].schema)


DAMAGE = {
    "truncated": _truncate,
    "missing_batch": _drop_last_batch,
    "one_batch": _one_batch,
    "rows_per_batch": _shifted_rows,
    "foreign": _foreign,
    "empty": _empty,
    "renamed": _renamed,
    "retyped": _retyped,
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damaged_cache_file_is_replaced(dataset: ObsDataset, cache: Path, damage: str) -> None:
    column = "cell_type"
    first = dataset.open(cache)
    first.localize([column])
    path = _file(first, column)
    good = path.read_bytes()
    DAMAGE[damage](path)
    assert path.read_bytes() != good
    second = dataset.open(cache)
    pd.testing.assert_series_equal(second.read_column(column), dataset.frame[column], check_exact=True)
    assert path.read_bytes() == good, "the damaged file is deleted and fetched again"
    assert second.store.ranged == dict.fromkeys(SHARDS, 1), "fetched again (by ranged reads: the shards were verified)"
    assert not list(first.directory.glob("*.tmp"))


def test_damage_is_noticed_by_the_same_reader(dataset: ObsDataset, cache: Path) -> None:
    obs = dataset.open(cache)
    before = obs.to_dataframe()
    _truncate(_file(obs, "pct"))
    pd.testing.assert_frame_equal(obs.to_dataframe(), before)


# ---------------------------------------------------------------------- integrity of the shards


def test_tampered_shard_is_refused(dataset: ObsDataset, cache: Path) -> None:
    path = dataset.root / "obs" / "obs_0001.parquet"
    data = bytearray(path.read_bytes())
    data[len(data) // 3] ^= 0xFF
    path.write_bytes(bytes(data))
    obs = dataset.open(cache)
    with pytest.raises(FormatError, match=r"obs_0001\.parquet: SHA-256 is [0-9a-f]{64} but manifest\.json"):
        obs.localize(["n_counts"])
    assert not list(obs.directory.glob("*.arrow")) and not list(obs.directory.glob("*.tmp"))
    assert json.loads((obs.directory / "verified.json").read_text())["shards"] == {
        "0": dataset.manifest.obs_shard_sha256[0]
    }, "the shard checked before the bad one is recorded"


def test_shard_of_the_wrong_size(dataset: ObsDataset, cache: Path) -> None:
    path = dataset.root / "obs" / "obs_0002.parquet"
    path.write_bytes(path.read_bytes() + b"\0")
    with pytest.raises(FormatError, match=r"obs_0002\.parquet: size is \d+ bytes but .*obs_shard_bytes\[2\]"):
        dataset.open(cache).localize(["n_counts"])


def test_missing_shard(dataset: ObsDataset, cache: Path) -> None:
    (dataset.root / "obs" / "obs_0001.parquet").unlink()
    with pytest.raises(MissingObjectError, match=r"obs/obs_0001\.parquet is missing"):
        dataset.open(cache).localize(["n_counts"])
    with pytest.raises(MissingObjectError, match=r"obs/obs_0001\.parquet is missing"):
        dataset.open(cache, verify=False).localize(["n_counts"])


def _rewrite_shard(dataset: ObsDataset, shard: int, change: Callable[[list[pa.Table]], list[pa.Table]]) -> None:
    path = dataset.root / "obs" / f"obs_{shard:04d}.parquet"
    parquet = pq.ParquetFile(path)
    tables = change([parquet.read_row_group(g) for g in range(parquet.num_row_groups)])
    with pq.ParquetWriter(path, tables[0].schema, compression="zstd") as writer:
        for table in tables:
            writer.write_table(table, row_group_size=max(1, len(table)))
    refresh_manifest(dataset)  # so that the SHA-256 passes and the layout check is what fails


def _merge_groups(tables: list[pa.Table]) -> list[pa.Table]:
    return [pa.concat_tables(tables)]


def _move_a_row(tables: list[pa.Table]) -> list[pa.Table]:
    return [tables[0].slice(0, TILE - 1), pa.concat_tables([tables[0].slice(TILE - 1), tables[1]]), *tables[2:]]


def _retype_column(tables: list[pa.Table]) -> list[pa.Table]:
    return [t.set_column(2, "n_counts", t.column("n_counts").cast(pa.int32())) for t in tables]


def _reorder_columns(tables: list[pa.Table]) -> list[pa.Table]:
    return [t.select(["_index", "n_counts", "cell_type", "pct", "flag", "note"]) for t in tables]


def _drop_column(tables: list[pa.Table]) -> list[pa.Table]:
    return [t.drop_columns(["note"]) for t in tables]


def _bad_code(tables: list[pa.Table]) -> list[pa.Table]:
    codes = tables[1].column("cell_type").to_numpy().copy()
    codes[2] = 3  # 3 categories: codes -1 .. 2
    return [tables[0], tables[1].set_column(1, "cell_type", pa.array(codes)), *tables[2:]]


def _negative_code(tables: list[pa.Table]) -> list[pa.Table]:
    codes = tables[0].column("cell_type").to_numpy().copy()
    codes[0] = -2
    return [tables[0].set_column(1, "cell_type", pa.array(codes)), *tables[1:]]


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (_merge_groups, r"obs_0001\.parquet: has 1 row groups, expected 3 \(one per tile, tiles 3 \.\. 5\)"),
        (_move_a_row, r"obs_0001\.parquet: row group 0 \(tile 3\) has 3 rows, but manifest\.json field tile_cells"),
        (_retype_column, r"obs_0001\.parquet: column 'n_counts' has Arrow type int32, but obs/schema\.json says int64"),
        (_reorder_columns, r"obs_0001\.parquet: columns are \['_index', 'n_counts'"),
        (_drop_column, r"obs_0001\.parquet: columns are"),
        (_bad_code, r"obs_0001\.parquet: row group 1 \(tile 4\): column 'cell_type' holds category code 3, outside -1"),
        (_negative_code, r"obs_0001\.parquet: row group 0 \(tile 3\): column 'cell_type' holds category code -2"),
    ],
)
@pytest.mark.parametrize("verify", [True, False])
def test_shard_layout_is_checked(
    dataset: ObsDataset, cache: Path, change: Callable[[list[pa.Table]], list[pa.Table]], match: str, verify: bool
) -> None:
    _rewrite_shard(dataset, 1, change)
    obs = dataset.open(cache, verify=verify)
    with pytest.raises(FormatError, match=match):
        obs.to_dataframe()
    assert not list(obs.directory.glob("*.arrow")) and not list(obs.directory.glob("*.tmp"))


def test_schema_that_does_not_match_the_fingerprint(dataset: ObsDataset, cache: Path) -> None:
    path = dataset.root / "obs" / "schema.json"
    path.write_text(path.read_text() + "\n")  # same schema, other text: the fingerprint no longer matches
    with pytest.raises(FormatError, match=r"obs/schema\.json: the schema text does not match .*obs_fingerprint"):
        _ = dataset.open(cache).columns
    lenient = dataset.open(cache, verify=False)
    assert lenient.columns == list(dataset.frame.columns)
    assert not (lenient.directory / "schema.json").exists(), "a schema that does not match is never cached"


def test_malformed_schema_names_the_file(dataset: ObsDataset, cache: Path) -> None:
    path = dataset.root / "obs" / "schema.json"
    path.write_text(path.read_text().replace('"kind": "numeric"', '"kind": "date"', 1))
    refresh_manifest(dataset)
    with pytest.raises(FormatError, match=r"obs/schema\.json: column 'n_counts': field kind is 'date'"):
        _ = dataset.open(cache).schema


def test_dataset_without_obs(tmp_path: Path) -> None:
    obs = ObsStore(CountingStore(tmp_path), manifest_for(np.array([3]), None), cache_dir=tmp_path / "cache")
    for action in (lambda: obs.schema, lambda: obs.columns, lambda: obs.localize(["a"]), obs.to_dataframe):
        with pytest.raises(FormatError, match="this dataset has no obs"):
            action()


def test_bad_requests(dataset: ObsDataset, cache: Path) -> None:
    obs = dataset.open(cache)
    with pytest.raises(KeyError, match="obs has no column 'nope'; its columns are"):
        obs.localize(["nope"])
    with pytest.raises(KeyError, match="'nope'"):
        obs.read_column("nope")
    with pytest.raises(KeyError, match="'nope'"):
        obs.to_dataframe(["pct", "nope"])
    with pytest.raises(ValueError, match="'pct' is asked for more than once"):
        obs.to_dataframe(["pct", "flag", "pct"])
    with pytest.raises(TypeError, match="list of column names"):
        obs.to_dataframe("pct")
    with pytest.raises(TypeError, match="strings"):
        obs.localize([3])
    assert not list(obs.directory.glob("*.arrow"))


# ---------------------------------------------------------------------- the cache directory


def test_resolve_cache_dir_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("DELTACELLS_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert resolve_cache_dir() == tmp_path / "home" / ".cache" / "deltacells"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")
    assert resolve_cache_dir() == tmp_path / "home" / ".cache" / "deltacells"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert resolve_cache_dir() == tmp_path / "xdg" / "deltacells"
    monkeypatch.setenv("DELTACELLS_CACHE", "")
    assert resolve_cache_dir() == tmp_path / "xdg" / "deltacells"
    monkeypatch.setenv("DELTACELLS_CACHE", str(tmp_path / "env"))
    assert resolve_cache_dir() == tmp_path / "env"
    assert resolve_cache_dir(tmp_path / "arg") == tmp_path / "arg"
    assert resolve_cache_dir("~/c") == tmp_path / "home" / "c"
    monkeypatch.chdir(tmp_path)
    assert resolve_cache_dir("rel") == tmp_path / "rel"


def test_default_cache_dir_comes_from_the_environment(
    dataset: ObsDataset, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DELTACELLS_CACHE", str(tmp_path / "env-cache"))
    obs = ObsStore(dataset.store(), dataset.manifest)
    obs.localize(["flag"])
    assert (tmp_path / "env-cache" / dataset.manifest.obs_fingerprint / "obs" / "flag.arrow").exists()


def _assert_clear_cache_error(info: pytest.ExceptionInfo[BaseException], where: Path) -> None:
    assert isinstance(info.value, OSError)
    message = str(info.value)
    assert str(where) in message and "cache_dir=" in message and "$DELTACELLS_CACHE" in message


def test_cache_dir_that_cannot_be_created(dataset: ObsDataset, tmp_path: Path) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    obs = dataset.open(blocker / "cache")
    assert obs.columns == list(dataset.frame.columns)  # the schema does not need the cache
    with pytest.raises(ObsCacheError) as info:
        obs.to_dataframe()
    _assert_clear_cache_error(info, blocker / "cache")


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root ignores file permissions")
def test_read_only_cache_dir(dataset: ObsDataset, cache: Path) -> None:
    cache.mkdir()
    cache.chmod(0o500)
    try:
        with pytest.raises(ObsCacheError) as info:
            dataset.open(cache).localize(["pct"])
        _assert_clear_cache_error(info, cache)
    finally:
        cache.chmod(0o700)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root ignores file permissions")
def test_read_only_cache_that_holds_the_columns_still_reads(dataset: ObsDataset, cache: Path) -> None:
    dataset.open(cache).localize(["pct", "_index"])
    directories = [cache, *(p for p in cache.rglob("*") if p.is_dir())]
    for directory in directories:
        directory.chmod(0o500)
    try:
        pd.testing.assert_series_equal(dataset.open(cache).read_column("pct"), dataset.frame["pct"])
    finally:
        for directory in directories:
            directory.chmod(0o700)


# ---------------------------------------------------------------------- locking and pickling


def test_localizing_waits_for_the_lock(dataset: ObsDataset, cache: Path) -> None:
    obs = dataset.open(cache)
    obs.directory.mkdir(parents=True)
    done = threading.Event()
    errors: list[BaseException] = []

    def localize() -> None:
        try:
            obs.localize(["note"])
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        done.set()

    with FileLock(str(obs.directory / ".lock")):
        worker = threading.Thread(target=localize)
        worker.start()
        time.sleep(0.3)
        assert not done.is_set(), "localize must wait while another process holds the lock"
        assert not _file(obs, "note").exists()
    worker.join(timeout=30)
    assert done.is_set() and not errors
    assert _file(obs, "note").exists()


def test_pickling(dataset: ObsDataset, cache: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    obs = dataset.open(cache, verify=False)
    before = pickle.dumps(obs)
    frame = obs.to_dataframe()
    after = pickle.dumps(obs)
    assert len(after) == len(before) < 5000, "pickles to store, manifest and options only"
    clone = pickle.loads(after)
    assert isinstance(clone, ObsStore) and clone.verify is False and clone.store.url == obs.store.url
    assert clone.manifest.to_dict() == obs.manifest.to_dict()
    assert clone.cache_dir == obs.cache_dir
    pd.testing.assert_frame_equal(clone.to_dataframe(), frame)
    # without a cache_dir argument, each process resolves its own
    monkeypatch.setenv("DELTACELLS_CACHE", str(tmp_path / "one"))
    default = ObsStore(dataset.store(), dataset.manifest)
    assert default.cache_dir == tmp_path / "one"
    monkeypatch.setenv("DELTACELLS_CACHE", str(tmp_path / "two"))
    assert pickle.loads(pickle.dumps(default)).cache_dir == tmp_path / "two"


def test_threads_share_one_reader(dataset: ObsDataset, cache: Path) -> None:
    obs = dataset.open(cache)
    results: dict[str, pd.Series] = {}

    def read(name: str) -> None:
        results[name] = obs.read_column(name)

    threads = [threading.Thread(target=read, args=(name,)) for name in dataset.frame.columns for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for name in dataset.frame.columns:
        pd.testing.assert_series_equal(results[name], dataset.frame[name])
    assert obs.store.shard_reads() == 3, "each shard read whole once"
