"""The format's rules, in one place: object names, the manifest and obs schema models, and checkers.

Every rule is a *checker*, a generator of :class:`Problem` that may return what it parsed: a reader raises
the first problem (:func:`first_problem_raises`), ``deltacells validate`` collects them all
(:func:`collect`). This package depends only on :mod:`deltacells.errors` (and on :mod:`deltacells.codec`
to decode tiles).

=====================  =========================================================================
module                 rules of
=====================  =========================================================================
``_names``             the name and path of every object of a dataset
``_problems``          :class:`Problem`, and raising or collecting what checkers find
``_manifest``          ``manifest.json`` (:class:`Manifest`, :func:`check_manifest`)
``_obs_schema``        ``obs/schema.json`` (:class:`ObsSchema`, :class:`ObsColumn`)
``_fingerprint``       the obs fingerprint (docs/format.md, decision 1)
``_listing``           the objects present against the manifest's flags and counts
``_sidecars``          ``gene_order.npy``, ``var_names.txt``, ``var.parquet``
``_tiles``             a tile against the manifest
``_shards``            an obs shard against the manifest and the schema
``_extras``            ``anndata.zarr``'s entry in the manifest's metadata (the AnnData's other elements)
``_dtype``             the dtype of the counts written, in the manifest's metadata (what reads return)
=====================  =========================================================================
"""

import lazy_loader

#: The public names, each with the module it lives in, are written once, in ``__init__.pyi`` (which type
#: checkers read); each name imports its module on first use, so that importing the package stays cheap.
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
