"""Tests of the test servers themselves (``tests/servers``), driven by s3fs and fsspec directly.

They check what the storage tests rely on: the proxy forwards S3 and HTTP traffic unchanged, its log counts
requests and bytes exactly, latency makes concurrent requests overlap, and injected faults reach s3fs as
the errors a real S3 would cause. They assert counts and bytes, never durations.

Some tests pin how s3fs talks to S3 (``test_s3fs_request_pattern``, the retry counts): when an s3fs or
botocore upgrade changes these, the failure says so here first.
"""

from __future__ import annotations

import http.client
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("aiohttp")
pytest.importorskip("moto.server")
s3fs = pytest.importorskip("s3fs")

import botocore.exceptions  # noqa: E402 - after the skips
from fsspec.implementations.http import HTTPFileSystem  # noqa: E402
from tests.servers import ProxiedS3Bucket, S3Bucket, ServedDirectory  # noqa: E402
from tests.servers.http import StaticHTTPServer  # noqa: E402
from tests.servers.proxy import RecordingProxy  # noqa: E402

pytestmark = pytest.mark.timeout(60)

DATA = bytes(range(256)) * 16  # 4096 bytes, every offset distinguishable modulo 256


def _s3fs(storage_options: dict[str, Any], **extra: Any) -> Any:
    """A fresh S3FileSystem (not from the instance cache)."""
    return s3fs.S3FileSystem(**storage_options, **extra, skip_instance_cache=True)


def _get(url: str, *, method: str = "GET", headers: dict[str, str] | None = None) -> tuple[int, Any, bytes]:
    """Status, headers and body of a request with urllib (error statuses included)."""
    request = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.headers, error.read()


@pytest.fixture
def served(http_server: Any, tmp_path: Path) -> ServedDirectory:
    """``data.bin`` (:data:`DATA`) served over HTTP behind a proxy."""
    (tmp_path / "data.bin").write_bytes(DATA)
    return http_server(tmp_path)


# ------------------------------------------------------------------------------ S3 through the proxy


def test_s3_bucket_reaches_the_server_directly(s3_bucket: S3Bucket) -> None:
    fs = _s3fs(s3_bucket.storage_options)
    assert s3_bucket.url == f"s3://{s3_bucket.name}"
    assert fs.ls(s3_bucket.url) == []  # a fresh bucket for each test
    fs.pipe_file(f"{s3_bucket.url}/key", b"payload")
    assert fs.cat_file(f"{s3_bucket.url}/key") == b"payload"
    assert s3_bucket.server.client.get_object(Bucket=s3_bucket.name, Key="key")["Body"].read() == b"payload"


def test_put_and_ranged_get_are_logged(s3_proxy: ProxiedS3Bucket) -> None:
    proxy = s3_proxy.proxy
    assert proxy.requests() == []  # the bucket was made on the server, not through the proxy
    fs = _s3fs(s3_proxy.storage_options)
    path = f"{s3_proxy.url}/dir/obj.bin"

    fs.pipe_file(path, DATA)
    [put] = proxy.requests()
    assert (put.method, put.path, put.status, put.fault) == ("PUT", f"/{s3_proxy.name}/dir/obj.bin", 200, None)

    proxy.reset()
    assert fs.cat_file(path, start=100, end=200) == DATA[100:200]
    [get] = proxy.requests()
    assert (get.method, get.range, get.status, get.bytes) == ("GET", "bytes=100-199", 206, 100)
    assert get.query == ""
    assert proxy.bytes_sent() == proxy.bytes_sent("GET", "obj.bin") == 100
    assert proxy.count("HEAD") == 0
    assert proxy.in_flight == 0 and proxy.max_in_flight == 1


def test_listing_is_logged_with_its_query(s3_proxy: ProxiedS3Bucket) -> None:
    s3_proxy.server.put_object(s3_proxy.name, "a/b c.bin", b"x")
    fs = _s3fs(s3_proxy.storage_options)
    assert fs.ls(f"{s3_proxy.url}/a") == [f"{s3_proxy.name}/a/b c.bin"]
    [listing] = s3_proxy.proxy.requests()
    assert (listing.method, listing.path, listing.status) == ("GET", f"/{s3_proxy.name}", 200)
    assert "list-type=2" in listing.query and "prefix=a%2F" in listing.query
    assert listing.bytes > 0

    s3_proxy.proxy.reset()
    assert fs.cat_file(f"{s3_proxy.url}/a/b c.bin", start=0, end=1) == b"x"
    assert s3_proxy.proxy.count(path_contains="/a/b c.bin") == 1  # paths are logged percent-decoded


def test_s3fs_request_pattern(s3_proxy: ProxiedS3Bucket) -> None:
    """How many requests s3fs makes for the reads the storage layer does (pinned, see the module docstring)."""
    s3_proxy.server.put_object(s3_proxy.name, "obj.bin", DATA)
    proxy = s3_proxy.proxy
    fs = _s3fs(s3_proxy.storage_options)
    path = f"{s3_proxy.url}/obj.bin"

    def log() -> list[tuple[str, str | None, int | None, int]]:
        records = [(r.method, r.range, r.status, r.bytes) for r in proxy.requests()]
        proxy.reset()
        return records

    # a whole object: HEAD for the size (s3fs may then split the read across max_concurrency requests), GET
    assert fs.cat_file(path) == DATA
    assert log() == [("HEAD", None, 200, 0), ("GET", None, 200, len(DATA))]
    # ... no HEAD with max_concurrency=1
    assert _s3fs(s3_proxy.storage_options, max_concurrency=1).cat_file(path) == DATA
    assert log() == [("GET", None, 200, len(DATA))]
    # the last n bytes: one GET with a suffix range, no HEAD
    assert fs.cat_file(path, start=-10) == DATA[-10:]
    assert log() == [("GET", "bytes=-10", 206, 10)]
    # a range from the end: HEAD for the size, then GET
    assert fs.cat_file(path, start=-10, end=-2) == DATA[-10:-2]
    assert log() == [("HEAD", None, 200, 0), ("GET", f"bytes={len(DATA) - 10}-{len(DATA) - 3}", 206, 8)]
    # the size: HEAD
    assert fs.size(path) == len(DATA)
    assert log() == [("HEAD", None, 200, 0)]


def test_latency_makes_concurrent_requests_overlap(s3_proxy: ProxiedS3Bucket) -> None:
    s3_proxy.server.put_object(s3_proxy.name, "obj.bin", DATA)
    proxy = s3_proxy.proxy
    fs = _s3fs(s3_proxy.storage_options)
    path = f"{s3_proxy.url}/obj.bin"

    # one after the other: never two at once (the log is complete before the client has its answer)
    for start in (0, 100, 200):
        fs.cat_file(path, start=start, end=start + 10)
    assert proxy.max_in_flight == 1

    proxy.reset()
    proxy.latency = 0.2
    starts = list(range(0, 800, 100))
    assert fs.cat_ranges([path] * len(starts), starts, [s + 10 for s in starts]) == [DATA[s : s + 10] for s in starts]
    records = proxy.requests("GET")
    assert sorted(r.range for r in records) == sorted(f"bytes={s}-{s + 9}" for s in starts)
    assert proxy.bytes_sent() == 10 * len(starts)
    assert proxy.max_in_flight >= 2
    assert proxy.in_flight == 0


def test_access_denied_raises_permission_error(s3_proxy: ProxiedS3Bucket) -> None:
    s3_proxy.server.put_object(s3_proxy.name, "obj.bin", DATA)
    proxy = s3_proxy.proxy
    fs = _s3fs(s3_proxy.storage_options)
    path = f"{s3_proxy.url}/obj.bin"
    rule = proxy.add_fault("/obj.bin", status=403)

    with pytest.raises(PermissionError, match="Access Denied"):
        fs.cat_file(path, start=0, end=10)
    [get] = proxy.requests()  # not retried
    assert (get.method, get.status, get.fault) == ("GET", 403, "status")
    assert get.bytes > 0  # the XML error body

    proxy.reset()
    with pytest.raises(PermissionError):  # HEAD: no body, s3fs maps the bare status
        fs.info(path)
    assert [(r.method, r.status, r.bytes) for r in proxy.requests()] == [("HEAD", 403, 0)]
    assert rule.hits == 2

    proxy.clear_faults()
    assert fs.cat_file(path, start=0, end=10) == DATA[:10]


@pytest.mark.parametrize("status", [500, 503])
def test_transient_error_is_retried(s3_proxy: ProxiedS3Bucket, status: int) -> None:
    s3_proxy.server.put_object(s3_proxy.name, "obj.bin", DATA)
    proxy = s3_proxy.proxy
    fs = _s3fs(s3_proxy.storage_options)
    rule = proxy.add_fault("/obj.bin", status=status, times=1, method="GET")

    assert fs.cat_file(f"{s3_proxy.url}/obj.bin", start=0, end=10) == DATA[:10]
    assert [(r.status, r.fault, r.range) for r in proxy.requests()] == [
        (status, "status", "bytes=0-9"),
        (206, None, "bytes=0-9"),
    ]
    assert rule.hits == 1 and rule.expired


@pytest.mark.timeout(60)
def test_hung_request_times_out(s3_proxy: ProxiedS3Bucket) -> None:
    s3_proxy.server.put_object(s3_proxy.name, "obj.bin", DATA)
    proxy = s3_proxy.proxy
    options = {
        **s3_proxy.storage_options,
        "config_kwargs": {"read_timeout": 1, "connect_timeout": 1, "retries": {"max_attempts": 1}},
    }
    fs = _s3fs(options)
    # s3fs retries timeouts itself, in two nested loops for cat_file: retries**2 * botocore's attempts
    fs.retries = 1
    proxy.add_fault("/obj.bin", hang=True)

    with pytest.raises(botocore.exceptions.ReadTimeoutError):  # s3fs does not translate it to an OSError
        fs.cat_file(f"{s3_proxy.url}/obj.bin", start=0, end=10)
    records = proxy.requests()
    # botocore's max_attempts counts retries: two attempts
    assert [(r.method, r.fault, r.status) for r in records] == [("GET", "hang", None)] * 2
    # the fixture's proxy.stop() cancels the hung handlers


# ------------------------------------------------------------------------------ HTTP


def test_http_range_read_is_one_get(served: ServedDirectory) -> None:
    fs = HTTPFileSystem(skip_instance_cache=True)
    assert fs.cat_file(f"{served.url}/data.bin", start=10, end=20) == DATA[10:20]
    [get] = served.proxy.requests()
    assert (get.method, get.path, get.range, get.status, get.bytes) == ("GET", "/data.bin", "bytes=10-19", 206, 10)

    served.proxy.reset()
    assert fs.cat_file(f"{served.url}/data.bin", start=-5) == DATA[-5:]
    assert [(r.method, r.range, r.bytes) for r in served.proxy.requests()] == [("GET", "bytes=-5", 5)]


def test_static_server_range_and_headers_through_the_proxy(served: ServedDirectory) -> None:
    for base in (served.server.url, served.url):
        status, headers, body = _get(f"{base}/data.bin", headers={"Range": "bytes=10-19"})
        assert (status, body) == (206, DATA[10:20])
        assert headers["Content-Range"] == f"bytes 10-19/{len(DATA)}"
        assert headers["Content-Length"] == "10"

        status, headers, body = _get(f"{base}/data.bin", headers={"Range": "bytes=-5"})
        assert (status, body) == (206, DATA[-5:])

        status, headers, body = _get(f"{base}/data.bin", method="HEAD")
        assert (status, body, headers["Content-Length"]) == (200, b"", str(len(DATA)))
        assert headers["ETag"]

        assert _get(f"{base}/missing.bin")[0] == 404

    direct = _get(f"{served.server.url}/data.bin", method="HEAD")[1]
    proxied = _get(f"{served.url}/data.bin", method="HEAD")[1]
    for name in ("ETag", "Last-Modified", "Content-Type", "Accept-Ranges"):
        assert proxied[name] == direct[name]
    assert [r.status for r in served.proxy.requests()] == [206, 206, 200, 404, 200]


def test_fault_rules(served: ServedDirectory) -> None:
    proxy = served.proxy
    url = f"{served.url}/data.bin"
    with pytest.raises(ValueError, match="exactly one"):
        proxy.add_fault("/data.bin")
    with pytest.raises(ValueError, match="exactly one"):
        proxy.add_fault("/data.bin", status=500, hang=True)

    head_only = proxy.add_fault("/data.bin", status=503, method="head")
    assert _get(url)[0] == 200
    status, headers, body = _get(url, method="HEAD")
    assert (status, body) == (503, b"")
    assert _get(f"{served.url}/missing.bin", method="HEAD")[0] == 404  # another path
    assert head_only.hits == 1

    proxy.clear_faults()
    twice = proxy.add_fault("data", status=503, times=2)
    statuses = [_get(url)[0] for _ in range(3)]
    assert statuses == [503, 503, 200] and twice.expired

    proxy.clear_faults()
    proxy.add_fault("", status=403)
    status, headers, body = _get(url)
    assert status == 403 and headers["Content-Type"].startswith("application/xml")
    assert b"<Code>AccessDenied</Code>" in body
    proxy.clear_faults()
    proxy.add_fault("", status=500, code="SlowDown")
    assert b"<Code>SlowDown</Code>" in _get(url)[2]

    faulted = [r for r in proxy.requests() if r.fault]
    assert [r.status for r in faulted] == [503, 503, 503, 403, 500]
    assert proxy.count() == 8


def test_stop_cancels_hung_requests(served: ServedDirectory) -> None:
    proxy = served.proxy
    proxy.add_fault("/data.bin", hang=True)
    outcome: list[BaseException | bytes] = []

    def fetch() -> None:
        try:
            outcome.append(_get(f"{served.url}/data.bin")[2])
        except (OSError, http.client.HTTPException) as exc:
            outcome.append(exc)

    thread = threading.Thread(target=fetch, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while proxy.in_flight == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert proxy.in_flight == 1
    proxy.stop()  # returns although the handler never answers
    thread.join(timeout=30)
    assert not thread.is_alive()
    [error] = outcome
    assert isinstance(error, OSError | http.client.HTTPException)
    [record] = proxy.requests()
    assert (record.fault, record.status) == ("hang", None) and record.error == "CancelledError()"
    assert proxy.in_flight == 0
    with pytest.raises(RuntimeError, match="not running"):
        _ = proxy.url


def test_proxy_reports_an_unreachable_upstream(tmp_path: Path) -> None:
    with StaticHTTPServer(tmp_path) as server:
        dead = server.url
    with RecordingProxy(dead) as proxy:
        status, _, body = _get(f"{proxy.url}/x")
    assert status == 502 and b"upstream" in body
    [record] = proxy.requests()
    assert record.status == 502 and record.error is not None
