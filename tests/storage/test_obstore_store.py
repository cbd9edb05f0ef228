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
