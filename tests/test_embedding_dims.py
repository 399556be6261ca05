"""Per-feature ``embedding_dim``: one sparse table per distinct dim (:mod:`ctr_model.sparse_tables`).

The grouping itself; the Paddle program of a mixed-dim spec (multi-valued features among them)
against the numpy scorer and the ONNX graph; the refusals (``deepfm`` on mixed dims before any training, an init model whose dim of a feature
differs); and a real 2x2 local gang on a spec with two dims, whose test AUC comes close to the planted
model's and which the scorer and the ONNX export reproduce."""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import numpy as np
import pytest

from ctr_model.feature_spec import criteo_spec, spec_from_dict
from ctr_model.features import SPARSE_COLUMNS
from ctr_model.infer import auc, load_model
from ctr_model.sparse_tables import EMBEDDING_NAME, mixed_dims_refusal, sparse_tables, tables_from_meta

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: Three dims over five features, one of them multi-valued (the scorer's pooling per table).
MIXED = spec_from_dict({"format": "parquet", "label": "y", "hash_buckets": 300, "embedding_dim": 3,
                        "dense": [{"name": "a", "transform": "none"}, {"name": "b", "transform": "none"}],
                        "categorical": [{"name": "u", "embedding_dim": 5}, {"name": "s"},
                                        {"name": "t", "multivalued": True, "pooling": "mean"},
                                        {"name": "v", "embedding_dim": 5}, {"name": "w", "embedding_dim": 2}]})


def test_features_of_one_dim_share_a_table_named_as_before():
    tables = sparse_tables(MIXED, 10)
    assert [(t.name, t.dim, t.slots, t.features) for t in tables] == [
        (EMBEDDING_NAME, 5, (0, 3), ("u", "v")), (f"{EMBEDDING_NAME}_1", 3, (1, 2), ("s", "t")),
        (f"{EMBEDDING_NAME}_2", 2, (4,), ("w",))]
    one_dim = spec_from_dict({"format": "parquet", "label": "y", "dense": [{"name": "a"}],
                              "categorical": [{"name": "u"}, {"name": "s"}]})
    assert [(t.name, t.dim, t.slots) for t in sparse_tables(one_dim, 4)] == [(EMBEDDING_NAME, 10, (0, 1))]
    for criteo in (None, criteo_spec(1000)):          # Criteo: the config's dim, all 26 columns
        assert [(t.name, t.dim, t.features) for t in sparse_tables(criteo, 7)] == [
            (EMBEDDING_NAME, 7, SPARSE_COLUMNS)]


def test_model_meta_records_the_tables_and_older_models_read_as_one():
    tables = sparse_tables(MIXED, 10)
    meta = {"sparse_tables": [t.to_dict() for t in tables]}
    assert meta["sparse_tables"][1] == {"name": f"{EMBEDDING_NAME}_1", "dim": 3, "features": ["s", "t"]}
    names = [c.name for c in MIXED.categorical]
    assert tables_from_meta(json.loads(json.dumps(meta)), names, 10) == tables
    assert tables_from_meta({}, SPARSE_COLUMNS, 10) == sparse_tables(None, 10)


def test_only_deepfm_refuses_mixed_dims_naming_a_feature_its_dim_and_the_fix():
    tables = sparse_tables(MIXED, 10)
    assert mixed_dims_refusal("deepfm", tables) == (
        "model 'deepfm' needs one embedding_dim for every categorical feature, but feature 's' has "
        "embedding_dim 3 and 'u' has 5: give every categorical feature embedding_dim 5, or train model "
        "dnn, wide_deep, dcn_v2")
    for model in ("dnn", "wide_deep", "dcn_v2"):
        assert mixed_dims_refusal(model, tables) is None
    assert mixed_dims_refusal("deepfm", tables[:1]) is None


#: Builds the family's program for MIXED in one process (local embeddings), runs it on random rows and
#: scores the same rows with the numpy scorer from the program's own parameters, and with the ONNX
#: graph when the family is the dnn (on the single-valued features only: ONNX has no multi-valued input).
_PARITY = r"""
import json, sys
from ctr_model.net import prepare_paddle
prepare_paddle()
import numpy as np, paddle, pyarrow as pa
from ctr_model.config import TrainConfig
from ctr_model.feature_spec import spec_from_dict
from ctr_model.infer import Scorer
from ctr_model.net import build_net, dense_param_names, net_tables
cfg = TrainConfig.from_dict(json.loads(sys.argv[1]))
spec = spec_from_dict(json.loads(sys.argv[2]))
cfg = cfg.replace(embedding_dim=spec.categorical[0].embedding_dim)
paddle.enable_static()
main, startup = paddle.static.Program(), paddle.static.Program()
with paddle.static.program_guard(main, startup):
    net = build_net(cfg, ps_mode=False, features=spec)
exe = paddle.static.Executor(paddle.CPUPlace())
exe.run(startup)
scope = paddle.static.global_scope()
rng = np.random.default_rng(0)
for name in dense_param_names(cfg):
    t = scope.find_var(name).get_tensor()
    t.set(np.asarray(t) + rng.normal(0, 0.1, np.asarray(t).shape).astype("float32"), paddle.CPUPlace())
tables = net_tables(cfg, spec)
arrays = []
for t in tables:
    tensor = scope.find_var(t.name).get_tensor()
    tensor.set(rng.normal(0, 0.3, np.asarray(tensor).shape).astype("float32"), paddle.CPUPlace())
    arrays.append((np.arange(cfg.hash_buckets, dtype=np.uint64), np.asarray(tensor)))
n = 64
cols = {d.name: rng.normal(0, 1, n).astype("float32") for d in spec.dense}
feed = {"label": np.zeros((n, 1), "int64"), "dense_input": np.stack([cols[d.name] for d in spec.dense], 1)}
for j, c in enumerate(spec.categorical):
    lengths = rng.integers(1, 4, n) if c.multivalued else np.ones(n, "int64")
    flat = rng.integers(0, cfg.hash_buckets, int(lengths.sum()))
    feed["cat%d" % j] = paddle.base.create_lod_tensor(flat.reshape(-1, 1).astype("int64"),
                                                      [lengths.tolist()], paddle.CPUPlace())
    if c.multivalued:
        cols[c.name] = pa.ListArray.from_arrays(np.concatenate([[0], np.cumsum(lengths)]).astype("int32"),
                                                pa.array(flat, pa.int64()))
    else:
        cols[c.name] = flat
(pred,) = exe.run(main, feed=feed, fetch_list=[net.predict], return_numpy=False)
pred = np.asarray(pred)[:, 1]
params = {k: np.asarray(scope.find_var(k).get_tensor()) for k in dense_param_names(cfg)}
meta = {"config": cfg.to_dict(), "feature_spec": spec.to_dict(), "hash_buckets": cfg.hash_buckets,
        "sparse_tables": [t.to_dict() for t in tables]}
scorer = Scorer(meta=meta, keys=arrays[0][0], rows=arrays[0][1], params=params, config=cfg,
                extra_tables=tuple(arrays[1:]))
mine = scorer.predict(pa.table(cols))
out = {"tables": [t.name for t in tables], "max_diff": float(np.abs(mine - pred).max()),
       "spread": float(pred.std())}
import onnxruntime as ort
from ctr_model.onnx_export import build_graph
from ctr_model.onnx_inputs import feeds, layout_of
sess = ort.InferenceSession(build_graph(scorer).SerializeToString())
(onnx_p,) = sess.run(["probability"], feeds(layout_of(spec), pa.table(cols)))
out["onnx_max_diff"] = float(np.abs(onnx_p - mine).max())
print(json.dumps(out))
"""


def _parity(model: str, spec) -> dict:
    cfg = {"model": model, "fc_sizes": [8, 4], "hash_buckets": 300}
    out = subprocess.run([sys.executable, "-c", _PARITY, json.dumps(cfg), json.dumps(spec.to_dict())],
                         env={**os.environ, "PYTHONPATH": REPO}, cwd=REPO, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("model", ["dnn", "wide_deep", "dcn_v2"])
def test_numpy_scorer_is_the_paddle_program_on_mixed_dims(model):
    result = _parity(model, MIXED)
    assert result["tables"] == [EMBEDDING_NAME, f"{EMBEDDING_NAME}_1", f"{EMBEDDING_NAME}_2"]
    assert result["spread"] > 1e-3, result
    assert result["max_diff"] < 2e-5, result
    assert result["onnx_max_diff"] < 1e-6, result      # the graph, multi-valued features pooled in it


def test_onnx_graph_is_the_paddle_program_on_mixed_dims():
    single = spec_from_dict(dict(MIXED.to_dict(), categorical=[
        dict(c, multivalued=False) for c in MIXED.to_dict()["categorical"]]))
    result = _parity("dnn", single)
    assert len(result["tables"]) == 3 and result["max_diff"] < 2e-5, result
    assert result["onnx_max_diff"] < 1e-6, result


def test_warm_start_refuses_a_feature_whose_dim_differs(tmp_path):
    from ctr_model.warm_start import WarmStart, WarmStartError, check_compatible

    spec = MIXED.to_dict()
    config = {"hash_buckets": 300, "embedding_dim": 5, "fc_sizes": [8]}
    init = WarmStart(str(tmp_path), str(tmp_path), {"schema_version": 1, "hash_buckets": 300,
                                                    "feature_spec": spec, "config": config}, 1)
    check_compatible(init, config, 1, 1, spec)
    other = json.loads(json.dumps(spec))
    other["categorical"][4]["embedding_dim"] = 6
    with pytest.raises(WarmStartError) as exc:
        check_compatible(init, config, 1, 1, other)
    assert str(exc.value) == (f"init_model={str(tmp_path)!r}: cannot warm-start from it: categorical feature 'w' has embedding_dim "
                              f"2 there but 6 in this run's data; prep with embedding_dim 2 for it (the init "
                              f"model's feature spec) or train from scratch")


# ------------------------------------------------------------------------------------------------
# a real gang
# ------------------------------------------------------------------------------------------------

#: Two dims: ``user`` and ``ad`` share the first table (8 wide), ``site`` has its own (4 wide). All
#: single-valued, so the ONNX graph covers the model too.
GANG_SPEC = {"format": "csv", "header": True, "label": "clicked",
             "dense": [{"name": "price", "transform": "log1p"}, {"name": "age", "transform": "standardize"},
                       {"name": "visits", "transform": "criteo"}],
             "categorical": [{"name": "user", "hash_buckets": 100003, "embedding_dim": 8},
                             {"name": "site", "embedding_dim": 4},
                             {"name": "ad", "embedding_dim": 8}]}
#: Measured 2026-12-03 on 200k training rows, 3 epochs of the SMALL model: test AUC 0.8249 against
#: the planted model's 0.8308 (0.006 below). With the earlier generator (dense effects on values the
#: data hides) four runs were 0.011-0.013 below, and 0.020-0.026 below on 80k rows, hence 250k rows.
MAX_GAP = 0.02


def _prep(tmp_path, spec_doc: dict) -> tuple:
    from ctr_volcano.app.cli.main import main

    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(spec_doc))
    assert main(["gen-data", "--feature-spec", str(spec), "--rows", "250000", "--files", "2", "--seed", "3",
                 "--out", str(tmp_path / "raw"), "--oracle-rows", "100000"]) == 0
    assert main(["prep", "--feature-spec", str(spec), "--input", str(tmp_path / "raw"), "--out",
                 str(tmp_path / "prep"), "--shards", "2", "--test-shards", "1", "--test-fraction", "0.2"]) == 0
    return str(tmp_path / "prep"), json.loads((tmp_path / "raw" / "oracle.json").read_text())["auc"]


@pytest.fixture
def job_id():
    from tests.gang_helpers import gang_job_id

    yield from gang_job_id("dimtest", grace_s=10, poll_s=0.2)


def test_deepfm_on_mixed_dims_is_refused_before_any_training(tmp_path):
    from ctr_volcano.errors import BadInput
    from ctr_volcano.training.local.backend import train_local

    spec = dict(GANG_SPEC, categorical=[dict(c, hash_buckets=1000) for c in GANG_SPEC["categorical"]])
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    from ctr_volcano.app.cli.main import main

    assert main(["gen-data", "--feature-spec", str(tmp_path / "spec.json"), "--rows", "1000", "--seed", "1",
                 "--out", str(tmp_path / "raw"), "--oracle-rows", "1000"]) == 0
    assert main(["prep", "--feature-spec", str(tmp_path / "spec.json"), "--input", str(tmp_path / "raw"),
                 "--out", str(tmp_path / "prep"), "--shards", "2", "--test-shards", "1"]) == 0
    with pytest.raises(BadInput) as exc:
        train_local(str(tmp_path / "prep"), str(tmp_path / "model"), {"model": "deepfm"}, pservers=1,
                    trainers=1, max_retry=0, workdir=str(tmp_path / "w"))
    assert str(exc.value).startswith("config.model='deepfm': model 'deepfm' needs one embedding_dim for every "
                                     "categorical feature, but feature 'site' has embedding_dim 4 and 'user' "
                                     "has 8: give every categorical feature embedding_dim 8"), str(exc.value)
    assert not (tmp_path / "w").exists() or not any((tmp_path / "w").iterdir())   # no gang started


def _onnx_auc(model_dir: str, prep: str, spec) -> tuple:
    """(AUC, rows) of the model's ``model.onnx`` on the test split, fed the prepped columns."""
    import onnxruntime as ort
    import pyarrow.parquet as pq

    test_dir = os.path.join(prep, "test")
    table = pq.read_table([os.path.join(test_dir, f) for f in sorted(os.listdir(test_dir))
                           if f.endswith(".parquet")])
    dense = np.stack([table.column(d.name).to_numpy().astype(np.float32) for d in spec.dense], axis=1)
    ids = np.stack([table.column(c.name).to_numpy().astype(np.int64) for c in spec.categorical], axis=1)
    sess = ort.InferenceSession(os.path.join(model_dir, "model.onnx"))
    (probs,) = sess.run(["probability"], {"dense": dense, "ids": ids})
    return auc(table.column(spec.label).to_numpy(), probs), len(probs)


@pytest.mark.slow
def test_two_by_two_learns_a_spec_of_two_dims(job_id, tmp_path):
    from ctr_volcano.app.cli.main import main
    from ctr_volcano.training.local.backend import train_local
    from tests.gang_helpers import SMALL

    prep, oracle = _prep(tmp_path, GANG_SPEC)
    result = train_local(prep, str(tmp_path / "model"), {**SMALL, "epochs": 3}, pservers=2, trainers=2,
                         max_retry=0, workdir=str(tmp_path / "w"), job_id=job_id)
    test_auc = result.metrics["test"]["auc"]
    logging.getLogger(__name__).info("two dims: test AUC %.4f, oracle %.4f", test_auc, oracle)
    assert oracle - MAX_GAP < test_auc <= oracle + 0.01, f"test AUC {test_auc:.4f}, oracle {oracle:.4f}"
    meta = load_model(result.model_dir).meta
    assert [(t["name"], t["dim"], t["features"]) for t in meta["sparse_tables"]] == [
        (EMBEDDING_NAME, 8, ["user", "ad"]), (f"{EMBEDDING_NAME}_1", 4, ["site"])]
    with np.load(os.path.join(result.model_dir, "sparse.npz")) as npz:
        assert npz["rows"].shape[1] == 8 and npz["rows_1"].shape[1] == 4
        assert len(npz["keys"]) > len(npz["keys_1"]) > 10       # two features' ids against one's
    assert main(["evaluate", "--model", result.model_dir, "--data", prep, "--out", str(tmp_path / "eval")]) == 0
    evaluated = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert evaluated["auc"] == pytest.approx(test_auc, abs=1e-4)
    onnx_auc, rows = _onnx_auc(result.model_dir, prep, load_model(result.model_dir).features)
    assert rows == result.metrics["test"]["rows"]
    assert onnx_auc == pytest.approx(test_auc, abs=1e-4)


@pytest.mark.slow
def test_warm_start_on_two_dims_loads_both_tables(job_id, tmp_path):
    """The pservers load both tables of the init model's checkpoint: the warm first epoch starts
    from a trained model (lower loss, higher AUC than the cold one), and the boundary check takes
    the spec's dims (the config's ``embedding_dim`` 4 is not the data's)."""
    from ctr_volcano.training.local.backend import train_local
    from tests.gang_helpers import SMALL

    prep, _oracle = _prep(tmp_path, GANG_SPEC)
    cold = train_local(prep, str(tmp_path / "m1"), {**SMALL, "epochs": 1}, pservers=2, trainers=2,
                       max_retry=0, workdir=str(tmp_path / "w1"), job_id=job_id)
    warm = train_local(prep, str(tmp_path / "m2"), {**SMALL, "epochs": 1}, pservers=2, trainers=2,
                       max_retry=0, workdir=str(tmp_path / "w2"), job_id=job_id + "-warm",
                       init_model=cold.model_dir)
    with open(os.path.join(os.path.dirname(warm.output_dir), "gang", "attempt-1", "trainer-0.log")) as fh:
        assert f"warm start from {cold.model_dir}" in fh.read()
    cold_e1, warm_e1 = cold.metrics["epochs"][0], warm.metrics["epochs"][0]
    assert warm_e1["loss"] < cold_e1["loss"] - 0.01, (warm_e1, cold_e1)
    assert warm_e1["auc_trainer0"] > cold_e1["auc_trainer0"] + 0.01, (warm_e1, cold_e1)
