"""Raw request columns -> the ONNX graph's inputs, with prep's transforms, for any feature spec.

A service calls the model with the values its log has, one V2 input per raw column named as in the
model's feature spec (Criteo: ``I1..I13``, ``C1..C26``), so the server must transform them exactly as
prep did before training. The transforms are imported from :mod:`ctr_model.transforms` (and through
it :mod:`ctr_model.features`): the one implementation prep, the trainer and the scorer use, never
re-written here. This module checks shapes and datatypes, reads the request's encodings (a
multi-valued row as the log's text or a JSON list) and names the input, the row and the fix of
anything malformed. What the values become, empty ones and ids never seen included, is the
transforms' business, so a served row scores as the numpy scorer scores prep's row.

Accepted, per input of shape ``[N]`` (or ``[N, 1]``):

* dense: ``BYTES`` (the log's text; ``""`` when missing) or ``FP32``/``FP64``/``INT32``/``INT64``
  (``NaN`` when missing);
* categorical: ``BYTES`` (the category's text, an integer id as its decimal text; ``""`` when
  missing) or ``INT64``/``INT32`` (integer ids, as a Parquet column has them);
* multi-valued: ``BYTES``, each row either the log's own form (the values joined by the feature's
  ``separator``) or a JSON list (``["a", "b"]``, ``[3, 7]``; ``[]`` or ``""`` when missing). A row
  whose text starts with ``[`` is read as JSON.

A cross (the spec's ``crosses``) is no input: its ids are computed from its features' ids by
:func:`ctr_model.transforms.cross_column`, as prep computes them.

The spec's label and ``ignore`` columns may be sent too (a log row as it is); they are not used.
"""
from __future__ import annotations

import json
from typing import Any, Dict, List, Mapping, Tuple

import numpy as np

from ctr_model.feature_spec import CategoricalFeature, DenseFeature, FeatureSpec, criteo_spec, spec_from_dict
from ctr_model.features import DENSE_COLUMNS, SPARSE_COLUMNS, BadRow
from ctr_model.onnx_inputs import DENSE_INPUT, IDS_INPUT, layout_of, padded
from ctr_model.transforms import (
    categorical_column,
    cross_columns,
    dense_column,
    dense_value,
    multivalued_column,
    parse_number,
)
from ctr_volcano.errors import BadInput

__all__ = ["RAW_INPUTS", "BYTES", "NUMERIC", "INTEGER", "request_spec", "raw_inputs", "model_inputs",
           "multivalued_ids"]

#: The Criteo model's inputs, one per raw column, in the model's order.
RAW_INPUTS = DENSE_COLUMNS + SPARSE_COLUMNS
BYTES = "BYTES"
#: Datatypes a dense column may also come as (missing = NaN).
NUMERIC = ("FP32", "FP64", "INT32", "INT64")
#: Datatypes a single-valued categorical column may also come as (integer ids).
INTEGER = ("INT32", "INT64")


def request_spec(manifest: Mapping[str, Any]) -> FeatureSpec:
    """The feature spec whose raw columns the model takes (``serving.json``'s, else Criteo's)."""
    doc = manifest.get("feature_spec")
    return criteo_spec(int(manifest["hash_buckets"])) if doc is None else spec_from_dict(doc)


def raw_inputs(spec: FeatureSpec) -> Tuple[str, ...]:
    """The request's inputs: the spec's dense, then categorical features, in order."""
    return tuple(d.name for d in spec.dense) + tuple(c.name for c in spec.categorical)


def _column(name: str, datatype: str, values: Any, rows: int, allowed: Tuple[str, ...]) -> np.ndarray:
    arr = np.asarray(values)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]
    if arr.ndim != 1 or len(arr) != rows:
        raise BadInput(name, f"shape {list(arr.shape)}",
                       f"send one value per row: shape [{rows}] (or [{rows}, 1]), as the other inputs")
    if datatype not in allowed:
        raise BadInput(name, datatype, f"send datatype {' or '.join(allowed)} (\"\" for a missing value)")
    return arr


def _dense(feature: DenseFeature, datatype: str, arr: np.ndarray) -> np.ndarray:
    """The feature's transform of one input (prep's, imported)."""
    if datatype != BYTES:
        return dense_column(feature, arr.astype(np.float64))
    try:
        if feature.transform == "criteo":
            return np.array([dense_value(feature, v) for v in arr.tolist()], dtype=np.float32)
        return dense_column(feature, np.array([parse_number(v) for v in arr.tolist()], dtype=np.float64))
    except (BadRow, TypeError, ValueError) as exc:
        i, reason = _first_bad(feature, arr)
        what = "the log's integer text" if feature.transform == "criteo" else "a number (or send FP32/FP64)"
        raise BadInput(f"{feature.name}[{i}]", arr[i], f"{reason or exc}; send {what}, or \"\" when missing") from None


def _first_bad(feature: DenseFeature, arr: np.ndarray) -> Tuple[int, str]:
    """The row of the first value the transform refuses, and why."""
    for i, v in enumerate(arr.tolist()):
        try:
            dense_value(feature, v)
        except BadRow as exc:
            return i, exc.reason
        except (TypeError, ValueError):
            return i, "not text or a number"
    return 0, ""


def _text_array(name: str, arr: np.ndarray) -> Any:
    """A BYTES input as an arrow string or binary array (None is null: a missing value)."""
    import pyarrow as pa

    values = arr.tolist()
    try:
        out = pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        out = None
    if out is not None and (pa.types.is_string(out.type) or pa.types.is_binary(out.type)
                            or pa.types.is_null(out.type)):
        return out
    i = next(i for i, v in enumerate(values) if v is not None and not isinstance(v, (str, bytes)))
    raise BadInput(f"{name}[{i}]", values[i], "send the value as text (an integer id as its decimal text, "
                                              "\"\" when missing), or the whole input as INT64")


def _json_row(name: str, row: int, text: Any) -> List[str]:
    """One multi-valued row sent as a JSON list: its ids as text (a JSON integer is its decimal text)."""
    try:
        items = json.loads(text)
    except ValueError as exc:
        raise BadInput(f"{name}[{row}]", text[:60], f"not a JSON list ({getattr(exc, 'msg', exc)}): send a JSON list of "
                                                   f"ids, or the values joined by the separator") from None
    if not isinstance(items, list):
        raise BadInput(f"{name}[{row}]", text[:60], "send a JSON list of ids, or the values joined by the separator")
    out = []
    for v in items:
        if isinstance(v, bool) or not isinstance(v, (str, int)) and v is not None:
            raise BadInput(f"{name}[{row}]", text[:60], f"the list holds {v!r}: send each id as text or an "
                                                       f"integer (null when missing)")
        out.append("" if v is None else v if isinstance(v, str) else str(v))
    return out


def multivalued_ids(spec: FeatureSpec, feature: CategoricalFeature, arr: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """The ids of a multi-valued input's rows as the server reads them (each row the values joined by
    the feature's separator, or a JSON list), unpadded, in row order (at most ``max_length`` a row, as
    prep keeps them): ``(offsets[N + 1], ids)``.

    Raises:
        BadInput: a row that starts as a JSON list and is not one, naming the input and the row.
    """
    import pyarrow as pa

    name = feature.name
    text = _text_array(name, arr)
    values = arr.tolist()
    is_json = np.fromiter((bool(v) and v.lstrip()[:1] in ("[", b"[") for v in values), dtype=bool, count=len(values))
    if not is_json.any():
        ids = multivalued_column(spec, feature, text)
        return ids.offsets.to_numpy(), ids.values.to_numpy()
    lists = [_json_row(name, i, v) for i, v in enumerate(values) if is_json[i]]
    parts = [(np.flatnonzero(is_json), multivalued_column(spec, feature, pa.array(lists, type=pa.list_(pa.string()))))]
    if not is_json.all():
        parts.append((np.flatnonzero(~is_json), multivalued_column(spec, feature, text.filter(pa.array(~is_json)))))
    lengths = np.zeros(len(values), dtype=np.int64)
    for rows, ids in parts:
        lengths[rows] = np.diff(ids.offsets.to_numpy())
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    out = np.empty(int(offsets[-1]), dtype=np.int64)
    for rows, ids in parts:          # each part's values to its rows' places
        own = ids.offsets.to_numpy()
        counts = np.diff(own)
        within = np.arange(int(own[-1])) - np.repeat(own[:-1], counts)
        out[np.repeat(offsets[rows], counts) + within] = ids.values.to_numpy()
    return offsets, out


def _multivalued(spec: FeatureSpec, feature: CategoricalFeature, arr: np.ndarray) -> np.ndarray:
    """``[N, max_length]`` ids of a multi-valued input, padded (rows as text, JSON lists, or both)."""
    offsets, ids = multivalued_ids(spec, feature, arr)
    return padded(offsets, ids, int(feature.max_length), feature.name)


def _check_names(spec: FeatureSpec, columns: Mapping[str, Any]) -> int:
    """The row count; refuses a missing or unknown input."""
    wanted = raw_inputs(spec)
    missing = [c for c in wanted if c not in columns]
    if missing:
        raise BadInput("inputs", missing[:5], f"send one input per raw column of the model's feature spec: "
                                              f"{', '.join(wanted[:8])}{' ...' if len(wanted) > 8 else ''}")
    extra = sorted(set(columns) - set(wanted) - {spec.label} - set(spec.ignore))
    if extra:
        raise BadInput("inputs", extra[:5], f"the model takes only {', '.join(wanted[:8])}"
                                            f"{' ...' if len(wanted) > 8 else ''} (and ignores {spec.label!r})")
    return len(np.asarray(columns[wanted[0]][1]).reshape(-1))


def model_inputs(spec: FeatureSpec, columns: Mapping[str, Tuple[str, Any]]) -> Dict[str, np.ndarray]:
    """The graph's feed from ``{input: (V2 datatype, values)}`` (its layout:
    :func:`ctr_model.onnx_inputs.layout_of`).

    Raises:
        BadInput: an input missing or unknown, a shape other than [N], a datatype that input cannot
            have, or a value its transform refuses; the message names the input and the row.
    """
    rows = _check_names(spec, columns)
    layout = layout_of(spec)
    feed: Dict[str, np.ndarray] = {}
    if spec.dense:
        feed[DENSE_INPUT] = np.empty((rows, len(spec.dense)), dtype=np.float32)
    if layout.ids:
        feed[IDS_INPUT] = np.empty((rows, len(layout.ids)), dtype=np.int64)
    for j, d in enumerate(spec.dense):
        datatype, values = columns[d.name]
        feed[DENSE_INPUT][:, j] = _dense(d, datatype, _column(d.name, datatype, values, rows, (BYTES,) + NUMERIC))
    single = 0
    for c in spec.categorical:
        datatype, values = columns[c.name]
        if c.multivalued:
            feed[c.name] = _multivalued(spec, c, _column(c.name, datatype, values, rows, (BYTES,)))
            continue
        arr = _column(c.name, datatype, values, rows, (BYTES,) + INTEGER)
        ids = _text_array(c.name, arr) if datatype == BYTES else _integers(arr)
        feed[IDS_INPUT][:, single] = categorical_column(spec, c, ids)
        single += 1
    if spec.crosses:        # the ids' last columns: computed from the features' ids, as prep does
        at = {name: k for k, name in enumerate(layout.ids)}
        crossed = cross_columns(spec, {n: feed[IDS_INPUT][:, at[n]] for n in spec.cross_features})
        feed[IDS_INPUT][:, single:] = np.stack(crossed, axis=1)
    return feed


def _integers(arr: np.ndarray) -> Any:
    import pyarrow as pa

    return pa.array(arr.astype(np.int64))
