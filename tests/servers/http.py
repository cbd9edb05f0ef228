"""A static file HTTP server on 127.0.0.1 with ``Range`` support, in a thread of the test process."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
from pathlib import Path
from types import TracebackType
from typing import Self

from aiohttp import web

__all__ = ["StaticHTTPServer"]


class StaticHTTPServer:
    """Serve the files under a directory over HTTP, with ``Range`` requests, ``HEAD`` and ``Content-Length``.

    The files are served by :mod:`aiohttp`'s static route (:class:`aiohttp.web.FileResponse`): a
    ``Range: bytes=a-b`` request gets ``206 Partial Content`` with only those bytes, a suffix range
    (``bytes=-n``) the last ``n`` bytes. Directory listings are off: a missing file is a 404.

    Parameters
    ----------
    directory
        The directory served at the root of :attr:`url`.

    Examples
    --------
    >>> with StaticHTTPServer(tmp_path) as server:  # doctest: +SKIP
    ...     fsspec.filesystem("http").cat_file(f"{server.url}/file.bin", start=10, end=20)
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory).resolve()
        if not self.directory.is_dir():
            msg = f"not a directory: {self.directory}"
            raise NotADirectoryError(msg)
        self._url: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        """The base URL, ``http://127.0.0.1:PORT``, without a trailing slash (only once started)."""
        if self._url is None:
            msg = "the HTTP server is not running: call start() first"
            raise RuntimeError(msg)
        return self._url

    def start(self) -> Self:
        """Bind a free port on 127.0.0.1 and serve in a background thread.

        Returns
        -------
        StaticHTTPServer
            ``self``.
        """
        if self._thread is not None:
            msg = "the HTTP server is already running"
            raise RuntimeError(msg)
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name=f"StaticHTTPServer({self.directory})", daemon=True)
        thread.start()
        self._loop, self._thread = loop, thread
        try:
            port = asyncio.run_coroutine_threadsafe(self._start(), loop).result(timeout=30)
        except BaseException:
            self.stop()
            raise
        self._url = f"http://127.0.0.1:{port}"
        return self

    async def _start(self) -> int:
        app = web.Application()
        app.router.add_static("/", self.directory, show_index=False, follow_symlinks=False)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        try:
            await web.SockSite(self._runner, sock).start()
        except BaseException:
            sock.close()
            raise
        return int(sock.getsockname()[1])

    def stop(self) -> None:
        """Stop serving (doing nothing if the server is not running)."""
        if self._loop is None:
            return
        try:
            if self._runner is not None:
                asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(timeout=30)
        finally:
            self._stop_loop()

    def _stop_loop(self) -> None:
        loop, thread = self._loop, self._thread
        self._loop = self._thread = None
        self._url = None
        self._runner = None
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)
        if not thread.is_alive():
            loop.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
