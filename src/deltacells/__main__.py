"""``python -m deltacells``: the ``deltacells`` command, also where its script is not on ``PATH``.

An environment that is not activated (``.venv/bin/python`` called by its path) has no ``deltacells`` on ``PATH``;
``python -m deltacells`` runs the command with that interpreter all the same (in a notebook:
``!{sys.executable} -m deltacells info DATASET``).
"""

from deltacells.cli import main

if __name__ == "__main__":  # pragma: no cover
    main(prog_name="deltacells")
