"""Click + conversion in one model: a spec's ``labels`` with ``depends_on``, the ``esmm`` and ``mmoe``
families, prep keeping every label, gen-data planting a conversion after a click, the numpy scorer's
one probability per task and the per-task evaluation; each family trains on a real 2x2 gang on a
small Ali-CCP-like CSV (string ids, two labels), resumes after a killed trainer, and its ONNX export
has one output per task equal to the numpy scorer's."""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import numpy as np
import pytest

from ctr_model.config import ConfigError, TrainConfig
from ctr_model.feature_spec import SpecError, spec_from_dict
from ctr_model.train.program import with_features

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: Ali-CCP's shape: click and purchase, string ids, one numeric column.
SPEC = {"format": "csv", "header": True, "labels": ["click", "purchase"], "depends_on": {"purchase": "click"},
        "dense": [{"name": "price", "transform": "log1p"}],
        "categorical": [{"name": "user"}, {"name": "item"}, {"name": "shop"}, {"name": "cate"}]}
MMOE = {"experts": 3, "expert_size": 16, "tower_sizes": [8]}


def _spec(**changes):
    return spec_from_dict({**SPEC, **changes})


def test_labels_and_depends_on_round_trip_and_shape_prep_output():
    spec = _spec()
    assert spec.label == "click" and spec.task_labels == ("click", "purchase")
    assert spec.parents == {"purchase": "click"}
    assert spec.output_columns[:3] == ("click", "purchase", "price")
    assert spec_from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    single = spec_from_dict({k: v for k, v in SPEC.items() if k not in ("labels", "depends_on")}
                            | {"label": "click", "ignore": ["purchase"]})
    assert single.task_labels == ("click",) and single.to_dict()["labels"] == []


@pytest.mark.parametrize("changes,message", [
    ({"labels": ["click"]}, "feature_spec=['labels']: 1 problem(s): labels=['click']: name two or more distinct "
                            "label columns (one task each), or use label for one"),
    ({"label": "purchase"}, "label='purchase': with labels, label is the first of them ('click')"),
    ({"depends_on": {"click": "purchase"}}, "depends_on.click='purchase': 'click' is not a task after the first"),
    ({"depends_on": {"purchase": "cart"}}, "depends_on.purchase='cart': the parent must be a label before "
                                           "'purchase' in labels: one of ['click']"),
    ({"depends_on": "purchase"}, "depends_on='purchase': write a mapping of task to parent label"),
    ({"labels": "click,purchase"}, "labels='click,purchase': write a list of label column names"),
    ({"format": "criteo"}, "format criteo is the fixed Criteo layout"),
])
def test_bad_label_combinations_are_refused_in_one_line(changes, message):
    with pytest.raises(SpecError) as err:
        _spec(**changes)
    assert len(str(err.value).splitlines()) == 1
    assert err.value.field == "feature_spec"
    assert message in str(err.value), str(err.value)


@pytest.mark.parametrize("model,model_config,changes,message", [
    ("dnn", {}, {}, "config.model='dnn': the data has 2 labels (click, purchase); train a multi-task model "
                    "(esmm, mmoe), or prep with one label and list the others under ignore"),
    ("esmm", {}, {"depends_on": {}}, "config.model='esmm': model 'esmm' needs each later task to depend on an "
                                     "earlier one; add depends_on: {purchase: click}"),
    ("esmm", {}, {"labels": ["click", "purchase", "cart"], "dense": [{"name": "price"}, {"name": "x"}]},
     "model 'esmm' trains exactly 2 labels, the spec has 3"),
    ("mmoe", {}, None, "config.model='mmoe': model 'mmoe' trains several labels; declare them in the feature "
                       "spec, e.g. labels: [click, purchase]"),
])
def test_a_family_that_cannot_train_the_labels_is_refused_before_training(model, model_config, changes, message):
    single = {**{k: v for k, v in SPEC.items() if k not in ("labels", "depends_on")}, "label": "click",
              "ignore": ["purchase"]}
    spec = spec_from_dict(single) if changes is None else _spec(**changes)
    with pytest.raises(ConfigError) as err:
        with_features(TrainConfig(model=model, model_config=model_config), spec)
    assert len(str(err.value).splitlines()) == 1
    assert message in str(err.value), str(err.value)


def test_multi_task_config_takes_its_task_count_from_the_spec():
    spec = _spec(labels=["click", "purchase", "cart"], depends_on={"purchase": "click"},
                 dense=[{"name": "price"}])
    assert with_features(TrainConfig(model="mmoe"), spec).model_config["tasks"] == 3
    assert with_features(TrainConfig(model="esmm"), _spec()).model_config == {"tasks": 2}
    with pytest.raises(ConfigError, match="model_config.experts=0: use an integer in 1..64"):
        TrainConfig(model="mmoe", model_config={"experts": 0})


#: Builds a multi-task program in one process (local embedding), moves every parameter off its
#: initial value and compares the program's per-task probabilities with the numpy scorer's.
_PARITY = r"""
import json, sys
from ctr_model.net import prepare_paddle
prepare_paddle()
import numpy as np, paddle
from ctr_model.config import TrainConfig
from ctr_model.feature_spec import spec_from_dict
from ctr_model.infer import Scorer
from ctr_model.net import build_net, dense_param_names, net_tables, label_input
from ctr_model.train.program import with_features
spec = spec_from_dict(json.loads(sys.argv[2]))
cfg = with_features(TrainConfig.from_dict(json.loads(sys.argv[1])), spec)
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
    t.set(np.asarray(t) + rng.normal(0, 0.3, np.asarray(t).shape).astype("float32"), paddle.CPUPlace())
(table,) = net_tables(cfg, spec)
tt = scope.find_var(table.name).get_tensor()
tt.set(rng.normal(0, 0.5, np.asarray(tt).shape).astype("float32"), paddle.CPUPlace())
n = 64
ids = rng.integers(0, cfg.hash_buckets, size=(n, len(spec.categorical)))
dense = rng.normal(0, 1, size=(n, len(spec.dense))).astype("float32")
feed = {label_input(k): rng.integers(0, 2, size=(n, 1)).astype("int64") for k in range(len(spec.task_labels))}
if spec.dense:
    feed["dense_input"] = dense
for j in range(len(spec.categorical)):
    feed[f"cat{j}"] = paddle.base.create_lod_tensor(ids[:, j:j + 1].astype("int64"), [[1] * n], paddle.CPUPlace())
outs = exe.run(main, feed=feed, fetch_list=list(net.task_probs), return_numpy=False)
pred = np.concatenate([np.asarray(o) for o in outs], axis=1)
params = {k: np.asarray(scope.find_var(k).get_tensor()) for k in dense_param_names(cfg)}
scorer = Scorer(meta={"config": cfg.to_dict(), "feature_spec": spec.to_dict()},
                keys=np.arange(cfg.hash_buckets, dtype=np.uint64), rows=np.asarray(tt), params=params, config=cfg)
cols = {d.name: dense[:, i] for i, d in enumerate(spec.dense)}
cols.update({c.name: ids[:, j] for j, c in enumerate(spec.categorical)})
mine = scorer.predict_tasks(cols)
print(json.dumps({"max_diff": float(np.abs(mine - pred).max()), "spread": pred.std(axis=0).tolist(),
                  "shape": list(mine.shape), "first": float(np.abs(scorer.predict(cols) - mine[:, 0]).max())}))
"""


@pytest.mark.parametrize("numeric", [True, False], ids=["dense", "no-dense"])
@pytest.mark.parametrize("model,model_config", [("esmm", {}), ("mmoe", MMOE)])
def test_numpy_scorer_is_the_multi_task_program(model, model_config, numeric):
    """The program against the numpy scorer, also on a log without a numeric column (Ali-CCP's shape:
    the families once concatenated a dense input that is not there)."""
    cfg = {"model": model, "model_config": model_config, "embedding_dim": 4, "fc_sizes": [8, 4], "hash_buckets": 500}
    spec = {**SPEC, "hash_buckets": 500, "categorical": [{"name": "user"}, {"name": "item"}]}
    if not numeric:
        spec["dense"] = []
    out = subprocess.run([sys.executable, "-c", _PARITY, json.dumps(cfg), json.dumps(spec)],
                         env={**os.environ, "PYTHONPATH": REPO}, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["shape"] == [64, 2] and result["first"] == 0.0
    assert min(result["spread"]) > 1e-3, result
    assert result["max_diff"] < 1e-6, result


@pytest.fixture(scope="module")
def ali_ccp_like(tmp_path_factory):
    """4,000 planted rows (gen-data) prepped into 2 training shards and a test split."""
    from ctr_volcano.app.cli.main import main

    root = tmp_path_factory.mktemp("aliccp")
    spec = root / "spec.json"
    spec.write_text(json.dumps(SPEC))
    assert main(["gen-data", "--feature-spec", str(spec), "--rows", "4000", "--files", "2", "--seed", "3",
                 "--out", str(root / "raw"), "--oracle-rows", "20000"]) == 0
    assert main(["prep", "--feature-spec", str(spec), "--input", str(root / "raw"), "--out", str(root / "prep"),
                 "--shards", "2", "--test-shards", "1", "--test-fraction", "0.2"]) == 0
    return root


def test_gen_data_plants_a_conversion_after_a_click_with_its_own_signal(ali_ccp_like):
    import pyarrow.csv as pacsv

    raw = pacsv.read_csv(ali_ccp_like / "raw" / "part-00000.csv").to_pydict()
    click, purchase = np.array(raw["click"]), np.array(raw["purchase"])
    assert purchase.sum() > 0 and not np.any(purchase > click)          # only after a click
    assert 0.1 < purchase.sum() / click.sum() < 0.35                   # about TASK_RATE of the clicks
    assert str(raw["user"][0]).startswith("user_")                      # string ids
    oracle = json.loads((ali_ccp_like / "raw" / "oracle.json").read_text())
    after = oracle["tasks"]["purchase"]["after_click"]
    assert after["auc"] > 0.7, oracle["tasks"]        # its own signal: ranks within the clicked rows
    assert oracle["tasks"]["click"]["auc"] == oracle["auc"]


def test_the_oracle_on_the_very_test_split_replays_prep_s_split_of_the_planted_rows(ali_ccp_like, tmp_path):
    """gen-data keeps every row's labels and true probabilities in input order (planted.npz: the files'
    labels, row for row); split_oracle scores them on the rows prep put in the test split, for a
    reading split on the click and one split on the purchase, and refuses a prep of other rows."""
    import pyarrow.csv as pacsv

    from ctr_volcano.app.cli.main import main
    from ctr_volcano.data.synthetic_spec import PLANTED_FILE, split_oracle

    raw = ali_ccp_like / "raw"
    files = [pacsv.read_csv(raw / f"part-0000{k}.csv").to_pydict() for k in (0, 1)]
    with np.load(raw / PLANTED_FILE) as planted:
        labels, p = planted["labels"], planted["p"]
    assert labels.tolist() == [[c, b] for f in files for c, b in zip(f["click"], f["purchase"])]
    assert np.all(p[:, 1] <= p[:, 0]) and labels.shape == p.shape == (4000, 2)

    stats = json.loads((ali_ccp_like / "prep" / "stats.json").read_text())
    doc = split_oracle(str(raw), str(ali_ccp_like / "prep"))
    assert doc["rows"] == stats["rows_test"] and doc["label"] == "click" and set(doc["tasks"]) == {"click", "purchase"}
    assert doc["auc"] == doc["tasks"]["click"]["auc"] and abs(doc["auc"] - json.loads(
        (raw / "oracle.json").read_text())["auc"]) < 0.05                    # 800 rows against 20,000
    assert doc["positive_rate"] == pytest.approx(stats["positive_rate_test"], abs=1e-6)

    spec = tmp_path / "purchase.json"
    spec.write_text(json.dumps({**SPEC, "labels": None, "depends_on": None, "label": "purchase",
                                "ignore": ["click"]}))
    spec.write_text(json.dumps({k: v for k, v in json.loads(spec.read_text()).items() if v is not None}))
    assert main(["prep", "--feature-spec", str(spec), "--input", str(raw), "--out", str(tmp_path / "p"),
                 "--shards", "2", "--test-shards", "1", "--test-fraction", "0.2"]) == 0
    by_purchase = split_oracle(str(raw), str(tmp_path / "p"))
    assert by_purchase["label"] == "purchase" and by_purchase["auc"] == by_purchase["tasks"]["purchase"]["auc"]
    test_rate = json.loads((tmp_path / "p" / "stats.json").read_text())["positive_rate_test"]
    assert by_purchase["positive_rate"] == pytest.approx(test_rate, abs=1e-6)

    other = tmp_path / "other"
    assert main(["gen-data", "--feature-spec", str(ali_ccp_like / "spec.json"), "--rows", "4000", "--seed", "4",
                 "--out", str(other), "--oracle-rows", "2000"]) == 0
    with pytest.raises(ValueError, match="not the replayed split"):
        split_oracle(str(other), str(ali_ccp_like / "prep"))


def test_prep_keeps_both_labels_and_rejects_a_conversion_without_a_click(tmp_path, capsys):
    import pyarrow.parquet as pq

    from ctr_volcano.app.cli.main import main

    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(SPEC))
    lines = ["click,purchase,price,user,item,shop,cate"]
    lines += [f"{i % 2},{int(i % 4 == 1)},{i}.5,u{i % 7},i{i % 5},s1,c{i % 3}" for i in range(200)]
    lines.append("0,1,3.0,u1,i1,s1,c1")                                  # a conversion without a click
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "part-0.csv").write_text("\n".join(lines) + "\n")
    argv = ["prep", "--feature-spec", str(spec), "--input", str(tmp_path / "raw"), "--out", str(tmp_path / "prep"),
            "--shards", "1", "--test-shards", "1", "--test-fraction", "0.2"]
    assert main(argv) == 2
    assert ("part-0.csv:202: purchase=1 where click=0: purchase is counted only after click (depends_on)"
            in capsys.readouterr().err)
    assert main(argv + ["--max-bad-fraction", "0.01"]) == 0
    stats = json.loads((tmp_path / "prep" / "stats.json").read_text())
    assert stats["rows_rejected"] == 1, stats
    assert "purchase=1 where click=0" in json.dumps(stats)
    train = pq.read_table(str(tmp_path / "prep" / "train" / "part-00000.parquet"))
    assert train.column_names[:2] == ["click", "purchase"]
    assert sum(train.column("purchase").to_pylist()) > 0


@pytest.fixture
def job_id():
    from tests.gang_helpers import gang_job_id

    yield from gang_job_id("mtask", grace_s=10, poll_s=0.2)


def _config(model: str, epochs: int) -> dict:
    from tests.gang_helpers import SMALL

    return {**SMALL, "epochs": epochs, "model": model, "learning_rate": 0.03,
            "model_config": MMOE if model == "mmoe" else {}}


def _check_export(result, data: str) -> None:
    """The export scores one probability per task, and its per-task evaluation is metrics.json's."""
    from ctr_model.infer import load_model
    from ctr_model.task_metrics import evaluate_tasks, task_rows

    scorer = load_model(result.model_dir)
    test = sorted(os.path.join(data, "test", f) for f in os.listdir(os.path.join(data, "test"))
                  if f.endswith(".parquet"))
    mine = evaluate_tasks(scorer, test)
    tasks = result.metrics["test"]["tasks"]
    assert set(tasks) == {"click", "purchase"} and tasks["click"]["rows"] == tasks["purchase"]["rows"]
    cvr = tasks["purchase"]["after_click"]
    assert cvr["rows"] == round(tasks["click"]["rate"] * tasks["click"]["rows"])    # the clicked rows
    for name in ("click", "purchase"):
        assert mine["tasks"][name]["auc"] == pytest.approx(tasks[name]["auc"], abs=1e-9)
    assert cvr["auc"] == pytest.approx(mine["tasks"]["purchase"]["after_click"]["auc"], abs=1e-9)
    assert result.metrics["test"]["auc"] == tasks["click"]["auc"]
    assert tasks["click"]["auc"] > 0.6 and tasks["purchase"]["auc"] > 0.6, tasks   # it learnt both
    calibration = scorer.meta["calibration"]["tasks"]          # one output bias per task, shifted
    assert set(calibration) == {"click", "purchase"} and calibration["purchase"]["rows"] < calibration["click"]["rows"]
    probs = np.concatenate([p for _, p in task_rows(scorer, test)])
    assert abs(probs[:, 0].mean() - tasks["click"]["rate"]) < 0.05, (probs.mean(axis=0), tasks)
    assert abs(probs[:, 1].mean() - tasks["purchase"]["rate"]) < 0.03, (probs.mean(axis=0), tasks)
    _check_onnx(result.model_dir, scorer, test)


def _check_onnx(model_dir: str, scorer, test) -> None:
    """The trainer's ONNX export has one output per task, each the numpy scorer's column (<= 1e-6)."""
    import onnxruntime as ort
    import pyarrow.parquet as pq

    from ctr_model.onnx_inputs import feeds, layout_of

    manifest = json.loads(open(os.path.join(model_dir, "serving.json")).read())
    assert manifest["outputs"] == {"probability": {"dtype": "FP64", "task": "click"},
                                   "probability_purchase": {"dtype": "FP64", "task": "purchase"}}
    config = open(os.path.join(model_dir, "serving", "ctr", "config.pbtxt")).read()
    assert 'name: "probability_purchase" data_type: TYPE_FP64' in config
    session = ort.InferenceSession(os.path.join(model_dir, "model.onnx"))
    assert [o.name for o in session.get_outputs()] == ["probability", "probability_purchase"]
    table = pq.read_table(test[0])
    outs = session.run(None, feeds(layout_of(scorer.features), table))
    mine = scorer.predict_tasks(table)
    assert mine.shape == (table.num_rows, 2) and np.all(mine[:, 1] <= mine[:, 0])   # pCTCVR <= pCTR
    diffs = [float(np.abs(out - mine[:, k]).max()) for k, out in enumerate(outs)]
    logging.getLogger(__name__).info("ONNX %s: %d rows, max abs diff per task %s, %.2f MB", scorer.config.model,
                                     table.num_rows, ", ".join(f"{d:.2e}" for d in diffs),
                                     os.path.getsize(os.path.join(model_dir, "model.onnx")) / 1e6)
    assert max(diffs) <= 1e-6


def _check_scoring(model_dir: str, raw, out) -> None:
    """``ctr-volcano score`` on the raw CSV files writes every task's column in input order, each the
    numpy scorer's on the rows' reference forms (<= 1e-6), and each task's AUC into scores.json."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    from ctr_model.infer import load_model
    from ctr_model.metrics import auc
    from ctr_model.transforms import categorical_ids, dense_value
    from ctr_volcano.app.cli.main import main

    assert main(["score", "--model", model_dir, "--input", str(raw), "--out", str(out), "--keep", "user"]) == 0
    scored = pa.concat_tables([pq.read_table(p) for p in sorted(out.glob("part-*.parquet"))])
    assert scored.column_names == ["user", "probability", "probability_purchase"]
    text = pacsv.ConvertOptions(column_types={n: pa.string() for n in ["price", "user", "item", "shop", "cate"]})
    rows = pa.concat_tables([pacsv.read_csv(p, convert_options=text) for p in sorted(raw.glob("part-*"))])
    kept = [u or "" for u in scored["user"].to_pylist()]                # an empty field is kept as null
    assert scored.num_rows == rows.num_rows == 4000 and kept == rows["user"].to_pylist()
    scorer = load_model(model_dir)
    spec = scorer.features
    cols = {d.name: np.array([dense_value(d, v) for v in rows[d.name].to_pylist()], np.float32) for d in spec.dense}
    cols.update({c.name: np.array([categorical_ids(spec, c, v)[0] for v in rows[c.name].to_pylist()])
                 for c in spec.categorical})
    mine = scorer.predict_tasks(pa.table(cols))
    for k, name in enumerate(["probability", "probability_purchase"]):
        assert np.abs(scored[name].to_numpy() - mine[:, k]).max() <= 1e-6, name
    doc = json.loads((out / "scores.json").read_text())["metrics"]
    for k, (task, name) in enumerate([("click", "probability"), ("purchase", "probability_purchase")]):
        labels = rows[task].to_numpy()
        assert doc["tasks"][task]["auc"] == pytest.approx(auc(labels, scored[name].to_numpy()), abs=1e-12)
        # ONNX's and numpy's scores differ by <= 1e-6, enough to swap a few near-tied pairs; each
        # swap moves the AUC by 1/(positives * negatives) (a CI run saw 1.2e-6 on 4,000 rows)
        assert doc["tasks"][task]["auc"] == pytest.approx(auc(labels, mine[:, k]), abs=1e-4)
    assert doc["auc"] == doc["tasks"]["click"]["auc"] and doc["rows"] == 4000
    assert doc["tasks"]["purchase"]["after_click"]["rows"] == int(rows["click"].to_numpy().sum())   # CVR


@pytest.mark.slow
@pytest.mark.parametrize("model", ["esmm", "mmoe"])
def test_family_trains_on_a_two_by_two_gang(ali_ccp_like, job_id, tmp_path, model):
    from ctr_volcano.training.local.backend import train_local

    data = str(ali_ccp_like / "prep")
    result = train_local(data, str(tmp_path / "model"), _config(model, 3), pservers=2, trainers=2,
                         max_retry=0, workdir=str(tmp_path / "w"), job_id=job_id, log=lambda m: None)
    assert result.metrics["epochs"][0]["examples"] == 3201
    meta = json.loads((tmp_path / "model" / "model_meta.json").read_text())
    assert meta["config"]["model"] == model and meta["config"]["model_config"]["tasks"] == 2
    _check_export(result, data)
    _check_scoring(result.model_dir, ali_ccp_like / "raw", tmp_path / "scores")
    from ctr_volcano.app.cli.main import main

    assert main(["evaluate", "--model", result.model_dir, "--data", data, "--out", str(tmp_path / "eval")]) == 0
    evaluated = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    for name, scores in result.metrics["test"]["tasks"].items():     # the trainer's, to the digit
        for key in ("auc", "logloss", "rows"):
            assert evaluated["tasks"][name][key] == pytest.approx(scores[key], abs=1e-9)
    after = evaluated["tasks"]["purchase"]["after_click"]
    assert after["auc"] == pytest.approx(result.metrics["test"]["tasks"]["purchase"]["after_click"]["auc"], abs=1e-9)
    assert evaluated["auc"] == pytest.approx(result.metrics["test"]["auc"], abs=1e-9)
    report = (tmp_path / "eval" / "report.html").read_text()
    assert "<h2>Tasks</h2>" in report and "<th>purchase after click</th>" in report


@pytest.mark.slow
@pytest.mark.parametrize("model", ["esmm", "mmoe"])
def test_family_resumes_after_a_killed_trainer(ali_ccp_like, job_id, tmp_path, model):
    import threading

    from ctr_volcano.training.local.backend import train_local
    from tests.gang_helpers import kill_when_checkpointed

    data = str(ali_ccp_like / "prep")
    workdir = str(tmp_path / "w")
    box: dict = {}
    killer = threading.Thread(target=kill_when_checkpointed,
                              args=(os.path.join(workdir, "output"), job_id, "trainer", 1, box))
    killer.start()
    result = train_local(data, str(tmp_path / "model"), _config(model, 3), max_retry=1, workdir=workdir,
                         job_id=job_id, log=lambda m: None)
    killer.join()
    assert "killed_at" in box and result.attempts == 2
    assert result.metrics["resumed_from_epoch"] >= 1
    assert [e["epoch"] for e in result.metrics["epochs"]] == [1, 2, 3]
    _check_export(result, data)


def test_both_backends_refuse_a_family_that_cannot_train_the_labels_before_any_gang(ali_ccp_like, tmp_path):
    from ctr_volcano.errors import BadInput
    from ctr_volcano.training.checks import check_train_data
    from ctr_volcano.training.local.backend import train_local

    data = str(ali_ccp_like / "prep")
    assert check_train_data(data, 2, model="esmm").features.task_labels == ("click", "purchase")
    with pytest.raises(BadInput) as err:
        check_train_data(data, 2, model="deepfm")
    assert str(err.value).startswith("config.model='deepfm': the data has 2 labels (click, purchase)")
    with pytest.raises(BadInput, match="the data has 2 labels"):
        train_local(data, str(tmp_path / "m"), {"model": "dnn"}, pservers=1, trainers=1)
    assert not os.path.exists(tmp_path / "m"), "a refused run must not start"


@pytest.mark.slow
def test_warm_start_continues_esmm_and_refuses_mmoe(ali_ccp_like, tmp_path):
    from ctr_volcano.errors import BadInput
    from ctr_volcano.training.local.backend import train_local

    data = str(ali_ccp_like / "prep")
    first = train_local(data, str(tmp_path / "first"), _config("esmm", 1), pservers=1, trainers=1, max_retry=0,
                        job_id="mtask-first", log=lambda m: None, workdir=str(tmp_path / "w1"))
    warm = train_local(data, str(tmp_path / "warm"), _config("esmm", 1), pservers=1, trainers=1, max_retry=0,
                       job_id="mtask-warm", log=lambda m: None, workdir=str(tmp_path / "w2"),
                       init_model=first.model_dir)
    assert warm.metrics["epochs"][0]["loss"] < first.metrics["epochs"][0]["loss"] - 0.01
    with pytest.raises(BadInput) as err:
        train_local(data, str(tmp_path / "m"), _config("mmoe", 1), pservers=1, trainers=1,
                    init_model=first.model_dir)
    assert "its model is 'esmm' but this run's is 'mmoe'" in str(err.value)
    assert len(str(err.value).splitlines()) == 1 and not os.path.exists(tmp_path / "m")
