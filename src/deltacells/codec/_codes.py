"""The error codes the decoder's kernels return (plain integers: importing them does not load numba)."""

OK = 0
GENE_OUT_OF_RANGE = 1
GENES_NOT_INCREASING = 2
ZERO_COUNT = 3
POSITION_OUT_OF_RANGE = 4
POSITIONS_NOT_INCREASING = 5
PAYLOAD_OUT_OF_RANGE = 6
STORED_NOT_ESCAPED = 7
