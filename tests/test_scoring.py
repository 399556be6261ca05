"""``ctr-volcano score`` on an Avazu-like day of candidates (a header, a string ``id`` column, string
categories only, no label): every row once, in order, with its id, at the probability the real model
server on loopback answers for it (a subset) and the numpy scorer computes from the transforms'
per-value reference forms (all rows); gzip and a directory; bad rows in the rejects file with their
file and line, the counts adding up; the same shards, byte for byte, from 1 and 3 workers; bad
arguments refused in one line with exit 2 before any output exists."""
from __future__ import annotations

import gzip
import json
import shutil
import sys
from pathlib import Path
from typing import Dict, List

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ctr_model.feature_spec import spec_from_dict
from ctr_model.infer import load_model
from ctr_model.metrics import auc, logloss
from ctr_model.transforms import categorical_ids
from ctr_volcano.app.cli.main import main as cli
from ctr_volcano.scoring import ScoreArgs, score
from tests.scoring_fixtures import SPEC, avazu_model, candidates, write_csv
from tools.model_server import model_server
from tools.v2_client import columns_to_body, infer, raw_to_body

ROWS = 3000


@pytest.fixture(scope="module")
def day(tmp_path_factory):
    """(candidate columns, their CSV, the model directory)."""
    root = tmp_path_factory.mktemp("avazu")
    cols = candidates(ROWS)
    return cols, write_csv(root / "candidates.csv", cols), avazu_model(root, cols)


def _shards(out: Path) -> pa.Table:
    return pa.concat_tables([pq.read_table(p) for p in sorted(out.glob("part-*.parquet"))])


def _reference(model_dir: str, cols: Dict[str, List[str]]) -> np.ndarray:
    """The numpy scorer over the per-value reference transforms of the raw values."""
    spec = spec_from_dict(SPEC)
    ids = {c.name: np.array([categorical_ids(spec, c, v)[0] for v in cols[c.name]]) for c in spec.categorical}
    return load_model(model_dir).predict(pa.table(ids))


def test_every_candidate_is_scored_once_in_order_with_its_id(day, tmp_path):
    cols, csv, model = day
    out = tmp_path / "out"
    assert cli(["score", "--model", model, "--input", str(csv), "--out", str(out), "--keep", "id,site_id"]) == 0
    table = _shards(out)
    assert table.column_names == ["id", "site_id", "probability"]
    assert table.column("id").to_pylist() == cols["id"]                 # every row once, in order
    assert table.column("site_id").to_pylist() == [v or None for v in cols["site_id"]]
    probs = table.column("probability").to_numpy()
    assert np.abs(probs - _reference(model, cols)).max() <= 1e-6
    assert probs.std() > 1e-3                                          # a model that ranks
    doc = json.loads((out / "scores.json").read_text())
    assert (doc["rows_in"], doc["rows_scored"], doc["rows_rejected"]) == (ROWS, ROWS, 0)
    assert doc["inputs"] == [str(csv)] and "metrics" not in doc
    import hashlib
    assert doc["model"]["sha256"] == hashlib.sha256((Path(model) / "model.onnx").read_bytes()).hexdigest()
    assert doc["feature_spec"]["ignore"] == ["id"] and (out / "rejects.jsonl").read_text() == ""
    assert not (out / ".scoring").exists()


def test_scores_equal_the_real_server_on_loopback(day, tmp_path):
    cols, csv, model = day
    out = tmp_path / "out"
    score(ScoreArgs(model=model, inputs=(str(csv),), out=str(out), keep=("id",)))
    scored = _shards(out).column("probability").to_numpy()
    names = [c["name"] for c in SPEC["categorical"]]
    rows = slice(1500, 2100)                         # seen and unseen ids, some empty values
    body = columns_to_body({i["name"]: (i["datatype"], i["data"]) for i in
                            raw_to_body({n: cols[n][rows] for n in names})["inputs"]})
    with model_server(sys.executable, model, tmp_path / "server.log") as url:
        served, _ = infer(url, body)
    assert len(served) == 600 and np.abs(np.array(served) - scored[rows]).max() <= 1e-6


def test_gzip_files_and_a_directory_score_as_the_one_file(day, tmp_path):
    cols, csv, model = day
    folder = tmp_path / "day"
    folder.mkdir()
    write_csv(folder / "a.csv", cols, 0, 1000)
    plain = write_csv(tmp_path / "b.csv", cols, 1000, 2200)
    with open(plain, "rb") as src, gzip.open(folder / "b.csv.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    write_csv(folder / "c.csv", cols, 2200, ROWS)
    one, many = tmp_path / "one", tmp_path / "many"
    score(ScoreArgs(model=model, inputs=(str(csv),), out=str(one), keep=("id",)))
    doc = score(ScoreArgs(model=model, inputs=(str(folder),), out=str(many), keep=("id",)))
    assert _shards(many).equals(_shards(one))
    assert [s["file"].rsplit("/", 1)[1] for s in doc["shards"]] == ["a.csv", "b.csv.gz", "c.csv"]
    assert [s["rows"] for s in doc["shards"]] == [1000, 1200, 800]


def _with_bad_rows(cols: Dict[str, List[str]], path: Path) -> Dict[int, str]:
    """The candidates with a row of too many fields at line 9, an empty line at 1500 and a short row
    at 2950 (file lines, the header is line 1); returns {line: reason}."""
    lines = [",".join(cols)] + [",".join(cols[c][i] for c in cols) for i in range(ROWS)]
    lines.insert(8, lines[8] + ",extra")
    lines.insert(1499, "")
    lines.insert(2949, "12345,14102100")
    path.write_text("\n".join(lines) + "\n")
    return {9: "wrong field count", 1500: "empty line", 2950: "wrong field count"}


def test_bad_rows_go_to_the_rejects_file_with_file_and_line(day, tmp_path):
    cols, _, model = day
    path = tmp_path / "bad.csv"
    expected = _with_bad_rows(cols, path)
    out = tmp_path / "out"
    doc = score(ScoreArgs(model=model, inputs=(str(path),), out=str(out), keep=("id",), block_bytes=16 << 10))
    assert doc["units"] > 5                           # the bad lines fall in later blocks of the file
    rejects = [json.loads(line) for line in (out / "rejects.jsonl").read_text().splitlines()]
    assert {r["line"]: r["reason"] for r in rejects} == expected
    assert all(r["file"] == str(path) for r in rejects)
    text = path.read_text().split("\n")
    assert text[9 - 1].endswith(",extra") and text[2950 - 1] == "12345,14102100"
    assert doc["rows_in"] == doc["rows_scored"] + doc["rows_rejected"] == ROWS + 3
    assert doc["rejected_by_reason"] == {"wrong field count": 2, "empty line": 1}
    assert _shards(out).column("id").to_pylist() == cols["id"]


def test_one_and_three_workers_write_the_same_shards_byte_for_byte(day, tmp_path):
    cols, csv, model = day
    outs = {}
    for n in (1, 3):
        outs[n] = tmp_path / f"w{n}"
        doc = score(ScoreArgs(model=model, inputs=(str(csv),), out=str(outs[n]), keep=("id",),
                              workers=n, block_bytes=32 << 10))
    assert doc["units"] >= 6 and doc["workers"] == 3
    names = sorted(p.name for p in outs[1].glob("part-*.parquet"))
    assert names == sorted(p.name for p in outs[3].glob("part-*.parquet")) and len(names) == doc["units"]
    for name in names:
        assert (outs[1] / name).read_bytes() == (outs[3] / name).read_bytes(), name
    assert _shards(outs[3]).column("id").to_pylist() == cols["id"]


def test_a_label_column_gives_auc_and_log_loss_of_the_scored_rows(day, tmp_path):
    cols, _, model = day
    labelled = dict(cols)
    rng = np.random.default_rng(1)
    labelled["click"] = [str(int(v)) for v in rng.random(ROWS) < 0.2]
    labelled["click"][5] = "yes"
    path = write_csv(tmp_path / "labelled.csv", labelled)
    doc = score(ScoreArgs(model=model, inputs=(str(path),), out=str(tmp_path / "out"), keep=("id",)))
    assert doc["rejected_by_reason"] == {"label not 0/1": 1} and doc["rows_scored"] == ROWS - 1
    probs = _shards(tmp_path / "out").column("probability").to_numpy()
    y = np.array([int(v) for i, v in enumerate(labelled["click"]) if i != 5])
    assert doc["metrics"]["rows"] == ROWS - 1
    assert doc["metrics"]["auc"] == pytest.approx(auc(y, probs)) and 0.3 < doc["metrics"]["auc"] < 0.7
    assert doc["metrics"]["logloss"] == pytest.approx(logloss(y, probs))


def _error(capsys) -> str:
    """The one error line the command printed (its log lines aside), which is its last."""
    lines = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in lines if line.startswith("ctr-volcano score: error: ")]
    assert len(errors) == 1 and lines[-1] == errors[0], lines
    return errors[0]


@pytest.mark.parametrize("flags,field", [
    (["--keep", "id,nope"], "--keep='nope'"),
    (["--keep", "id,probability"], "--keep='probability'"),
    (["--workers", "0"], "--workers=0"),
    (["--workers", "two"], "--workers='two'"),
    (["--model", "/nonexistent/model"], "--model='/nonexistent/model'"),
    (["--input", "/nonexistent/day.csv"], "--input='/nonexistent/day.csv'"),
])
def test_bad_arguments_are_refused_in_one_line_before_any_work(day, tmp_path, capsys, flags, field):
    _, csv, model = day
    args = {"--model": model, "--input": str(csv), "--out": str(tmp_path / "out")}
    extra = []
    for flag, value in zip(flags[::2], flags[1::2]):
        if flag in args:
            args[flag] = value
        else:
            extra += [flag, value]
    argv = ["score"] + [x for kv in args.items() for x in kv] + extra
    assert cli(argv) == 2
    err = _error(capsys)
    assert field in err, err
    assert not (tmp_path / "out").exists()


def test_a_file_without_a_feature_column_is_refused_naming_it(day, tmp_path, capsys):
    cols, _, model = day
    path = write_csv(tmp_path / "short.csv", {k: v for k, v in cols.items() if k != "device_model"})
    assert cli(["score", "--model", model, "--input", str(path), "--out", str(tmp_path / "out")]) == 2
    err = _error(capsys)
    assert "device_model" in err and str(path) in err
