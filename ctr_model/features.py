"""The feature schema and transforms shared by prep, training, evaluation and serving.

Prep writes Parquet with exactly these columns; training and evaluation refuse data whose
``schema.json`` carries another :data:`SCHEMA_VERSION`. The transforms themselves (dense
normalisation, stable categorical hashing) live here too, so they are identical everywhere: prep
uses the vectorised forms, a server or a test can use the per-value reference forms, and both give
the same numbers bit for bit.

Dense transform (columns ``I1..I13``)
    ``x`` is the raw integer field. Empty -> ``0``; negative -> ``0``; then ``log1p``, computed in
    float64 and rounded once to float32::

        dense(x) = float32(log(1 + max(x, 0)))        # empty field -> 0.0

Categorical hash (columns ``C1..C26``), version 1
    All arithmetic is on unsigned 64-bit integers modulo 2**64. ``j`` is the 1-based column number
    (``C7`` -> 7), ``B`` the number of hash buckets (``B >= 27``)::

        mix64(z):                   # the splitmix64 finaliser
            z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
            z = (z ^ (z >> 27)) * 0x94D049BB133111EB
            return z ^ (z >> 31)

        salt(j) = mix64(0x6374725F766F6C63 + j)          # 0x6374... is ASCII "ctr_volc"

        key(v)  = v[0] + v[1]*2**8 + ... + v[7]*2**56   if v is exactly 8 bytes (little-endian)
                = fnv1a64(v)                                otherwise (any other non-empty bytes)

        fnv1a64(b): h = 0xCBF29CE484222325; for each byte c: h = (h ^ c) * 0x100000001B3

        id(v, j) = j - 1                                       if v is empty
                 = 26 + mix64(key(v) ^ salt(j)) % (B - 26)     otherwise

    ``v`` is the field's raw bytes (UTF-8 for text). So ids are in ``[0, B)``; ids ``0..25`` are
    reserved, one per column, for "empty", and non-empty values never get them. Criteo's values are
    8 hex digits, so they take the 8-byte branch, where distinct values get distinct keys and
    ``mix64`` is a bijection: two values of a column share an id only through the final modulo.
    The case of hex digits matters (``"0a1b2c3d"`` and ``"0A1B2C3D"`` are different values).
    Nothing depends on Python's per-process ``hash()`` salt.
"""
from __future__ import annotations

import json
import math
import os
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from ctr_model.atomic import write_json
from ctr_model.defaults import DEFAULT_HASH_BUCKETS
from ctr_model.errors import BadInput
from ctr_model.hash_kernels import M64, MIX1, MIX2, hash_chunk, key_int

__all__ = [
    "SCHEMA_VERSION", "LABEL", "NUM_DENSE", "NUM_SPARSE", "DENSE_COLUMNS", "SPARSE_COLUMNS",
    "RAW_COLUMNS", "DEFAULT_HASH_BUCKETS", "SCHEMA_FILE", "MIN_HASH_BUCKETS", "HASH_VERSION",
    "SchemaMismatch", "BadRow", "mix64_int",
    "dense_transform", "dense_value", "parse_int_field", "column_salt", "column_salt_int", "hash_value",
    "hash_categorical", "hash_slot", "hash_slot_value",
    "transform_line", "arrow_schema", "validate_hash_buckets",
    "read_split_schema", "check_split_schema", "check_schema_doc", "expected_columns", "write_split_schema", "shard_files", "is_shard_name",
]

#: Bump whenever the columns, dtypes or transforms change.
SCHEMA_VERSION = 1

LABEL = "label"                                          # int8, 0/1
NUM_DENSE = 13
NUM_SPARSE = 26
DENSE_COLUMNS = tuple(f"I{i}" for i in range(1, NUM_DENSE + 1))   # float32, transformed
SPARSE_COLUMNS = tuple(f"C{i}" for i in range(1, NUM_SPARSE + 1))  # int64 hashed ids in [0, buckets)
RAW_COLUMNS = (LABEL,) + DENSE_COLUMNS + SPARSE_COLUMNS          # the 40 TSV fields, in order

#: Ids ``0..NUM_SPARSE-1`` are the per-column "empty" ids, so at least one more bucket is needed.
MIN_HASH_BUCKETS = NUM_SPARSE + 1
#: Version of the categorical hash documented in the module docstring (part of SCHEMA_VERSION 1).
HASH_VERSION = 1

#: Written by prep into every split directory (``train/``, ``test/``) next to the Parquet shards:
#: ``{"schema_version": 1, "hash_buckets": N, "columns": [...], "rows": n}``.
SCHEMA_FILE = "schema.json"

_SALT_BASE = 0x6374725F766F6C63


class SchemaMismatch(BadInput):
    """A split directory was not written by a compatible prep (version, columns or buckets differ):
    bad input naming the field ``data``, the directory and the fix."""

    def __init__(self, split_dir: str, fix: str):
        super().__init__("data", split_dir, fix)


class BadRow(BadInput):
    """A raw field or line that cannot be transformed: bad input naming the ``row`` text (its first
    40 characters). ``reason`` is one short sentence; prep counts the rejected lines by it."""

    def __init__(self, reason: str, text: Union[str, bytes, None] = None):
        self.reason = reason
        raw = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
        super().__init__("row", raw if raw is None else raw[:40], reason)


# ---------------------------------------------------------------------------------------------
# dense


def dense_transform(values: Any) -> np.ndarray:
    """Transform raw integer dense values: empty -> 0, negatives -> 0, ``log1p``, float32.

    Args:
        values: array-like of numbers where ``None``/NaN means an empty field, or a pyarrow
            integer array whose nulls are empty fields.

    Returns:
        A float32 numpy array of the same length.
    """
    if hasattr(values, "to_numpy") and hasattr(values, "null_count") and hasattr(values, "type"):
        import pyarrow.compute as pc  # only when given an arrow array

        values = pc.fill_null(values, 0).to_numpy(zero_copy_only=False)
    arr = np.asarray(values, dtype=np.float64)
    arr = np.where(np.isnan(arr), 0.0, arr)
    return np.log1p(np.maximum(arr, 0.0)).astype(np.float32)


# The integer syntax prep's CSV parser (pyarrow) accepts, so the per-line path agrees with it:
# surrounding spaces, then a decimal with an optional minus, or 0x/0X hex; within int64.
_INT_RE = re.compile(rb"^ *(?:(-?[0-9]+)|0[xX]([0-9a-fA-F]+)) *$")


def parse_int_field(text: Union[str, bytes, None]) -> Optional[int]:
    """Parse one raw integer field the way prep does; ``None`` for an empty field.

    Raises:
        BadRow: if the field is not an integer in int64 range.
    """
    raw = text.encode("utf-8") if isinstance(text, str) else (text or b"")
    if raw.strip(b" ") == b"":
        return None
    m = _INT_RE.match(raw)
    if m is None:
        raise BadRow(f"not an integer: {raw[:40].decode('utf-8', 'replace')!r}", raw)
    x = int(m.group(1), 10) if m.group(1) is not None else int(m.group(2), 16)
    if not -(2 ** 63) <= x <= 2 ** 63 - 1:
        raise BadRow(f"integer out of int64 range: {raw[:40].decode('utf-8', 'replace')!r}", raw)
    return x


def dense_value(text: Union[str, bytes, None]) -> float:
    """The dense transform of one raw TSV field (reference form of :func:`dense_transform`).

    Raises:
        BadRow: if the field is neither empty nor an integer.
    """
    x = parse_int_field(text)
    if x is None:
        return 0.0
    return float(np.float32(math.log1p(max(x, 0))))


# ---------------------------------------------------------------------------------------------
# categorical hash: reference (per value, pure Python)


def mix64_int(z: int) -> int:
    """SplitMix64's finaliser on one integer: the stable mixer behind every hash and salt here (and
    prep's split offsets), the same in every process, unlike Python's salted ``hash()``."""
    z &= M64
    z = ((z ^ (z >> 30)) * MIX1) & M64
    z = ((z ^ (z >> 27)) * MIX2) & M64
    return z ^ (z >> 31)


def _column_number(column: Union[int, str]) -> int:
    if isinstance(column, str):
        if column not in SPARSE_COLUMNS:
            raise ValueError(f"column={column!r}: expected one of C1..C{NUM_SPARSE}")
        return int(column[1:])
    if not 1 <= int(column) <= NUM_SPARSE:
        raise ValueError(f"column={column!r}: expected a 1-based column number 1..{NUM_SPARSE}")
    return int(column)


def validate_hash_buckets(hash_buckets: int) -> int:
    """Return ``hash_buckets`` as int, or raise ValueError saying the allowed range."""
    if isinstance(hash_buckets, bool) or int(hash_buckets) != hash_buckets \
            or not MIN_HASH_BUCKETS <= int(hash_buckets) <= 2 ** 62:
        raise ValueError(f"hash_buckets={hash_buckets!r}: must be an integer >= {MIN_HASH_BUCKETS} "
                         f"(ids 0..{NUM_SPARSE - 1} are reserved for empty values); "
                         f"the default is {DEFAULT_HASH_BUCKETS}")
    return int(hash_buckets)


def column_salt(column: Union[int, str]) -> int:
    """The 64-bit salt of a categorical column (``"C7"`` or ``7``)."""
    return column_salt_int(_column_number(column))


def column_salt_int(slot: int) -> int:
    """The 64-bit salt of the 1-based categorical slot ``slot`` (any positive number)."""
    return mix64_int(_SALT_BASE + int(slot))


def hash_value(value: Union[str, bytes, None], column: Union[int, str],
               hash_buckets: int = DEFAULT_HASH_BUCKETS) -> int:
    """Hash one raw categorical value to its id (reference form; see the module docstring).

    Args:
        value: the raw field (``str`` is UTF-8 encoded); ``None`` or ``""`` means empty.
        column: ``"C1".."C26"`` or the 1-based column number.
        hash_buckets: number of ids.
    """
    return hash_slot_value(value, _column_number(column), NUM_SPARSE, validate_hash_buckets(hash_buckets))


def hash_slot_value(value: Union[str, bytes, None], slot: int, slots: int, buckets: int) -> int:
    """The hash of the module docstring for slot ``slot`` (1-based) of ``slots`` categorical
    features: Criteo is ``slots = 26``; a feature spec with ``n`` categorical features uses
    ``slots = n``, so ids ``0..n-1`` are the per-feature empty ids (``buckets > slots``)."""
    raw = value.encode("utf-8") if isinstance(value, str) else (value or b"")
    if not raw:
        return slot - 1
    return slots + mix64_int(key_int(raw) ^ column_salt_int(slot)) % (buckets - slots)


# ---------------------------------------------------------------------------------------------
# categorical hash: vectorised (numpy over arrow buffers: the kernels are ctr_model.hash_kernels)


def hash_categorical(values: Any, column: Union[int, str],
                     hash_buckets: int = DEFAULT_HASH_BUCKETS) -> np.ndarray:
    """Vectorised :func:`hash_value` over a whole column.

    Args:
        values: a pyarrow string/binary array (nulls are empty), or a sequence of str/bytes/None.
        column: ``"C1".."C26"`` or the 1-based column number.
        hash_buckets: number of ids.

    Returns:
        int64 numpy array of ids in ``[0, hash_buckets)``.
    """
    return hash_slot(values, _column_number(column), NUM_SPARSE, validate_hash_buckets(hash_buckets))


def hash_slot(values: Any, slot: int, slots: int, buckets: int) -> np.ndarray:
    """Vectorised :func:`hash_slot_value` over a whole column (``buckets > slots`` unchecked)."""
    if type(values).__name__ != "ChunkedArray":
        return hash_chunk(values, slot, column_salt_int(slot), buckets, None, slots)
    out = np.empty(len(values), dtype=np.int64)   # each chunk hashed straight into its slice
    pos = 0
    for chunk in values.chunks:
        hash_chunk(chunk, slot, column_salt_int(slot), buckets, out[pos:pos + len(chunk)], slots)
        pos += len(chunk)
    return out


# ---------------------------------------------------------------------------------------------
# one raw line (reference path for serving and tests)


def transform_line(line: Union[str, bytes], hash_buckets: int = DEFAULT_HASH_BUCKETS
                   ) -> Tuple[int, np.ndarray, np.ndarray]:
    """Parse and transform one raw Criteo TSV line, exactly as prep does.

    Returns:
        ``(label, dense float32[13], sparse int64[26])``.

    Raises:
        BadRow: wrong field count, a non-integer in an integer column, or a label not 0/1.
    """
    raw = line.encode("utf-8") if isinstance(line, str) else bytes(line)
    raw = raw.rstrip(b"\n").rstrip(b"\r")
    fields = raw.split(b"\t")
    if len(fields) != len(RAW_COLUMNS):
        raise BadRow(f"wrong field count: {len(fields)} fields, expected {len(RAW_COLUMNS)}", raw)
    try:
        label = parse_int_field(fields[0])
    except BadRow:
        label = None
    if label not in (0, 1):
        raise BadRow(f"label not 0/1: {fields[0][:40].decode('utf-8', 'replace')!r}", raw)
    dense = np.zeros(NUM_DENSE, dtype=np.float32)
    for i, field in enumerate(fields[1:1 + NUM_DENSE]):
        try:
            dense[i] = dense_value(field)
        except BadRow as exc:
            raise BadRow(f"non-integer in integer column {DENSE_COLUMNS[i]}: {exc.reason}", raw) from None
    sparse = np.array([hash_value(f, j + 1, hash_buckets)
                       for j, f in enumerate(fields[1 + NUM_DENSE:])], dtype=np.int64)
    return int(label), dense, sparse


def arrow_schema():
    """The pyarrow schema of the prepped Parquet shards (label int8, I* float32, C* int64)."""
    import pyarrow as pa

    return pa.schema([(LABEL, pa.int8())] + [(c, pa.float32()) for c in DENSE_COLUMNS]
                     + [(c, pa.int64()) for c in SPARSE_COLUMNS])


# ---------------------------------------------------------------------------------------------
# split directories


def is_shard_name(name: str) -> bool:
    """Is ``name`` (a file name, not a path) one of prep's ``part-*.parquet`` shards?"""
    return name.startswith("part-") and name.endswith(".parquet")


def shard_files(split_dir: str) -> List[str]:
    """Sorted paths of the ``part-*.parquet`` shards in a split directory (none if it is missing)."""
    try:
        names = os.listdir(split_dir)
    except FileNotFoundError:
        return []
    return [os.path.join(split_dir, n) for n in sorted(names) if is_shard_name(n)]


def write_split_schema(split_dir: str, hash_buckets: int, rows: int,
                       files: Optional[Sequence[Dict[str, Any]]] = None,
                       feature_spec: Optional[Dict[str, Any]] = None,
                       positive_rate: Optional[float] = None) -> Dict[str, Any]:
    """Write ``schema.json`` into a split directory (prep calls this last, as a commit marker).

    ``feature_spec`` is the spec's :meth:`~ctr_model.feature_spec.FeatureSpec.to_dict`; without
    one the data is the Criteo layout (as every split written before specs existed).
    ``positive_rate``: the split's click rate (the trainer starts the output bias from it)."""
    doc: Dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "hash_buckets": int(hash_buckets),
        "columns": expected_columns({"feature_spec": feature_spec}),
        "rows": int(rows),
        "hash_version": HASH_VERSION,
    }
    if doc["columns"] == list(RAW_COLUMNS):
        doc["dense_transform"] = "log1p(max(x, 0)), empty -> 0, float32"
    if positive_rate is not None:
        doc["positive_rate"] = round(float(positive_rate), 6)
    if files is not None:
        doc["files"] = [dict(f) for f in files]
    if feature_spec is not None:
        doc["feature_spec"] = feature_spec
    write_json(os.path.join(split_dir, SCHEMA_FILE), doc)
    return doc


def expected_columns(doc: Dict[str, Any]) -> List[str]:
    """The Parquet columns a ``schema.json`` document's feature spec implies (label, dense,
    categorical); Criteo's without a spec."""
    spec = doc.get("feature_spec")
    if not isinstance(spec, dict) or spec.get("format", "criteo") == "criteo":
        return list(RAW_COLUMNS)
    return ([str(spec.get("label"))] + [str(d.get("name")) for d in spec.get("dense") or []]
            + [str(c.get("name")) for c in spec.get("categorical") or []]
            + [str(x.get("name")) for x in spec.get("crosses") or []])


def read_split_schema(split_dir: str) -> Dict[str, Any]:
    """Read a split directory's ``schema.json``.

    Raises:
        SchemaMismatch: if the file is missing or not valid JSON.
    """
    path = os.path.join(split_dir, SCHEMA_FILE)
    try:
        with open(path) as fh:
            doc = json.load(fh)
    except FileNotFoundError:
        raise SchemaMismatch(split_dir, f"no {SCHEMA_FILE}, so this is not the output of a finished prep; "
                                        f"run `ctr-volcano prep --input RAW --out DIR` and point at "
                                        f"DIR/train or DIR/test") from None
    except (OSError, ValueError) as exc:
        raise SchemaMismatch(path, f"unreadable ({exc}); re-run `ctr-volcano prep`") from None
    if not isinstance(doc, dict):
        raise SchemaMismatch(path, "expected a JSON object; re-run `ctr-volcano prep`")
    return doc


def check_split_schema(split_dir: str, expected_buckets: Optional[int] = None,
                       any_spec: bool = False) -> Dict[str, Any]:
    """Read ``schema.json`` and refuse data this code cannot use.

    Args:
        split_dir: a ``train/`` or ``test/`` directory written by prep.
        expected_buckets: if given, the ``hash_buckets`` the model was built for.
        any_spec: accept data prepped with any feature spec; by default only the Criteo layout,
            the one the trainer, evaluation and the scorer read so far.

    Returns:
        The schema document.

    Raises:
        SchemaMismatch: naming the directory, what was found, what was expected and the fix.
    """
    doc = check_schema_doc(read_split_schema(split_dir), split_dir, expected_buckets, any_spec)
    if not shard_files(split_dir):
        raise SchemaMismatch(split_dir, f"{SCHEMA_FILE} present but no part-*.parquet shards; "
                                        f"re-run `ctr-volcano prep`")
    return doc


def check_schema_doc(doc: Dict[str, Any], split_dir: str, expected_buckets: Optional[int] = None,
                     any_spec: bool = False) -> Dict[str, Any]:
    """The checks of :func:`check_split_schema` on a schema document already read (from a
    directory or from the object store, whose reader has no directory to list); ``split_dir``
    names where it came from in the errors.

    Raises:
        SchemaMismatch: as :func:`check_split_schema`, shards aside.
    """
    found = doc.get("schema_version")
    if found != SCHEMA_VERSION:
        raise SchemaMismatch(split_dir, f"schema_version {found!r} found, this code expects {SCHEMA_VERSION}; "
                                        f"re-run `ctr-volcano prep` on the raw data with this version to "
                                        f"regenerate it")
    if not any_spec and expected_columns(doc) != list(RAW_COLUMNS):
        raise SchemaMismatch(split_dir, f"prepped with a {doc['feature_spec'].get('format')!r} feature spec "
                                        f"(columns {expected_columns(doc)[:6]!r}...); training, evaluation "
                                        f"and the scorer read the Criteo layout only so far: prep "
                                        f"Criteo-format data (no --feature-spec) to train")
    if list(doc.get("columns") or []) != expected_columns(doc):
        raise SchemaMismatch(split_dir, f"columns {doc.get('columns')!r} differ from the expected "
                                        f"{expected_columns(doc)!r}; re-run `ctr-volcano prep` to "
                                        f"regenerate the data")
    if expected_buckets is not None and doc.get("hash_buckets") != int(expected_buckets):
        raise SchemaMismatch(split_dir, f"hash_buckets {doc.get('hash_buckets')!r} found, expected "
                                        f"{int(expected_buckets)}; set the model's hash_buckets to the "
                                        f"data's, or re-run `ctr-volcano prep --hash-buckets "
                                        f"{int(expected_buckets)}`")
    return doc
