"""Models of any family on any feature spec with random parameters of the shapes training gives them,
in memory (a :class:`~ctr_model.infer.Scorer`) or as an exported model directory: for testing the ONNX
graph and the server on layouts the trainer does not take yet, and on every family without training."""
from __future__ import annotations

import json
import os
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ctr_model.config import TrainConfig
from ctr_model.feature_spec import FeatureSpec
from ctr_model.features import SCHEMA_VERSION
from ctr_model.infer import DENSE_FILE, MODEL_META, SPARSE_FILE, Scorer, npz_names
from ctr_model.models import family
from ctr_model.sparse_tables import sparse_tables

__all__ = ["random_scorer", "write_model_dir"]


def _params(cfg: TrainConfig, n_dense: int, widths: Sequence[int], rng) -> Dict[str, np.ndarray]:
    """Dense parameters: the FC stack over ``n_dense + sum(widths)`` inputs, the family's own."""
    fam = family(cfg.model)
    crosses = int(cfg.model_config.get("crosses", 0))     # Wide&Deep's crosses: its wide part only
    deep_in = n_dense + sum(widths[:len(widths) - crosses])
    sizes = [deep_in] + list(cfg.fc_sizes) + [2]
    names = fam.dense_names(cfg, n_dense, len(widths))
    fc = [n for n in names if n.startswith(("fc", "out"))]
    params: Dict[str, np.ndarray] = {}
    for i, (w, b) in enumerate(zip(fc[0::2], fc[1::2])):
        params[w] = rng.normal(0, 0.4, (sizes[i], sizes[i + 1])).astype(np.float32)
        params[b] = rng.normal(0, 0.1, sizes[i + 1]).astype(np.float32)
    rank = int(cfg.model_config.get("low_rank") or 0)
    for name in names:
        if name in ("wide.w", "fm_dense.w"):
            params[name] = rng.normal(0, 0.3, (n_dense, 1)).astype(np.float32)
        elif name.startswith("cross"):
            shape = {"w": (deep_in, deep_in), "b": (deep_in,), "v": (deep_in, rank), "u": (rank, deep_in)}
            params[name] = rng.normal(0, 0.2, shape[name[-1]]).astype(np.float32)
    return params


def random_scorer(spec: FeatureSpec, model: str, model_config: dict, keys: Optional[List[np.ndarray]] = None,
                  seed: int = 0, hash_buckets: Optional[int] = None) -> Scorer:
    """A model of ``model`` on ``spec`` (the Criteo preset: the Criteo layout) with random parameters.

    Args:
        keys: each sparse table's ids seen in training (default: 400 random ids per table).
    """
    rng = np.random.default_rng(seed)
    features = None if spec.is_criteo else spec
    buckets = hash_buckets or max([c.hash_buckets for c in spec.categorical] or [spec.hash_buckets])
    cfg = TrainConfig.from_dict({"model": model, "model_config": model_config, "embedding_dim": 4,
                                 "fc_sizes": [8, 4], "hash_buckets": buckets})
    fam = family(model)
    tables = sparse_tables(features, cfg.embedding_dim)
    widths = [t.dim for t in tables for _ in t.slots]
    params = _params(cfg, len(spec.dense), widths, rng)
    arrays: List[Tuple[np.ndarray, np.ndarray]] = []
    for k, t in enumerate(tables):
        ids = keys[k] if keys is not None else np.unique(rng.integers(0, buckets, 400))
        ids = np.unique(np.asarray(ids)).astype(np.uint64)
        arrays.append((ids, rng.normal(0, 0.3, (len(ids), fam.table_width(t.dim))).astype(np.float32)))
    if not arrays:            # no categorical feature: the one (empty) table a meta without tables implies
        arrays.append((np.zeros(0, np.uint64), np.zeros((0, fam.table_width(cfg.embedding_dim)), np.float32)))
    meta = {"schema_version": SCHEMA_VERSION, "config": cfg.to_dict(), "hash_buckets": buckets,
            "sparse_tables": [dict(t.to_dict(), table_id=k) for k, t in enumerate(tables)]}
    if features is not None:
        meta["feature_spec"] = features.to_dict()
    return Scorer(meta=meta, keys=arrays[0][0], rows=arrays[0][1], params=params, config=cfg,
                  extra_tables=tuple(arrays[1:]))


def write_model_dir(scorer: Scorer, model_dir: str) -> str:
    """The model directory an export writes (``model_meta.json``, ``dense.npz``, ``sparse.npz``)."""
    os.makedirs(model_dir, exist_ok=True)
    with open(os.path.join(model_dir, MODEL_META), "w", encoding="utf-8") as fh:
        json.dump(scorer.meta, fh)
    np.savez(os.path.join(model_dir, DENSE_FILE), **scorer.params)
    arrays = {}
    for k in range(len(scorer.tables)):
        key_name, row_name = npz_names(k)
        arrays[key_name], arrays[row_name] = scorer.table_arrays(k)
    np.savez(os.path.join(model_dir, SPARSE_FILE), **arrays)
    return model_dir
