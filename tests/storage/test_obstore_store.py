"""The store conformance suite for :class:`~deltacells.storage.ObstoreStore` on the S3 test server (moto)."""

from __future__ import annotations

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
