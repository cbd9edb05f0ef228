"""Real servers on 127.0.0.1 for the object storage tests, and what the fixtures of ``tests/storage`` return.

- :class:`~tests.servers.proxy.RecordingProxy`: an HTTP reverse proxy that adds latency, logs every request
  (method, path, Range, status, bytes) and injects faults (S3-style errors, hung requests).
- :class:`~tests.servers.s3.S3Server`: moto's S3 server in a thread.
- :class:`~tests.servers.http.StaticHTTPServer`: a static file server with ``Range`` support.

All three share their lifecycle (``start()``, ``stop()``, ``url``, ``with`` block) through
:mod:`tests.servers._lifecycle`. :func:`tests.servers.datasets.obs_adata` makes the AnnData the obs network
tests write.

The servers' submodules import ``aiohttp`` and ``moto`` at the top: import them only after checking these are
installed (the fixtures in ``tests/storage/conftest.py`` do so with :func:`pytest.importorskip`). This module,
``_lifecycle`` and ``datasets`` import neither.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from tests.servers.http import StaticHTTPServer
    from tests.servers.proxy import RecordingProxy
    from tests.servers.s3 import S3Server

__all__ = ["ProxiedS3Bucket", "S3Bucket", "ServedDirectory"]


@dataclass(frozen=True)
class S3Bucket:
    """A fresh bucket on the test S3 server, reached directly (fixture ``s3_bucket``).

    Attributes
    ----------
    name
        The bucket name, unique in the test session.
    url
        ``s3://<name>``.
    storage_options
        s3fs options (``S3FileSystem(**storage_options)``) pointing at the server.
    server
        The server, for :meth:`~tests.servers.s3.S3Server.put_object` and such.
    """

    name: str
    url: str
    storage_options: dict[str, Any]
    server: S3Server


@dataclass(frozen=True)
class ProxiedS3Bucket:
    """A fresh bucket on the test S3 server, reached through a :class:`RecordingProxy` (fixture ``s3_proxy``).

    The bucket was made on the server directly, so the proxy's log starts empty.

    Attributes
    ----------
    proxy
        The proxy in front of the server (latency 0, no faults at first).
    name
        The bucket name, unique in the test session.
    url
        ``s3://<name>``.
    storage_options
        s3fs options pointing at the proxy.
    direct_storage_options
        s3fs options pointing at the server itself (to set up data without touching the log).
    server
        The server.
    """

    proxy: RecordingProxy
    name: str
    url: str
    storage_options: dict[str, Any]
    direct_storage_options: dict[str, Any]
    server: S3Server


class ServedDirectory(NamedTuple):
    """A directory served over HTTP behind a :class:`RecordingProxy` (what fixture ``http_server`` returns).

    Attributes
    ----------
    url
        The base URL through the proxy, ``http://127.0.0.1:PORT`` (no trailing slash): a file ``a/b.bin`` of
        the directory is at ``f"{url}/a/b.bin"``.
    proxy
        The proxy, whose log records every request.
    server
        The static file server behind the proxy; its own ``url`` bypasses the proxy.
    """

    url: str
    proxy: RecordingProxy
    server: StaticHTTPServer
