"""DIN's target attention, a pooling every family takes: a history of ads pooled by weights that depend
on the candidate ad. The spec refuses bad combinations in one line before any data is read; a
history's value and the same value as the candidate are one id; gen-data plants a click driven by
how much of the history is relevant to the candidate; a real 2x2 local gang trains it (single- and
multi-task), resumes after a killed trainer, and its ONNX export and the model server (one output
per task) score as the numpy scorer does.
(Every single-task family's ONNX and served outputs on such a log: tests/test_serving_families.py,
layout ``csv_history``; the Paddle program against the scorer: tests/test_any_spec.py.)"""
from __future__ import annotations

import json
import os
import threading

import numpy as np
import pytest

from ctr_model.feature_spec import SpecError, spec_from_dict
from ctr_volcano.app.cli.main import main as cli

SPEC = {"format": "csv", "header": True, "label": "click", "hash_buckets": 20011, "embedding_dim": 4,
        "dense": [{"name": "price", "transform": "log1p"}],
        "categorical": [{"name": "user"}, {"name": "ad"},
                        {"name": "seen", "multivalued": True, "pooling": "attention", "query": "ad",
                         "max_length": 6}]}


def _with_history(**changes) -> dict:
    doc = json.loads(json.dumps(SPEC))
    doc["categorical"][2].update(changes)
    return doc


@pytest.mark.parametrize("changes,message", [
    ({"query": None}, "categorical[2].query='': name the candidate: the single-valued categorical feature "
                      "whose ids this history holds (one of user, ad)"),
    ({"query": "adz"}, "categorical[2].query='adz': not a categorical feature; did you mean 'ad'?"),
    ({"query": "seen"}, "categorical[2].query='seen': the query is the candidate"),
    ({"multivalued": False}, "categorical[2].pooling='attention': attention pools a behaviour history: set "
                             "multivalued: true"),
    ({"embedding_dim": 8}, "categorical[2].embedding_dim=8: the history and its query 'ad' share one id space "
                           "and one embedding: give both embedding_dim 4"),
    ({"hash_buckets": 1000}, "categorical[2].hash_buckets=1000: the history and its query 'ad' share"),
    ({"attention_units": []}, "categorical[2].attention_units=[]: write a non-empty list of layer widths"),
    ({"pooling": "sum"}, "categorical[2].query='ad': query belongs to pooling attention"),
])
def test_bad_attention_specs_are_refused_in_one_line_before_prep_reads(tmp_path, capsys, changes, message):
    doc = _with_history(**changes)
    if changes.get("query", "") is None:
        del doc["categorical"][2]["query"]
    with pytest.raises(SpecError) as err:
        spec_from_dict(doc)
    assert message in str(err.value)
    (tmp_path / "spec.json").write_text(json.dumps(doc))
    assert cli(["prep", "--feature-spec", str(tmp_path / "spec.json"), "--input", str(tmp_path / "nowhere"),
                "--out", str(tmp_path / "out")]) == 2
    err_text = capsys.readouterr().err.strip()
    assert message in err_text and "\n" not in err_text and "nowhere" not in err_text


def test_the_spec_round_trips_and_older_documents_stay_the_same():
    spec = spec_from_dict(SPEC)
    assert spec_from_dict(spec.to_dict()) == spec
    assert spec.categorical[2].attention_units == (80, 40)
    assert spec.to_dict()["categorical"][2]["attention_units"] == [80, 40]
    assert "query" not in spec.to_dict()["categorical"][0] and "attention_units" not in spec.to_dict()["categorical"][1]


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_a_history_value_and_the_same_candidate_are_one_id(tmp_path, fmt):
    """Prep hashes a history's values as its query's: ``ad_7`` seen before is the candidate ``ad_7``
    (text in a CSV; integers in Parquet), while a sum-pooled list of the same text is not."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    doc = json.loads(json.dumps(SPEC))
    doc["categorical"].append({"name": "tags", "multivalued": True})
    raw = tmp_path / "raw"
    raw.mkdir()
    rows = [(i % 2, f"{i}.5", f"u{i % 5}", i % 7, [(i + k) % 7 for k in range(i % 4)]) for i in range(200)]
    if fmt == "csv":
        lines = ["click,price,user,ad,seen,tags"] + [
            f"{c},{p},{u},ad_{a},{'|'.join(f'ad_{h}' for h in hist)},{'|'.join(f'ad_{h}' for h in hist)}"
            for c, p, u, a, hist in rows]
        (raw / "part-0.csv").write_text("\n".join(lines) + "\n")
    else:
        doc["format"] = "parquet"
        del doc["header"]
        pq.write_table(pa.table({"click": [r[0] for r in rows], "price": [float(r[1]) for r in rows],
                                 "user": [r[2] for r in rows], "ad": [r[3] for r in rows],
                                 "seen": [r[4] for r in rows], "tags": [[str(h) for h in r[4]] for r in rows]}),
                       raw / "part-0.parquet")
    (tmp_path / "spec.json").write_text(json.dumps(doc))
    assert cli(["prep", "--feature-spec", str(tmp_path / "spec.json"), "--input", str(raw),
                "--out", str(tmp_path / "prep"), "--shards", "1", "--test-shards", "1",
                "--test-fraction", "0.2"]) == 0
    table = pq.read_table(str(tmp_path / "prep" / "train" / "part-00000.parquet")).to_pydict()
    ad_ids = set(table["ad"])
    seen = {i for row in table["seen"] for i in row}
    tags = {i for row in table["tags"] for i in row}
    assert len(ad_ids) == 7 and seen - {2} == ad_ids                 # 2: the history's own empty id
    assert not tags & ad_ids


def test_gen_data_plants_a_click_driven_by_the_relevant_history(tmp_path):
    """Rows whose history holds items of the candidate's group click more; the oracle knows it."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    from ctr_volcano.data.synthetic_spec import GROUPS

    (tmp_path / "spec.json").write_text(json.dumps(SPEC))
    assert cli(["gen-data", "--feature-spec", str(tmp_path / "spec.json"), "--rows", "20000", "--seed", "2",
                "--out", str(tmp_path / "raw"), "--oracle-rows", "20000"]) == 0
    raw = pacsv.read_csv(tmp_path / "raw" / "part-00000.csv", convert_options=pacsv.ConvertOptions(
        column_types={"seen": pa.string(), "ad": pa.string()}, strings_can_be_null=False)).to_pydict()
    group = [int(a.split("_")[1]) % GROUPS if a else -1 for a in raw["ad"]]
    relevant = np.array([sum(int(h.split("_")[1]) % GROUPS == g for h in s.split("|") if h) if g >= 0 else 0
                         for s, g in zip(raw["seen"], group)])
    click = np.array(raw["click"])
    assert all(h.startswith("ad_") for s in raw["seen"][:200] for h in s.split("|") if h)  # the ad's ids
    assert click[relevant >= 2].mean() > click[relevant == 0].mean() + 0.15
    assert json.loads((tmp_path / "raw" / "oracle.json").read_text())["auc"] > 0.75


# --------------------------------------------------------------------------------------- gangs
@pytest.fixture(scope="module")
def history_log(tmp_path_factory):
    """6,000 planted rows with a history, with a second label (a purchase after a click), prepped."""
    root = tmp_path_factory.mktemp("history")
    doc = {**SPEC, "labels": ["click", "purchase"], "depends_on": {"purchase": "click"}}
    (root / "spec.json").write_text(json.dumps(doc))
    assert cli(["gen-data", "--feature-spec", str(root / "spec.json"), "--rows", "6000", "--files", "2",
                "--seed", "4", "--out", str(root / "raw"), "--oracle-rows", "20000"]) == 0
    assert cli(["prep", "--feature-spec", str(root / "spec.json"), "--input", str(root / "raw"),
                "--out", str(root / "prep"), "--shards", "2", "--test-shards", "1", "--test-fraction", "0.2"]) == 0
    return root


@pytest.fixture
def job_id():
    from tests.gang_helpers import gang_job_id

    yield from gang_job_id("attn", grace_s=10, poll_s=0.2)


def _test_files(prep: str) -> list:
    test = os.path.join(prep, "test")
    return sorted(os.path.join(test, f) for f in os.listdir(test) if f.endswith(".parquet"))


def _check_export(model_dir: str, prep: str, tasks: int) -> None:
    """The export's ONNX graph gives the numpy scorer's probabilities, every task (<= 1e-6)."""
    import onnxruntime as ort
    import pyarrow.parquet as pq

    from ctr_model.infer import load_model
    from ctr_model.onnx_inputs import feeds, layout_of

    scorer = load_model(model_dir)
    assert [n for n in scorer.params if n.startswith("att2.")] == ["att2.fc0.w", "att2.fc0.b", "att2.fc1.w",
                                                                    "att2.fc1.b", "att2.out.w", "att2.out.b"]
    table = pq.read_table(_test_files(prep)[0])
    session = ort.InferenceSession(os.path.join(model_dir, "model.onnx"))
    outs = session.run(None, feeds(layout_of(scorer.features), table))
    mine = scorer.predict_tasks(table)
    assert len(outs) == tasks and mine.shape == (table.num_rows, tasks)
    for k, out in enumerate(outs):
        assert np.abs(out - mine[:, k]).max() <= 1e-6


def _config(model: str) -> dict:
    from tests.gang_helpers import SMALL

    return {**SMALL, "epochs": 3, "model": model, "learning_rate": 0.01}


@pytest.mark.slow
def test_a_history_model_resumes_after_a_killed_trainer_and_exports(history_log, job_id, tmp_path):
    """2 pservers x 2 trainers, the DNN over an attention-pooled history and the first label; trainer 1
    killed once epoch 1 is checkpointed; the gang resumes and its export scores as the scorer."""
    from ctr_volcano.training.local.backend import train_local
    from tests.gang_helpers import kill_when_checkpointed

    prep = str(history_log / "prep-click")
    doc = {**SPEC, "ignore": ["purchase"]}      # the click alone
    (history_log / "spec-click.json").write_text(json.dumps(doc))
    if not os.path.exists(prep):
        assert cli(["prep", "--feature-spec", str(history_log / "spec-click.json"), "--input",
                    str(history_log / "raw"), "--out", prep, "--shards", "2", "--test-shards", "1",
                    "--test-fraction", "0.2", "--max-bad-fraction", "0"]) == 0
    workdir = str(tmp_path / "w")
    box: dict = {}
    killer = threading.Thread(target=kill_when_checkpointed,
                              args=(os.path.join(workdir, "output"), job_id, "trainer", 1, box))
    killer.start()
    result = train_local(prep, str(tmp_path / "model"), _config("dnn"), pservers=2, trainers=2, max_retry=1,
                         workdir=workdir, job_id=job_id, log=lambda m: None)
    killer.join()
    assert "killed_at" in box and result.attempts == 2
    assert [e["epoch"] for e in result.metrics["epochs"]] == [1, 2, 3]
    assert result.metrics["test"]["auc"] > 0.65, result.metrics["test"]
    _check_export(result.model_dir, prep, 1)


@pytest.mark.slow
def test_esmm_over_an_attention_pooled_history_on_a_two_by_two_gang(history_log, job_id, tmp_path):
    from ctr_volcano.training.local.backend import train_local

    prep = str(history_log / "prep")
    result = train_local(prep, str(tmp_path / "model"), _config("esmm"), pservers=2, trainers=2, max_retry=0,
                         workdir=str(tmp_path / "w"), job_id=job_id, log=lambda m: None)
    tasks = result.metrics["test"]["tasks"]
    assert tasks["click"]["auc"] > 0.65 and tasks["purchase"]["auc"] > 0.6, tasks
    _check_export(result.model_dir, prep, 2)
    from ctr_volcano.retraining.gate import compare

    gated = compare(result.model_dir, result.model_dir, os.path.join(prep, "test"), str(tmp_path / "gate"),
                    min_auc=0.5, tolerance=0.0, task="purchase")      # the gate on the chosen task
    assert gated["decision"]["challenger_auc"] == pytest.approx(tasks["purchase"]["auc"], abs=1e-9)
    assert gated["decision"]["reason"].startswith("challenger purchase AUC") and gated["decision"]["publish"]
    _check_served(result.model_dir, history_log / "raw" / "part-00000.csv", tmp_path / "server.log")


def _check_served(model_dir: str, raw_csv, server_log) -> None:
    """The model server on loopback answers a log's raw rows with one output per task, each the numpy
    scorer's on what prep's transforms make of the same values (<= 1e-6)."""
    import sys

    import pyarrow as pa
    import pyarrow.csv as pacsv

    from ctr_model.infer import load_model
    from ctr_model.transforms import categorical_ids, dense_value
    from tools.model_server import model_server
    from tools.v2_client import infer, raw_to_body

    scorer = load_model(model_dir)
    spec = scorer.features
    names = [d.name for d in spec.dense] + [c.name for c in spec.categorical]
    text = pacsv.read_csv(raw_csv, convert_options=pacsv.ConvertOptions(
        column_types={n: pa.string() for n in names}, strings_can_be_null=False)).slice(0, 500).to_pydict()
    values = {n: text[n] for n in names}
    cols = {d.name: np.array([dense_value(d, v) for v in values[d.name]], dtype=np.float32) for d in spec.dense}
    for c in spec.categorical:
        ids = [categorical_ids(spec, c, v) for v in values[c.name]]
        cols[c.name] = pa.array(ids, pa.list_(pa.int64())) if c.multivalued else np.array([i[0] for i in ids])
    expected = scorer.predict_tasks(pa.table(cols))
    with model_server(sys.executable, model_dir, server_log) as url:
        _, answer = infer(url, raw_to_body(values))
    outputs = {o["name"]: np.array(o["data"]) for o in answer["outputs"]}
    assert list(outputs) == ["probability", "probability_purchase"], list(outputs)
    for k, name in enumerate(outputs):
        assert np.abs(outputs[name] - expected[:, k]).max() <= 1e-6, name
