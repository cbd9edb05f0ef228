"""Options shared by several commands: ``--storage-options`` (fsspec options as JSON), ``--io-concurrency``."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click

from deltacells.codec import ARCHIVE_LEVEL, DEFAULT_LEVEL, resolve_level
from deltacells.errors import DeltaCellsError

if TYPE_CHECKING:
    from collections.abc import Callable

    from click.decorators import FC

    #: A click parameter type converting to ``int`` (recent click's ParamType is generic in the value it gives).
    IntParamType = click.ParamType[int]
else:
    IntParamType = click.ParamType  # unsubscripted: not generic at run time in every click this package supports


def parse_storage_options(text: str | None) -> dict[str, Any] | None:
    """The value of ``--storage-options`` as a dict.

    Parameters
    ----------
    text
        The option's value, a JSON object (``None`` when not given).

    Returns
    -------
    dict or None
        The fsspec options, or ``None`` when the option was not given.

    Raises
    ------
    click.BadParameter
        When ``text`` is not a JSON object.
    """
    if text is None:
        return None
    try:
        options = json.loads(text)
    except json.JSONDecodeError as exc:
        msg = f"--storage-options must be a JSON object, e.g. '{{\"anon\": true}}' ({exc})"
        raise click.BadParameter(msg) from exc
    if not isinstance(options, dict):
        msg = "--storage-options must be a JSON object, e.g. '{\"anon\": true}'"
        raise click.BadParameter(msg)
    return options


def storage_option(what: str) -> Callable[[FC], FC]:
    """The ``--storage-options`` option, for the remote ``what`` (an argument's metavar, e.g. ``"PATH"``)."""
    return click.option(
        "--storage-options",
        "storage_options",
        metavar="JSON",
        default=None,
        help=f"fsspec options for a remote {what}, as a JSON object (e.g. '{{\"anon\": true}}').",
    )


def io_concurrency_option(what: str) -> Callable[[FC], FC]:
    """The ``--io-concurrency`` option: the most requests in flight at once for ``what`` (e.g. ``"uploads"``)."""
    return click.option(
        "--io-concurrency",
        "io_concurrency",
        type=click.IntRange(min=1),
        metavar="N",
        default=None,
        help=f"The most {what} in flight at once [default: 32 on object storage, 8 on a local disk].",
    )


class ZstdLevel(IntParamType):
    """``--level``: a zstd level ``1 .. 22`` or a preset name (``default``, ``archive``), given as its integer."""

    name = "LEVEL"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        """The integer level that ``value`` stands for (see ``deltacells.codec._encode.resolve_level``).

        Raises
        ------
        click.BadParameter
            For an unknown name or a number outside ``1 .. 22``.
        """
        try:
            return resolve_level(value if isinstance(value, int) else str(value))
        except DeltaCellsError as exc:
            self.fail(str(exc), param, ctx)


def level_option() -> Callable[[FC], FC]:
    """``--level``: zstd level or preset (default ``default``), as the integer that ``write_deltacells`` takes."""
    return click.option(
        "--level",
        type=ZstdLevel(),
        default="default",
        show_default=True,
        help=(
            f"zstd level: 'default' (level {DEFAULT_LEVEL}: about as fast as writing a gzip h5ad), 'archive' "
            f"(level {ARCHIVE_LEVEL}: the smallest files, much slower to write, as fast to read) or 1-22."
        ),
    )
