"""Structure-aware mutators: :class:`TileMutator` for tiles, :class:`JsonMutator` for manifests and schemas.

Both engines use them (the atheris worker as libFuzzer's custom mutator and crossover). A mutator draws
every choice from the :class:`random.Random` it is given: a run is deterministic for a seed.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable, Iterable
from typing import Any

from ._tilebytes import HEADER_FIELDS, STREAMS, chunk_field, fix_tile, n_table_chunks, put, stream_span, u

_EXTREMES = (
    0, 1, 2, 7, 8, 64, 255, 65535, 65536, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**62, 2**63 - 1, 2**63, 2**64 - 1,
)  # fmt: skip


class TileMutator:
    """Structure-aware mutations of tiles; the CRC (and total_size) are made right half of the time."""

    def __init__(self, donors: list[bytes]) -> None:
        import zstandard

        self.zstd = zstandard
        self.donors = donors
        self.ops: list[tuple[Callable[[bytearray, random.Random], bytearray], int]] = [
            (self.bit_flips, 4),
            (self.interesting_bytes, 2),
            (self.truncate, 3),
            (self.extend, 1),
            (self.header_field, 5),
            (self.chunk_field, 6),
            (self.chunk_boundary, 3),
            (self.indptr_entry, 4),
            (self.splice, 2),
            (self.transplant_frame, 3),
            (self.frame_content, 7),
            (self.frame_size_claim, 3),
            (self.grow_last_chunk, 1),
        ]
        self._choices = [op for op, weight in self.ops for _ in range(weight)]

    def mutate(self, data: bytes, rng: random.Random, *, fix: bool | None = None) -> bytes:
        """One to three mutations of ``data``, then (if ``fix``, else with probability 1/2) the CRC fixed."""
        buf = bytearray(data)
        for _ in range(rng.choice((1, 1, 1, 2, 2, 3))):
            buf = rng.choice(self._choices)(buf, rng)
        if fix if fix is not None else rng.random() < 0.5:
            return fix_tile(buf)
        return bytes(buf)

    def crossover(self, a: bytes, b: bytes, rng: random.Random) -> bytes:
        """A splice of two tiles."""
        return self._splice(bytearray(a), b, rng)

    # --------------------------------------------------------------------------------- bytes

    def bit_flips(self, buf: bytearray, rng: random.Random) -> bytearray:
        """Flip 1 .. 8 bits, half of the time within the header, chunk table and indptr."""
        if not buf:
            return bytearray(rng.randbytes(rng.randrange(1, 128)))
        dense = min(len(buf), 64 + 96 * n_table_chunks(buf) + 8 * min(u(buf, 16, 8) + 1, 64))
        for _ in range(rng.randrange(1, 9)):
            i = rng.randrange(dense if rng.random() < 0.5 else len(buf))
            buf[i] ^= 1 << rng.randrange(8)
        return buf

    def interesting_bytes(self, buf: bytearray, rng: random.Random) -> bytearray:
        """Set a run of bytes to 0x00, 0x01, 0x7f, 0x80 or 0xff."""
        if buf:
            i = rng.randrange(len(buf))
            buf[i : i + rng.randrange(1, 9)] = bytes([rng.choice((0, 1, 0x7F, 0x80, 0xFF))]) * rng.randrange(1, 9)
        return buf

    def truncate(self, buf: bytearray, rng: random.Random) -> bytearray:
        """Cut the tile, often at or next to a section or stream boundary."""
        marks = [64, 64 + 96 * n_table_chunks(buf), u(buf, 40, 8)]
        for c in range(n_table_chunks(buf)):
            for kind in STREAMS:
                span = stream_span(buf, c, kind)
                if span:
                    marks += [span[0], span[0] + span[1]]
        cut = rng.choice(marks) + rng.choice((-1, 0, 0, 1)) if rng.random() < 0.6 else rng.randrange(len(buf) + 1)
        return buf[: max(0, min(cut, len(buf)))]

    def extend(self, buf: bytearray, rng: random.Random) -> bytearray:
        """Append trailing bytes."""
        return buf + (bytes(rng.randrange(1, 65)) if rng.random() < 0.5 else rng.randbytes(rng.randrange(1, 65)))

    def _value(self, rng: random.Random, current: int, width: int, size: int) -> int:
        choice = rng.random()
        if choice < 0.5:
            return rng.choice(_EXTREMES)
        if choice < 0.8:
            return current + rng.choice((-8, -1, 1, 8))
        if choice < 0.9:
            return size + rng.choice((-8, -1, 0, 1, 8))
        return rng.randrange(1 << (8 * width))

    # --------------------------------------------------------------------------------- structure

    def header_field(self, buf: bytearray, rng: random.Random) -> bytearray:
        """Set a header field to an extreme (0, 1, 2^31, 2^32 - 1, 2^63, 2^64 - 1...) or a neighbour."""
        if len(buf) < 64:
            buf += bytes(64 - len(buf))
        name = rng.choice(list(HEADER_FIELDS))
        off, width = HEADER_FIELDS[name]
        put(buf, off, width, self._value(rng, u(buf, off, width), width, len(buf)))
        return buf

    def chunk_field(self, buf: bytearray, rng: random.Random) -> bytearray:
        """Set a chunk-table field to an extreme, a neighbour, or the value of another field."""
        n = n_table_chunks(buf)
        if n == 0:
            return self.header_field(buf, rng)
        c, k = rng.randrange(n), rng.randrange(12)
        at = 64 + 96 * c + 8 * k
        if rng.random() < 0.2:
            value = chunk_field(buf, rng.randrange(n), rng.randrange(12))  # e.g. two streams at one offset
        else:
            value = self._value(rng, u(buf, at, 8), 8, len(buf))
        put(buf, at, 8, value)
        return buf

    def chunk_boundary(self, buf: bytearray, rng: random.Random) -> bytearray:
        """Move the boundary between two chunks (cells or nonzeros) on both sides, keeping them contiguous."""
        n = n_table_chunks(buf)
        if n < 2:
            return self.chunk_field(buf, rng)
        c = rng.randrange(n - 1)
        k = rng.choice((1, 3))  # cell_hi / cell_lo or nnz_hi / nnz_lo
        delta = rng.choice((-2, -1, 1, 2, 1000))
        value = chunk_field(buf, c, k) + delta
        put(buf, 64 + 96 * c + 8 * k, 8, value)
        put(buf, 64 + 96 * (c + 1) + 8 * (k - 1), 8, value)
        return buf

    def indptr_entry(self, buf: bytearray, rng: random.Random) -> bytearray:
        """Change an indptr entry: an extreme, a neighbour, a copy of the next one (empty cell), or a swap."""
        off, n_cells = u(buf, 40, 8), u(buf, 16, 8)
        count = min(n_cells + 1, max(0, (len(buf) - off) // 8)) if off < len(buf) else 0
        if count == 0:
            return self.header_field(buf, rng)
        i = rng.randrange(count)
        at = off + 8 * i
        choice = rng.random()
        if choice < 0.3 and i + 1 < count:
            put(buf, at, 8, u(buf, at + 8, 8))
        elif choice < 0.45 and count > 1:
            j = rng.randrange(count)
            a, b = u(buf, at, 8), u(buf, off + 8 * j, 8)
            put(buf, at, 8, b)
            put(buf, off + 8 * j, 8, a)
        else:
            put(buf, at, 8, self._value(rng, u(buf, at, 8), 8, len(buf)))
        return buf

    def splice(self, buf: bytearray, rng: random.Random) -> bytearray:
        """Splice with another tile (a seed)."""
        return bytearray(self._splice(buf, rng.choice(self.donors), rng))

    def _splice(self, a: bytearray, b: bytes, rng: random.Random) -> bytes:
        choice = rng.random()
        if choice < 0.3:  # the header of one, the rest of the other
            return bytes(a[:64]) + b[64:]
        if choice < 0.5 and n_table_chunks(a) and n_table_chunks(b):  # one chunk entry from the other tile
            ca, cb = rng.randrange(n_table_chunks(a)), rng.randrange(n_table_chunks(b))
            out = bytearray(a)
            out[64 + 96 * ca : 64 + 96 * (ca + 1)] = b[64 + 96 * cb : 64 + 96 * (cb + 1)]
            return bytes(out)
        cut = rng.randrange(min(len(a), len(b)) + 1)
        if rng.random() < 0.5:
            cut -= cut % 8
        return bytes(a[:cut]) + b[cut:]

    def _frames(self, buf: bytearray) -> list[tuple[int, str, int, int]]:
        return [
            (c, kind, *span)
            for c in range(n_table_chunks(buf))
            for kind in STREAMS
            if (span := stream_span(buf, c, kind)) is not None
        ]

    def _repoint(self, buf: bytearray, c: int, kind: str, frame: bytes) -> bytearray:
        """Append ``frame`` (8-aligned) and point stream ``kind`` of chunk ``c`` at it."""
        start = len(buf) + (-len(buf) % 8)
        out = buf + bytes(start - len(buf)) + frame
        k = 4 + 2 * STREAMS.index(kind)
        put(out, 64 + 96 * c + 8 * k, 8, start)
        put(out, 64 + 96 * c + 8 * (k + 1), 8, len(frame))
        return out

    def transplant_frame(self, buf: bytearray, rng: random.Random) -> bytearray:
        """Point a stream of this tile at a frame taken from another tile (or another stream of this one)."""
        targets = [(c, kind) for c in range(n_table_chunks(buf)) for kind in STREAMS]
        donor = bytearray(rng.choice(self.donors) if rng.random() < 0.6 else buf)
        frames = self._frames(donor)
        if not targets or not frames:
            return self.bit_flips(buf, rng)
        c, kind = rng.choice(targets)
        _, _, off, length = rng.choice(frames)
        return self._repoint(buf, c, kind, bytes(donor[off : off + length]))

    def frame_content(self, buf: bytearray, rng: random.Random) -> bytearray:
        """Decompress a frame, change its content (values, planes, exception positions...), compress it again."""
        frames = self._frames(buf)
        if not frames:
            return self.chunk_field(buf, rng)
        c, kind, off, length = rng.choice(frames)
        frame = bytes(buf[off : off + length])
        try:
            size = self.zstd.get_frame_parameters(frame).content_size
            if size > 1 << 24:  # also CONTENTSIZE_UNKNOWN / ERROR (2^64 - 1, 2^64 - 2)
                return self.bit_flips(buf, rng)
            content = bytearray(self.zstd.ZstdDecompressor().decompress(frame))
        except self.zstd.ZstdError:
            return self.bit_flips(buf, rng)
        op = rng.randrange(7)
        if op == 0 and content:  # byte flips
            for _ in range(rng.randrange(1, 5)):
                content[rng.randrange(len(content))] ^= 1 << rng.randrange(8)
        elif op == 1 and len(content) >= 2:  # one uint16 of a byte-plane stream
            n = len(content) // 2
            i = rng.randrange(n)
            value = rng.choice((0, 1, 2, 255, 256, 32768, 65534, 65535))
            content[i], content[n + i] = value & 0xFF, value >> 8
        elif op == 2 and len(content) >= 8:  # one uint32 of an exception frame (position or payload)
            i = rng.randrange(len(content) // 4)
            n = chunk_field(buf, c, 3) - chunk_field(buf, c, 2)
            value = rng.choice((0, 1, 65535, 65536, 2**24 + 1, 2**31 - 1, 2**31, 2**32 - 1, n - 1, n, n + 1))
            content[4 * i : 4 * i + 4] = (value % 2**32).to_bytes(4, "little")
        elif op == 3 and len(content) >= 16:  # two exception positions swapped or made equal
            k = len(content) // 8
            i, j = rng.randrange(k), rng.randrange(k)
            a, b = content[4 * i : 4 * i + 4], content[4 * j : 4 * j + 4]
            content[4 * i : 4 * i + 4] = b
            if rng.random() < 0.5:
                content[4 * j : 4 * j + 4] = a
        elif op == 4:  # one size off
            delta = rng.choice((-8, -2, -1, 1, 2, 8))
            content = content[:delta] if delta < 0 else content + bytes(delta)
        elif op == 5:
            content = bytearray(bytes([rng.choice((0, 0xFF, 0x01))]) * len(content))
        else:  # a plane swapped: high bytes first
            half = len(content) // 2
            content = content[half:] + content[:half]
        frame = self.zstd.ZstdCompressor(level=1, write_content_size=rng.random() < 0.9).compress(bytes(content))
        return self._repoint(buf, c, kind, frame)

    def frame_size_claim(self, buf: bytearray, rng: random.Random) -> bytearray:
        """Change the content size a frame declares (its header field), or replace it by a compressible bomb."""
        frames = self._frames(buf)
        if not frames:
            return self.chunk_field(buf, rng)
        c, kind, off, length = rng.choice(frames)
        if rng.random() < 0.3:
            size = rng.choice((2**20, 2**24, 2**26, 2**27 + 8))
            frame = self.zstd.ZstdCompressor(level=1).compress(bytes(size))
            return self._repoint(buf, c, kind, frame)
        frame = bytearray(buf[off : off + length])
        if len(frame) < 6 or frame[:4] != b"\x28\xb5\x2f\xfd":
            return self.bit_flips(buf, rng)
        fhd = frame[4]
        single = (fhd >> 5) & 1
        fcs_width = (1 if single else 0, 2, 4, 8)[fhd >> 6]
        at = 5 + (0 if single else 1) + (0, 1, 2, 4)[fhd & 3]
        if fcs_width == 0 or at + fcs_width > len(frame):
            return self.bit_flips(buf, rng)
        current = u(frame, at, fcs_width) + (256 if fcs_width == 2 else 0)
        value = rng.choice((0, 2, current - 2, current + 2, current * 2, 2**31, 2**32 - 1, 2**63, 2**64 - 1))
        put(frame, at, fcs_width, value - (256 if fcs_width == 2 else 0))
        buf[off : off + length] = frame
        return buf

    def grow_last_chunk(self, buf: bytearray, rng: random.Random) -> bytearray:
        """Give the last cell up to millions more nonzeros, consistently (large but valid, or nearly so)."""
        n = n_table_chunks(buf)
        n_cells = u(buf, 16, 8)
        if n == 0 or n_cells == 0 or u(buf, 40, 8) + 8 * (n_cells + 1) > len(buf):
            return self.header_field(buf, rng)
        extra = rng.choice((1, 1000, 40_000, 2**20, 4 * 2**20))
        c = n - 1
        lo, hi = chunk_field(buf, c, 2), chunk_field(buf, c, 3) + extra
        put(buf, 64 + 96 * c + 24, 8, hi)
        put(buf, 24, 8, u(buf, 24, 8) + extra)
        put(buf, u(buf, 40, 8) + 8 * n_cells, 8, u(buf, u(buf, 40, 8) + 8 * n_cells, 8) + extra)
        count = max(0, hi - lo)
        if count > 8 * 2**20:  # an earlier mutation made the chunk huge already
            return self.header_field(buf, rng)
        ones = bytes([1]) * count + bytes(count)  # gaps of 1 (or values of 1): low plane 1, high plane 0
        frame = self.zstd.ZstdCompressor(level=1).compress(ones)
        buf = self._repoint(buf, c, "gaps", frame)
        return self._repoint(buf, c, "vals", frame)


_JSON_VALUES: tuple[Any, ...] = (
    0, 1, -1, 2, 3, 64, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**62, 2**63 - 1, 2**63, 2**64 - 1, -(2**63), 10**30,
    0.0, -0.0, 0.5, 1.0, 2.0, 1e308, math.nan, math.inf, True, False, None, "", "x", "0", "é", "\ud800",
    "int8", "int16", "int32", "int64", "float", "double", "bool", "string", "category", "numeric", "uint64",
    "deltacells-dataset", "deltacells-obs", [], {}, [0], [None], [[]], {"a": 1},
)  # fmt: skip
_RAW_JSON = (
    "1" * 5000,
    "-" + "9" * 4400,
    "[" * 5000 + "]" * 5000,
    "[" * 100_000,  # deeper than the C recursion limit of Python 3.12+ too
    '{"a":' * 3000 + "0" + "}" * 3000,
    "1e99999",
    "-0",
    "18446744073709551616",
    '"\\ud800"',
    "NaN",
    "-Infinity",
)
_KEYS = (
    "format", "version", "n_cells", "n_genes", "tile_size", "tile_cells", "tile_nnz", "tile_bytes", "n_chunks",
    "zstd_level", "has_gene_order", "has_var_names", "has_var_table", "has_obs", "obs_tiles_per_file",
    "obs_shard_bytes", "obs_shard_sha256", "obs_fingerprint", "metadata", "columns", "name", "kind", "arrow_type",
    "categories", "ordered", "pandas_dtype",
)  # fmt: skip
_PLACEHOLDER = "\x00fuzz-raw\x00"


class JsonMutator:
    """Mutations of JSON documents.

    Values set to extremes or other types, keys dropped or added, lists resized, structurally consistent
    manifests with extreme sizes, raw text (huge numbers, deep nesting), byte-level changes of the text.
    """

    def __init__(self, donors: list[bytes]) -> None:
        self.donors = donors

    def mutate(self, data: bytes, rng: random.Random) -> bytes:
        """One to three mutations of ``data``."""
        for _ in range(rng.choice((1, 1, 2, 3))):
            data = self._once(data, rng)
        return data

    def crossover(self, a: bytes, b: bytes, rng: random.Random) -> bytes:
        """Graft a value of ``b`` into ``a``."""
        try:
            doc, other = json.loads(a), json.loads(b)
        except (ValueError, RecursionError):
            return a[: rng.randrange(len(a) + 1)] + b[rng.randrange(len(b) + 1) :]
        slots = list(_slots(doc))
        if not slots:
            return a
        container, key = rng.choice(slots)
        container[key] = _pick_node(other, rng)
        return json.dumps(doc).encode()

    def _once(self, data: bytes, rng: random.Random) -> bytes:
        if rng.random() < 0.2:
            return self._bytes(data, rng)
        try:
            doc = json.loads(data)
        except (ValueError, RecursionError):
            return self._bytes(data, rng)
        raw = None
        op = rng.randrange(8)
        slots = list(_slots(doc))
        if op == 0 and slots:
            container, key = rng.choice(slots)
            container[key] = rng.choice(_JSON_VALUES)
        elif op == 1 and slots:
            container, key = rng.choice(slots)
            container[key] = _PLACEHOLDER
            raw = rng.choice(_RAW_JSON)
        elif op == 2 and slots:
            container, key = rng.choice(slots)
            container[key] = _derived(doc, rng)
        elif op == 3:
            dicts = [d for d in _nodes(doc) if isinstance(d, dict)]
            if dicts:
                d = rng.choice(dicts)
                if d and rng.random() < 0.5:
                    del d[rng.choice(list(d))]
                else:
                    d[rng.choice(_KEYS)] = rng.choice(_JSON_VALUES)
        elif op == 4:
            lists = [x for x in _nodes(doc) if isinstance(x, list)]
            if lists:
                _resize(rng.choice(lists), rng)
        elif op == 5 and isinstance(doc, dict) and "tile_cells" in doc:
            _consistent_manifest(doc, rng)
        elif op == 6 and isinstance(doc, dict) and isinstance(doc.get("columns"), list):
            doc["columns"].append(_column(rng))
        elif slots:
            container, key = rng.choice(slots)
            container[key] = _pick_node(json.loads(rng.choice(self.donors)), rng)
        text = json.dumps(doc, indent=rng.choice((None, 1)), ensure_ascii=rng.random() < 0.8)
        if raw is not None:
            text = text.replace(json.dumps(_PLACEHOLDER), raw, 1)
        return text.encode("utf-8", "surrogatepass")

    def _bytes(self, data: bytes, rng: random.Random) -> bytes:
        buf = bytearray(data)
        op = rng.randrange(4)
        if op == 0 and buf:
            for _ in range(rng.randrange(1, 5)):
                buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)
        elif op == 1 and buf:
            i = rng.randrange(len(buf))
            del buf[i : i + rng.randrange(1, 16)]
        elif op == 2:
            i = rng.randrange(len(buf) + 1)
            buf[i:i] = rng.choice(_RAW_JSON).encode()[: rng.choice((8, 64, 100_000))]
        else:
            buf = buf[: rng.randrange(len(buf) + 1)]
        return bytes(buf)


def _nodes(doc: Any) -> Iterable[Any]:
    stack = [doc]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node[:50])


def _slots(doc: Any) -> Iterable[tuple[Any, Any]]:
    for node in _nodes(doc):
        if isinstance(node, dict):
            yield from ((node, k) for k in node)
        elif isinstance(node, list):
            yield from ((node, i) for i in range(min(len(node), 50)))


def _pick_node(doc: Any, rng: random.Random) -> Any:
    return rng.choice(list(_nodes(doc)))


def _derived(doc: Any, rng: random.Random) -> Any:
    """An integer derived from the document: sums (exact and wrapped to int64) and lengths of its lists."""
    lists = [x for x in _nodes(doc) if isinstance(x, list) and all(type(v) is int for v in x)]
    if not lists:
        return rng.choice(_JSON_VALUES)
    values = rng.choice(lists)
    total = sum(values)
    wrapped = (total + 2**63) % 2**64 - 2**63
    return rng.choice((total, wrapped, len(values), total + 1, max(values, default=0)))


def _resize(values: list[Any], rng: random.Random) -> None:
    op = rng.randrange(5)
    if op == 0:
        del values[rng.randrange(len(values) + 1) :]
    elif op == 1 and values:
        values.extend([rng.choice(values)] * rng.choice((1, 2, 100, 10_000)))
    elif op == 2:
        values.reverse()
    elif op == 3 and values:
        fill = rng.choice(_JSON_VALUES)
        values[:] = [fill] * len(values)
    else:
        rng.shuffle(values)


def _consistent_manifest(doc: dict[str, Any], rng: random.Random) -> None:
    """Per-tile lists that agree with each other, with extreme tile sizes (where sums overflow int64)."""
    size = rng.choice((1, 2, 3, 2**31, 2**32, 2**61, 2**62, 2**63 - 1))
    k = rng.randrange(1, 5)
    last = rng.choice((1, 2, size))
    cells = [size] * (k - 1) + [last]
    doc["tile_size"] = size
    doc["tile_cells"] = cells
    doc["tile_nnz"] = [rng.choice((0, 1)) for _ in cells]
    doc["tile_bytes"] = [64] * k
    total = sum(cells)
    doc["n_cells"] = rng.choice((total, (total + 2**63) % 2**64 - 2**63, total % 2**64))
    if doc.get("has_obs"):
        per_file = rng.choice((1, 2, 1000))
        shards = -(-k // per_file)
        doc["obs_tiles_per_file"] = per_file
        doc["obs_shard_bytes"] = [1] * shards
        doc["obs_shard_sha256"] = ["0" * 64] * shards


def _column(rng: random.Random) -> dict[str, Any]:
    kind = rng.choice(("category", "numeric", "bool", "string"))
    arrow = {"category": ("int8", "int16", "int32"), "numeric": ("int64", "double", "float", "uint8")}.get(
        kind, (kind,)
    )
    column: dict[str, Any] = {"name": rng.choice(("a", "b", "_index", "x y")), "kind": kind}
    column["arrow_type"] = rng.choice(arrow)
    vocabularies = (["a", "b"], [1, 2], [0.5], [True], list(range(130)), ["a", "a"], [1, "a"])
    column["categories"] = rng.choice(vocabularies) if kind == "category" else None
    if rng.random() < 0.3:
        column[rng.choice(("ordered", "pandas_dtype"))] = rng.choice(_JSON_VALUES)
    return column


def make_mutator(target: str, donors: list[bytes]) -> TileMutator | JsonMutator:
    """The mutator of ``target``."""
    return TileMutator(donors) if target.startswith("tile") else JsonMutator(donors)
