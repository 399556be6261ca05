"""The transforms a feature spec declares, in one pure module that prep, the trainer's checks, the
scorer and any server import, so a value is transformed the same way everywhere.

Each transform has a vectorised form (numpy over a whole column, what prep uses) and a per-value
reference form (what a server scoring one request or a test uses); both give the same numbers bit
for bit, and the tests hold them to it. For the Criteo preset they are exactly
:mod:`ctr_model.features`' (``criteo`` dense transform; the categorical hash with 26 slots and one
shared table), so the preset's output is today's.

Dense, with ``x`` the raw number and an empty field read as the feature's ``fill``:

* ``criteo``: ``float32(log(1 + max(x, 0)))``, integers only, empty -> 0 (today's); an integer
  written as a float (``260.0``, ``1e3``: what pandas writes for an integer column with missing
  values) is that integer, a fractional value a reject whose reason names ``log1p``/``standardize``;
* ``log1p``: the same on any number, empty -> ``fill``;
* ``standardize``: ``float32((x - mean) / std)`` in float64, ``mean``/``std`` from prep;
* ``none``: ``float32(x)``.

Labels: ``0``/``1``, also written as numbers (``0.0``/``1.0``); anything else is a reject.

Categorical: feature ``k`` (1-based, in the spec's order) of ``n`` has ids in
``[0, hash_buckets)``: ``k - 1`` for an empty value, else ``n + mix64(key(v) ^ salt(k)) %
(hash_buckets - n)`` (the hash of :mod:`ctr_model.features`). Integer ids are hashed as their
decimal text, so ``123`` in Parquet and ``"123"`` in a CSV are the same id. A multi-valued feature
hashes each non-empty value, keeps the first ``max_length`` and reads an empty list as ``[k - 1]``;
an attention-pooled history hashes its values with its ``query``'s ``salt(q)``, so an item has one id
as history and as candidate (its empty list is still ``[k - 1]``).

Cross ``x`` (the spec's ``crosses``, slot ``s = n + x + 1``) of features ``f_1..f_m`` with ids
``i_1..i_m`` (above; an empty value's id too, so "empty" crosses like any value): ``h = salt(s)``,
then ``h = mix64(h ^ i_j)`` for each ``j`` in order, and the id is ``h % hash_buckets``
(:func:`cross_column`; every path that has the features' ids, prep, scoring and the server, calls
it, so a served row's cross is prep's).
"""
from __future__ import annotations

import math
from typing import Any, List, Optional, Tuple, Union

import numpy as np

from ctr_model.feature_spec import CategoricalFeature, DenseFeature, FeatureSpec
from ctr_model.features import BadRow, column_salt_int, dense_transform, hash_slot, hash_slot_value
from ctr_model.features import dense_value as criteo_dense_value
from ctr_model.hash_kernels import mix64_array
from ctr_model.spec_attention import query_of

__all__ = ["dense_column", "dense_value", "standardize_stats", "categorical_column",
           "multivalued_column", "categorical_ids", "parse_number", "output_schema",
           "parse_dense_column", "parse_label_column", "dense_reject", "NON_NUMBER", "FRACTION",
           "cross_column", "cross_columns"]

#: The reject categories of a dense field (prep counts rejects by category).
NON_NUMBER = "non-number in dense column"
FRACTION = "fraction under transform criteo"

#: A decimal number as text (what :func:`parse_dense_column` accepts where Arrow's cast does not).
_NUMBER = r"^[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$"


def _np(array: Any) -> np.ndarray:
    """An arrow array as numpy (``np.asarray`` would import pandas, a second per process)."""
    if hasattr(array, "combine_chunks"):
        array = array.combine_chunks()
    return array.to_numpy(zero_copy_only=False)


def _filled(values: Any, fill: float) -> np.ndarray:
    """float64 numpy of ``values`` (numbers, NaN/None or arrow nulls = empty), empties -> ``fill``."""
    if hasattr(values, "to_numpy") and hasattr(values, "null_count"):
        import pyarrow as pa
        import pyarrow.compute as pc

        values = pc.fill_null(pc.cast(values, pa.float64()), float("nan")).to_numpy(zero_copy_only=False)
    arr = np.array(values, dtype=np.float64)
    arr[np.isnan(arr)] = float(fill)
    return arr


def dense_column(feature: DenseFeature, values: Any) -> np.ndarray:
    """The feature's transform of a whole column (float32, same length).

    Args:
        feature: the spec's entry (``standardize`` needs ``mean`` and ``std`` set).
        values: numbers where NaN/None (or an arrow null) is an empty field.
    """
    if feature.transform == "criteo":
        return dense_transform(values)
    x = _filled(values, feature.fill)
    if feature.transform == "log1p":
        return np.log1p(np.maximum(x, 0.0)).astype(np.float32)
    if feature.transform == "standardize":
        if feature.mean is None or feature.std is None:
            raise ValueError(f"dense feature {feature.name!r}: standardize without mean/std; "
                             f"prep computes them, so read the spec from prep's schema.json")
        return ((x - float(feature.mean)) / float(feature.std)).astype(np.float32)
    return x.astype(np.float32)


def parse_number(raw: Union[str, bytes, float, int, None]) -> float:
    """One raw dense field as a float; NaN for an empty field.

    Raises:
        BadRow: if the field is not a number.
    """
    if raw is None:
        return float("nan")
    if isinstance(raw, (int, float, np.integer, np.floating)) and not isinstance(raw, bool):
        return float(raw)
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    if not text.strip():
        return float("nan")
    try:
        value = float(text)
    except ValueError:
        raise BadRow(f"not a number: {text[:40]!r}", text) from None
    if math.isnan(value):
        raise BadRow(f"not a number: {text[:40]!r}", text)
    return value


def _fraction(text: Any) -> BadRow:
    return BadRow(f"not an integer: {str(text)[:40]!r}; transform criteo takes counts: give this "
                  f"column transform log1p (or standardize) in the feature spec")


def _criteo_value(raw: Union[str, bytes, float, int, None]) -> float:
    """``criteo`` on one raw field: an integer (as text, or written as an integral float) or empty."""
    if isinstance(raw, (int, np.integer)) and not isinstance(raw, bool):
        return criteo_dense_value(str(int(raw)))
    if raw is None or isinstance(raw, (str, bytes)):
        try:
            return criteo_dense_value(raw)
        except BadRow:
            pass            # not integer text: maybe an integer written as a float, like 260.0
    value = parse_number(raw)
    if math.isnan(value):
        return 0.0
    if not math.isfinite(value):
        raise BadRow(f"not a number: {str(raw)[:40]!r}")
    if value != math.floor(value):
        raise _fraction(raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw)
    return float(np.float32(math.log1p(max(value, 0.0))))


def dense_value(feature: DenseFeature, raw: Union[str, bytes, float, int, None]) -> float:
    """Reference form of :func:`dense_column` on one raw field.

    Raises:
        BadRow: if the field is not a number (an integer for ``criteo``: ``260``, ``260.0``, ``1e3``).
    """
    if feature.transform == "criteo":
        return _criteo_value(raw)
    return float(dense_column(feature, np.array([parse_number(raw)]))[0])


def dense_reject(feature: DenseFeature, raw: Any) -> Tuple[str, str]:
    """``(category, reason)`` of a raw field :func:`parse_dense_column` refused (reason from the
    reference form, so a server and prep say the same)."""
    try:
        dense_value(feature, raw)
    except BadRow as exc:
        if exc.reason.startswith("not an integer"):
            return FRACTION, f"dense column {feature.name}: {exc.reason}"
    return NON_NUMBER, f"{NON_NUMBER} {feature.name}: {str(raw)[:40]!r}"


def _numbers(text: Any) -> Tuple[np.ndarray, np.ndarray]:
    """(float64 with NaN for empty or invalid, valid) of a trimmed text column: a field is valid
    when empty or a finite decimal number. Arrow's cast runs first (a fraction of the regex's cost);
    the regex only on a batch with a bad value."""
    import pyarrow as pa
    import pyarrow.compute as pc

    empty = pc.fill_null(pc.equal(pc.utf8_length(text), 0), True)
    nulled = pc.if_else(empty, pa.scalar(None, pa.string()), text)
    try:
        values = pc.cast(nulled, pa.float64())
        if pc.all(pc.is_finite(values)).as_py() in (True, None):
            return pc.fill_null(values, float("nan")).to_numpy(zero_copy_only=False), np.ones(len(text), bool)
    except pa.ArrowInvalid:
        pass
    valid = pc.or_(empty, pc.fill_null(pc.match_substring_regex(text, _NUMBER), False))
    usable = pc.if_else(pc.and_(valid, pc.invert(empty)), text, pa.scalar(None, pa.string()))
    values = pc.fill_null(pc.cast(usable, pa.float64()), float("nan"))
    return values.to_numpy(zero_copy_only=False), _np(valid)


def parse_dense_column(feature: DenseFeature, column: Any) -> Tuple[np.ndarray, np.ndarray]:
    """(float64 with NaN for empty, ok) of a raw dense arrow column (text as read from a CSV, or
    numbers from Parquet): text must be a number, and under ``criteo`` an integral one (``260.0``
    is 260); :func:`dense_reject` says why a row is not ok."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_string(column.type) or pa.types.is_binary(column.type):
        values, ok = _numbers(pc.utf8_trim_whitespace(column))
    else:
        values = pc.fill_null(pc.cast(column, pa.float64()), float("nan")).to_numpy(zero_copy_only=False)
        ok = np.ones(len(column), dtype=bool)
    if feature.transform == "criteo":
        with np.errstate(invalid="ignore"):
            ok = ok & (np.isnan(values) | (values == np.floor(values)))
    return values, ok


def parse_label_column(column: Any) -> Tuple[np.ndarray, np.ndarray]:
    """(label int8, ok) of a raw label column: ``0``/``1`` as text or numbers, ``0.0``/``1.0`` too, and
    ``false``/``true`` in any case (pandas writes a bool column so; Parquet keeps it a bool)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_string(column.type) or pa.types.is_binary(column.type):
        text = pc.utf8_trim_whitespace(column)
        values, _ = _numbers(text)
        if pa.types.is_string(column.type):
            word = pc.utf8_lower(text)
            values = np.where(_np(pc.fill_null(pc.equal(word, "true"), False)), 1.0,
                              np.where(_np(pc.fill_null(pc.equal(word, "false"), False)), 0.0, values))
    else:
        values = pc.fill_null(pc.cast(column, pa.float64()), float("nan")).to_numpy(zero_copy_only=False)
    ok = (values == 0) | (values == 1)
    return (values == 1).astype(np.int8), ok


def standardize_stats(values: Any, fill: float = 0.0) -> Tuple[float, float]:
    """``(mean, std)`` of a raw dense column after filling empties; a constant column gets std 1."""
    x = _filled(values, fill)
    if x.size == 0:
        return 0.0, 1.0
    mean = float(x.mean())
    std = float(x.std())
    return mean, (std if std > 0 and math.isfinite(std) else 1.0)


def _slot(spec: FeatureSpec, feature: CategoricalFeature) -> int:
    return spec.categorical.index(feature) + 1


def _hash_slot(spec: FeatureSpec, feature: CategoricalFeature) -> int:
    """The slot whose salt hashes ``feature``'s values: its own, or an attention-pooled history's
    query's (one id space: :mod:`ctr_model.spec_attention`)."""
    query = query_of(spec, feature)
    return _slot(spec, query if query is not None else feature)


def _as_text(values: Any) -> Any:
    """An arrow string/binary array of ``values``; integer ids become their decimal text, and so do
    integral floats (a Parquet id column pandas stored as float64 because it has gaps: ``1005.0`` is
    ``1005``, NaN is empty); other floats their shortest text (``0.5``), booleans ``1``/``0``, a
    dictionary column (pandas' category dtype) its values."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if not isinstance(values, pa.Array):
        values = pa.array([None if v is None else v if isinstance(v, (str, bytes)) else _id_text(v)
                           for v in values])
    if pa.types.is_dictionary(values.type):          # pandas' category dtype, as Parquet keeps it
        values = values.dictionary_decode()
    if pa.types.is_floating(values.type):
        return pc.cast(pc.if_else(pc.is_nan(values), pa.scalar(None, values.type), values), pa.string())
    if pa.types.is_boolean(values.type):             # as the integers 1/0 a request sends for it
        values = pc.cast(values, pa.int8())
    if pa.types.is_integer(values.type):
        return pc.cast(values, pa.string())
    if pa.types.is_null(values.type):
        return pa.array([b""] * len(values), type=pa.binary())
    return values


def _id_text(value: Any) -> Optional[str]:
    """One non-text id's text, as :func:`_as_text` makes it of a column (``None``: NaN, empty)."""
    import pyarrow as pa

    if isinstance(value, (float, np.floating)):
        return _as_text(pa.array([float(value)], pa.float64()))[0].as_py()
    return str(int(value))


def categorical_column(spec: FeatureSpec, feature: CategoricalFeature, values: Any) -> np.ndarray:
    """Ids (int64) of a single-valued categorical column (strings, bytes or integers; null = empty)."""
    return hash_slot(_as_text(values), _slot(spec, feature), len(spec.categorical),
                     int(feature.hash_buckets))


def multivalued_column(spec: FeatureSpec, feature: CategoricalFeature, values: Any) -> Any:
    """Ids of a multi-valued column as an arrow ``list<int64>`` (never empty per row).

    Args:
        values: an arrow list array (Parquet), or strings split on the feature's ``separator``.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if not isinstance(values, pa.Array) or not pa.types.is_list(values.type) \
            and not pa.types.is_large_list(values.type):
        values = pc.split_pattern(_as_text(values), feature.separator)
    n = len(values)
    flat = _as_text(pc.list_flatten(values))
    parents = _np(pc.list_parent_indices(values)).astype(np.int64)
    keep = _np(pc.fill_null(pc.greater(pc.binary_length(flat), 0), False))
    parents, flat = parents[keep], flat.filter(pa.array(keep))
    rank = np.arange(parents.size) - np.searchsorted(parents, parents, side="left")
    short = rank < int(feature.max_length)
    parents, rank, flat = parents[short], rank[short], flat.filter(pa.array(short))
    slot = _slot(spec, feature)
    counts = np.maximum(np.bincount(parents, minlength=n), 1)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    ids = np.full(int(offsets[-1]), slot - 1, dtype=np.int64)
    ids[offsets[parents] + rank] = hash_slot(flat, _hash_slot(spec, feature), len(spec.categorical),
                                             int(feature.hash_buckets))
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(ids))


def categorical_ids(spec: FeatureSpec, feature: CategoricalFeature, raw: Any) -> List[int]:
    """Reference form: the ids of one raw value (one id unless the feature is multi-valued).

    Args:
        raw: ``str``/``bytes``/``int``/``float``/``None``; for a multi-valued feature also a list of
            them (a string is split on the feature's ``separator``).
    """
    slot, slots, buckets = _slot(spec, feature), len(spec.categorical), int(feature.hash_buckets)

    def one(v: Any) -> Union[str, bytes, None]:
        return v if v is None or isinstance(v, (str, bytes)) else _id_text(v)

    if not feature.multivalued:
        return [hash_slot_value(one(raw), slot, slots, buckets)]
    if isinstance(raw, (str, bytes)):
        sep = feature.separator.encode() if isinstance(raw, bytes) else feature.separator
        raw = raw.split(sep)  # type: ignore[arg-type]
    items = [one(v) for v in (raw or [])]
    ids = [hash_slot_value(v, _hash_slot(spec, feature), slots, buckets) for v in items if v]
    return ids[:int(feature.max_length)] or [slot - 1]


def cross_column(spec: FeatureSpec, k: int, ids: Any) -> np.ndarray:
    """The ids (int64) of the spec's ``k``-th cross (0-based) from its features' ids (the module
    docstring's hash).

    Args:
        ids: ``{feature: int64 ids}`` of (at least) the cross's features, one per row.
    """
    cross = spec.crosses[k]
    first = np.asarray(ids[cross.features[0]])
    h = np.full(first.shape, column_salt_int(len(spec.categorical) + k + 1), dtype=np.uint64)
    for name in cross.features:
        np.bitwise_xor(h, np.asarray(ids[name], dtype=np.int64).view(np.uint64), out=h)
        mix64_array(h)
    np.remainder(h, np.uint64(int(cross.hash_buckets)), out=h)
    return h.view(np.int64)


def cross_columns(spec: FeatureSpec, ids: Any) -> List[np.ndarray]:
    """:func:`cross_column` of every cross of the spec, in order."""
    return [cross_column(spec, k, ids) for k in range(len(spec.crosses))]


def output_schema(spec: FeatureSpec) -> Any:
    """The pyarrow schema of prep's Parquet for ``spec``: label int8, dense float32, categorical
    int64 (``list<int64>`` when multi-valued), then each cross's int64 ids; the Criteo preset's is
    :func:`ctr_model.features.arrow_schema`."""
    import pyarrow as pa

    return pa.schema([(name, pa.int8()) for name in spec.task_labels] + [(d.name, pa.float32()) for d in spec.dense]
                     + [(c.name, pa.list_(pa.int64()) if c.multivalued else pa.int64())
                        for c in spec.categorical] + [(x.name, pa.int64()) for x in spec.crosses])
