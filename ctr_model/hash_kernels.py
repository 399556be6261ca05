"""The vectorised categorical hash's kernels: numpy over Arrow's buffers, no Python per value.

:mod:`ctr_model.features` defines the hash (its module docstring) and its reference form per value;
these kernels compute the same ids for a whole column, bit for bit, and live apart so that module
stays the schema's and the transforms' reading.
"""
from __future__ import annotations

from typing import Any, Optional, Tuple

import numpy as np

__all__ = ["M64", "MIX1", "MIX2", "FNV_OFFSET", "FNV_PRIME", "key_int", "hash_chunk", "mix64_array"]

M64 = (1 << 64) - 1
MIX1 = 0xBF58476D1CE4E5B9
MIX2 = 0x94D049BB133111EB
FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3


def key_int(raw: bytes) -> int:
    """A value's 64-bit key: its 8 bytes little-endian, else FNV-1a of its bytes."""
    if len(raw) == 8:
        return int.from_bytes(raw, "little")
    h = FNV_OFFSET
    for c in raw:
        h = ((h ^ c) * FNV_PRIME) & M64
    return h


def _mix64_np(z: np.ndarray, tmp: Optional[np.ndarray] = None) -> np.ndarray:
    """splitmix64's finaliser, in place on the uint64 array ``z`` (``tmp``: scratch of its size)."""
    tmp = np.empty_like(z) if tmp is None else tmp
    for shift, mult in ((30, MIX1), (27, MIX2)):
        np.right_shift(z, np.uint64(shift), out=tmp)
        np.bitwise_xor(z, tmp, out=z)
        np.multiply(z, np.uint64(mult), out=z)
    np.right_shift(z, np.uint64(31), out=tmp)
    np.bitwise_xor(z, tmp, out=z)
    return z


def mix64_array(z: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, in place on the uint64 array ``z`` (returned)."""
    return _mix64_np(z)


def _binary_parts(values: Any) -> Tuple[np.ndarray, np.ndarray]:
    """(offsets[n+1] int64, data uint8) of a string/binary column, nulls read as empty."""
    import pyarrow as pa

    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    if not isinstance(values, pa.Array):
        values = pa.array([v.encode("utf-8") if isinstance(v, str) else (v or b"")
                           for v in values], type=pa.binary())
    if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
        values = values.view(pa.large_binary() if pa.types.is_large_string(values.type)
                             else pa.binary())
    if not (pa.types.is_binary(values.type) or pa.types.is_large_binary(values.type)):
        raise TypeError(f"categorical values must be strings or bytes, got {values.type}")
    if values.null_count:
        import pyarrow.compute as pc

        values = pc.fill_null(values, pa.scalar(b"", type=values.type))
    n = len(values)
    off_dtype = np.int64 if pa.types.is_large_binary(values.type) else np.int32
    bufs = values.buffers()
    offsets = np.frombuffer(bufs[1], dtype=off_dtype)[values.offset:values.offset + n + 1]
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None and bufs[2].size \
        else np.zeros(1, dtype=np.uint8)
    return offsets, data


def hash_chunk(values: Any, j: int, salt: int, buckets: int, out: Optional[np.ndarray], slots: int) -> np.ndarray:
    """The ids of one array's values for slot ``j`` (1-based) of ``slots`` whose salt is ``salt``, into
    ``out`` (int64, its length) if given (:func:`ctr_model.features.hash_slot`)."""
    offsets, data = _binary_parts(values)
    n = len(offsets) - 1
    out = np.empty(n, dtype=np.int64) if out is None else out
    lo, hi = int(offsets[0]), int(offsets[-1])
    salt_u = np.uint64(salt)
    lengths = np.diff(offsets)
    if hi - lo == 8 * n and (n == 0 or int(lengths.min()) == 8):
        # Every value is 8 bytes (all of Criteo without empties): the keys are a little-endian
        # view of the data buffer, xor'ed with the salt straight into the output.
        ids = out.view(np.uint64)
        np.bitwise_xor(data[lo:hi].view("<u8"), salt_u, out=ids)
        _finish_ids(ids, buckets, slots)
        return out
    nonempty = lengths != 0
    if hi - lo == 8 * int(np.count_nonzero(nonempty)) and np.all((lengths | 8) == 8):
        # Every value is empty or 8 bytes: the non-empty values are consecutive 8-byte words.
        keys = np.bitwise_xor(data[lo:hi].view("<u8"), salt_u, dtype=np.uint64)
    else:
        keys = _keys_general(offsets, lengths, data, nonempty)
        keys ^= salt_u
    _finish_ids(keys, buckets, slots)
    out[:] = j - 1
    out[nonempty] = keys.view(np.int64)
    return out


def _finish_ids(keys: np.ndarray, buckets: int, slots: int) -> None:
    """``slots + mix64(keys) % (buckets - slots)``, in place (``keys`` already xor'ed with the salt)."""
    _mix64_np(keys)
    np.remainder(keys, np.uint64(buckets - slots), out=keys)
    np.add(keys, np.uint64(slots), out=keys)


#: Values longer than this are hashed one at a time instead of in the vectorised position loop.
_VECTOR_HASH_MAX_LEN = 256


def _keys_general(offsets: np.ndarray, lengths: np.ndarray, data: np.ndarray,
                  nonempty: np.ndarray) -> np.ndarray:
    """Keys of the non-empty values, in order, for columns with values of any length."""
    idx = np.flatnonzero(nonempty)
    starts, lens = offsets[idx].astype(np.int64), lengths[idx].astype(np.int64)
    keys = np.empty(idx.size, dtype=np.uint64)
    is8 = lens == 8
    if is8.any():
        raw = data[starts[is8, None] + np.arange(8)]
        keys[is8] = np.ascontiguousarray(raw).view("<u8").ravel()
    # Rare long values (any bytes are allowed) are hashed one by one: the position loop below would
    # run once per byte of the longest value.
    long_values = np.flatnonzero(~is8 & (lens > _VECTOR_HASH_MAX_LEN))
    for k in long_values:
        keys[k] = key_int(data[starts[k]:starts[k] + lens[k]].tobytes())
    other = np.flatnonzero(~is8 & (lens <= _VECTOR_HASH_MAX_LEN))
    if other.size:  # FNV-1a over the bytes, one byte position at a time
        o_start, o_len = starts[other], lens[other]
        h = np.full(other.size, FNV_OFFSET, dtype=np.uint64)
        prime = np.uint64(FNV_PRIME)
        for pos in range(int(o_len.max())):
            live = np.flatnonzero(o_len > pos)
            h[live] = (h[live] ^ data[o_start[live] + pos].astype(np.uint64)) * prime
        keys[other] = h
    return keys
