"""The lifecycle every test server shares: start on a free port of 127.0.0.1, ``url``, stop, ``with`` block.

- :class:`ServerLifecycle`: ``start()`` (returning ``self``), ``stop()`` (idempotent), ``url`` (an error
  unless running) and the context manager, around three hooks a server implements.
- :class:`AiohttpServer`: a :class:`ServerLifecycle` that serves an :mod:`aiohttp` application from an event
  loop of its own in a daemon thread, so it answers clients on any other loop or thread
  (:class:`~tests.servers.http.StaticHTTPServer`, :class:`~tests.servers.proxy.RecordingProxy`).

This module imports :mod:`aiohttp` only when an :class:`AiohttpServer` starts, so that moto's server
(:class:`~tests.servers.s3.S3Server`) can use it without.
"""

from __future__ import annotations

import abc
import asyncio
import socket
import threading
from types import TracebackType
from typing import TYPE_CHECKING, ClassVar, Self

if TYPE_CHECKING:
    from aiohttp import web

__all__ = ["TIMEOUT", "AiohttpServer", "ServerLifecycle"]

#: Seconds that starting or stopping a server may take.
TIMEOUT = 30


class ServerLifecycle(abc.ABC):
    """Start, stop and the URL of a server on 127.0.0.1; ``with server:`` starts it and stops it.

    A server implements :meth:`_is_running`, :meth:`_serve` (start, return the base URL once the server
    accepts connections) and :meth:`_shutdown` (stop whatever runs, doing nothing if nothing does), and names
    itself in :attr:`_what` for the error messages.
    """

    #: How error messages name the server ("the proxy is not running").
    _what: ClassVar[str] = "the server"

    def __init__(self) -> None:
        self._url: str | None = None

    @property
    def url(self) -> str:
        """The base URL, ``http://127.0.0.1:PORT``, without a trailing slash (only once started)."""
        if self._url is None:
            msg = f"{self._what} is not running: call start() first"
            raise RuntimeError(msg)
        return self._url

    def start(self) -> Self:
        """Start serving; returns once the server accepts connections.

        Returns
        -------
        Self
            ``self``, so ``server = Server(...).start()`` works.
        """
        if self._is_running():
            msg = f"{self._what} is already running"
            raise RuntimeError(msg)
        self._url = self._serve()
        return self

    def stop(self) -> None:
        """Stop serving (doing nothing if the server is not running)."""
        try:
            self._shutdown()
        finally:
            self._url = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @abc.abstractmethod
    def _is_running(self) -> bool:
        """Whether the server has been started and not stopped since."""

    @abc.abstractmethod
    def _serve(self) -> str:
        """Start the server; return its base URL once it accepts connections."""

    @abc.abstractmethod
    def _shutdown(self) -> None:
        """Stop the server and release what it holds; do nothing if it is not running."""


class AiohttpServer(ServerLifecycle):
    """An :mod:`aiohttp` application served on a free port of 127.0.0.1 from a daemon thread's event loop.

    A server implements :meth:`_make_app` and :meth:`_thread_name`, and extends :meth:`_close` to release
    what :meth:`_make_app` opened.
    """

    def __init__(self) -> None:
        super().__init__()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None

    @abc.abstractmethod
    async def _make_app(self) -> web.Application:
        """The application to serve (called on the server's event loop, by :meth:`start`)."""

    @abc.abstractmethod
    def _thread_name(self) -> str:
        """The name of the server's thread."""

    async def _close(self) -> None:
        """Stop serving the application (called on the server's event loop, by :meth:`stop`)."""
        if self._runner is not None:
            await self._runner.cleanup()
        self._runner = None

    def _is_running(self) -> bool:
        return self._thread is not None

    def _serve(self) -> str:
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name=self._thread_name(), daemon=True)
        thread.start()
        self._loop, self._thread = loop, thread
        try:
            port = asyncio.run_coroutine_threadsafe(self._listen(), loop).result(timeout=TIMEOUT)
        except BaseException:
            self.stop()
            raise
        return f"http://127.0.0.1:{port}"

    async def _listen(self) -> int:
        """Serve :meth:`_make_app` on a free port of 127.0.0.1; return the port."""
        from aiohttp import web

        app = await self._make_app()
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

    def _shutdown(self) -> None:
        if self._loop is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(timeout=TIMEOUT)
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
        thread.join(timeout=TIMEOUT)
        if not thread.is_alive():
            loop.close()
