"""How the command line reports problems: user errors as one line, ``error: <message>``, and warnings.

Errors the user can act on are deltacells' own (:class:`~deltacells.errors.DeltaCellsError`: a malformed
dataset, an existing output, data that are not counts...) and operating-system errors that name their file
(a missing input, a full disk, a permission denied). They are printed as ``error: <message>`` on stderr,
with exit status 1 and no traceback; warnings as ``warning: <message>``. Anything else is a bug, and shows
its traceback.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections.abc import Iterator
from typing import Any

import click

from deltacells.errors import DeltaCellsError


def is_user_error(exc: BaseException) -> bool:
    """Whether ``exc`` is reported as one line: one of deltacells' errors, or an ``OSError`` naming its file."""
    return isinstance(exc, DeltaCellsError) or (isinstance(exc, OSError) and exc.filename is not None)


class CLIError(DeltaCellsError, click.ClickException):
    """An error of the command line's own (a missing or unreadable input), reported as one line.

    It is printed as ``error: <message>``, with exit status 1.
    """

    def show(self, file: Any = None) -> None:
        """Print ``error: <message>`` to stderr."""
        click.echo(f"error: {self.format_message()}", err=True, file=file)


def error_message(exc: BaseException) -> str:
    """The one-line message that reports ``exc`` to the user.

    Parameters
    ----------
    exc
        An error for which :func:`is_user_error` holds.

    Returns
    -------
    str
        Its message on one line (a ``KeyError``'s unquoted), or the name of its type when it has none.
    """
    # str(KeyError) would quote the message.
    text = exc.args[0] if isinstance(exc, KeyError) and exc.args and isinstance(exc.args[0], str) else str(exc)
    return " ".join(text.split("\n")).strip() or type(exc).__name__


class ErrorReportingGroup(click.Group):
    """A group whose commands report user errors as ``error: <message>`` and warnings as ``warning: ...``."""

    def invoke(self, ctx: click.Context) -> Any:
        """Invoke the command, turning user errors (:func:`is_user_error`) into :class:`CLIError`, showing warnings.

        A reader that stops reading (``deltacells info DATASET | head -5``) is not an error: the output that no
        one reads is dropped and the command exits with status 0.
        """
        with cli_warnings():
            try:
                return super().invoke(ctx)
            except BrokenPipeError:
                drop_stdout()
                ctx.exit(0)
            except Exception as exc:
                if not is_user_error(exc):
                    raise
                raise CLIError(error_message(exc)) from exc


def drop_stdout() -> None:
    """Send what is still to be written to stdout nowhere: its reader has gone (a closed pipe).

    The Python documentation's recipe (``signal`` module, "Note on SIGPIPE"): point the descriptor at
    ``os.devnull``, so that flushing stdout at exit does not fail again.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)


@contextlib.contextmanager
def cli_warnings() -> Iterator[None]:
    """Show warnings once each as ``warning: <message>`` on stderr (deprecations of libraries hidden)."""

    def show(message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
        click.echo(f"warning: {message}", err=True)

    with warnings.catch_warnings():
        warnings.simplefilter("default")
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        warnings.filterwarnings("ignore", category=PendingDeprecationWarning)
        warnings.filterwarnings("ignore", category=FutureWarning)  # API changes: for programmers, not for the CLI
        warnings.showwarning = show
        yield
