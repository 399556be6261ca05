"""A tiny planted-signal dataset in prep's output format, for tests and the training benchmark.

It writes what ``ctr-volcano prep`` writes (``train/`` and ``test/`` split dirs of Parquet shards
plus ``schema.json``) straight from a known logistic model, so training can be checked end to end
without the data area: a model that learns must beat AUC 0.5 clearly, and the generating model's
own AUC (the oracle) bounds what any model can reach.
"""
from __future__ import annotations

import json
import os
from typing import Dict

from ctr_model.features import DENSE_COLUMNS, LABEL, RAW_COLUMNS, SCHEMA_FILE, SCHEMA_VERSION, SPARSE_COLUMNS

__all__ = ["write_planted_prep"]


def write_planted_prep(out_dir: str, train_rows: int = 20_000, test_rows: int = 5_000,
                       shards: int = 4, hash_buckets: int = 100_003, cardinality: int = 200,
                       seed: int = 7) -> Dict[str, float]:
    """Write a planted prep dir and return the oracle's test AUC.

    Args:
        out_dir: created; gets ``train/`` (``shards`` shards) and ``test/`` (one shard).
        train_rows, test_rows: sizes.
        shards: number of train shards.
        hash_buckets: id space written to ``schema.json``.
        cardinality: distinct values per categorical column.
        seed: makes the data reproducible.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ctr_model.metrics import auc

    rng = np.random.default_rng(seed)
    n_sparse = len(SPARSE_COLUMNS)
    slot_w = rng.normal(0.0, 1.0, size=(n_sparse, cardinality))
    slot_w[n_sparse // 2:] = 0.0                       # half of the slots are pure noise
    dense_w = rng.normal(0.0, 1.0, size=len(DENSE_COLUMNS))
    bias = -1.5

    def make(rows: int):
        raw = np.minimum(rng.zipf(1.3, size=(rows, n_sparse)) - 1, cardinality - 1)
        dense = rng.random((rows, len(DENSE_COLUMNS)), dtype=np.float32)
        logit = bias + (dense - 0.5) @ dense_w + slot_w[np.arange(n_sparse), raw].sum(axis=1)
        p = 1.0 / (1.0 + np.exp(-logit))
        label = (rng.random(rows) < p).astype(np.int8)
        # slot-aware ids so slots never share embedding rows
        ids = (raw + np.arange(n_sparse) * cardinality) % hash_buckets
        cols = {LABEL: label}
        cols.update({c: dense[:, i] for i, c in enumerate(DENSE_COLUMNS)})
        cols.update({c: ids[:, i].astype(np.int64) for i, c in enumerate(SPARSE_COLUMNS)})
        return pa.table({c: cols[c] for c in RAW_COLUMNS}), label, p

    def write_split(name: str, rows: int, n_shards: int):
        table, label, p = make(rows)
        split = os.path.join(out_dir, name)
        os.makedirs(split, exist_ok=True)
        bounds = np.linspace(0, rows, n_shards + 1).astype(int)
        for i in range(n_shards):
            pq.write_table(table.slice(bounds[i], bounds[i + 1] - bounds[i]),
                           os.path.join(split, f"part-{i:05d}.parquet"))
        with open(os.path.join(split, SCHEMA_FILE), "w", encoding="utf-8") as fh:
            json.dump({"schema_version": SCHEMA_VERSION, "hash_buckets": hash_buckets,
                       "columns": list(RAW_COLUMNS), "rows": rows,
                       "positive_rate": round(float(label.mean()), 6)}, fh)
        return label, p

    write_split("train", train_rows, shards)
    label, p = write_split("test", test_rows, 1)
    return {"oracle_test_auc": auc(label, p)}
