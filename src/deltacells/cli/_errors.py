"""How the command line reports problems: user errors as one line, ``error: <message>``, and warnings.

Errors the user can act on are deltacells' own (:class:`~deltacells.errors.DeltaCellsError`: a malformed
dataset, an existing output, data that are not counts...) and operating-system errors that name their file
(a missing input, a full disk, a permission denied). They are printed as ``error: <message>`` on stderr,
with exit status 1 and no traceback; warnings as ``warning: <message>``. Anything else is a bug, and shows
its traceback. A command stopped by Ctrl-C says so in one line, with what it leaves (see :func:`on_interrupt`),
and exits with status 130 (128 + SIGINT, as shells report it), instead of click's bare ``Aborted!``.
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

#: The exit status of a command stopped by Ctrl-C (SIGINT): 128 + 2, as a shell reports a process it killed.
INTERRUPTED_EXIT_CODE = 130

#: The key of ``click.Context.meta`` (shared by a command's context and the group's) holding what an
#: interruption of the running command leaves.
_INTERRUPT_KEY = "deltacells.interrupted"

#: What an interrupted command leaves, unless it said otherwise (:func:`on_interrupt`): commands that only read.
_READ_ONLY = "it only reads: nothing was changed"


def on_interrupt(what_it_leaves: str) -> None:
    """Say what stopping the running command by Ctrl-C from now on leaves behind (printed if it happens).

    Parameters
    ----------
    what_it_leaves
        The end of the line ``interrupted: deltacells COMMAND stopped (Ctrl-C); <what_it_leaves>``, saying what
        was written and what to do (``"OUT was not written (what had been written is removed)"``). A command
        that never calls it leaves nothing: it only reads.
    """
    click.get_current_context().meta[_INTERRUPT_KEY] = what_it_leaves


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
        one reads is dropped and the command exits with status 0. Ctrl-C prints ``interrupted: deltacells COMMAND
        stopped (Ctrl-C); <what it leaves>`` on stderr (see :func:`on_interrupt`) and exits with status 130.
        """
        with cli_warnings():
            try:
                return super().invoke(ctx)
            except BrokenPipeError:
                drop_stdout()
                ctx.exit(0)
            except KeyboardInterrupt:
                leaves = ctx.meta.get(_INTERRUPT_KEY, _READ_ONLY)
                after_the_terminal_echo = "\n" if sys.stderr.isatty() else ""  # "^C", maybe a progress bar
                click.echo(
                    f"{after_the_terminal_echo}interrupted: deltacells {ctx.invoked_subcommand} stopped (Ctrl-C); "
                    f"{leaves}",
                    err=True,
                )
                ctx.exit(INTERRUPTED_EXIT_CODE)
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
