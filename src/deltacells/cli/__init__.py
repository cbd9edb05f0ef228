"""The ``deltacells`` command line: ``convert``, ``info``, ``validate`` and ``demo``.

Errors the user can act on (a missing input, an existing output, data that are not counts, a malformed
dataset...) are printed as one line, ``error: <message>``, on stderr, with exit status 1; no traceback.
Warnings are printed as ``warning: <message>``.

``deltacells info --json`` prints one JSON object (see :func:`dataset_info` for its keys); ``deltacells
validate --json`` prints :meth:`deltacells.validate.ValidationReport.to_dict`.

One module per command (``_convert``, ``_info``, ``_validate``, ``_demo_command``), and the pieces they
share: ``_errors`` (one-line errors and warnings), ``_options`` (``--storage-options``), ``_format``
(sizes and counts for people) and ``_inputs`` (the input formats of ``convert``: detection and reading).
"""

from __future__ import annotations

import click

from deltacells._version import __version__
from deltacells.cli._convert import convert
from deltacells.cli._demo_command import demo
from deltacells.cli._errors import CLIError, ErrorReportingGroup
from deltacells.cli._info import INFO_JSON_VERSION, dataset_info, info
from deltacells.cli._inputs import INPUT_FORMATS, detect_format, read_input
from deltacells.cli._validate import validate

__all__ = [
    "main",
    # the commands
    "convert",
    "info",
    "validate",
    "demo",
    # what they build on
    "CLIError",
    "INFO_JSON_VERSION",
    "INPUT_FORMATS",
    "dataset_info",
    "detect_format",
    "read_input",
]


@click.group(cls=ErrorReportingGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="deltacells")
def main() -> None:
    """Store, inspect and read single-cell count matrices as deltacells datasets.

    Run "deltacells COMMAND --help" for the options of a command.
    """


main.add_command(convert)
main.add_command(info)
main.add_command(validate)
main.add_command(demo)
