"""A real 2x2 parameter-server gang on the local backend trains data in three non-Criteo layouts,
each made by ``gen-data --feature-spec`` and prepped by ``prep --feature-spec``, and its test AUC
comes close to the planted model's own (``oracle.json``)."""
from __future__ import annotations

import json
import logging

import pytest

from ctr_model.infer import load_model
from ctr_volcano.app.cli.main import main
from ctr_volcano.training.local.backend import train_local
from tests.gang_helpers import SMALL, gang_job_id

FEATURES = {"label": "clicked",
            "dense": [{"name": "price", "transform": "log1p"}, {"name": "age", "transform": "standardize"},
                      {"name": "visits", "transform": "criteo"}],
            "categorical": [{"name": "user", "hash_buckets": 100003},
                            {"name": "items", "multivalued": True, "pooling": "mean", "separator": "|"},
                            {"name": "site"}],
            "ignore": ["other"]}
LAYOUTS = {"csv-header": {"format": "csv", "header": True},
           "tsv-columns": {"format": "tsv",
                           "columns": ["clicked", "price", "age", "visits", "user", "items", "site", "other"]},
           "parquet-list": {"format": "parquet"}}
#: The issue's bar. Measured 2026-12-03 (80k training rows, 3 epochs of the SMALL model, a fresh-clone
#: CI run loading the other core): csv-header 0.8202, tsv-columns 0.8206, parquet-list 0.8206 against
#: the oracle's 0.8320 (gaps 0.011-0.012). Before gen-data planted the dense effect on the value the
#: learner sees (an empty field as its fill), the gap was 0.018-0.020 and 0.031 under load.
MAX_GAP = 0.02


@pytest.fixture
def job_id():
    yield from gang_job_id("spectest", grace_s=10, poll_s=0.2)


@pytest.mark.slow
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_two_by_two_learns_a_planted_spec(layout, job_id, tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(dict(FEATURES, **LAYOUTS[layout])))
    assert main(["gen-data", "--feature-spec", str(spec), "--rows", "100000", "--files", "2", "--seed", "3",
                 "--out", str(tmp_path / "raw"), "--oracle-rows", "100000"]) == 0
    assert main(["prep", "--feature-spec", str(spec), "--input", str(tmp_path / "raw"), "--out",
                 str(tmp_path / "prep"), "--shards", "2", "--test-shards", "1", "--test-fraction", "0.2"]) == 0
    oracle = json.loads((tmp_path / "raw" / "oracle.json").read_text())["auc"]
    result = train_local(str(tmp_path / "prep"), str(tmp_path / "model"), {**SMALL, "epochs": 3},
                         pservers=2, trainers=2, max_retry=0, workdir=str(tmp_path / "w"), job_id=job_id)
    test_auc = result.metrics["test"]["auc"]
    logging.getLogger(__name__).info("%s: test AUC %.4f, oracle %.4f", layout, test_auc, oracle)
    assert oracle - MAX_GAP < test_auc <= oracle + 0.01, f"test AUC {test_auc:.4f}, oracle {oracle:.4f}"
    meta = load_model(result.model_dir).meta
    assert meta["feature_spec"]["categorical"][1]["multivalued"] is True
    assert meta["feature_spec"]["dense"][1]["std"] > 0          # prep's statistics travel with the model
    assert main(["evaluate", "--model", result.model_dir, "--data", str(tmp_path / "prep"),
                 "--out", str(tmp_path / "eval")]) == 0
    metrics = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert metrics["auc"] == pytest.approx(test_auc, abs=1e-4)
    features = {f["name"]: f for f in metrics["features"]}   # the report names the spec's features
    assert list(features) == ["price", "age", "visits", "user", "items", "site"]
    assert features["items"]["transform"] == "multi-valued, mean of up to 16"
    assert 0.10 < features["items"]["missing_rate"] < 0.18   # gen-data leaves 1 in 7 lists empty
    assert "<th>items</th>" in (tmp_path / "eval" / "report.html").read_text()


#: The same features without a numeric column (Avazu's, Ali-CCP's shape). Measured 2026-12-06 (100k
#: rows, 3 epochs of the SMALL model, 2x2, a CI run on the other core): test AUC 0.8316 (dnn),
#: 0.8320 (wide_deep), 0.8326 (deepfm), 0.8295 (dcn_v2) against the oracle's 0.8389.
CATEGORICAL_ONLY = {"format": "csv", "header": True, **{k: v for k, v in FEATURES.items() if k != "dense"}}


@pytest.mark.slow
@pytest.mark.parametrize("model", ["dnn", "wide_deep", "deepfm", "dcn_v2"])
def test_every_family_learns_a_planted_spec_without_a_numeric_column(model, job_id, tmp_path_factory):
    root = tmp_path_factory.getbasetemp() / "categorical-only"
    if not (root / "prep" / "stats.json").exists():        # made once, for every family
        root.mkdir(exist_ok=True)
        (root / "spec.json").write_text(json.dumps(CATEGORICAL_ONLY))
        assert main(["gen-data", "--feature-spec", str(root / "spec.json"), "--rows", "100000", "--files", "2",
                     "--seed", "3", "--out", str(root / "raw"), "--oracle-rows", "100000"]) == 0
        assert main(["prep", "--feature-spec", str(root / "spec.json"), "--input", str(root / "raw"), "--out",
                     str(root / "prep"), "--shards", "2", "--test-shards", "1", "--test-fraction", "0.2"]) == 0
    oracle = json.loads((root / "raw" / "oracle.json").read_text())["auc"]
    work = tmp_path_factory.mktemp(model)
    result = train_local(str(root / "prep"), str(work / "model"), {**SMALL, "epochs": 3, "model": model},
                         pservers=2, trainers=2, max_retry=0, workdir=str(work / "w"), job_id=job_id)
    test_auc = result.metrics["test"]["auc"]
    logging.getLogger(__name__).info("categorical only, %s: test AUC %.4f, oracle %.4f", model, test_auc, oracle)
    assert oracle - MAX_GAP < test_auc <= oracle + 0.01, f"{model}: test AUC {test_auc:.4f}, oracle {oracle:.4f}"
    assert load_model(result.model_dir).meta["feature_spec"]["dense"] == []


@pytest.mark.slow
def test_training_pipeline_under_kfp_local_on_a_csv_spec(tmp_path):
    """``ctr-volcano run`` (the training pipeline through kfp.local: prep, a local gang, evaluate,
    gate, publish) with ``feature_spec`` set to a CSV layout with a multi-valued column."""
    import os
    import subprocess
    import sys

    doc = dict(FEATURES, **LAYOUTS["csv-header"])
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(doc))
    assert main(["gen-data", "--feature-spec", str(spec), "--rows", "20000", "--seed", "3",
                 "--out", str(tmp_path / "raw"), "--oracle-rows", "20000"]) == 0
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-m", "ctr_volcano.app.cli.main", "run", "--data", str(tmp_path / "raw"),
                           "--workdir", str(tmp_path / "workdir"), "-p", "min_auc=0.0",
                           "-p", f"feature_spec={json.dumps(doc)}"],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    summary = json.loads((tmp_path / "workdir" / "summary.json").read_text())
    # 18k rows, one epoch of batch 32 (the run's demo overrides): learning, not the oracle's 0.82
    assert summary["rows"] == 2000 and summary["auc"] > 0.65 and summary["passed_gate"] is True
    assert load_model(summary["model"]).meta["feature_spec"]["format"] == "csv"
