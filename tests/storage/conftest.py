"""Fixtures of the object storage tests: moto's S3 server, a recording proxy, a static HTTP server.

All servers listen on 127.0.0.1 on ports the operating system picks, so pytest-xdist workers never collide.
The fixtures skip the tests that use them when moto, s3fs or aiohttp is not installed; the other tests of
this directory do not need them.

- ``s3_server`` (session): :class:`~tests.servers.s3.S3Server`.
- ``s3_bucket``: :class:`~tests.servers.S3Bucket`, a fresh bucket reached directly.
- ``s3_proxy``: :class:`~tests.servers.ProxiedS3Bucket`, a fresh bucket behind a
  :class:`~tests.servers.proxy.RecordingProxy`.
- ``http_server``: a factory ``serve(directory) -> ServedDirectory`` (a static server behind a proxy).
- ``aws_env``: AWS environment variables for the fake credentials, and none that could reach the network.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

try:
    import tests.servers  # noqa: F401 - pytest's importlib mode makes ``tests`` a namespace package
except ImportError:  # pragma: no cover - run with a rootdir that does not make ``tests`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.servers import ProxiedS3Bucket, S3Bucket, ServedDirectory

if TYPE_CHECKING:
    from tests.servers.http import StaticHTTPServer
    from tests.servers.proxy import RecordingProxy
    from tests.servers.s3 import S3Server

#: Environment variables that would make botocore use other credentials, endpoints or a network proxy.
_AWS_UNSET = (
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_ROLE_ARN",
    "AWS_ROLE_SESSION_NAME",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_USE_FIPS_ENDPOINT",
    "AWS_USE_DUALSTACK_ENDPOINT",
    "AWS_S3_US_EAST_1_REGIONAL_ENDPOINT",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
)


def _require_servers() -> None:
    """Skip the test unless the packages the servers and s3fs need are installed."""
    pytest.importorskip("aiohttp")
    pytest.importorskip("moto.server")
    pytest.importorskip("s3fs")


def _clear_fsspec_instances() -> None:
    """Forget the cached s3fs and HTTP filesystem instances (they are keyed by their options, not by test)."""
    if "s3fs" in sys.modules:
        sys.modules["s3fs"].S3FileSystem.clear_instance_cache()
    if "fsspec.implementations.http" in sys.modules:
        sys.modules["fsspec.implementations.http"].HTTPFileSystem.clear_instance_cache()


def _unique_bucket() -> str:
    return f"deltacells-test-{uuid.uuid4().hex[:20]}"


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fake AWS credentials in the environment; no profile, config file, metadata service or network proxy."""
    for name in _AWS_UNSET:
        monkeypatch.delenv(name, raising=False)
    for name in list(os.environ):
        if name.startswith(("FSSPEC_S3", "FSSPEC_HTTP")):  # fsspec's configuration of these filesystems
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """moto's S3 server on 127.0.0.1, started once per session (per xdist worker)."""
    _require_servers()
    from tests.servers.s3 import S3Server

    server = S3Server().start()
    try:
        yield server
    finally:
        _clear_fsspec_instances()
        server.stop()


@pytest.fixture
def s3_bucket(s3_server: S3Server, aws_env: None) -> Iterator[S3Bucket]:
    """A fresh, empty bucket on :func:`s3_server`, with s3fs options that reach the server directly."""
    name = s3_server.make_bucket(_unique_bucket())
    try:
        yield S3Bucket(name=name, url=f"s3://{name}", storage_options=s3_server.storage_options(), server=s3_server)
    finally:
        _clear_fsspec_instances()


@pytest.fixture
def s3_proxy(s3_server: S3Server, aws_env: None) -> Iterator[ProxiedS3Bucket]:
    """A fresh, empty bucket on :func:`s3_server` and a :class:`RecordingProxy` in front of the server.

    The bucket is made on the server directly, so the proxy's log starts empty; ``storage_options`` point s3fs
    at the proxy. The proxy has no latency and no faults until the test sets them.
    """
    from tests.servers.proxy import RecordingProxy

    name = s3_server.make_bucket(_unique_bucket())
    proxy = RecordingProxy(s3_server.endpoint_url).start()
    try:
        yield ProxiedS3Bucket(
            proxy=proxy,
            name=name,
            url=f"s3://{name}",
            storage_options=s3_server.storage_options(proxy.url),
            direct_storage_options=s3_server.storage_options(),
            server=s3_server,
        )
    finally:
        _clear_fsspec_instances()
        proxy.stop()


@pytest.fixture
def http_server() -> Iterator[Callable[[str | os.PathLike[str]], ServedDirectory]]:
    """A factory ``serve(directory)`` that serves a directory over HTTP (with ``Range``) behind a proxy.

    Each call starts a :class:`~tests.servers.http.StaticHTTPServer` and a :class:`RecordingProxy` in front of
    it and returns a :class:`~tests.servers.ServedDirectory` (``url`` through the proxy, ``proxy``,
    ``server``); all are stopped after the test.
    """
    _require_servers()
    from tests.servers.http import StaticHTTPServer
    from tests.servers.proxy import RecordingProxy

    running: list[StaticHTTPServer | RecordingProxy] = []

    def serve(directory: str | os.PathLike[str]) -> ServedDirectory:
        server = StaticHTTPServer(directory).start()
        running.append(server)
        proxy = RecordingProxy(server.url).start()
        running.append(proxy)
        return ServedDirectory(url=proxy.url, proxy=proxy, server=server)

    try:
        yield serve
    finally:
        _clear_fsspec_instances()
        for item in reversed(running):
            item.stop()
