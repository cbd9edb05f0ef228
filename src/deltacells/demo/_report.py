"""What the demo measures: one frozen dataclass per step, and :class:`DemoReport` collecting them."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "Converted",
    "DemoReport",
    "FullRead",
    "Generated",
    "H5adWritten",
    "Opened",
    "ReadComparison",
    "ScanpyRun",
    "SubsetRead",
    "WarmUp",
]


@dataclass(frozen=True)
class Generated:
    """The generated AnnData: its shape, nonzeros and annotation columns."""

    n_cells: int
    n_genes: int
    nnz: int
    obs_columns: tuple[str, ...]
    var_columns: tuple[str, ...]
    seconds: float

    @property
    def density(self) -> float:
        """Share of nonzero entries."""
        entries = self.n_cells * self.n_genes
        return self.nnz / entries if entries else 0.0


@dataclass(frozen=True)
class H5adWritten:
    """The same AnnData written as a gzip-compressed h5ad, for comparison (its reading: :class:`ReadComparison`)."""

    bytes: int
    seconds: float


@dataclass(frozen=True)
class Converted:
    """The dataset written by :func:`~deltacells.write_deltacells`."""

    path: str
    n_tiles: int
    tile_size: int
    level: int
    threads: int
    #: Everything stored: tiles, obs shards, manifest and sidecar files.
    total_bytes: int
    tile_bytes: int
    seconds: float


@dataclass(frozen=True)
class Opened:
    """The dataset opened with :func:`~deltacells.read_deltacells` (X lazy, obs localized)."""

    n_obs: int
    n_vars: int
    tiles_decoded: int
    cache_dir: str
    seconds: float


@dataclass(frozen=True)
class WarmUp:
    """The first reads of the process, until the compiled decoding kernels are loaded."""

    seconds: float


@dataclass(frozen=True)
class FullRead:
    """All of X read back (twice, to time a repeat), and the checks against the source."""

    nnz: int
    tiles_decoded: int
    seconds: float
    seconds_again: float
    same_x: bool
    same_obs: bool
    same_var: bool

    @property
    def identical(self) -> bool:
        """Whether X, obs and var all equal the source's."""
        return self.same_x and self.same_obs and self.same_var


#: Below this share of a CPU for the single-threaded h5ad read, the machine is reported busy (timings noisy).
BUSY_CPU_SHARE = 0.9


@dataclass(frozen=True)
class ReadComparison:
    """The whole dataset read into memory as an AnnData, against ``anndata.read_h5ad`` of the gzip h5ad.

    Each read ran once untimed, then ``rounds`` times, the two in turn; the best time of each is kept.
    """

    rounds: int
    #: ``read_deltacells(path).to_memory()``: X, obs and var in memory.
    deltacells_seconds: float
    #: ``anndata.read_h5ad(h5ad)``: the same.
    h5ad_seconds: float
    #: Threads decoding the tiles, and the CPUs the process may use.
    threads: int
    usable_cpus: int
    #: CPU time over wall time of the h5ad reads (one thread): near 1 when nothing else wanted the CPUs.
    h5ad_cpu_share: float

    @property
    def speedup(self) -> float:
        """How many times as fast the dataset read as the gzip h5ad (best against best)."""
        return self.h5ad_seconds / self.deltacells_seconds

    @property
    def busy(self) -> bool:
        """Whether other work on the machine took CPU time from the reads (the h5ad's had under 90% of a CPU)."""
        return self.h5ad_cpu_share < BUSY_CPU_SHARE


@dataclass(frozen=True)
class SubsetRead:
    """A subset of cells read into memory, and whether its X equals the source's."""

    label: str
    n_cells: int
    tiles_decoded: int
    n_tiles: int
    seconds: float
    identical: bool


@dataclass(frozen=True)
class ScanpyRun:
    """A short scanpy pipeline on one in-memory subset: what it found and how long each part took."""

    label: str
    n_cells: int
    n_genes: int
    #: scanpy's own first-call compilation, on a few cells.
    warm_up_seconds: float
    median_counts: float
    median_genes: float
    median_pct_mito: float
    n_highly_variable: int
    n_comps: int
    #: Share of the variance of the highly variable genes the components explain.
    explained_variance: float
    #: Seconds per part: ``calculate_qc_metrics``, ``normalize_total+log1p``, ``highly_variable_genes``,
    #: ``pca``.
    seconds: dict[str, float]


@dataclass(frozen=True)
class DemoReport:
    """Everything one run of the demo measured, step by step, with the figures derived from it."""

    generated: Generated
    h5ad: H5adWritten
    converted: Converted
    opened: Opened
    warm_up: WarmUp
    full_read: FullRead
    comparison: ReadComparison
    subsets: tuple[SubsetRead, ...]
    scanpy: ScanpyRun

    @property
    def bytes_per_nonzero(self) -> float:
        """Bytes of the tiles per nonzero entry."""
        return self.converted.tile_bytes / max(self.generated.nnz, 1)

    @property
    def ratio_vs_h5ad(self) -> float:
        """How many times smaller the dataset is than the gzip h5ad."""
        return self.h5ad.bytes / max(self.converted.total_bytes, 1)

    @property
    def write_cells_per_s(self) -> float:
        """Cells written per second."""
        return self.generated.n_cells / self.converted.seconds

    @property
    def read_nnz_per_s(self) -> float:
        """Nonzeros read per second, reading all of X (after the warm-up)."""
        return self.full_read.nnz / self.full_read.seconds

    @property
    def read_again_nnz_per_s(self) -> float:
        """Nonzeros read per second, reading all of X a second time."""
        return self.full_read.nnz / self.full_read.seconds_again

    @property
    def identical(self) -> bool:
        """Whether everything read back (all of X, obs, var, each subset) equals the source."""
        return self.full_read.identical and all(s.identical for s in self.subsets)
