"""Obs: the per-cell metadata sidecar (``obs/schema.json`` and parquet shards) and its local cache.

:func:`write_obs` writes a DataFrame as obs shards with one row group per tile; :class:`ObsStore`
localizes the columns asked for into a local cache (once per node) and reads them back as pandas.
"""

import lazy_loader

#: The public names, each with the module it lives in, are written once, in ``__init__.pyi`` (which type
#: checkers read); each name imports its module on first use, so that importing the package stays cheap.
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
