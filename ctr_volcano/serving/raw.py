"""Raw request columns -> the ONNX model's ``dense`` and ``ids`` inputs, with prep's transforms.

A service calls the model with the values its log has (Criteo: ``I1..I13`` as the integer text of
the log or as numbers, ``C1..C26`` as the raw category text, ``""`` for missing), so the server must
transform them exactly as prep did before training. The transforms are imported from
:mod:`ctr_model.features` (the one implementation prep, the trainer and the scorer use), never
re-written here; this module only checks shapes and types and names the column at fault.
"""
from __future__ import annotations

from typing import Any, Mapping, Tuple

import numpy as np

from ctr_model.features import DENSE_COLUMNS, SPARSE_COLUMNS, BadRow, dense_transform, dense_value, hash_categorical
from ctr_volcano.errors import BadInput

__all__ = ["RAW_INPUTS", "BYTES", "NUMERIC", "model_inputs"]

#: The request's inputs, one per raw column, in the model's order.
RAW_INPUTS = DENSE_COLUMNS + SPARSE_COLUMNS
BYTES = "BYTES"
#: Datatypes a dense column may also come as (missing = NaN).
NUMERIC = ("FP32", "FP64", "INT32", "INT64")


def _column(name: str, datatype: str, values: Any, rows: int, numeric_ok: bool) -> np.ndarray:
    arr = np.asarray(values)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]
    if arr.ndim != 1 or len(arr) != rows:
        raise BadInput(name, f"shape {list(arr.shape)}",
                       f"send one value per row: shape [{rows}] (or [{rows}, 1]) like {RAW_INPUTS[0]}")
    allowed = (BYTES,) + (NUMERIC if numeric_ok else ())
    if datatype not in allowed:
        raise BadInput(name, datatype, f"send datatype {' or '.join(allowed)} (\"\" for a missing value)")
    return arr


def _dense(name: str, datatype: str, arr: np.ndarray) -> np.ndarray:
    if datatype != BYTES:
        return dense_transform(arr.astype(np.float64))
    out = np.empty(len(arr), dtype=np.float32)
    for i, v in enumerate(arr):
        try:
            out[i] = dense_value(v)
        except BadRow as exc:
            raise BadInput(f"{name}[{i}]", v, f"{exc.reason}; send the log's integer text or \"\"") from None
    return out


def model_inputs(columns: Mapping[str, Tuple[str, Any]], hash_buckets: int) -> Tuple[np.ndarray, np.ndarray]:
    """``(dense float32 [N, 13], ids int64 [N, 26])`` from ``{column: (V2 datatype, values)}``.

    Raises:
        BadInput: a column missing or unknown, a shape other than [N], a datatype that column cannot
            have, or an integer column whose text is not an integer; the message names the column.
    """
    missing = [c for c in RAW_INPUTS if c not in columns]
    if missing:
        raise BadInput("inputs", missing[:5], f"send one input per raw column: {RAW_INPUTS[0]}..{RAW_INPUTS[-1]}")
    unknown = sorted(set(columns) - set(RAW_INPUTS))
    if unknown:
        raise BadInput("inputs", unknown[:5], f"the model takes only {RAW_INPUTS[0]}..{RAW_INPUTS[-1]}")
    rows = len(np.asarray(columns[RAW_INPUTS[0]][1]).reshape(-1))
    dense = np.empty((rows, len(DENSE_COLUMNS)), dtype=np.float32)
    for j, name in enumerate(DENSE_COLUMNS):
        datatype, values = columns[name]
        dense[:, j] = _dense(name, datatype, _column(name, datatype, values, rows, numeric_ok=True))
    ids = np.empty((rows, len(SPARSE_COLUMNS)), dtype=np.int64)
    for j, name in enumerate(SPARSE_COLUMNS):
        datatype, values = columns[name]
        arr = _column(name, datatype, values, rows, numeric_ok=False)
        values = arr.tolist()
        bad = next((i for i, v in enumerate(values) if not isinstance(v, (bytes, str))), None)
        if bad is not None:
            raise BadInput(f"{name}[{bad}]", values[bad], "send the category as text (\"\" when missing)")
        ids[:, j] = hash_categorical(values, name, hash_buckets)
    return dense, ids
