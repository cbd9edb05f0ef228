"""The store conformance suite on the S3 test server (moto), where writes, moves and conditional writes are
S3 requests (a PUT with ``If-Match`` / ``If-None-Match``, a copy on the server)."""

from __future__ import annotations

import pytest
from tests.servers import S3Bucket

from deltacells.storage import FsspecStore
from deltacells.testing.store import StoreTests


class TestS3Store(StoreTests):
    @pytest.fixture
    def store(self, s3_bucket: S3Bucket) -> FsspecStore:
        return FsspecStore(f"{s3_bucket.url}/root", s3_bucket.storage_options)
