"""Shard assignment, Parquet -> slot conversion, checkpoints and the numpy scorer (no Paddle)."""
from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ctr_model import checkpoint as ckpt
from ctr_model.data import DataError, assign_shards, parquet_to_slots, resolve_split
from ctr_model.errors import BadInput
from ctr_model.features import DENSE_COLUMNS, RAW_COLUMNS, SPARSE_COLUMNS, SchemaMismatch
from ctr_model.infer import Scorer, auc, load_model
from tools.planted_prep import write_planted_prep


def test_assign_shards_is_disjoint_and_complete():
    files = [f"s/part-{i:05d}.parquet" for i in range(7)][::-1]
    parts = [assign_shards(files, t, 3) for t in range(3)]
    assert sorted(sum(parts, [])) == sorted(files)
    assert parts[0] == ["s/part-00000.parquet", "s/part-00003.parquet", "s/part-00006.parquet"]


def test_slot_conversion_keeps_every_row_in_feed_order(tmp_path):
    write_planted_prep(str(tmp_path / "p"), train_rows=300, test_rows=10, shards=2)
    split = resolve_split(str(tmp_path / "p"))
    assert split.rows == 300 and len(split.files) == 2
    table = pq.read_table(split.files[0])
    out = tmp_path / "a.slots"
    assert parquet_to_slots(split.files[0], str(out), split.hash_buckets) == table.num_rows
    lines = out.read_text().splitlines()
    assert len(lines) == table.num_rows
    first = lines[0].split(" ")
    assert first[0:2] == ["1", str(table.column("label")[0].as_py())]
    assert first[2:4] == ["1", str(table.column("C1")[0].as_py())]
    assert first[54] == "13" and len(first) == 2 * 27 + 14
    assert float(first[55]) == pytest.approx(table.column("I1")[0].as_py(), rel=1e-6)


def test_bad_data_is_refused_not_dropped(tmp_path):
    write_planted_prep(str(tmp_path / "p"), train_rows=50, test_rows=10, shards=1, hash_buckets=10_000)
    split = resolve_split(str(tmp_path / "p"))
    table = pq.read_table(split.files[0])
    ids = table.column("C5").to_numpy().copy()
    ids[3] = 10_000
    bad = table.set_column(table.schema.get_field_index("C5"), "C5", pa.array(ids))
    pq.write_table(bad, split.files[0])
    with pytest.raises(DataError, match="C5 ids .* outside"):
        parquet_to_slots(split.files[0], str(tmp_path / "x"), split.hash_buckets)
    with pytest.raises(DataError, match="prep"):
        resolve_split(str(tmp_path / "nothing-here"))


def test_checkpoint_latest_complete_ignores_incomplete(tmp_path):
    out = str(tmp_path)
    for epoch in (1, 2, 3):
        os.makedirs(ckpt.epoch_dir(out, epoch))
    ckpt.mark_complete(ckpt.epoch_dir(out, 1), {"epoch": 1})
    ckpt.mark_complete(ckpt.epoch_dir(out, 2), {"epoch": 2})
    best = ckpt.latest_complete(out)
    assert best.epoch == 2 and best.meta == {"epoch": 2}
    ckpt.prune(out, keep=1)
    assert not os.path.exists(ckpt.epoch_dir(out, 1))
    assert os.path.exists(ckpt.epoch_dir(out, 2)) and os.path.exists(ckpt.epoch_dir(out, 3))


def test_auc_matches_pairwise_definition_with_ties():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 300)
    s = np.round(rng.random(300) + 0.3 * y, 1)           # many ties
    pos, neg = s[y == 1], s[y == 0]
    pairs = (pos[:, None] > neg[None, :]).mean() + 0.5 * (pos[:, None] == neg[None, :]).mean()
    assert auc(y, s) == pytest.approx(pairs, abs=1e-12)


def test_scorer_forward_pass_and_unknown_ids(tmp_path):
    dim, fc = 2, [3]
    rng = np.random.default_rng(1)
    width = len(SPARSE_COLUMNS) * dim + len(DENSE_COLUMNS)
    dense = {"fc0.w": rng.normal(size=(width, 3)).astype(np.float32), "fc0.b": np.zeros(3, np.float32),
             "out.w": rng.normal(size=(3, 2)).astype(np.float32), "out.b": np.array([0.1, -0.2], np.float32)}
    model = tmp_path / "model"
    model.mkdir()
    np.savez(model / "dense.npz", **dense)
    keys = np.array([5, 9], dtype=np.uint64)
    rows = np.array([[1.0, 2.0], [-1.0, 0.5]], dtype=np.float32)
    np.savez(model / "sparse.npz", keys=keys, rows=rows)
    (model / "model_meta.json").write_text(json.dumps(
        {"schema_version": 1, "hash_buckets": 100, "config": {"embedding_dim": dim, "fc_sizes": fc}}))
    scorer = load_model(str(model))
    assert isinstance(scorer, Scorer)
    cols = {c: np.array([0.5, 0.0], np.float32) for c in DENSE_COLUMNS}
    cols.update({c: np.array([5, 77], np.int64) for c in SPARSE_COLUMNS})    # 77 is unseen
    probs = scorer.predict(pa.table(cols))
    emb0 = np.tile([1.0, 2.0], len(SPARSE_COLUMNS))
    x0 = np.concatenate([emb0, np.full(len(DENSE_COLUMNS), 0.5)])
    h = np.maximum(x0 @ dense["fc0.w"] + dense["fc0.b"], 0)
    logits = h @ dense["out.w"] + dense["out.b"]
    expected0 = np.exp(logits[1]) / np.exp(logits).sum()
    assert probs.dtype == np.float64 and probs[0] == pytest.approx(expected0, rel=1e-5)
    logits1 = np.maximum(np.zeros(width) @ dense["fc0.w"], 0) @ dense["out.w"] + dense["out.b"]
    assert probs[1] == pytest.approx(np.exp(logits1[1]) / np.exp(logits1).sum(), rel=1e-5)
    assert set(RAW_COLUMNS) > set(cols)


def test_training_refuses_data_of_another_schema_version(tmp_path):
    write_planted_prep(str(tmp_path / "p"), train_rows=50, test_rows=10, shards=2)
    schema_path = tmp_path / "p" / "train" / "schema.json"
    doc = json.loads(schema_path.read_text())
    doc["schema_version"] = 0
    schema_path.write_text(json.dumps(doc))
    with pytest.raises(SchemaMismatch, match=r"schema_version.*ctr-volcano prep") as err:
        resolve_split(str(tmp_path / "p"))
    assert err.value.field == "data" and err.value.value == str(tmp_path / "p" / "train")
    schema_path.unlink()
    with pytest.raises(BadInput, match=r"no schema.json"):
        resolve_split(str(tmp_path / "p"))
