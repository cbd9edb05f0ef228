"""moto's S3 server on 127.0.0.1, in a thread of the test process."""

from __future__ import annotations

import logging
import threading
import urllib.request
from typing import TYPE_CHECKING, Any

from moto.moto_server.threaded_moto_server import ThreadedMotoServer
from tests.servers._lifecycle import ServerLifecycle

if TYPE_CHECKING:
    from botocore.client import BaseClient

__all__ = ["ACCESS_KEY", "REGION", "SECRET_KEY", "S3Server"]

#: The credentials every client of the test server uses; moto does not check signatures.
ACCESS_KEY = "testing"
SECRET_KEY = "testing"
REGION = "us-east-1"


class S3Server(ServerLifecycle):
    """moto's S3-protocol server (:class:`moto.server.ThreadedMotoServer`) on 127.0.0.1.

    moto's state (buckets, objects) is global to the process: every server started in one process, and
    ``moto.mock_aws``, see the same buckets. Under pytest-xdist each worker is a process with its own server.

    :meth:`start` runs the server in a daemon thread and returns once it accepts connections (setting the
    ``werkzeug`` logger, if it has no level yet, to ``WARNING`` so that the server does not log each
    request); :attr:`endpoint_url` (also :attr:`url`) is then ``http://127.0.0.1:PORT``. :meth:`stop` stops
    it (doing nothing if it is not running).

    Parameters
    ----------
    port
        The port to listen on; ``0`` lets the operating system choose a free one (so parallel test workers
        never collide).

    Examples
    --------
    >>> with S3Server() as server:  # doctest: +SKIP
    ...     server.make_bucket("data")
    ...     fs = s3fs.S3FileSystem(**server.storage_options())
    ...     fs.pipe_file("data/key", b"payload")
    """

    _what = "the S3 server"

    def __init__(self, port: int = 0) -> None:
        super().__init__()
        self._port = port
        self._server: ThreadedMotoServer | None = None
        self._client: BaseClient | None = None

    @property
    def endpoint_url(self) -> str:
        """The server's URL, ``http://127.0.0.1:PORT`` (only once started); the same as :attr:`url`."""
        return self.url

    @property
    def _endpoint_url(self) -> str | None:
        # benchmarks/bench_object_storage.py sets it, to use a server that runs in another process
        return self._url

    @_endpoint_url.setter
    def _endpoint_url(self, value: str | None) -> None:
        self._url = value

    def _is_running(self) -> bool:
        return self._server is not None

    def _serve(self) -> str:
        # werkzeug logs every request at INFO (to a stderr handler of its own unless the logger has a level)
        werkzeug_logger = logging.getLogger("werkzeug")
        if werkzeug_logger.level == logging.NOTSET:
            werkzeug_logger.setLevel(logging.WARNING)
        _atomic_conditional_puts()
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=self._port, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        self._server = server
        return f"http://{host}:{port}"

    def _shutdown(self) -> None:
        server, self._server = self._server, None
        if self._client is not None:
            self._client.close()
            self._client = None
        if server is not None:
            server.stop()

    def reset(self) -> None:
        """Forget every bucket and object (``POST /moto-api/reset``); this resets all of moto in the process."""
        request = urllib.request.Request(f"{self.endpoint_url}/moto-api/reset", method="POST", data=b"")
        with urllib.request.urlopen(request, timeout=30) as response:
            response.read()

    @property
    def client(self) -> BaseClient:
        """A synchronous botocore S3 client talking to the server directly (made on first use)."""
        if self._client is None:
            import botocore.config
            import botocore.session

            session = botocore.session.Session()
            self._client = session.create_client(
                "s3",
                endpoint_url=self.endpoint_url,
                region_name=REGION,
                aws_access_key_id=ACCESS_KEY,
                aws_secret_access_key=SECRET_KEY,
                config=botocore.config.Config(retries={"max_attempts": 1}, s3={"addressing_style": "path"}),
            )
        return self._client

    def make_bucket(self, name: str) -> str:
        """Create a bucket on the server directly (not through any proxy).

        Parameters
        ----------
        name
            The bucket name (3-63 characters of lower-case letters, digits, ``-`` and ``.``).

        Returns
        -------
        str
            ``name``.
        """
        self.client.create_bucket(Bucket=name)
        return name

    def put_object(self, bucket: str, key: str, data: bytes) -> None:
        """FsspecStore ``data`` at ``key`` in ``bucket`` directly on the server (not through any proxy)."""
        self.client.put_object(Bucket=bucket, Key=key, Body=data)

    def storage_options(self, endpoint_url: str | None = None) -> dict[str, Any]:
        """s3fs storage options (``S3FileSystem(**options)``) for this server or a proxy in front of it.

        The options carry the credentials and the region, so neither s3fs nor botocore looks for credentials
        elsewhere or asks the network for a region.

        Parameters
        ----------
        endpoint_url
            The endpoint s3fs talks to; the server itself by default.

        Returns
        -------
        dict
            ``key``, ``secret`` and ``client_kwargs`` (``endpoint_url``, ``region_name``).
        """
        return {
            "key": ACCESS_KEY,
            "secret": SECRET_KEY,
            "client_kwargs": {"endpoint_url": endpoint_url or self.endpoint_url, "region_name": REGION},
        }


_WRITES = threading.RLock()


def _atomic_conditional_puts() -> None:
    """Make moto's conditional PUTs (``If-Match`` / ``If-None-Match``) atomic, as S3's are.

    moto compares the ETag and stores the object in two steps, and its server answers requests on threads: two
    conditional PUTs of one key could both pass the comparison, and a copy (or a plain PUT) could land between
    a conditional PUT's comparison and its write, which the conditional PUT would then overwrite. S3 guarantees
    that a conditional write compares and writes in one step against every other write (the other gets 412,
    or 409 while the first is in flight); the appends' commits and roll-forwards rely on that guarantee, so the
    test server provides it by serialising the requests that write an object whole (PUT, copy).
    """
    from moto.s3.responses import S3Response

    for name in ("put_object", "copy_object"):
        original = getattr(S3Response, name)
        if getattr(original, "serialised", False):
            continue

        def serialised(self: S3Response, original: Any = original) -> Any:
            with _WRITES:
                return original(self)

        serialised.serialised = True  # type: ignore[attr-defined]
        setattr(S3Response, name, serialised)
