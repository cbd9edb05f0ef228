# deltacells.core's public names, each from the module it lives in: the one list of them
# (lazy_loader reads it at run time, type checkers in place of __init__.py).

from ._collection import Collection as Collection
from ._collection_obs import CollectionObs as CollectionObs
from ._dataset import Dataset as Dataset
from ._open import open_dataset as open_dataset

# opening datasets whose manifests were fetched together (a collection's)
from ._open import dataset_of_manifest as dataset_of_manifest, not_a_dataset as not_a_dataset
from ._rows import RowSource as RowSource
from ._sizes import sidecar_bytes as sidecar_bytes
from ._writer import DatasetWriter as DatasetWriter

# the dtype reads give: float32 for a dataset that records none; several datasets' as anndata.concat's
from ._dtypes import UNRECORDED_DTYPE as UNRECORDED_DTYPE, promoted_dtype as promoted_dtype

# rows as users give them, checked and made an index array or a slice
from ._indexing import normalize_rows as normalize_rows

# writing: where a dataset may be written; appending cells to one
from ._append import AppendRequest as AppendRequest, append_cells as append_cells
from ._output import check_output as check_output, holds_dataset as holds_dataset

# the tiles and obs shards a manifest lists, there (and of their sizes, on a local disk)
from ._listed import listed_objects_problems as listed_objects_problems, sizes_checked as sizes_checked

# reading a dataset whose append is pending (its commit not rolled forward yet); one appended to since opened
from ._commit import PendingCommitStore as PendingCommitStore
from ._follow import STALE_ERRORS as STALE_ERRORS

# the current manifest with its version tag and commit entry; the writer lock (a local disk's)
from ._commit import read_for_commit as read_for_commit, writer_lock as writer_lock
from ._follow import manifest_changed as manifest_changed
