"""obs as a lazy frame: constant-time opening at atlas scale, the pandas calls users make, anndata's machinery.

A pandas obs costs a Python string per cell for its names, a full load per column, and anndata's check of
the names for duplicates: time and memory that grow with the cells. Above a million cells (the rule is
``read_deltacells``'s ``lazy_obs``) obs is instead a :class:`LazyObs`, anndata's xarray-backed ``Dataset2D``
whose columns are read from the local Arrow cache when they are used, and which answers column access,
``head``, ``iloc``, ``loc`` and the names as a pandas obs does.

- :mod:`._source`: what is read, with an eager read's dtypes (columns and names for chosen cells, name lookups);
- :mod:`._backend`: the xarray variables and index anndata's own code reads;
- :mod:`._cell_numbers`: the whole atlas's ``obs_names``, cell numbers that the stored names also find;
- :mod:`._frame`: :class:`LazyObs` itself.
"""

from __future__ import annotations

from deltacells.io._lazy_obs._backend import OBS_DIM
from deltacells.io._lazy_obs._cell_numbers import CellNumbers
from deltacells.io._lazy_obs._frame import LazyObs, add_lazy_columns, lazy_obs_frame
from deltacells.io._lazy_obs._source import ObsSource

__all__ = ["OBS_DIM", "CellNumbers", "LazyObs", "ObsSource", "add_lazy_columns", "lazy_obs_frame"]
