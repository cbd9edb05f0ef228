"""``python -m deltacells.cli``: the same as the ``deltacells`` command."""

from deltacells.cli import main

if __name__ == "__main__":  # pragma: no cover
    main()
