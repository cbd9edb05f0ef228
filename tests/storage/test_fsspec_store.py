from __future__ import annotations

import asyncio
import os
import pickle
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import pytest
from fsspec.asyn import AsyncFileSystem
from fsspec.implementations.memory import MemoryFileSystem

from deltacells.errors import MissingObjectError
from deltacells.storage import FsspecStore, PrefixStore, StoreFile, open_store
from deltacells.testing.store import StoreTests


@pytest.fixture
def memory_url() -> Iterator[str]:
    """A fresh ``memory://`` URL, removed from the in-memory filesystem afterwards."""
    name = f"deltacells-test-{uuid.uuid4().hex}"
    yield f"memory://{name}/root"
    fs = fsspec.filesystem("memory")
    if fs.exists(f"/{name}"):
        fs.rm(f"/{name}", recursive=True)


# ------------------------------------------------------------------------------ the conformance suite


class TestLocalStore(StoreTests):
    @pytest.fixture
    def store(self, tmp_path: Path) -> FsspecStore:
        return FsspecStore(tmp_path / "root")


class TestFileUrlStore(StoreTests):
    @pytest.fixture
    def store(self, tmp_path: Path) -> FsspecStore:
        return FsspecStore(f"file://{tmp_path}/root")


class TestMemoryStore(StoreTests):
    @pytest.fixture
    def store(self, memory_url: str) -> FsspecStore:
        return FsspecStore(memory_url)


class TestPrefixStoreLocal(StoreTests):
    @pytest.fixture
    def store(self, tmp_path: Path) -> PrefixStore:
        return PrefixStore(FsspecStore(tmp_path / "root"), ".staging/ds")


class TestPrefixStoreMemory(StoreTests):
    @pytest.fixture
    def store(self, memory_url: str) -> PrefixStore:
        return PrefixStore(FsspecStore(memory_url), "staging")


class AsyncMemoryFileSystem(AsyncFileSystem):
    """The in-memory filesystem's objects behind an asynchronous API, as s3fs, gcsfs and http have.

    Each ``_cat_file`` sleeps a little; ``cat_calls`` counts them and ``max_in_flight`` records the most
    that ran at once. With ``gather`` set, each request also waits (up to ``GATHER_TIMEOUT`` seconds) until
    that many have been in flight together, so that a loaded machine finishing one early cannot hide
    concurrency the code has.
    """

    GATHER_TIMEOUT = 5.0

    protocol = "deltacells-test-async"
    cachable = False

    def __init__(self, **options: Any) -> None:
        super().__init__(asynchronous=False, **options)
        self.memory = MemoryFileSystem()
        self.cat_calls = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.gather = 0

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        return MemoryFileSystem._strip_protocol(str(path).removeprefix(f"{cls.protocol}://"))

    async def _cat_file(self, path: str, start: int | None = None, end: int | None = None, **kwargs: Any) -> bytes:
        self.cat_calls += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(0.005)
            deadline = time.monotonic() + self.GATHER_TIMEOUT
            while self.max_in_flight < self.gather and time.monotonic() < deadline:
                await asyncio.sleep(0.001)
            return self.memory.cat_file(path, start, end)
        finally:
            self.in_flight -= 1

    async def _pipe_file(self, path: str, value: bytes, **kwargs: Any) -> None:
        self.memory.pipe_file(path, value)

    async def _info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        return self.memory.info(path)

    async def _ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[Any]:
        return self.memory.ls(path, detail=detail)

    async def _rm_file(self, path: str, **kwargs: Any) -> None:
        if self.memory.isfile(path):  # directories are implied by the objects, as in buckets
            self.memory.rm_file(path)

    async def _cp_file(self, path1: str, path2: str, **kwargs: Any) -> None:
        self.memory.cp_file(path1, path2)


fsspec.register_implementation(AsyncMemoryFileSystem.protocol, AsyncMemoryFileSystem, clobber=True)


class TestAsyncFilesystemStore(StoreTests):
    """A filesystem with an asynchronous API: read_many goes through fsspec's ``cat_ranges``."""

    @pytest.fixture
    def store(self, memory_url: str) -> FsspecStore:
        store = FsspecStore(memory_url.replace("memory://", f"{AsyncMemoryFileSystem.protocol}://"))
        assert store.fs.async_impl
        return store


def test_read_many_on_an_async_filesystem_runs_requests_together(memory_url: str) -> None:
    store = FsspecStore(memory_url.replace("memory://", f"{AsyncMemoryFileSystem.protocol}://"))
    fs = store.fs
    assert isinstance(fs, AsyncMemoryFileSystem)
    objects = {f"tiles/{i}": bytes([i]) * 100 for i in range(20)}
    for path, data in objects.items():
        store.write(path, data)
    requests = [(path, 10, 20) for path in objects] + [("tiles/3", -5, None), ("tiles/4", None, None)]
    expected = [data[10:20] for data in objects.values()] + [objects["tiles/3"][-5:], objects["tiles/4"]]
    fs.gather = len(requests)
    assert store.read_many(requests) == expected
    assert fs.cat_calls == len(requests)  # one request each, no size lookups
    assert fs.max_in_flight == len(requests)
    fs.max_in_flight, fs.gather = 0, 4
    assert store.read_many(requests, max_workers=4) == expected
    assert fs.max_in_flight == 4  # max_workers is fsspec's batch size there
    fs.gather = 0
    assert store.read_many([*requests[:2], ("tiles/5", 10, 2), ("tiles/6", -10, -5)]) == [
        *expected[:2],
        b"",
        objects["tiles/6"][-10:-5],
    ]


def test_read_many_on_a_sync_filesystem_uses_a_bounded_thread_pool(tmp_path: Path) -> None:
    in_flight: list[int] = []
    lock, running = threading.Lock(), [0]

    class SlowStore(FsspecStore):
        def read(self, path: str, start: int | None = None, end: int | None = None) -> bytes:
            with lock:
                running[0] += 1
                in_flight.append(running[0])
            try:
                time.sleep(0.02)
                return super().read(path, start, end)
            finally:
                with lock:
                    running[0] -= 1

    store = SlowStore(tmp_path)
    for i in range(12):
        store.write(f"o/{i}", b"x" * i)
    requests = [(f"o/{i}", None, None) for i in range(12)]
    assert store.read_many(requests, max_workers=3) == [b"x" * i for i in range(12)]
    assert 1 < max(in_flight) <= 3


# ----------------------------------------------------------------------------- behaviour kept from FsspecStore


@pytest.fixture(params=["local", "memory", "file-url"])
def store(request: pytest.FixtureRequest, tmp_path: Path, memory_url: str) -> FsspecStore:
    if request.param == "local":
        return FsspecStore(tmp_path / "root")
    if request.param == "file-url":
        return FsspecStore(f"file://{tmp_path}/root")
    return FsspecStore(memory_url)


def test_store_is_the_fsspec_store() -> None:
    assert FsspecStore is FsspecStore


def test_write_read_list_delete(store: FsspecStore) -> None:
    store.write("tiles/a.dct", b"abc")
    store.write("manifest.json", b"{}")
    assert store.read("tiles/a.dct") == b"abc"
    assert store.size("tiles/a.dct") == 3
    assert store.list() == ["manifest.json", "tiles"]
    assert store.list("tiles") == ["a.dct"]
    assert store.list("absent") == []
    store.write("tiles/a.dct", b"xyz!")  # replaced whole
    assert store.read("tiles/a.dct") == b"xyz!"
    store.delete("tiles")
    assert not store.exists("tiles/a.dct")
    store.delete("tiles")  # absent: no error
    with pytest.raises(MissingObjectError, match="tiles/a.dct"):
        store.read("tiles/a.dct")


def test_fsspec_members(store: FsspecStore) -> None:
    assert store.list() == []
    assert store.path("") == store.root
    assert store.path("tiles/a") == f"{store.root}/tiles/a"
    store.write("tiles/a", b"a")
    assert store.fs.cat_file(store.path("tiles/a")) == b"a"
    assert store.local_path("tiles/a") == (store.path("tiles/a") if store.is_local else None)


def test_is_local(tmp_path: Path, memory_url: str) -> None:
    assert FsspecStore(tmp_path).is_local
    assert FsspecStore(f"file://{tmp_path}").is_local
    assert not FsspecStore(memory_url).is_local
    assert FsspecStore(memory_url).local_path("x") is None


def test_local_write_leaves_no_temporary_files(tmp_path: Path) -> None:
    store = FsspecStore(tmp_path)
    store.write("x/y.bin", b"1" * 1000)
    assert sorted(p.name for p in (tmp_path / "x").iterdir()) == ["y.bin"]


def test_failed_local_write_keeps_the_old_object(tmp_path: Path) -> None:
    store = FsspecStore(tmp_path)
    store.write("a.bin", b"old")
    with pytest.raises(TypeError):
        store.write("a.bin", "not bytes")  # type: ignore[arg-type]
    assert store.read("a.bin") == b"old"
    assert store.list() == ["a.bin"]


def test_pickles_to_url_and_options_only(tmp_path: Path) -> None:
    store = FsspecStore(tmp_path, {"auto_mkdir": True})
    store.write("manifest.json", b"{}")
    _ = store.fs  # an open filesystem is not part of the pickle
    clone = pickle.loads(pickle.dumps(store))
    assert clone.url == store.url
    assert clone.storage_options == {"auto_mkdir": True}
    assert clone._fs is None
    assert len(pickle.dumps(store)) < 300


def test_filesystem_is_made_again_in_another_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = FsspecStore(tmp_path)
    _ = store.fs
    monkeypatch.setattr(os, "getpid", lambda: -1)  # as after a fork
    made: list[str] = []
    real = fsspec.core.url_to_fs
    monkeypatch.setattr(fsspec.core, "url_to_fs", lambda url, **kw: made.append(url) or real(url, **kw))
    _ = store.fs
    _ = store.fs
    assert made == [store.url]


def test_storage_options_reach_the_filesystem(tmp_path: Path) -> None:
    assert FsspecStore(tmp_path, {"auto_mkdir": True}).fs.auto_mkdir
    assert not FsspecStore(tmp_path).fs.auto_mkdir


def test_missing_object_message(tmp_path: Path) -> None:
    store = FsspecStore(tmp_path)
    with pytest.raises(MissingObjectError, match=r"missing\.bin is missing") as info:
        store.read("missing.bin")
    assert str(info.value) == f"{tmp_path}/missing.bin is missing"


def test_move_onto_itself_is_refused(tmp_path: Path) -> None:
    store = FsspecStore(tmp_path)
    store.write("a", b"a")
    with pytest.raises(FileExistsError):
        store.move("a", "a")
    assert store.read("a") == b"a"


# --------------------------------------------------------------------------------- open_store, PrefixStore


def test_open_store(tmp_path: Path) -> None:
    store = open_store(tmp_path, {"auto_mkdir": True})
    assert isinstance(store, FsspecStore)
    assert store.url == str(tmp_path)
    assert store.storage_options == {"auto_mkdir": True}
    assert open_store(str(tmp_path)).storage_options == {}
    assert open_store(store) is store
    assert open_store(store, {}) is store
    with pytest.raises(ValueError, match="storage_options"):
        open_store(store, {"anon": True})


def test_prefix_store_names_objects_by_their_full_url(tmp_path: Path) -> None:
    base = FsspecStore(tmp_path)
    staged = PrefixStore(base, ".staging-1/")
    assert staged.url == f"{tmp_path}/.staging-1"
    staged.write("tiles/a", b"a")
    assert base.read(".staging-1/tiles/a") == b"a"
    assert staged.local_path("tiles/a") == f"{tmp_path}/.staging-1/tiles/a"
    with pytest.raises(MissingObjectError, match=f"{tmp_path}/.staging-1/tiles/b is missing"):
        staged.read("tiles/b")
    clone = pickle.loads(pickle.dumps(staged))
    assert clone.read("tiles/a") == b"a"
    assert len(pickle.dumps(staged)) < 400
    assert PrefixStore(base, "").url == base.url


# ---------------------------------------------------------------------------------------- StoreFile


def test_store_file_cannot_be_pickled(tmp_path: Path) -> None:
    store = FsspecStore(tmp_path)
    store.write("a", b"abc")
    with StoreFile(store, "a") as f, pytest.raises(TypeError, match="pickle the store"):
        pickle.dumps(f)


def test_store_file_asks_the_size_only_when_not_given(tmp_path: Path) -> None:
    calls: list[str] = []

    class SizeCounting(FsspecStore):
        def size(self, path: str) -> int:
            calls.append(path)
            return super().size(path)

    store = SizeCounting(tmp_path)
    store.write("a", b"abc")
    assert StoreFile(store, "a").size == 3
    assert StoreFile(store, "a", size=3).read() == b"abc"
    assert calls == ["a"]


def test_relative_paths_become_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A dataset opened by a relative path still reads after a pickle to another working directory."""
    monkeypatch.chdir(tmp_path)
    store = FsspecStore("rel/ds")
    assert store.url == str(tmp_path / "rel" / "ds")
    store.write("a.bin", b"abc")
    clone = pickle.loads(pickle.dumps(store))
    monkeypatch.chdir("/")
    assert clone.read("a.bin") == b"abc"
    assert FsspecStore("memory://x/y").url == "memory://x/y"


@pytest.mark.parametrize("pread", [True, False])  # False: the fallback of systems without os.pread
def test_ranges_of_a_local_file_read_as_cat_file_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pread: bool
) -> None:
    from deltacells.storage import _fsspec

    if not pread:
        monkeypatch.setattr(_fsspec, "_read_at", _fsspec._seek_and_read)
    store = open_store(tmp_path)
    payload = bytes(range(256)) * 40
    store.write("blob", payload)
    for start, end in ((0, 10), (5, 5), (100, 10240), (10000, 20000), (10240, 10300), (0, len(payload))):
        assert store.read("blob", start, end) == payload[start:end]
    with pytest.raises(MissingObjectError):
        store.read("absent", 0, 10)
