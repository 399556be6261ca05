"""The ONNX export: the graph trainer 0 writes scores the test split as the numpy scorer does, unseen
ids get the zero row, and an over-large model is refused with the limit and the way out."""
from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from ctr_model.features import DENSE_COLUMNS, SPARSE_COLUMNS
from ctr_model.infer import load_model
from ctr_model.onnx_export import OnnxTooLarge, build_graph
from ctr_volcano.app.cli import main as cli
from tests.serving_fixtures import trained_model  # noqa: F401  (a fixture)

pytestmark = pytest.mark.slow       # a real training run (the shared fixture), a real server


def _inputs(table):
    dense = np.stack([table.column(c).to_numpy() for c in DENSE_COLUMNS], axis=1).astype(np.float32)
    ids = np.stack([table.column(c).to_numpy() for c in SPARSE_COLUMNS], axis=1).astype(np.int64)
    return dense, ids


def test_training_export_writes_an_onnx_model_that_matches_the_scorer(trained_model):  # noqa: F811
    import onnxruntime as ort

    prep, model = trained_model
    manifest = json.loads((model / "serving.json").read_text())
    assert manifest["inputs"]["ids"]["columns"] == list(SPARSE_COLUMNS) and manifest["sparse_keys"] > 1000
    assert (model / "serving" / "ctr" / "1" / "model.onnx").read_bytes() == (model / "model.onnx").read_bytes()
    assert "TYPE_INT64" in (model / "serving" / "ctr" / "config.pbtxt").read_text()
    table = pq.read_table(sorted(str(p) for p in (prep / "test").glob("part-*.parquet")))
    dense, ids = _inputs(table)
    session = ort.InferenceSession(str(model / "model.onnx"), providers=["CPUExecutionProvider"])
    served = session.run(["probability"], {"dense": dense, "ids": ids})[0]
    expected = load_model(str(model)).predict(table)
    assert served.dtype == np.float64 and len(served) == table.num_rows >= 10000
    assert np.abs(served - expected).max() <= 1e-6
    assert expected.std() > 1e-3                      # a model that ranks, not a constant


def test_unseen_and_negative_ids_score_with_the_zero_row(trained_model):  # noqa: F811
    import onnxruntime as ort

    _, model = trained_model
    scorer = load_model(str(model))
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 2 ** 62, size=(64, len(SPARSE_COLUMNS)), dtype=np.int64)   # almost surely unseen
    ids[:8] = scorer.keys[:8 * len(SPARSE_COLUMNS)].reshape(8, -1).astype(np.int64)  # seen
    dense = rng.random((64, len(DENSE_COLUMNS)), dtype=np.float32)
    cols = {c: dense[:, i] for i, c in enumerate(DENSE_COLUMNS)}
    cols.update({c: ids[:, i] for i, c in enumerate(SPARSE_COLUMNS)})
    session = ort.InferenceSession(str(model / "model.onnx"), providers=["CPUExecutionProvider"])
    served = session.run(["probability"], {"dense": dense, "ids": ids})[0]
    assert np.abs(served - scorer.predict(cols)).max() <= 1e-6


def test_a_model_past_the_size_limit_is_refused_with_the_way_out(trained_model):  # noqa: F811
    _, model = trained_model
    with pytest.raises(OnnxTooLarge, match=r"over the 1 MiB one ONNX file can hold.*hash_buckets"):
        build_graph(load_model(str(model)), max_bytes=2 ** 20)


def test_export_verb_writes_the_repository_and_refuses_a_non_model(trained_model, tmp_path, capsys):  # noqa: F811
    _, model = trained_model
    assert cli.main(["export", "--model", str(model), "--out", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "serving" / "ctr" / "1" / "model.onnx").stat().st_size > 100_000
    capsys.readouterr()
    rc = cli.main(["export", "--model", str(tmp_path / "nothing")])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("ctr-volcano export: error: --model=") and "Traceback" not in err
