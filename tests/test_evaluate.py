"""The evaluation core: exact metrics against scikit-learn, streaming over real Parquet, the report."""
from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from sklearn.metrics import confusion_matrix as sk_confusion
from sklearn.metrics import log_loss, roc_auc_score
from sklearn.metrics import roc_curve as sk_roc_curve

from ctr_volcano.errors import BadInput
from ctr_volcano.evaluation import evaluate as ev


def _fixed_predictions(n=2000, seed=7, decimals=2):
    """Labels correlated with scores; scores rounded so that many are tied."""
    rng = np.random.default_rng(seed)
    p = np.round(rng.uniform(0.01, 0.99, n), decimals)
    y = (rng.uniform(size=n) < p).astype(np.int8)
    return y, p


@pytest.mark.parametrize("decimals", [1, 2, 6])
def test_auc_and_logloss_match_sklearn_with_ties(decimals):
    y, p = _fixed_predictions(decimals=decimals)
    assert len(np.unique(p)) < len(p)  # ties present
    assert abs(ev.auc(y, p) - roc_auc_score(y, p)) < 1e-6
    assert abs(ev.logloss(y, p) - log_loss(y, p)) < 1e-6


def test_auc_all_tied_is_half_and_perfect_is_one():
    assert ev.auc([0, 1, 0, 1], [0.3, 0.3, 0.3, 0.3]) == pytest.approx(0.5)
    assert ev.auc([0, 0, 1, 1], [0.1, 0.2, 0.8, 0.9]) == 1.0
    assert ev.auc([1, 1, 0, 0], [0.1, 0.2, 0.8, 0.9]) == 0.0
    # one tie between a positive and a negative counts as half a pair: (3 + 0.5) / 4
    assert ev.auc([0, 0, 1, 1], [0.1, 0.5, 0.5, 0.9]) == pytest.approx(3.5 / 4)


def test_logloss_clips_confident_mistakes():
    got = ev.logloss([1, 0], [0.0, 1.0])
    assert np.isfinite(got)
    assert got == pytest.approx(-np.log(ev.LOGLOSS_EPS), rel=1e-6)


def test_roc_curve_matches_sklearn_points():
    y, p = _fixed_predictions(n=500, decimals=2)
    pts = ev.roc_curve(y, p, max_points=None)
    fpr, tpr, thr = sk_roc_curve(y, p, drop_intermediate=False)
    np.testing.assert_allclose([q["fpr"] for q in pts], fpr, atol=1e-12)
    np.testing.assert_allclose([q["tpr"] for q in pts], tpr, atol=1e-12)
    np.testing.assert_allclose([q["threshold"] for q in pts][1:], thr[1:])
    assert all(np.isfinite(q["threshold"]) for q in pts)
    # trapezoid area under the full curve equals the rank AUC
    assert np.trapezoid(tpr, fpr) == pytest.approx(ev.auc(y, p), abs=1e-9)


def test_roc_curve_is_thinned_but_keeps_endpoints():
    y, p = _fixed_predictions(n=3000, decimals=6)
    pts = ev.roc_curve(y, p, max_points=50)
    assert len(pts) <= 50
    assert (pts[0]["fpr"], pts[0]["tpr"]) == (0.0, 0.0)
    assert (pts[-1]["fpr"], pts[-1]["tpr"]) == (1.0, 1.0)
    fprs = [q["fpr"] for q in pts]
    assert fprs == sorted(fprs)


def test_confusion_matrix_matches_sklearn():
    y, p = _fixed_predictions(n=777)
    cm = ev.confusion_matrix(y, p, threshold=0.4)
    (tn, fp), (fn, tp) = sk_confusion(y, (p >= 0.4).astype(int))
    assert cm == {"tn": tn, "fp": fp, "fn": fn, "tp": tp}


def test_calibration_deciles():
    y, p = _fixed_predictions(n=1000)
    cal = ev.calibration(y, p)
    assert [c["bin"] for c in cal] == list(range(1, 11))
    assert sum(c["rows"] for c in cal) == 1000
    order = np.argsort(p, kind="mergesort")
    first = order[:100]
    assert cal[0]["mean_predicted"] == pytest.approx(p[first].mean())
    assert cal[0]["observed_ctr"] == pytest.approx(y[first].mean())
    means = [c["mean_predicted"] for c in cal]
    assert means == sorted(means)
    # the data are calibrated by construction: observed tracks predicted in the top decile
    assert abs(cal[-1]["observed_ctr"] - cal[-1]["mean_predicted"]) < 0.1


@pytest.mark.parametrize("labels,probs,field", [
    ([0, 0, 0], [0.1, 0.2, 0.3], "labels"),      # one class: AUC undefined
    ([0, 2, 1], [0.1, 0.2, 0.3], "labels"),      # not a 0/1 label
    ([0, 1], [0.1, float("nan")], "probs"),
    ([0, 1], [0.1, 1.5], "probs"),
    ([0, 1], [0.1], "probs"),
    ([], [], "labels"),
])
def test_bad_inputs_name_the_field(labels, probs, field):
    with pytest.raises(BadInput) as info:
        ev.auc(labels, probs)
    assert info.value.field == field
    assert info.value.fix


def test_compute_metrics_and_report_are_consistent():
    y, p = _fixed_predictions(n=1500)
    m = ev.compute_metrics(y, p, threshold=0.5)
    json.dumps(m, allow_nan=False)  # strictly JSON-serializable
    assert m["rows"] == 1500 and m["positives"] == int(y.sum())
    assert m["positive_rate"] == pytest.approx(y.mean())
    cm = m["confusion_matrix"]
    assert m["accuracy"] == pytest.approx((cm["tp"] + cm["tn"]) / 1500)
    page = ev.render_report(m)
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page
    svgs = [page[i:page.index("</svg>", i) + 6] for i in range(len(page)) if page.startswith("<svg", i)]
    assert len(svgs) == 2
    for svg in svgs:
        root = ET.fromstring(svg)  # well-formed XML
        assert root.findall("{http://www.w3.org/2000/svg}polyline")
    assert f"{m['auc']:.4f}" in page


def test_metrics_show_the_constant_predictor_and_the_normalized_entropy():
    y, p = _fixed_predictions(n=1500)
    m = ev.compute_metrics(y, p)
    constant = log_loss(y, np.full(y.size, y.mean()))
    assert m["constant_logloss"] == pytest.approx(constant, abs=1e-9)
    assert m["normalized_entropy"] == pytest.approx(log_loss(y, p) / constant, abs=1e-9)
    assert m["normalized_entropy"] < 1                         # the fixed predictions carry signal
    flat = ev.compute_metrics(y, np.full(y.size, 0.5))          # a useless model is told as one
    assert flat["normalized_entropy"] > 1
    m["context"] = {"model family": "deepfm"}
    page = ev.render_report(m)
    assert f"<td>{constant:.6f}</td>" in page and f"<td>{m['normalized_entropy']:.4f}</td>" in page
    assert "<th>model family</th><td>deepfm</td>" in page


def test_model_summary_names_the_family_and_its_shape():
    meta = {"config": {"model": "dcn_v2", "model_config": {"cross_layers": 2, "low_rank": 0},
                       "fc_sizes": [8], "embedding_dim": 4, "base_rate": 0.2, "epochs": 3}}
    assert ev.model_summary(meta) == {"family": "dcn_v2", "config": {
        "model_config": {"cross_layers": 2, "low_rank": 0}, "fc_sizes": [8], "embedding_dim": 4, "base_rate": 0.2}}
    assert ev.model_summary({"config": {"fc_sizes": [8]}})["family"] == "dnn"   # exported before families


# ---------------------------------------------------------------------------------------------
# evaluate(): real Parquet split on disk, a small scorer of our own (the real model is tested in
# test_evaluate_model.py and in the pipeline run)


def _write_split(split_dir, n_rows=600, shards=3, seed=3, rows_in_schema=None):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ctr_model import features as F

    rng = np.random.default_rng(seed)
    os.makedirs(split_dir, exist_ok=True)
    dense = rng.normal(size=(n_rows, F.NUM_DENSE)).astype(np.float32)
    logit = 1.5 * dense[:, 0] - 1.0
    label = (rng.uniform(size=n_rows) < 1 / (1 + np.exp(-logit))).astype(np.int8)
    sparse = rng.integers(0, 1000, size=(n_rows, F.NUM_SPARSE)).astype(np.int64)
    cols = {F.LABEL: label}
    cols.update({c: dense[:, i] for i, c in enumerate(F.DENSE_COLUMNS)})
    cols.update({c: sparse[:, i] for i, c in enumerate(F.SPARSE_COLUMNS)})
    table = pa.table(cols)
    bounds = np.linspace(0, n_rows, shards + 1).astype(int)
    for i in range(shards):
        pq.write_table(table.slice(bounds[i], bounds[i + 1] - bounds[i]),
                       os.path.join(split_dir, f"part-{i:05d}.parquet"))
    schema = {"schema_version": F.SCHEMA_VERSION, "hash_buckets": 1000,
              "columns": list(F.RAW_COLUMNS), "rows": n_rows if rows_in_schema is None else rows_in_schema}
    with open(os.path.join(split_dir, F.SCHEMA_FILE), "w") as f:
        json.dump(schema, f)
    return label, dense


class DenseScorer:
    """Scores sigmoid(1.5 * I1 - 1) batch by batch, recording batch sizes."""

    def __init__(self):
        self.batches = []

    def predict_files(self, paths, batch_size=1024):
        import pyarrow.parquet as pq

        for path in paths:
            for batch in pq.ParquetFile(path).iter_batches(batch_size=batch_size):
                d = batch.to_pydict()
                x = np.asarray(d["I1"], dtype=np.float64)
                self.batches.append(len(x))
                yield np.asarray(d["label"]), 1 / (1 + np.exp(-(1.5 * x - 1.0)))


def test_evaluate_streams_split_and_writes_outputs(tmp_path):
    label, dense = _write_split(tmp_path / "prep" / "test")
    scorer = DenseScorer()
    out = tmp_path / "eval"
    m = ev.evaluate(str(tmp_path / "model"), str(tmp_path / "prep"), str(out), batch_size=64, scorer=scorer)
    assert max(scorer.batches) <= 64 and sum(scorer.batches) == 600  # streamed, every row once
    probs = 1 / (1 + np.exp(-(1.5 * dense[:, 0].astype(np.float64) - 1.0)))
    assert m["auc"] == pytest.approx(roc_auc_score(label, probs), abs=1e-6)
    assert m["logloss"] == pytest.approx(log_loss(label, probs), abs=1e-6)
    assert m["auc"] > 0.7
    on_disk = json.loads((out / "metrics.json").read_text())
    assert on_disk["auc"] == m["auc"] and on_disk["rows"] == 600
    assert os.path.isfile(on_disk["report"]) and on_disk["report"] == str(out / "report.html")
    assert "Calibration" in (out / "report.html").read_text()


def test_evaluate_refuses_lost_rows(tmp_path):
    _write_split(tmp_path / "test", rows_in_schema=601)
    with pytest.raises(BadInput, match="scored 600 rows but schema.json says 601"):
        ev.evaluate("unused", str(tmp_path / "test"), str(tmp_path / "out"), scorer=DenseScorer())


def test_evaluate_refuses_wrong_schema_version(tmp_path):
    _write_split(tmp_path / "test")
    schema_path = tmp_path / "test" / "schema.json"
    schema = json.loads(schema_path.read_text())
    schema["schema_version"] = 999
    schema_path.write_text(json.dumps(schema))
    with pytest.raises(BadInput) as info:
        ev.evaluate("unused", str(tmp_path / "test"), str(tmp_path / "out"), scorer=DenseScorer())
    assert info.value.field == "data"
    assert not (tmp_path / "out" / "metrics.json").exists()


def test_evaluate_missing_data_dir_is_clear(tmp_path):
    with pytest.raises(BadInput, match="test split"):
        ev.evaluate("m", str(tmp_path), str(tmp_path / "out"), scorer=DenseScorer())
    with pytest.raises(BadInput, match="existing directory"):
        ev.evaluate("m", str(tmp_path / "nope"), str(tmp_path / "out"), scorer=DenseScorer())


def test_evaluate_refuses_data_hashed_for_another_model(tmp_path):
    _write_split(tmp_path / "test")  # hash_buckets 1000 in schema.json
    scorer = DenseScorer()
    scorer.meta = {"hash_buckets": 5000}
    with pytest.raises(BadInput) as info:
        ev.evaluate("unused", str(tmp_path / "test"), str(tmp_path / "out"), scorer=scorer)
    assert info.value.field == "data" and "hash_buckets" in str(info.value)


def test_evaluate_unlabelled_data_and_missing_model_are_clear(tmp_path):
    _write_split(tmp_path / "test")

    class Unlabelled:
        def predict_files(self, paths, batch_size):
            yield None, np.array([0.5])

    with pytest.raises(BadInput, match="label"):
        ev.evaluate("unused", str(tmp_path / "test"), str(tmp_path / "out"), scorer=Unlabelled())
    with pytest.raises(BadInput) as info:
        ev.evaluate(str(tmp_path / "no-model"), str(tmp_path / "test"), str(tmp_path / "out"))
    assert info.value.field == "model"
    (tmp_path / "empty-model").mkdir()
    with pytest.raises(BadInput) as info:
        ev.evaluate(str(tmp_path / "empty-model"), str(tmp_path / "test"), str(tmp_path / "out"))
    assert info.value.field == "model" and "model_meta.json" in str(info.value)


def test_feature_table_names_a_specs_features_and_prep_missing_rates():
    from ctr_model.feature_spec import spec_from_dict
    from ctr_volcano.evaluation.feature_table import feature_rows, model_spec

    spec = spec_from_dict({"format": "csv", "header": True, "label": "y",
                           "dense": [{"name": "price", "transform": "log1p", "fill": 1},
                                     {"name": "age", "transform": "standardize", "mean": 38.5, "std": 12.0}],
                           "categorical": [{"name": "user", "hash_buckets": 5003, "embedding_dim": 8},
                                           {"name": "tags", "multivalued": True, "pooling": "mean",
                                            "max_length": 5}]})
    rows = feature_rows(spec, {"price": 0.05, "tags": 0.25})
    assert [(r["name"], r["kind"]) for r in rows] == [("price", "dense"), ("age", "dense"),
                                                      ("user", "categorical"), ("tags", "categorical")]
    assert rows[0]["transform"] == "log1p, empty -> 1" and rows[0]["missing_rate"] == 0.05
    assert rows[1]["transform"] == "standardize (mean 38.5, std 12)" and rows[1]["missing_rate"] is None
    assert rows[2]["ids"] == 5003 and rows[2]["embedding_dim"] == 8
    assert rows[3]["transform"] == "multi-valued, mean of up to 5"
    criteo = feature_rows(model_spec({"hash_buckets": 1000}), None, criteo_dim=4)
    assert [r["name"] for r in criteo][:2] == ["I1", "I2"] and criteo[13]["name"] == "C1"
    assert criteo[13]["ids"] == 1000 and criteo[13]["embedding_dim"] == 4
    m = ev.compute_metrics(*_fixed_predictions(n=500))
    m["features"] = rows
    page = ev.render_report(m)
    assert "<h2>Features</h2>" in page and "<th>tags</th><td>categorical</td>" in page and "25.00%" in page
