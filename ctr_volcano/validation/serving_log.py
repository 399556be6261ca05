"""Training/serving skew: the profile of what a model server was asked, from its request log.

The server logs a sample of the raw rows it scored (:mod:`ctr_volcano.serving.request_log`: JSON Lines,
``{"time", "model", "columns": {raw column: value}, "probability"}``). Profiled here with the model's
feature spec, through the transforms prep uses (dense features: the raw numbers; categorical ones:
the ids of :mod:`ctr_model.transforms`), it compares with the model's training profile like a day
of data does (without the label and row-count checks: a request has no label, and a log's size says
nothing about the traffic).
"""
from __future__ import annotations

import json
import math
from typing import Any, Dict, List, Tuple

import numpy as np

from ctr_volcano.data.profile import DataProfile
from ctr_volcano.data.profile.sketches import DenseSketch, IdSketch
from ctr_volcano.errors import BadInput

__all__ = ["read_log", "log_profile"]


def read_log(path: str) -> Tuple[List[Dict[str, Any]], List[float]]:
    """The logged rows' raw columns and probabilities.

    Raises:
        BadInput: a missing file, a line that is not a logged row, or no row at all.
    """
    rows: List[Dict[str, Any]] = []
    probabilities: List[float] = []
    try:
        with open(path, encoding="utf-8") as fh:
            for number, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                    rows.append(dict(record["columns"]))
                    probabilities.append(float(record.get("probability", math.nan)))
                except (ValueError, KeyError, TypeError):
                    raise BadInput("serving_log", f"{path}:{number}", "not a request-log line ({\"columns\": "
                                   "{...}, \"probability\": p}); give the file ctr-volcano serve "
                                   "--request-log wrote") from None
    except OSError as exc:
        raise BadInput("serving_log", path, f"cannot read it ({exc.strerror or exc})") from None
    if not rows:
        raise BadInput("serving_log", path, "no logged request in it: is the server logging "
                                            "(--request-log, --log-sample)?")
    return rows, probabilities


def _number(value: Any, where: str) -> float:
    from ctr_model.transforms import parse_number

    try:
        return parse_number(value)
    except Exception:   # BadRow: the server accepted it as a number, so this is a hand-edited log
        raise BadInput("serving_log", where, f"{value!r} is not a number") from None


def log_profile(path: str, spec: Any = None) -> Tuple[DataProfile, Dict[str, Any]]:
    """The profile (and its ``profile.json`` document) of the request log at ``path``, read with the
    feature spec ``spec`` (the served model's; ``None``: Criteo).

    Raises:
        BadInput: an unreadable log, or one that lacks a column of the spec.
    """
    import pyarrow as pa

    from ctr_model.feature_spec import criteo_spec
    from ctr_model.transforms import categorical_column
    from ctr_volcano.serving.raw import multivalued_ids

    spec = spec if spec is not None else criteo_spec()
    rows, probabilities = read_log(path)
    names = [d.name for d in spec.dense] + [c.name for c in spec.categorical]
    absent = [n for n in names if n not in rows[0]]
    if absent:
        raise BadInput("serving_log", path, f"its rows lack the model's column(s) {', '.join(absent[:5])}: "
                                            f"was it logged by a server of another model?")
    profile = DataProfile(label=spec.label, rows=len(rows), positives=0)
    for d in spec.dense:
        x = np.array([_number(r.get(d.name), f"{path}: {d.name}") for r in rows], dtype=np.float64)
        profile.dense[d.name] = DenseSketch.of(x)
    slots = len(spec.categorical)
    for k, c in enumerate(spec.categorical):
        text = [None if r.get(c.name) in (None, "") else str(r.get(c.name)) for r in rows]
        if c.multivalued:       # as the server read them: the values joined by the separator, or JSON lists
            ids = multivalued_ids(spec, c, np.array(text, dtype=object))[1]
        else:
            ids = categorical_column(spec, c, pa.array(text, type=pa.string()))
        profile.categorical[c.name] = IdSketch.of(ids, k, slots)
    p = np.array(probabilities, dtype=np.float64)
    source = {"serving_log": path, "rows": len(rows),
              "mean_probability": float(np.nanmean(p)) if np.isfinite(p).any() else None}
    return profile, profile.to_doc(spec.to_dict(), source)
