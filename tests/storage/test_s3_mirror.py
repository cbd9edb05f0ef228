"""The benchmarks' fast S3 server (:class:`~tests.servers.s3_mirror.MirrorS3Server`) answers reads as S3 does.

Both clients of ``s3://`` read a directory through it with the meaning ``BaseStore.read`` gives ranges, sizes,
listings and missing objects; the reads that hand over obstore's own buffer give the same bytes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("aiohttp")

from tests.servers.s3_mirror import MirrorS3Server

from deltacells.errors import MissingObjectError
from deltacells.storage import FsspecStore, ObstoreStore


@pytest.fixture
def mirror(tmp_path: Path, aws_env: None):
    root = tmp_path / "bucket" / "ds"
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_bytes(b"hello world")
    (root / "sub" / "y").write_bytes(b"x")
    (root / "empty").write_bytes(b"")
    with MirrorS3Server({"bucket": tmp_path / "bucket"}) as server:
        yield server


@pytest.mark.parametrize("client", [ObstoreStore, FsspecStore], ids=["obstore", "fsspec"])
def test_reads_as_s3(mirror: MirrorS3Server, client: type) -> None:
    if client is ObstoreStore:
        pytest.importorskip("obstore")
    options = {"key": "k", "secret": "s", "client_kwargs": {"endpoint_url": mirror.url, "region_name": "us-east-1"}}
    store = client("s3://bucket/ds", options)
    assert store.read("a.txt") == b"hello world"
    assert store.read("a.txt", 2, 5) == b"llo"
    assert store.read("a.txt", -3) == b"rld"
    assert store.read("a.txt", 6) == b"world"
    assert store.read("a.txt", 5, 100) == b" world"
    assert store.read("a.txt", 20, 30) == b""
    assert store.read("empty") == b""
    assert store.size("a.txt") == 11
    assert store.list("") == ["a.txt", "empty", "sub"]
    assert store.list("sub") == ["y"]
    assert store.exists("sub") and not store.exists("nope")
    assert [o.path for o in store.objects_under("")] == ["a.txt", "empty", "sub/y"]
    with pytest.raises(MissingObjectError, match="s3://bucket/ds/missing"):
        store.read("missing")
    assert store.read_many([("a.txt", 0, 3), ("sub/y", None, None)]) == [b"hel", b"x"]
    assert bytes(store.submit_read_buffer("a.txt", 0, 12).result()) == b"hello world"
    assert mirror.count(path_contains="/a.txt") >= 8
    with pytest.raises(Exception):  # noqa: B017, PT011 - read-only: a write is refused (405), each client its way
        store.write("new", b"n")
