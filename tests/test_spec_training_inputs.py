"""The trainer's inputs for a feature spec: the slot text (one slot per feature, multi-valued ones of
variable length) and the numpy scorer's pooling, checked against a hand computation."""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ctr_model.data import DataError, spec_to_slots, trainable_features
from ctr_model.feature_spec import spec_from_dict
from ctr_model.infer import Scorer

SPEC = spec_from_dict({"format": "parquet", "label": "y", "hash_buckets": 100,
                       "dense": [{"name": "a", "transform": "none"}, {"name": "b", "transform": "none"}],
                       "categorical": [{"name": "u"}, {"name": "t", "multivalued": True, "pooling": "mean"}]})
TABLE = pa.table({"y": pa.array([1, 0], pa.int8()), "a": pa.array([0.5, -1.25], pa.float32()),
                  "b": pa.array([2.0, 3.0], pa.float32()), "u": pa.array([7, 9], pa.int64()),
                  "t": pa.array([[3, 4, 5], [1]], pa.list_(pa.int64()))})


def test_slot_text_has_one_slot_per_feature(tmp_path):
    pq.write_table(TABLE, tmp_path / "p.parquet")
    assert spec_to_slots(str(tmp_path / "p.parquet"), str(tmp_path / "s"), SPEC, 100) == 2
    assert (tmp_path / "s").read_text().splitlines() == ["1 1 1 7 3 3 4 5 2 0.5 2", "1 0 1 9 1 1 2 -1.25 3"]
    with pytest.raises(DataError, match="ids outside"):
        spec_to_slots(str(tmp_path / "p.parquet"), str(tmp_path / "s"), SPEC, 6)


def test_scorer_pools_multivalued_embeddings_like_the_network():
    rng = np.random.default_rng(0)
    keys = np.array([1, 3, 4, 5, 7, 9], dtype=np.uint64)
    rows = rng.normal(size=(6, 2)).astype(np.float32)
    w1, b1 = rng.normal(size=(6, 3)).astype(np.float32), np.zeros(3, np.float32)
    w2, b2 = rng.normal(size=(3, 2)).astype(np.float32), np.zeros(2, np.float32)
    from ctr_model.config import TrainConfig

    config = TrainConfig.from_dict({"embedding_dim": 2, "fc_sizes": [3]})
    scorer = Scorer(meta={"config": config.to_dict(), "feature_spec": SPEC.to_dict()}, keys=keys,
                    rows=rows, params={"fc0.w": w1, "fc0.b": b1, "out.w": w2, "out.b": b2}, config=config)
    emb = {int(k): rows[i] for i, k in enumerate(keys)}
    x = np.array([np.concatenate([emb[7], (emb[3] + emb[4] + emb[5]) / 3, [0.5, 2.0]]),
                  np.concatenate([emb[9], emb[1], [-1.25, 3.0]])], dtype=np.float32)
    logits = np.maximum(x @ w1 + b1, 0) @ w2 + b2
    expected = 1 / (1 + np.exp(-(logits[:, 1].astype(np.float64) - logits[:, 0])))
    assert scorer.predict(TABLE) == pytest.approx(expected, rel=1e-5)


def test_trainer_takes_any_spec_and_refuses_a_broken_one(tmp_path):
    doc = {"feature_spec": json.loads(json.dumps(SPEC.to_dict()))}
    assert trainable_features(doc, "d") == SPEC
    doc["feature_spec"]["categorical"][1]["embedding_dim"] = 4      # mixed dims: a table per dim
    assert trainable_features(doc, "d").categorical[1].embedding_dim == 4
    doc["feature_spec"]["dense"] = []                               # no dense feature: no dense slot
    no_dense = trainable_features(doc, "d")
    assert no_dense is not None and no_dense.dense == ()
    pq.write_table(TABLE, tmp_path / "p.parquet")
    assert spec_to_slots(str(tmp_path / "p.parquet"), str(tmp_path / "s"), no_dense, 100) == 2
    assert (tmp_path / "s").read_text().splitlines() == ["1 1 1 7 3 3 4 5", "1 0 1 9 1 1"]
    doc["feature_spec"]["categorical"] = []
    with pytest.raises(DataError, match="declare at least one dense or categorical feature"):
        trainable_features(doc, "d")
    assert trainable_features({"hash_buckets": 1000}, "d") is None


def test_warm_start_refuses_an_init_model_trained_on_other_features(tmp_path):
    from ctr_model.warm_start import WarmStart, WarmStartError, check_compatible

    spec = SPEC.to_dict()
    init = WarmStart(model_dir=str(tmp_path), checkpoint=str(tmp_path), pservers=1,
                     meta={"schema_version": 1, "hash_buckets": 100, "feature_spec": spec,
                           "config": {"embedding_dim": 10, "fc_sizes": [8]}})
    config = {"hash_buckets": 100, "embedding_dim": 10, "fc_sizes": [8]}
    check_compatible(init, config, 1, 1, spec)
    restat = json.loads(json.dumps(spec))
    restat["dense"][0].update(transform="standardize", mean=1.0, std=2.0)
    init_std = WarmStart(str(tmp_path), str(tmp_path), init.meta | {"feature_spec": restat}, 1)
    other = json.loads(json.dumps(restat))
    other["dense"][0].update(mean=3.0, std=4.0)
    check_compatible(init_std, config, 1, 1, other)     # each prep's own statistics
    other["categorical"][1]["pooling"] = "sum"
    with pytest.raises(WarmStartError, match="categorical feature 't'"):
        check_compatible(init_std, config, 1, 1, other)
    with pytest.raises(WarmStartError, match="trained on a feature spec but this run's data has the Criteo"):
        check_compatible(init, config, 1, 1, None)
