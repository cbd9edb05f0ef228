"""Every exception deltacells defines derives from DeltaCellsError, and lives in deltacells.errors."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import deltacells
from deltacells import errors


def all_modules() -> list[str]:
    names = ["deltacells"]
    for info in pkgutil.walk_packages(deltacells.__path__, prefix="deltacells."):
        if info.name.startswith("deltacells.testing"):  # imports pytest: a test helper, not the package
            continue
        names.append(info.name)
    return names


@pytest.mark.parametrize("module_name", all_modules())
def test_every_exception_class_derives_from_one_base(module_name: str) -> None:
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:  # deltacells.loader._torch needs torch, an optional dependency
        if exc.name != "torch":
            raise
        pytest.skip(f"{module_name} needs torch")
    for name, value in vars(module).items():
        if not (inspect.isclass(value) and issubclass(value, BaseException)) or value.__module__ != module_name:
            continue
        if issubclass(value, Warning):
            assert issubclass(value, errors.DeltaCellsWarning), f"{module_name}.{name}"
            continue
        assert issubclass(value, errors.DeltaCellsError), f"{module_name}.{name} does not derive from DeltaCellsError"
        # the command line's one-line error is the only one defined elsewhere (it is a click exception too)
        assert module_name in ("deltacells.errors", "deltacells.cli._errors"), f"{name} is not in deltacells.errors"


@pytest.mark.parametrize(
    ("error", "builtin"),
    [
        (errors.FormatError, ValueError),
        (errors.MissingObjectError, FileNotFoundError),
        (errors.InvalidValueError, ValueError),
        (errors.InvalidTypeError, TypeError),
        (errors.UnknownKeyError, KeyError),
        (errors.OutOfRangeError, IndexError),
        (errors.OutputExistsError, FileExistsError),
        (errors.ExceptionPolicyError, ValueError),
        (errors.ObsCacheError, OSError),
    ],
)
def test_errors_are_also_the_builtin_a_caller_expects(error: type, builtin: type) -> None:
    assert issubclass(error, errors.DeltaCellsError) and issubclass(error, builtin)


def test_unknown_key_error_is_not_quoted() -> None:
    assert str(errors.UnknownKeyError("obs has no column 'x'")) == "obs has no column 'x'"
