"""The KServe model server as a real process on loopback (in this environment: the serve extra):
raw Criteo rows in, the exported scorer's probabilities out (prep's transforms, imported), unseen
ids and missing values, and a malformed request answered with a 4xx naming the field."""
from __future__ import annotations

import sys

import numpy as np
import pytest

from ctr_model.features import DENSE_COLUMNS, SPARSE_COLUMNS, transform_line
from ctr_model.infer import load_model
from tests.serving_fixtures import raw_lines, trained_model  # noqa: F401
from tools.model_server import model_server
from tools.v2_client import V2Error, infer, infer_binary, rows_to_body

pytestmark = pytest.mark.slow       # a real training run (the shared fixture), a real server

ROWS = 20000


def _expected(model_dir, rows, hash_buckets):
    """The numpy scorer on prep's per-line transform of the same raw rows."""
    parsed = [transform_line("\t".join(r), hash_buckets) for r in rows]
    cols = {c: np.array([p[1][i] for p in parsed], dtype=np.float32) for i, c in enumerate(DENSE_COLUMNS)}
    cols.update({c: np.array([p[2][i] for p in parsed], dtype=np.int64) for i, c in enumerate(SPARSE_COLUMNS)})
    return load_model(str(model_dir)).predict(cols)


@pytest.fixture(scope="module")
def server(trained_model, tmp_path_factory):  # noqa: F811
    with model_server(sys.executable, trained_model[1], tmp_path_factory.mktemp("srv") / "server.log") as url:
        yield url


def test_served_probabilities_match_the_scorer_on_raw_rows(server, trained_model, sample_dir):  # noqa: F811
    model = trained_model[1]
    rows = raw_lines(sample_dir, ROWS)
    buckets = int(load_model(str(model)).meta["hash_buckets"])
    served = np.concatenate([infer(server, rows_to_body(rows[i:i + 5000]))[0]
                             for i in range(0, len(rows), 5000)])
    expected = _expected(model, rows, buckets)
    assert len(served) == ROWS and np.abs(served - expected).max() <= 1e-6
    assert sum("" in r for r in rows) > 1000            # missing values among them


def test_the_binary_tensor_extension_gives_the_same_probabilities(server, trained_model, sample_dir):  # noqa: F811
    model = trained_model[1]
    rows = raw_lines(sample_dir, 2000)
    buckets = int(load_model(str(model)).meta["hash_buckets"])
    served = np.array(infer_binary(server, rows))
    assert len(served) == 2000 and np.abs(served - _expected(model, rows, buckets)).max() <= 1e-6


def test_unseen_values_and_an_empty_row_are_scored(server, trained_model):  # noqa: F811
    model = trained_model[1]
    unseen = ["0"] + ["7"] * 13 + ["zzzz%04d" % i for i in range(26)]
    empty = ["0"] + [""] * 39
    served, response = infer(server, rows_to_body([unseen, empty]))
    buckets = int(load_model(str(model)).meta["hash_buckets"])
    assert np.abs(np.array(served) - _expected(model, [unseen, empty], buckets)).max() <= 1e-6
    assert response["model_name"] == "ctr" and response["id"]


@pytest.mark.parametrize("change,field", [
    (lambda b: b["inputs"].pop(20), "inputs=['C8']"),
    (lambda b: b["inputs"][0].update(data=["12", "x"]), "I1[1]='x'"),
    (lambda b: b["inputs"][30].update(datatype="FP32", data=[1.0, 2.0]), "C18='FP32'"),
    (lambda b: b["inputs"][3].update(shape=[1], data=["1"]), "I4='shape [1]'"),
])
def test_a_malformed_request_gets_a_400_naming_the_field(server, change, field):
    body = rows_to_body([["0"] + ["1"] * 13 + ["abcd0123"] * 26] * 2)
    change(body)
    with pytest.raises(V2Error) as info:
        infer(server, body)
    assert 400 <= info.value.status < 500 and field in info.value.error, info.value
    assert "\n" not in info.value.error.strip()


def test_the_request_log_holds_what_was_served_and_validates_against_the_model(trained_model, sample_dir,  # noqa: F811
                                                                              tmp_path, capsys):
    """``serve --request-log``: a real server logs the sampled raw rows with the probability it answered;
    ``validate --serving-log`` compares them with the model's training profile (no skew here)."""
    import json

    from ctr_volcano.app.cli.main import main as cli

    model = trained_model[1]
    rows = raw_lines(sample_dir, 4000)
    log = tmp_path / "requests.jsonl"
    with model_server(sys.executable, model, tmp_path / "server.log",
                      extra_args=["--request-log", str(log), "--log-sample", "0.5"]) as url:
        served = np.concatenate([infer(url, rows_to_body(rows[i:i + 1000]))[0] for i in range(0, 4000, 1000)])
    logged = [json.loads(line) for line in log.read_text().splitlines()]
    assert 1700 <= len(logged) <= 2300                          # half of the rows, sampled
    by_row = {tuple(r[1:]): p for r, p in zip(rows, served.tolist())}
    for record in logged[:200]:
        key = tuple(record["columns"][c] for c in DENSE_COLUMNS + SPARSE_COLUMNS)
        assert abs(by_row[key] - record["probability"]) <= 1e-9
    assert json.loads((model / "model_meta.json").read_text())["data_profile"]["file"] == "data_profile.json"
    assert cli(["validate", "--serving-log", str(log), "--reference", str(model)]) == 0
    assert capsys.readouterr().out.startswith("pass: ")
