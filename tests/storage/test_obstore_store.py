"""The store conformance suite for :class:`~deltacells.storage.ObstoreStore` on the S3 test server (moto)."""

from __future__ import annotations

import multiprocessing
import os

import pytest
from tests.servers import S3Bucket

from deltacells.storage import ObstoreStore
from deltacells.testing.store import StoreTests

pytest.importorskip("obstore")


class TestObstoreS3Store(StoreTests):
    @pytest.fixture
    def store(self, s3_bucket: S3Bucket) -> ObstoreStore:
        return ObstoreStore(f"{s3_bucket.url}/root", s3_bucket.storage_options)


def test_credentials_of_a_profile(s3_bucket: S3Bucket, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without keys, a ``profile`` of ``~/.aws/credentials`` signs the requests (botocore's chain, as s3fs's)."""
    credentials = tmp_path / "credentials"
    credentials.write_text("[lab]\naws_access_key_id = LABKEY\naws_secret_access_key = labsecret\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    endpoint = s3_bucket.storage_options["client_kwargs"]
    store = ObstoreStore(f"{s3_bucket.url}/root", {"profile": "lab", "client_kwargs": endpoint})
    assert store.settings.botocore_profile == "lab"
    store.write("a", b"signed by the profile")
    assert store.read("a") == b"signed by the profile"
    provider = store.store.credential_provider
    assert provider()["access_key_id"] == "LABKEY"


#: Run in a child forked from the test process: reads through the ObstoreStore it inherited, and a new one.
def _read_in_a_forked_child(store: ObstoreStore, queue: object) -> None:
    from deltacells.storage._obstore import obstore_unusable

    again = ObstoreStore(store.url, store.storage_options)
    queue.put(  # type: ignore[attr-defined]
        (obstore_unusable(), store.read("a"), again.read_many([("a", 0, 3), ("b", None, None)]), again.exists("c"))
    )


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_a_forked_child_reads_through_fsspec(s3_bucket: S3Bucket) -> None:
    """obstore's runtime does not survive a fork (its first request in the child would wait forever): a child forked
    after obstore was used reads through fsspec, with the same answers (a DataLoader's workers on S3)."""
    store = ObstoreStore(f"{s3_bucket.url}/root", s3_bucket.storage_options)
    store.write("a", b"inherited")
    store.write("b", b"the other")
    assert store.read("a") == b"inherited"  # obstore's runtime started here
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_read_in_a_forked_child, args=(store, queue))
    child.start()
    try:
        got = queue.get(timeout=60)
    finally:
        child.join(timeout=10)
        if child.is_alive():
            child.kill()
    assert got == (True, b"inherited", [b"inh", b"the other"], False)
    assert child.exitcode == 0
