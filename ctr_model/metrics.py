"""The one numpy implementation of AUC and log loss, shared by training, evaluation and the generator.

It lives in ``ctr_model`` because the trainer image (which has no ``ctr_volcano``) scores its test
split with it; ``ctr_volcano.evaluation.evaluate`` adds input validation and error messages on top.
"""
from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["LOGLOSS_EPS", "average_ranks", "auc", "logloss"]

#: Probabilities are clipped to ``[eps, 1 - eps]`` so a confident wrong prediction costs ``-log(eps)``.
LOGLOSS_EPS = 1e-7


def average_ranks(values: Any) -> np.ndarray:
    """1-based ranks of ``values``, tied values sharing the mean of their ranks."""
    values = np.asarray(values, dtype=np.float64).reshape(-1)
    order = np.argsort(values, kind="mergesort")
    sorted_vals = values[order]
    n = values.size
    starts = np.flatnonzero(np.r_[True, sorted_vals[1:] != sorted_vals[:-1]])  # first index of each tie run
    ends = np.r_[starts[1:], n]                                               # exclusive
    ranks = np.empty(n, dtype=np.float64)
    ranks[order] = np.repeat((starts + 1 + ends) / 2.0, ends - starts)
    return ranks


def auc(labels: Any, scores: Any) -> float:
    """Exact ROC AUC, ties counted as half (the Mann-Whitney U statistic); NaN with one class only."""
    y = np.asarray(labels).reshape(-1).astype(bool)
    n_pos = int(y.sum())
    n_neg = y.size - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    u = float(average_ranks(scores)[y].sum()) - n_pos * (n_pos + 1) / 2.0
    return u / (float(n_pos) * float(n_neg))


def logloss(labels: Any, probs: Any, eps: float = LOGLOSS_EPS) -> float:
    """Mean binary cross-entropy (natural log), probabilities clipped to ``[eps, 1 - eps]``."""
    y = np.asarray(labels, dtype=np.float64).reshape(-1)
    p = np.clip(np.asarray(probs, dtype=np.float64).reshape(-1), eps, 1.0 - eps)
    return float(-np.mean(np.where(y == 1, np.log(p), np.log1p(-p))))
