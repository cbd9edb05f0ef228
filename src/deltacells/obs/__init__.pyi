# deltacells.obs's public names, each from the module it lives in: the one list of them
# (lazy_loader reads it at run time, type checkers in place of __init__.py).

from ._cache import ObsStore as ObsStore, resolve_cache_dir as resolve_cache_dir
from ._encode import DEFAULT_MAX_CATEGORIES as DEFAULT_MAX_CATEGORIES
from ._files import column_file_name as column_file_name
from ._write import (
    DEFAULT_OBS_TILES_PER_FILE as DEFAULT_OBS_TILES_PER_FILE,
    ObsWriteResult as ObsWriteResult,
    check_obs as check_obs,
    write_obs as write_obs,
)

# joining the obs of several datasets as anndata.concat does (a collection's obs: core.CollectionObs)
from ._concat import (
    as_joined as as_joined,
    empty_values as empty_values,
    joined_dtypes as joined_dtypes,
    missing_values as missing_values,
    renumbered as renumbered,
)
from ._dtypes import default_string_dtype as default_string_dtype

# appending cells: their obs added to the dataset's shards
from ._append import append_obs as append_obs
