"""Synthetic daily click logs whose planted model drifts from day to day.

Recurring retraining is only worth testing on data where yesterday's model goes stale. Day ``k`` is
drawn from day ``k-1``'s planted model with a share ``drift`` of its weights' variance replaced by
fresh draws of the same structure (``w_k = sqrt(1 - drift) * w_{k-1} + sqrt(drift) * fresh_k``, for
the categorical value weights and the dense weights), so the click rate and the oracle AUC stay about
the same while what predicts clicks moves. Vocabularies do not change, so a categorical value has the
same id every day (the stable hash) and a warm-started model's embeddings stay meaningful.

Layout: ``OUT/day=YYYY-MM-DD/part-*.tsv`` plus that day's ``oracle.json``, which also records
``day0_model_auc``: the first day's planted model scored on this day's oracle sample, i.e. how much a
perfectly learned but never retrained model loses to drift.
"""
from __future__ import annotations

import datetime as _dt
import math
import os
from dataclasses import replace
from typing import Any, Dict, List

import numpy as np

from ctr_model.atomic import write_json
from ctr_volcano.data.synthetic import (
    FREQUENT_VALUES,
    ORACLE_FILE,
    ORACLE_ROWS,
    PlantedModel,
    auc_score,
    generate,
    planted_model,
)
from ctr_volcano.errors import BadInput

__all__ = ["generate_days", "drifted_models", "day_dir", "DAY_DIR_FORMAT"]

#: Directory of one day's partition; ``ctr_volcano.retraining.window`` templates use ``day={date}``.
DAY_DIR_FORMAT = "day={date}"


def day_dir(out_dir: str, date: _dt.date) -> str:
    """The partition directory of ``date`` under ``out_dir``."""
    return os.path.join(out_dir, DAY_DIR_FORMAT.format(date=date.isoformat()))


def drifted_models(seed: int, days: int, drift: float, vocab_scale: int = 1) -> List[PlantedModel]:
    """The planted model of each day (day 0 is ``planted_model(seed, vocab_scale)``); deterministic."""
    base = planted_model(seed, vocab_scale)
    rng = np.random.default_rng([int(seed), 0xD21F7])
    keep, new = math.sqrt(1.0 - drift), math.sqrt(drift)
    models = [base]
    for _ in range(1, days):
        prev = models[-1]
        sparse = []
        for w0, w in zip(base.sparse_weight, prev.sparse_weight):
            fresh = rng.normal(0.0, 1.0, w.shape)   # same head/tail scales as day 0; noise slots stay 0
            fresh[:FREQUENT_VALUES] *= float(np.std(w0[:FREQUENT_VALUES]))
            fresh[FREQUENT_VALUES:] *= float(np.std(w0[FREQUENT_VALUES:])) if len(w0) > FREQUENT_VALUES else 0.0
            sparse.append(keep * w + new * fresh)
        dense = keep * prev.dense_weight + new * rng.normal(0.0, float(np.std(base.dense_weight)),
                                                            prev.dense_weight.shape)
        models.append(replace(prev, sparse_weight=sparse, dense_weight=dense))
    return models


def generate_days(out_dir: str, days: int, rows: int, drift: float = 0.3, seed: int = 0,
                  start_date: str = "2026-01-01", files: int = 1, gzip_level: int = 0,
                  oracle_rows: int = ORACLE_ROWS, vocab_scale: int = 1) -> List[Dict[str, Any]]:
    """Write ``days`` daily partitions of ``rows`` lines each.

    Args:
        out_dir: gets ``day=YYYY-MM-DD/`` directories.
        days: number of consecutive days (>= 1).
        rows: lines per day.
        drift: share of the planted weights' variance replaced per day, in [0, 1).
        seed: selects the planted model, its drift and the rows.
        start_date: the first day, ``YYYY-MM-DD``.
        files, gzip_level, oracle_rows, vocab_scale: as in :func:`ctr_volcano.data.synthetic.generate`.

    Returns:
        Each day's oracle dict (also in its ``oracle.json``), with ``date``, ``day``, ``drift`` and
        ``day0_model_auc``.

    Raises:
        BadInput: on invalid arguments (before anything is written).
    """
    if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= 366:
        raise BadInput("days", days, "use an integer in 1..366")
    if isinstance(drift, bool) or not isinstance(drift, (int, float)) or not 0.0 <= drift < 1.0:
        raise BadInput("drift", drift, "use a share of the weights replaced per day in [0, 1), e.g. 0.3")
    try:
        first = _dt.date.fromisoformat(start_date)
    except (TypeError, ValueError):
        raise BadInput("start_date", start_date, "use an ISO date, e.g. 2026-01-01") from None
    models = drifted_models(seed, days, float(drift), vocab_scale)
    out = []
    for k, model in enumerate(models):
        date = first + _dt.timedelta(days=k)
        path = day_dir(out_dir, date)
        # every day draws its own rows (row stream seed), from its own model
        oracle = generate(path, rows=rows, seed=seed * 1000 + k, files=files, gzip_level=gzip_level,
                          oracle_rows=oracle_rows, model=model, vocab_scale=vocab_scale)
        sample = model.sample(np.random.default_rng([seed * 1000 + k, 0x0AC1E]), oracle_rows)
        stale = models[0].intercept + models[0].scale * models[0].raw_logit(
            sample["dense"], sample["dense_missing"], sample["ranks"])
        oracle.update({"date": date.isoformat(), "day": k, "drift": float(drift), "base_seed": seed,
                       "day0_model_auc": round(auc_score(sample["label"], stale), 5)})
        write_json(os.path.join(path, ORACLE_FILE), oracle, sort_keys=True)
        out.append(oracle)
    return out
