from __future__ import annotations

import pickle

import pytest

from deltacells.errors import MissingObjectError
from deltacells.storage import Store


@pytest.fixture(params=["local", "memory", "file-url"])
def store(request, tmp_path):
    if request.param == "local":
        return Store(tmp_path / "root")
    if request.param == "file-url":
        return Store(f"file://{tmp_path}/root")
    return Store(f"memory://deltacells-test-{id(request)}/root")


def test_write_read_list_remove(store):
    store.makedirs()
    store.write("tiles/a.dct", b"abc")
    store.write("manifest.json", b"{}")
    assert store.read("tiles/a.dct") == b"abc"
    assert store.size("tiles/a.dct") == 3
    assert store.listdir() == {"tiles", "manifest.json"}
    assert store.listdir("tiles") == {"a.dct"}
    assert store.listdir("absent") == set()
    store.write("tiles/a.dct", b"xyz!")  # replaced whole
    assert store.read("tiles/a.dct") == b"xyz!"
    store.remove("tiles")
    assert not store.exists("tiles/a.dct")
    store.remove("tiles")  # absent: no error
    with pytest.raises(MissingObjectError, match="tiles/a.dct"):
        store.read("tiles/a.dct")


def test_local_write_leaves_no_temporary_files(tmp_path):
    store = Store(tmp_path)
    store.write("x/y.bin", b"1" * 1000)
    assert sorted(p.name for p in (tmp_path / "x").iterdir()) == ["y.bin"]


def test_pickles_to_url_and_options_only(tmp_path):
    store = Store(tmp_path, {"auto_mkdir": True})
    store.makedirs()
    _ = store.fs  # an open filesystem is not part of the pickle
    clone = pickle.loads(pickle.dumps(store))
    assert clone.url == store.url
    assert clone.storage_options == {"auto_mkdir": True}
    assert clone._fs is None
    assert len(pickle.dumps(store)) < 300
