"""The conformance suite of stores: subclass :class:`StoreTests` and provide a ``store`` fixture.

Example
-------
::

    import pytest
    from deltacells.storage import FsspecStore
    from deltacells.testing.store import StoreTests


    class TestLocalStore(StoreTests):
        @pytest.fixture
        def store(self, tmp_path):
            return FsspecStore(tmp_path / "root")
"""

from __future__ import annotations

import io
import pickle
import random
import re
import threading
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltacells.errors import CommitConflictError, MissingObjectError
from deltacells.storage import BaseStore, StoreFile

__all__ = ["StoreTests"]

_DATA = bytes(range(256)) * 4 + b"tail"  # 1028 bytes, every offset distinguishable

#: ``(start, end)`` pairs for ranged reads: each must give ``data[start:end]``.
RANGES: list[tuple[int | None, int | None]] = [
    (None, None),  # whole
    (10, None),  # start only
    (None, 10),  # end only
    (10, 20),  # both
    (0, len(_DATA)),  # exactly the object
    (-4, None),  # suffix
    (-4, -1),  # negative both
    (-2000, None),  # suffix longer than the object
    (10, -10),  # negative end
    (-10, len(_DATA) - 2),  # negative start, positive end
    (1000, 5000),  # past the end
    (len(_DATA), None),  # at the end: empty
    (5000, None),  # beyond the end: empty
    (5000, 6000),  # wholly past the end: empty
    (20, 10),  # end before start: empty
    (7, 7),  # empty
    (None, 0),  # empty
    (-3, 2),  # negative start after the end: empty
]


def _ids(ranges: list[tuple[int | None, int | None]]) -> list[str]:
    return [f"[{'' if s is None else s}:{'' if e is None else e}]" for s, e in ranges]


class StoreTests:
    """Tests that every :class:`~deltacells.storage.BaseStore` must pass.

    Subclasses (named ``Test...``) define the fixture ``store``, which returns a fresh,
    empty, writable store (its root need not exist yet) and removes what it wrote afterwards.
    """

    @pytest.fixture
    def store(self) -> BaseStore:
        """A fresh, empty, writable store: subclasses must override this fixture."""
        msg = f"{type(self).__name__} must define a `store` fixture returning a fresh, empty, writable store"
        raise NotImplementedError(msg)

    @staticmethod
    def fill(store: BaseStore, objects: Mapping[str, bytes]) -> None:
        """Write ``objects`` (``{path: bytes}``) into ``store``."""
        for path, data in objects.items():
            store.write(path, data)

    @staticmethod
    def assert_missing(store: BaseStore, path: str, call: Callable[[], Any]) -> None:
        """``call()`` raises a :class:`MissingObjectError` naming ``f"{store.url}/{path}"``."""
        where = re.escape(f"{store.url.rstrip('/')}/{path}")
        with pytest.raises(MissingObjectError, match=f"{where}.*missing|missing.*{where}") as info:
            call()
        assert isinstance(info.value, FileNotFoundError)

    # ---------------------------------------------------------------------------------- the basics

    def test_is_a_base_store(self, store: BaseStore) -> None:
        """The store is a BaseStore, with its URL in its repr."""
        assert isinstance(store, BaseStore)
        assert isinstance(store.url, str) and store.url
        assert store.url in repr(store)

    def test_empty_store(self, store: BaseStore) -> None:
        """A fresh store lists nothing, holds nothing, and deletes nothing without error."""
        assert store.list() == []
        assert not store.exists("manifest.json")
        store.delete("anything")  # no error

    @pytest.mark.parametrize("path", ["manifest.json", "tiles/tile_000000.dct", "a/b/c/d.bin"])
    @pytest.mark.parametrize("data", [b"", b"\x00", _DATA], ids=["empty", "one-byte", "binary"])
    def test_write_read_round_trip(self, store: BaseStore, path: str, data: bytes) -> None:
        """An object reads back as written, at any depth, empty included."""
        store.write(path, data)
        got = store.read(path)
        assert isinstance(got, bytes)
        assert got == data
        assert store.size(path) == len(data)
        assert store.exists(path)

    def test_large_object(self, store: BaseStore) -> None:
        """A multi-megabyte object reads back whole and in part."""
        data = np.random.default_rng(0).bytes(3 * 2**20 + 17)
        store.write("big.bin", data)
        assert store.read("big.bin") == data
        assert store.read("big.bin", 2**20, 2**20 + 5) == data[2**20 : 2**20 + 5]

    # -------------------------------------------------------------------------------------- ranges

    @pytest.mark.parametrize(("start", "end"), RANGES, ids=_ids(RANGES))
    def test_read_range(self, store: BaseStore, start: int | None, end: int | None) -> None:
        """``read(path, start, end)`` is ``data[start:end]``, for every kind of range."""
        store.write("tiles/t.dct", _DATA)
        got = store.read("tiles/t.dct", start, end)
        assert isinstance(got, bytes)
        assert got == _DATA[start:end]

    @pytest.mark.parametrize(("start", "end"), RANGES, ids=_ids(RANGES))
    def test_read_range_of_empty_object(self, store: BaseStore, start: int | None, end: int | None) -> None:
        """Every range of an empty object is empty."""
        store.write("empty.bin", b"")
        assert store.read("empty.bin", start, end) == b""

    @pytest.mark.parametrize(("start", "end"), [(None, None), (0, 4), (-4, None), (5, 2), (3, 3)])
    def test_read_range_of_missing_object(self, store: BaseStore, start: int | None, end: int | None) -> None:
        """A range of a missing object raises, even an empty range."""
        store.write("present.bin", _DATA)
        self.assert_missing(store, "absent.bin", lambda: store.read("absent.bin", start, end))

    # ---------------------------------------------------------------------------------- read_many

    def test_read_many_in_request_order(self, store: BaseStore) -> None:
        """read_many returns each request's bytes in request order, whatever the pool size."""
        objects = {f"tiles/tile_{i:06d}.dct": bytes([i]) * (i + 1) + _DATA[: i * 7] for i in range(40)}
        self.fill(store, objects)
        rng = random.Random(0)
        requests: list[tuple[str, int | None, int | None]] = []
        for path in rng.sample(sorted(objects), len(objects)):
            requests.append((path, None, None))
            requests.append((path, *rng.choice(RANGES)))
        requests += requests[:5]  # the same request twice
        expected = [objects[path][start:end] for path, start, end in requests]
        assert store.read_many(requests) == expected
        assert store.read_many(requests, max_workers=1) == expected
        assert store.read_many(requests, max_workers=3) == expected
        assert store.read_many(iter(requests[:3])) == expected[:3]  # any iterable

    def test_read_many_nothing(self, store: BaseStore) -> None:
        """No requests, no results."""
        assert store.read_many([]) == []

    def test_read_many_one(self, store: BaseStore) -> None:
        """One request, one result."""
        store.write("a", b"abc")
        assert store.read_many([("a", 1, None)]) == [b"bc"]

    @pytest.mark.parametrize("max_workers", [None, 1, 4])
    def test_read_many_missing_object(self, store: BaseStore, max_workers: int | None) -> None:
        """A missing object among many requests raises, naming it."""
        self.fill(store, {f"o/{i}": b"x" * i for i in range(10)})
        requests: list[tuple[str, int | None, int | None]] = [(f"o/{i}", None, None) for i in range(10)]
        requests.insert(6, ("o/absent", 0, 1))
        self.assert_missing(store, "o/absent", lambda: store.read_many(requests, max_workers=max_workers))

    # -------------------------------------------------------------------------------------- writes

    def test_overwrite_replaces_whole(self, store: BaseStore) -> None:
        """Writing an object again replaces it whole, shorter or empty."""
        store.write("a.bin", _DATA)
        store.write("a.bin", b"short")
        assert store.read("a.bin") == b"short"
        assert store.size("a.bin") == 5
        store.write("a.bin", b"")
        assert store.read("a.bin") == b""

    def test_write_leaves_nothing_else(self, store: BaseStore) -> None:
        """Writes leave only the objects written (no temporary files in listings)."""
        for data in (b"1" * 1000, b"22", b"333"):
            store.write("x/y.bin", data)
        store.write("z.bin", b"z")
        assert store.list() == ["x", "z.bin"]
        assert store.list("x") == ["y.bin"]

    def test_write_accepts_bytes_like(self, store: BaseStore) -> None:
        """Bytes-like data (bytearray, memoryview) are written like bytes."""
        store.write("a", bytearray(b"abc"))  # type: ignore[arg-type]
        store.write("b", memoryview(b"def"))  # type: ignore[arg-type]
        assert store.read_many([("a", None, None), ("b", None, None)]) == [b"abc", b"def"]

    def test_write_many(self, store: BaseStore) -> None:
        """``write_many`` stores every object whole, new folders and replaced objects alike, and nothing else."""
        store.write("g/old.bin", b"old")
        objects = {f"g/{i % 3}/{i}.bin": bytes([i]) * (i * 100) for i in range(12)} | {"g/old.bin": b"new", "top": b""}
        store.write_many(objects)
        assert store.read_many([(path, None, None) for path in objects]) == list(objects.values())
        assert store.list("g") == ["0", "1", "2", "old.bin"]
        assert store.list("g/1") == sorted(f"{i}.bin" for i in range(1, 12, 3))
        store.write_many({})

    def test_concurrent_writes_from_threads(self, store: BaseStore) -> None:
        """Threads writing different objects under new prefixes at once all succeed."""
        n_threads, per_thread = 8, 6
        barrier = threading.Barrier(n_threads)
        errors: list[BaseException] = []

        def work(t: int) -> None:
            try:
                barrier.wait(timeout=30)
                for i in range(per_thread):  # every thread creates the same new parents at once
                    store.write(f"tiles/{i}/t{t}.dct", f"{t}:{i}".encode() * (t + 1))
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(n_threads)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not errors, errors
        for i in range(per_thread):
            assert store.list(f"tiles/{i}") == sorted(f"t{t}.dct" for t in range(n_threads))
            for t in range(n_threads):
                assert store.read(f"tiles/{i}/t{t}.dct") == f"{t}:{i}".encode() * (t + 1)

    def test_concurrent_overwrites_of_one_object(self, store: BaseStore) -> None:
        """Threads overwriting one object leave one whole version of it."""
        versions = [bytes([v]) * (1000 * (v + 1)) for v in range(8)]

        def write(data: bytes) -> None:
            store.write("shared.bin", data)

        threads = [threading.Thread(target=write, args=(data,)) for data in versions]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert store.read("shared.bin") in versions  # one whole version, never a mix
        assert store.list() == ["shared.bin"]

    # -------------------------------------------------------------------------------------- listing

    def test_list(self, store: BaseStore) -> None:
        """Listing names the entries directly under a prefix, sorted, relative, without trailing slashes."""
        self.fill(
            store,
            {"manifest.json": b"{}", "tiles/a": b"1", "tiles/b": b"2", "obs/x/y": b"3", "c/0": b"4", "cc/0": b"5"},
        )
        assert store.list() == ["c", "cc", "manifest.json", "obs", "tiles"]
        assert store.list("") == store.list()
        assert store.list("tiles") == ["a", "b"]
        assert store.list("obs") == ["x"]
        assert store.list("obs/x") == ["y"]
        assert store.list("c") == ["0"]  # not cc
        assert store.list("absent") == []
        assert store.list("tiles/absent") == []
        assert store.list("manifest.json") == []  # an object has no entries

    # ------------------------------------------------------------------------------------- deletion

    def test_objects_under(self, store: BaseStore) -> None:
        """A recursive listing gives each object at or under a prefix once, with its size and a plausible time."""
        import time

        before = time.time()
        self.fill(store, {"p/a": b"1", "p/q/b": b"22", "p/q/r/c": _DATA, "pz": b"z", "top": b""})
        found = store.objects_under("p")
        assert [(o.path, o.size) for o in found] == [("p/a", 1), ("p/q/b", 2), ("p/q/r/c", len(_DATA))]
        for o in found:  # where a store tells the time, it is about now (object stores round to seconds)
            assert o.modified is None or before - 120 <= o.modified <= time.time() + 120
        assert [o.path for o in store.objects_under()] == ["p/a", "p/q/b", "p/q/r/c", "pz", "top"]
        assert [(o.path, o.size) for o in store.objects_under("p/q/b")] == [("p/q/b", 2)]  # an object itself
        assert store.objects_under("absent") == []

    def test_delete_object(self, store: BaseStore) -> None:
        """Deleting an object removes it and nothing else."""
        self.fill(store, {"a.bin": b"a", "tiles/t0": b"0", "tiles/t1": b"1"})
        store.delete("tiles/t0")
        assert not store.exists("tiles/t0")
        assert store.list("tiles") == ["t1"]
        store.delete("a.bin")
        assert not store.exists("a.bin")
        self.assert_missing(store, "a.bin", lambda: store.read("a.bin"))
        assert store.read("tiles/t1") == b"1"

    def test_delete_prefix(self, store: BaseStore) -> None:
        """Deleting a prefix removes everything under it, and not a sibling sharing its start."""
        self.fill(store, {"tiles/a": b"1", "tiles/sub/b": b"2", "tilesx/c": b"3", "m.json": b"{}"})
        store.delete("tiles")
        assert store.list() == ["m.json", "tilesx"]
        assert store.list("tiles") == []
        assert not store.exists("tiles/a")
        assert not store.exists("tiles/sub/b")
        assert store.read("tilesx/c") == b"3"

    def test_delete_absent(self, store: BaseStore) -> None:
        """Deleting what is absent is no error."""
        store.write("a", b"a")
        store.delete("absent")
        store.delete("absent/deeper/x")
        store.delete("a")
        store.delete("a")  # twice
        assert store.list() == []

    # --------------------------------------------------------------------------------- size, exists

    def test_size(self, store: BaseStore) -> None:
        """The size is the object's length; a missing object raises."""
        self.fill(store, {"a": b"", "b/c": _DATA})
        assert store.size("a") == 0
        assert store.size("b/c") == len(_DATA)
        self.assert_missing(store, "absent", lambda: store.size("absent"))
        self.assert_missing(store, "b/absent", lambda: store.size("b/absent"))

    def test_exists(self, store: BaseStore) -> None:
        """Objects, prefixes with objects and a root with content exist; absent paths do not."""
        store.write("tiles/a.dct", b"a")
        assert store.exists("tiles/a.dct")
        assert store.exists("tiles")  # a prefix with objects under it
        assert store.exists("")  # the root, once it holds something
        assert not store.exists("tiles/b.dct")
        assert not store.exists("absent")
        assert not store.exists("absent/deeper")

    # --------------------------------------------------------------------------- conditional writes

    def test_conditional_writes(self, store: BaseStore) -> None:
        """``write_if`` writes only over the version read (or only where nothing is); ``version_tag`` tells it."""
        assert store.version_tag("c/m.json") is None
        first = store.write_if("c/m.json", b"1", version=None)
        assert store.version_tag("c/m.json") == store.read_versioned("c/m.json")[1] == first
        with pytest.raises(CommitConflictError):
            store.write_if("c/m.json", b"2", version=None)  # exists
        second = store.write_if("c/m.json", b"2", version=first)
        assert store.read_versioned("c/m.json") == (b"2", second)
        with pytest.raises(CommitConflictError):
            store.write_if("c/m.json", b"3", version=first)  # changed since
        store.delete("c/m.json")
        with pytest.raises(CommitConflictError):
            store.write_if("c/m.json", b"4", version=second)  # removed since
        assert not store.exists("c/m.json")

    # ---------------------------------------------------------------------------------------- moves

    def test_move_object(self, store: BaseStore) -> None:
        """Moving an object renames it, into new parents if need be."""
        self.fill(store, {"staging/a.bin": _DATA, "other": b"o"})
        store.move("staging/a.bin", "final/deep/a.bin")
        assert store.read("final/deep/a.bin") == _DATA
        assert not store.exists("staging/a.bin")
        self.assert_missing(store, "staging/a.bin", lambda: store.read("staging/a.bin"))
        assert store.read("other") == b"o"

    def test_move_prefix(self, store: BaseStore) -> None:
        """Moving a prefix renames everything under it, and not a sibling sharing its start."""
        self.fill(store, {"staging/x": b"x", "staging/sub/y": b"y", "stagingz": b"z"})
        store.move("staging", "final/ds")
        assert store.list("final/ds") == ["sub", "x"]
        assert store.read("final/ds/x") == b"x"
        assert store.read("final/ds/sub/y") == b"y"
        assert store.list("staging") == []
        assert not store.exists("staging/x")
        assert store.read("stagingz") == b"z"  # a sibling sharing the name's start stays

    @pytest.mark.parametrize("dst", ["b", "p"], ids=["onto-object", "onto-prefix"])
    @pytest.mark.parametrize("src", ["a", "q"], ids=["object", "prefix"])
    def test_move_onto_existing(self, store: BaseStore, src: str, dst: str) -> None:
        """Moving onto a destination that exists is refused, and changes nothing."""
        objects = {"a": b"A", "b": b"B", "p/1": b"P", "q/1": b"Q"}
        self.fill(store, objects)
        with pytest.raises(FileExistsError, match=re.escape(dst)):
            store.move(src, dst)
        assert store.read_many([(path, None, None) for path in objects]) == list(objects.values())
        assert store.list() == ["a", "b", "p", "q"]

    def test_move_missing(self, store: BaseStore) -> None:
        """Moving a missing object raises MissingObjectError."""
        store.write("a", b"a")
        self.assert_missing(store, "absent", lambda: store.move("absent", "b"))
        assert store.list() == ["a"]

    # ------------------------------------------------------------------------------ missing objects

    @pytest.mark.parametrize(
        "call",
        [
            pytest.param(lambda store, path: store.read(path), id="read"),
            pytest.param(lambda store, path: store.read(path, 2, 4), id="read-range"),
            pytest.param(lambda store, path: store.read(path, -2), id="read-suffix"),
            pytest.param(lambda store, path: store.size(path), id="size"),
            pytest.param(lambda store, path: store.read_many([("present", None, None), (path, 0, 1)]), id="read_many"),
            pytest.param(lambda store, path: StoreFile(store, path), id="StoreFile"),
            pytest.param(lambda store, path: StoreFile(store, path, size=10).read(), id="StoreFile-sized"),
        ],
    )
    @pytest.mark.parametrize("path", ["absent.bin", "tiles/tile_000003.dct"])
    def test_missing_object_error(self, store: BaseStore, call: Callable[..., Any], path: str) -> None:
        """Every read of a missing object raises MissingObjectError naming ``url/path``."""
        store.write("present", b"here")
        self.assert_missing(store, path, lambda: call(store, path))

    # ------------------------------------------------------------------------------------- pickling

    def test_pickle(self, store: BaseStore) -> None:
        """A pickled and restored store reads and writes the same objects."""
        store.write("tiles/a", b"a" * 100)
        assert store.read("tiles/a", 0, 2) == b"aa"  # any connection is open by now
        clone = pickle.loads(pickle.dumps(store))
        assert type(clone) is type(store)
        assert clone.url == store.url
        assert clone.read("tiles/a") == b"a" * 100
        clone.write("from-clone", b"c")
        assert store.read("from-clone") == b"c"
        assert pickle.loads(pickle.dumps(clone)).list() == ["from-clone", "tiles"]

    # ----------------------------------------------------------------------------------- local paths

    def test_local_path(self, store: BaseStore) -> None:
        """local_path is a readable file path on local stores, None elsewhere."""
        store.write("tiles/a.dct", _DATA)
        local = store.local_path("tiles/a.dct")
        if not store.is_local:
            assert local is None
            return
        assert isinstance(local, str)
        with open(local, "rb") as f:
            assert f.read() == _DATA

    # -------------------------------------------------------------------------------------- StoreFile

    def test_store_file(self, store: BaseStore) -> None:
        """StoreFile reads, seeks, tells, reads into buffers and counts its requests."""
        store.write("obj", _DATA)
        with StoreFile(store, "obj") as f:
            assert f.readable() and f.seekable() and not f.writable()
            assert f.size == len(_DATA)
            assert f.requests == 0
            assert f.read(4) == _DATA[:4]
            assert f.tell() == 4
            assert f.seek(-4, io.SEEK_END) == len(_DATA) - 4
            assert f.read() == b"tail"
            assert f.read() == b""  # at the end: no request
            assert f.seek(10) == 10
            assert f.seek(5, io.SEEK_CUR) == 15
            buffer = bytearray(6)
            assert f.readinto(buffer) == 6
            assert bytes(buffer) == _DATA[15:21]
            f.seek(len(_DATA) + 10)
            assert f.read(3) == b""
            assert f.requests == 3
            assert f.bytes_read == 4 + 4 + 6
            with pytest.raises(ValueError, match="negative"):
                f.seek(-1)
        assert f.closed
        with pytest.raises(ValueError, match="closed"):
            f.read(1)

    def test_store_file_with_known_size(self, store: BaseStore) -> None:
        """StoreFile with a known size reads without asking for it."""
        store.write("obj", _DATA)
        with StoreFile(store, "obj", size=len(_DATA)) as f:
            assert f.read(3) == _DATA[:3]
            assert f.requests == 1

    def test_store_file_through_io_buffers(self, store: BaseStore) -> None:
        """StoreFile works under io.BufferedReader."""
        store.write("lines.txt", b"one\ntwo\nthree\n")
        with io.BufferedReader(StoreFile(store, "lines.txt")) as f:
            assert f.readlines() == [b"one\n", b"two\n", b"three\n"]

    def test_store_file_parquet_reads_only_what_it_needs(self, store: BaseStore) -> None:
        """Reading one parquet column through StoreFile fetches well under the whole file."""
        n = 40_000
        rng = np.random.default_rng(0)
        table = pa.table({name: rng.random(n) for name in ("a", "b", "c", "d")})  # incompressible
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink, compression="none", row_group_size=n // 2)
        blob = sink.getvalue().to_pybytes()
        store.write("obs/obs_0000.parquet", blob)
        with StoreFile(store, "obs/obs_0000.parquet") as f:
            parquet = pq.ParquetFile(f)
            assert parquet.metadata.num_rows == n
            assert parquet.read(columns=["b"]).column("b").equals(table.column("b"))
            assert f.requests >= 2
            assert f.bytes_read < len(blob) / 2
