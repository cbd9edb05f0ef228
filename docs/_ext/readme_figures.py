"""README.md's figures, kept equal to those the documentation computes from ``docs/_data``.

Sphinx does not build ``README.md``, so it cannot use substitutions: each figure it quotes sits between two
markers, ``<!-- figure: read_vs_h5ad_gzip -->3.10<!-- /figure -->``, the name being one that ``figures.py``
computes. ``python docs/_ext/readme_figures.py --write`` rewrites every marked value from the JSON of
``docs/_data`` (``nox -s bench`` does, after the benchmarks); ``--check`` exits with 1, naming them, when some
differ. ``tests/test_docs_figures.py`` checks them too, and ``typed_figures.py`` that no other figure is typed.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
README = HERE.parents[1] / "README.md"
DATA = HERE.parent / "_data"
#: A marked figure: its name, then its value.
MARKER = re.compile(r"<!-- figure: (\w+) -->(.*?)<!-- /figure -->", re.DOTALL)


def marked(text: str) -> list[tuple[str, str]]:
    """The ``(name, value)`` of every marked figure of ``text``, in order."""
    return [(found.group(1), found.group(2)) for found in MARKER.finditer(text)]


def rewrite(text: str, values: dict[str, str]) -> str:
    """``text`` with every marked figure's value replaced by ``values[name]``.

    Raises
    ------
    KeyError
        For a marker whose name ``values`` does not have.
    """
    return MARKER.sub(lambda found: f"<!-- figure: {found.group(1)} -->{values[found.group(1)]}<!-- /figure -->", text)


def differences(text: str, values: dict[str, str]) -> list[str]:
    """One line per marked figure whose value is not ``values[name]`` (or whose name is unknown)."""
    out = []
    for name, value in marked(text):
        if name not in values:
            out.append(f"{name}: no such figure (docs/_ext/figures.py computes {', '.join(sorted(values))})")
        elif value != values[name]:
            out.append(f"{name}: README.md says {value!r}, docs/_data gives {values[name]!r}")
    return out


def main(argv: list[str] | None = None) -> int:
    """Rewrite (``--write``) or check (``--check``) README.md's marked figures; the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", action="store_true", help="rewrite the marked figures from docs/_data")
    action.add_argument("--check", action="store_true", help="exit with 1 if a marked figure differs")
    parser.add_argument("--readme", type=Path, default=README)
    parser.add_argument("--data", type=Path, default=DATA)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(HERE))
    from figures import figures

    values = figures(args.data)
    text = args.readme.read_text(encoding="utf-8")
    wrong = differences(text, values)
    if args.check:
        print("\n".join(wrong) or f"{args.readme.name}: {len(marked(text))} figures, all as docs/_data gives them")
        return 1 if wrong else 0
    new = rewrite(text, values)
    if new != text:
        args.readme.write_text(new, encoding="utf-8")
    print(f"{args.readme.name}: {len(wrong)} of {len(marked(text))} figures rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
