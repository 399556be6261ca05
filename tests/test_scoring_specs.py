"""``ctr-volcano score`` on the other layouts than the Avazu-like CSV: Criteo TSV (the committed
sample, gzip, the label present: AUC in scores.json) and a Parquet log with a multi-valued list
column and a dense column; every row scored once, in order, at the probability the real model server
on loopback answers for the same raw rows."""
from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ctr_model.feature_spec import criteo_spec, spec_from_dict
from ctr_model.onnx_export import export_onnx
from ctr_model.sparse_tables import sparse_tables
from ctr_model.transforms import categorical_column, multivalued_column
from ctr_volcano.app.cli.main import main as cli
from ctr_volcano.scoring import ScoreArgs, score
from tests.onnx_models import random_scorer, write_model_dir
from tools.model_server import model_server
from tools.v2_client import columns_to_body, infer, raw_to_body, rows_to_body

PARQUET_SPEC = {"format": "parquet", "label": "y", "hash_buckets": 100003,
                "dense": [{"name": "price", "transform": "log1p"}],
                "categorical": [{"name": "user", "embedding_dim": 4},
                                {"name": "items", "multivalued": True, "pooling": "mean", "max_length": 8,
                                 "embedding_dim": 4}]}


def _shards(out: Path) -> pa.Table:
    return pa.concat_tables([pq.read_table(p) for p in sorted(out.glob("part-*.parquet"))])


def test_criteo_tsv_gzip_with_its_label_scores_as_the_server(sample_dir, tmp_path):
    (src,) = sorted(sample_dir.glob("part-00000.*"))
    lines = gzip.open(src, "rt").read().splitlines()[:3000]
    with gzip.open(tmp_path / "day.tsv.gz", "wt") as fh:
        fh.write("\n".join(lines) + "\n")
    model = write_model_dir(random_scorer(criteo_spec(10007), "dnn", {}, seed=5, hash_buckets=10007),
                            str(tmp_path / "model"))
    export_onnx(model)
    out = tmp_path / "out"
    doc = score(ScoreArgs(model=model, inputs=(str(tmp_path / "day.tsv.gz"),), out=str(out), keep=("label", "C1")))
    table = _shards(out)
    assert doc["rows_scored"] == table.num_rows == 3000 and doc["metrics"]["rows"] == 3000
    assert table.column("C1").to_pylist() == [ln.split("\t")[14] or None for ln in lines]
    rows = [ln.split("\t") for ln in lines[:400]]
    with model_server(sys.executable, model, tmp_path / "server.log") as url:
        served, _ = infer(url, rows_to_body(rows))
    probs = table.column("probability").to_numpy()
    assert np.abs(np.array(served) - probs[:400]).max() <= 1e-6 and probs.std() > 1e-3


def test_criteo_lines_without_the_label_score_as_with_it_and_unscorable_ones_fail(sample_dir, tmp_path, capsys):
    """Criteo's Kaggle ``test.txt`` has no label field (39 per line): its rows score as the same lines
    with the label; a file of which no row can be scored exits 2 naming the reason, not 0."""
    (src,) = sorted(sample_dir.glob("part-00000.*"))
    lines = gzip.open(src, "rt").read().splitlines()[:1000]
    (tmp_path / "train.txt").write_text("\n".join(lines) + "\n")
    (tmp_path / "test.txt").write_text("\n".join(ln.split("\t", 1)[1] for ln in lines) + "\n")
    model = write_model_dir(random_scorer(criteo_spec(10007), "dnn", {}, seed=5, hash_buckets=10007),
                            str(tmp_path / "model"))
    export_onnx(model)
    with_label = score(ScoreArgs(model=model, inputs=(str(tmp_path / "train.txt"),), out=str(tmp_path / "a")))
    without = score(ScoreArgs(model=model, inputs=(str(tmp_path / "test.txt"),), out=str(tmp_path / "b")))
    assert with_label["rows_scored"] == without["rows_scored"] == 1000 and "metrics" not in without
    assert _shards(tmp_path / "b").equals(_shards(tmp_path / "a"))
    (tmp_path / "broken_first.txt").write_text("\n".join([lines[0]] + [ln.split("\t", 1)[1] for ln in lines[1:]]) + "\n")
    broken = score(ScoreArgs(model=model, inputs=(str(tmp_path / "broken_first.txt"),), out=str(tmp_path / "d")))
    assert broken["rows_scored"] == 999 and broken["rejected_by_reason"] == {"wrong field count": 1}
    (tmp_path / "csv.txt").write_text("\n".join(ln.replace("\t", ",") for ln in lines[:50]) + "\n")
    assert cli(["score", "--model", model, "--input", str(tmp_path / "csv.txt"), "--out", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "none of its 50 row(s) could be scored (wrong field count: 50)" in err and "rejects.jsonl" in err, err


def _parquet_day(path: Path, n: int) -> pa.Table:
    rng = np.random.default_rng(4)
    items = [[f"i{v}" for v in rng.integers(0, 300, rng.integers(0, 12))] for _ in range(n)]
    table = pa.table({"rid": [f"r{i:06d}" for i in range(n)],
                      "price": pa.array([None if i % 17 == 0 else float(v) for i, v in
                                         enumerate(rng.gamma(2.0, 30.0, n))], pa.float64()),
                      "user": [f"u{v}" for v in rng.integers(0, 500, n)],
                      "items": pa.array(items, pa.list_(pa.string()))})
    pq.write_table(table, path, row_group_size=700)
    return table


def test_parquet_with_a_list_column_scores_as_the_server(tmp_path):
    spec = spec_from_dict(PARQUET_SPEC)
    table = _parquet_day(tmp_path / "day.parquet", 2500)
    ids = np.concatenate([categorical_column(spec, spec.categorical[0], table.column("user")),
                          multivalued_column(spec, spec.categorical[1], table.column("items")).values.to_numpy()])
    assert len(sparse_tables(spec, 4)) == 1
    scorer = random_scorer(spec, "wide_deep", {}, keys=[np.unique(ids)], seed=2, hash_buckets=100003)
    model = write_model_dir(scorer, str(tmp_path / "model"))
    export_onnx(model)
    out = tmp_path / "out"
    assert cli(["score", "--model", model, "--input", str(tmp_path / "day.parquet"), "--out", str(out),
                "--keep", "rid", "--workers", "2"]) == 0
    scored = _shards(out)
    assert scored.column("rid").to_pylist() == table.column("rid").to_pylist()
    assert scored.schema.field("rid").type == pa.string()
    doc = json.loads((out / "scores.json").read_text())
    assert doc["rows_in"] == doc["rows_scored"] == 2500 and "metrics" not in doc
    values = {n: table.column(n).to_pylist()[:500] for n in ("price", "user", "items")}
    body = columns_to_body({i["name"]: (i["datatype"], i["data"]) for i in raw_to_body(values)["inputs"]})
    with model_server(sys.executable, model, tmp_path / "server.log") as url:
        served, _ = infer(url, body)
    probs = scored.column("probability").to_numpy()
    assert np.abs(np.array(served) - probs[:500]).max() <= 1e-6 and probs.std() > 1e-3


@pytest.mark.parametrize("bad", ["twelve", "inf"])
def test_a_non_number_in_a_dense_column_is_rejected_with_its_line(tmp_path, bad):
    """A CSV spec with a dense column: a value that is not a finite number is refused, by line."""
    doc = {"format": "csv", "header": True, "label": "click", "hash_buckets": 10007,
           "dense": [{"name": "price", "transform": "log1p"}], "categorical": [{"name": "user"}]}
    spec = spec_from_dict(doc)
    model = write_model_dir(random_scorer(spec, "dnn", {}, seed=1, hash_buckets=10007), str(tmp_path / "model"))
    export_onnx(model)
    rows = [f"u{i},{i * 1.5}" for i in range(50)]
    rows[20] = f"u20,{bad}"
    (tmp_path / "day.csv").write_text("user,price\n" + "\n".join(rows) + "\n")
    result = score(ScoreArgs(model=model, inputs=(str(tmp_path / "day.csv"),), out=str(tmp_path / "out")))
    rejects = [json.loads(x) for x in (tmp_path / "out" / "rejects.jsonl").read_text().splitlines()]
    assert [(r["line"], r["reason"]) for r in rejects] == [(22, "non-number in dense column")]
    assert result["rows_in"] == 50 and result["rows_scored"] == 49
