"""The model server's optional request log: a sample of the raw rows it scored, with their probability.

``ctr-volcano serve --request-log FILE --log-sample RATE`` appends one JSON line per sampled row::

    {"time": 1767225600.1, "model": "ctr", "columns": {"I1": "3", ..., "C26": "a1b2c3d4"}, "probability": 0.21}

the raw columns as the request sent them (text as text, numbers as numbers, a missing value as ``""``),
so what the server saw can be profiled exactly as prep profiles a day (``ctr-volcano validate
--serving-log FILE --reference MODEL``: training/serving skew, :mod:`ctr_volcano.validation.serving_log`).
Each row is kept with probability ``RATE`` (independently, seeded per server), a request's lines are
written at once under a lock and flushed, so a log read while the server runs has whole lines only.
"""
from __future__ import annotations

import json
import math
import threading
import time
from typing import Any, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ctr_volcano.errors import BadInput

__all__ = ["RequestLog", "check_log_args"]


def check_log_args(path: Optional[str], sample: float) -> None:
    """``--request-log``/``--log-sample`` checked before the server starts.

    Raises:
        BadInput: a rate outside (0, 1], or a log file that cannot be appended to.
    """
    if isinstance(sample, bool) or not isinstance(sample, (int, float)) or not 0.0 < sample <= 1.0:
        raise BadInput("--log-sample", sample, "use the share of rows to log, in (0, 1], e.g. 0.01")
    if path is None:
        return
    try:
        with open(path, "a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise BadInput("--request-log", path, f"cannot append to it ({exc.strerror or exc}); name a writable "
                                              f"file") from None


def _value(v: Any) -> Any:
    """A raw request value as JSON: text as text, a number as a number, NaN (a missing number) as ``""``."""
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, (np.floating, float)):
        return "" if math.isnan(float(v)) else float(v)
    if isinstance(v, (np.integer, int)):
        return int(v)
    return "" if v is None else str(v)


class RequestLog:
    """Appends a sample of the scored rows to ``path`` (see the module docstring)."""

    def __init__(self, path: str, sample: float = 1.0, model: str = "ctr", seed: Optional[int] = None):
        check_log_args(path, sample)
        self.path, self.sample, self.model = path, float(sample), model
        self._rng = np.random.default_rng(seed)
        self._lock = threading.Lock()

    def log(self, columns: Mapping[str, Tuple[str, Any]], probabilities: Sequence[float]) -> int:
        """Log the sampled rows of one request (``{column: (V2 datatype, values)}``, as the model read
        them); returns how many were written."""
        rows = len(probabilities)
        with self._lock:
            keep = np.flatnonzero(self._rng.random(rows) < self.sample) if self.sample < 1.0 else np.arange(rows)
        if not keep.size:
            return 0
        flat = {name: np.asarray(values).reshape(rows, -1)[:, 0] for name, (_, values) in columns.items()}
        now = time.time()
        lines: List[str] = []
        for i in keep.tolist():
            record = {"time": now, "model": self.model, "columns": {n: _value(v[i]) for n, v in flat.items()},
                      "probability": float(probabilities[i])}
            lines.append(json.dumps(record, separators=(",", ":")) + "\n")
        with self._lock, open(self.path, "a", encoding="utf-8") as fh:
            fh.write("".join(lines))
            fh.flush()
        return len(lines)
