"""A static file HTTP server on 127.0.0.1 with ``Range`` support, in a thread of the test process."""

from __future__ import annotations

import os
from pathlib import Path

from aiohttp import web
from tests.servers._lifecycle import AiohttpServer

__all__ = ["StaticHTTPServer"]


class StaticHTTPServer(AiohttpServer):
    """Serve the files under a directory over HTTP, with ``Range`` requests, ``HEAD`` and ``Content-Length``.

    The files are served by :mod:`aiohttp`'s static route (:class:`aiohttp.web.FileResponse`): a
    ``Range: bytes=a-b`` request gets ``206 Partial Content`` with only those bytes, a suffix range
    (``bytes=-n``) the last ``n`` bytes. Directory listings are off: a missing file is a 404.

    :meth:`start` binds a free port on 127.0.0.1 and serves in a background thread; :meth:`stop` stops
    serving (doing nothing if the server is not running); :attr:`url` is the base URL,
    ``http://127.0.0.1:PORT``, without a trailing slash (only once started).

    Parameters
    ----------
    directory
        The directory served at the root of :attr:`url`.

    Examples
    --------
    >>> with StaticHTTPServer(tmp_path) as server:  # doctest: +SKIP
    ...     fsspec.filesystem("http").cat_file(f"{server.url}/file.bin", start=10, end=20)
    """

    _what = "the HTTP server"

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory).resolve()
        if not self.directory.is_dir():
            msg = f"not a directory: {self.directory}"
            raise NotADirectoryError(msg)
        super().__init__()

    def _thread_name(self) -> str:
        return f"StaticHTTPServer({self.directory})"

    async def _make_app(self) -> web.Application:
        app = web.Application()
        app.router.add_static("/", self.directory, show_index=False, follow_symlinks=False)
        return app
