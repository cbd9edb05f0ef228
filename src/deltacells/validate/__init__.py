"""Deep validation of a dataset: every object fetched, decoded and checked against the manifest.

:func:`validate_dataset` is what ``deltacells validate`` runs. Unlike reading, which stops at the first
problem, it collects every problem it finds (the object at fault and what is wrong with it) and returns
them in a :class:`ValidationReport`; it never raises for a malformed dataset.

What is checked (docs/format.md):

* ``manifest.json``: present, JSON, the right format and version, every field and the counts consistent
  with each other. When the strict parse fails, the fields that can still be read are used for the
  checks below, so that one bad count does not hide the state of the tiles.
* tiles: each one fetched and decoded with every rule of the format checked (header, CRC-32, chunk
  table, frames, gene range...), its size against ``tile_bytes``, and its cells, nonzeros and
  ``n_genes`` against ``tile_cells``, ``tile_nnz`` and ``n_genes``; tile files the manifest does not
  list are reported too.
* obs: ``obs/schema.json`` parsed; ``obs_fingerprint`` recomputed from the schema text, ``tile_cells``
  and the manifest's shard SHA-256s; each shard's size and SHA-256 against the manifest, its columns
  and Arrow types against the schema, one row group per tile with ``tile_cells[t]`` rows, every row
  group readable and every category code within its vocabulary.
* sidecars: the ``has_*`` flags against the files present; ``gene_order.npy`` a little-endian ``int32`` permutation
  of ``0 .. n_genes - 1``; ``var_names.txt`` UTF-8 with ``n_genes`` lines; ``var.parquet`` readable with
  ``n_genes`` rows.

Every rule is one of :mod:`deltacells.format`'s checkers, the same the reader runs: the reader raises the
first problem, validation collects them all. One module per kind of object: ``_report`` (what is found),
``_access`` (reads that record failures), ``_manifest``, ``_files`` (flags, stray objects, sidecars),
``_tiles``, ``_obs``; ``_run`` runs them in order. ``_staging`` finds (and :func:`remove_staging` removes) what
killed writers left at the root: staging prefixes no commit names, reported with their ages, never as problems.
"""

from __future__ import annotations

from deltacells.validate._report import Problem, ValidationReport
from deltacells.validate._run import validate_dataset
from deltacells.validate._staging import DEFAULT_STAGING_AGE, StaleStaging, find_staging, remove_staging

__all__ = [
    "Problem",
    "ValidationReport",
    "validate_dataset",
    # what killed writers left at a dataset's root, and removing it
    "DEFAULT_STAGING_AGE",
    "StaleStaging",
    "find_staging",
    "remove_staging",
]
