"""Bounded, structure-aware fuzzing of the deltacells decoders (the command line: :mod:`deltacells_fuzz.cli`).

Run it as ``python fuzz/fuzz_decode.py`` (or ``python -m deltacells_fuzz`` with ``fuzz/`` on ``sys.path``).

Modules, one job each:

* :mod:`~deltacells_fuzz.targets`: the targets, their shares of the time, caps, paths, the environment of
  their workers, and :data:`~deltacells_fuzz.targets.JIT_MODULES`;
* :mod:`~deltacells_fuzz._tilebytes`: reading and writing the header and chunk-table fields of a tile, and
  the allocation budget its frames justify;
* :mod:`~deltacells_fuzz.oracles`: one input through its target, and the property checked on the result;
* :mod:`~deltacells_fuzz.seeds`: valid inputs to start from;
* :mod:`~deltacells_fuzz.mutators`: structure-aware mutations of tiles and JSON documents;
* :mod:`~deltacells_fuzz.corpus`: failure signatures, corpus file names, and replaying saved inputs;
* :mod:`~deltacells_fuzz.workers`: fuzzing one target in one process (random engine or atheris);
* :mod:`~deltacells_fuzz.supervisor`: running and restarting workers in subprocesses, collecting results;
* :mod:`~deltacells_fuzz.cli`: the command line and the report.

Importing this package does not import deltacells: the atheris worker imports it inside its
instrumentation hook.
"""

from __future__ import annotations

from .cli import main
from .corpus import corpus_name, known_signatures, replay, signature, target_of
from .mutators import JsonMutator, TileMutator, make_mutator
from .oracles import ManifestOracle, PropertyViolation, SchemaOracle, TileOracle, make_oracle
from .seeds import manifest_seeds, schema_seeds, seeds_for, tile_seeds
from .supervisor import supervise
from .targets import DEFAULT_CORPUS, JIT_MODULES, TARGETS, target_environment
from .workers import atheris_worker, random_worker, warm_up

__all__ = [
    "DEFAULT_CORPUS",
    "JIT_MODULES",
    "TARGETS",
    "target_environment",
    "PropertyViolation",
    "TileOracle",
    "ManifestOracle",
    "SchemaOracle",
    "make_oracle",
    "tile_seeds",
    "manifest_seeds",
    "schema_seeds",
    "seeds_for",
    "TileMutator",
    "JsonMutator",
    "make_mutator",
    "signature",
    "corpus_name",
    "target_of",
    "known_signatures",
    "replay",
    "warm_up",
    "random_worker",
    "atheris_worker",
    "supervise",
    "main",
]
