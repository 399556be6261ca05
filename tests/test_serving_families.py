"""Every model family on the layouts of click logs, trained once per session on a real 2x2 local gang
(:mod:`tests.serving_layouts`): its exported ONNX graph scores the whole test split as the numpy
scorer does, and the KServe server, a real process on loopback, answers the split's raw rows (as the
log has them: text, numbers, JSON lists, the log's own separator) with the scorer's probabilities.
Unseen ids and missing values are scored as the scorer scores prep's transform of them; a malformed
value gets a 400 naming the input, the row and the fix."""
from __future__ import annotations

import logging
import math
import sys
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ctr_model.infer import load_model
from ctr_model.onnx_inputs import feeds, layout_of
from ctr_model.transforms import categorical_ids, cross_columns, dense_value
from tests.serving_layouts import FAMILIES, LAYOUTS, Layout, make_layout, raw_values, takes, train_model
from tools.model_server import model_server
from tools.v2_client import V2Error, columns_to_body, infer, raw_to_body

pytestmark = pytest.mark.slow       # real gangs (once per layout and family), real servers

_log = logging.getLogger(__name__)
CASES = [pytest.param(layout, fam, mc.get(layout, {}) if fam == "dcn_v2" else mc, id=f"{layout}-{fam}")
         for layout in LAYOUTS for fam, mc in FAMILIES if takes(layout, fam)]
CHUNK = 2000


@pytest.fixture(scope="module")
def layouts(tmp_path_factory, sample_dir):
    """Each layout made and prepped on first use."""
    made: Dict[str, Layout] = {}

    def get(name: str) -> Layout:
        if name not in made:
            made[name] = make_layout(name, tmp_path_factory.mktemp(name), sample_dir)
        return made[name]
    return get


@pytest.fixture(scope="module")
def models(layouts, tmp_path_factory):
    """Each (layout, family) model trained on first use, shared by the ONNX and the server tests."""
    made: Dict[tuple, tuple] = {}

    def get(layout: str, fam: str, model_config: dict):
        if (layout, fam) not in made:
            model_dir, how = train_model(layouts(layout), fam, model_config,
                                         tmp_path_factory.mktemp(f"{layout}-{fam}"))
            _log.info("%s/%s: %s", layout, fam, how)
            made[(layout, fam)] = (layouts(layout), model_dir, how)
        return made[(layout, fam)]
    return get


def _test_split(layout: Layout) -> pa.Table:
    return pq.read_table(sorted(str(p) for p in (Path(layout.prep) / "test").glob("part-*.parquet")))


@pytest.mark.parametrize("layout_name,fam,model_config", CASES)
def test_onnx_graph_scores_the_test_split_as_the_scorer(models, layout_name, fam, model_config):
    import onnxruntime as ort

    layout, model_dir, how = models(layout_name, fam, model_config)
    scorer = load_model(model_dir)
    table = _test_split(layout)
    path = Path(model_dir) / "model.onnx"
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    served = session.run(["probability"], feeds(layout_of(scorer.features), table))[0]
    expected = scorer.predict(table)
    diff = float(np.abs(served - expected).max())
    _log.info("ONNX %s/%s (%s): %d rows, max abs diff %.2e, %.2f MB", layout_name, fam, how, len(served),
              diff, path.stat().st_size / 1e6)
    assert len(served) == table.num_rows >= 5000 and diff <= 1e-6
    assert expected.std() > 1e-3                      # a model that ranks, not a constant
    config = (Path(model_dir) / "serving" / "ctr" / "config.pbtxt").read_text()
    assert all(f'name: "{i.name}"' in config for i in session.get_inputs())


# ------------------------------------------------------------------------------------------------
# the server


def _encode(layout: Layout, values: Dict[str, List[Any]]) -> Dict[str, tuple]:
    """The V2 inputs of raw values as a client of this log sends them (text; Parquet's numbers as
    text, its lists as JSON)."""
    return {i["name"]: (i["datatype"], i["data"]) for i in raw_to_body(values)["inputs"]}


def _reference(scorer, layout: Layout, values: Dict[str, List[Any]]) -> np.ndarray:
    """The scorer on the transforms' per-value reference forms of raw values (what prep makes of them)."""
    spec = layout.spec
    cols: Dict[str, Any] = {}
    for d in spec.dense:
        cols[d.name] = np.array([dense_value(d, v) for v in values[d.name]], dtype=np.float32)
    for c in spec.categorical:
        ids = [categorical_ids(spec, c, v) for v in values[c.name]]
        cols[c.name] = pa.array(ids, pa.list_(pa.int64())) if c.multivalued else np.array([i[0] for i in ids])
    for x, ids in zip(spec.crosses, cross_columns(spec, cols)):
        cols[x.name] = ids
    return scorer.predict(pa.table(cols) if not spec.is_criteo else cols)


def _unseen_and_missing(layout: Layout) -> Dict[str, List[Any]]:
    """Two rows: every value never seen in training, then every value missing (a list feature of
    Parquet as lists, of CSV as the log's text)."""
    spec = layout.spec
    rows: Dict[str, List[Any]] = {d.name: ["7", ""] for d in spec.dense}
    for c in spec.categorical:
        if not c.multivalued:
            rows[c.name] = ["never-seen-value", ""]
        elif spec.format == "parquet":
            rows[c.name] = [["never-seen", "nor-this"], []]
        else:
            rows[c.name] = [c.separator.join(["never-seen", "nor-this"]), ""]
    return rows


def _malformed(layout: Layout, values: Dict[str, List[Any]]) -> tuple:
    """(body with a malformed value in row 1, the input[row] the 400 must name)."""
    body = _encode(layout, values)
    spec = layout.spec
    if spec.dense:
        name = spec.dense[0].name
        body[name][1][1] = "twelve"
    else:
        name = next(c.name for c in spec.categorical if c.multivalued)
        body[name][1][1] = '["a", 2.5]'
    return columns_to_body(body), f"{name}[1]="


@pytest.mark.parametrize("layout_name,fam,model_config", CASES)
def test_server_answers_raw_rows_with_the_scorers_probabilities(models, layout_name, fam, model_config,
                                                                tmp_path):
    layout, model_dir, how = models(layout_name, fam, model_config)
    scorer = load_model(model_dir)
    expected = scorer.predict(_test_split(layout))
    n = len(expected)
    with model_server(sys.executable, model_dir, tmp_path / "server.log") as url:
        served = np.concatenate([infer(url, columns_to_body(_encode(layout, raw_values(layout, i, i + CHUNK))))[0]
                                 for i in range(0, n, CHUNK)])
        diff = float(np.abs(served - expected).max())
        _log.info("served %s/%s (%s): %d raw rows, max abs diff %.2e", layout_name, fam, how, n, diff)
        assert len(served) == n and diff <= 1e-6
        odd = _unseen_and_missing(layout)
        probs, _ = infer(url, columns_to_body(_encode(layout, odd)))
        assert np.abs(np.array(probs) - _reference(scorer, layout, odd)).max() <= 1e-6
        body, field = _malformed(layout, raw_values(layout, 0, 3))
        with pytest.raises(V2Error) as info:
            infer(url, body)
    assert info.value.status == 400 and info.value.error.startswith(field), info.value
    assert "send" in info.value.error and "\n" not in info.value.error.strip()


def test_parquet_rows_as_numbers_integers_and_separated_text_score_alike(models, tmp_path):
    """The same Parquet rows sent with FP64 dense values, INT64 ids and the lists in the separator
    form get the probabilities of their text form."""
    layout, model_dir, _ = models("parquet_lists", "wide_deep", {})
    values = raw_values(layout, 0, 400)
    keep = [i for i in range(400) if values["user"][i] is not None and values["site"][i] is not None
            and all(values[d.name][i] is not None for d in layout.spec.dense)][:200]
    values = {k: [v[i] for i in keep] for k, v in values.items()}
    typed = _encode(layout, values)
    for d in layout.spec.dense:
        typed[d.name] = ("FP64", [float(v) for v in values[d.name]])
    typed["user"] = ("INT64", [int(v) for v in values["user"]])
    for c in layout.spec.categorical:
        if c.multivalued:
            typed[c.name] = ("BYTES", [c.separator.join(v) for v in values[c.name]])
    with model_server(sys.executable, model_dir, tmp_path / "server.log") as url:
        as_text, _ = infer(url, columns_to_body(_encode(layout, values)))
        as_typed, _ = infer(url, columns_to_body(typed))
    assert len(as_text) == len(keep) > 100 and as_typed == as_text
    assert not any(math.isnan(p) for p in as_text)


def test_a_model_without_its_onnx_files_is_served_from_a_graph_built_in_memory(models, tmp_path):
    """A model directory as a registry or KServe's storage initializer copies it, but without
    model.onnx and serving.json (exported before every family had a graph): served all the same."""
    import shutil

    layout, model_dir, _ = models("parquet_lists", "deepfm", {})
    bare = tmp_path / "model"
    shutil.copytree(model_dir, bare)
    for name in ("model.onnx", "serving.json"):
        (bare / name).unlink()
    shutil.rmtree(bare / "serving")
    with model_server(sys.executable, str(bare), tmp_path / "server.log") as url:
        served, _ = infer(url, columns_to_body(_encode(layout, raw_values(layout, 0, 500))))
    expected = load_model(model_dir).predict(_test_split(layout).slice(0, 500))
    assert len(served) == 500 and np.abs(np.array(served) - expected).max() <= 1e-6
    assert "the graph built in memory" in (tmp_path / "server.log").read_text()
    assert not (bare / "model.onnx").exists()          # a read-only model directory is fine


def test_wide_deep_with_crosses_batch_scores_raw_rows_as_the_scorer(models, tmp_path):
    """``ctr-volcano score`` on the crosses layout's raw test rows (the crosses computed from the ids,
    as prep and the server compute them) gives the numpy scorer's probabilities; the trained model's
    cross table holds weights learnt for many crosses."""
    import pyarrow.csv as pacsv

    from ctr_volcano.scoring import ScoreArgs, score

    layout, model_dir, _ = models("csv_crosses", "wide_deep", {})
    scorer = load_model(model_dir)
    cross_table = scorer.tables[-1]
    keys, rows = scorer.table_arrays(len(scorer.tables) - 1)
    assert cross_table.features == ("user_x_ad", "site_x_ad_x_user") and len(keys) > 1000
    assert np.abs(rows[:, 0]).max() > 1e-3
    names = [layout.label] + [d.name for d in layout.spec.dense] + [c.name for c in layout.spec.categorical]
    pacsv.write_csv(pa.table({n: pa.array(layout.raw[n], pa.string()) for n in names}), tmp_path / "day.csv")
    doc = score(ScoreArgs(model=model_dir, inputs=(str(tmp_path / "day.csv"),), out=str(tmp_path / "out")))
    scored = pa.concat_tables([pq.read_table(p) for p in sorted((tmp_path / "out").glob("part-*.parquet"))])
    expected = scorer.predict(_test_split(layout))
    assert doc["rows_scored"] == scored.num_rows == len(expected)
    assert np.abs(scored.column("probability").to_numpy() - expected).max() <= 1e-6


SKEW_CASES = [pytest.param(layout, "dnn" if takes(layout, "dnn") else "wide_deep", id=layout)
              for layout in LAYOUTS if layout != "criteo"]     # Criteo's: tests/test_serving_server.py


@pytest.mark.parametrize("layout_name,fam", SKEW_CASES)
def test_the_request_log_of_a_spec_model_validates_against_its_training_profile(models, layout_name, fam,
                                                                                tmp_path, capsys):
    """Training/serving skew on logs that are not Criteo's: the real server's request log of the test
    split's raw rows passes ``validate --serving-log`` against the model; the same rows with the
    ``user`` column re-keyed upstream of the server fail on ``user``, in one line, exit 2."""
    from ctr_volcano.app.cli.main import main as cli
    from ctr_volcano.serving.request_log import RequestLog

    layout, model_dir, _ = models(layout_name, fam, {})
    n = len(layout.raw[layout.label])
    log = tmp_path / "requests.jsonl"
    with model_server(sys.executable, model_dir, tmp_path / "server.log",
                      extra_args=("--request-log", str(log), "--log-sample", "1")) as url:
        served = sum(len(infer(url, columns_to_body(_encode(layout, raw_values(layout, i, i + CHUNK))))[0])
                     for i in range(0, n, CHUNK))
    assert served == n == len(log.read_text().splitlines()) >= 5000
    assert cli(["validate", "--serving-log", str(log), "--reference", model_dir, "--out", str(tmp_path / "v")]) == 0
    out = capsys.readouterr().out.strip().splitlines()[-1]      # (the fixtures' prep printed before)
    assert out.startswith("pass: 0 finding(s)"), out
    skewed = RequestLog(str(tmp_path / "skewed.jsonl"), 1.0)
    for i in range(0, n, CHUNK):
        values = raw_values(layout, i, i + CHUNK)
        values["user"] = [None if v is None else f"{v}-v2" for v in values["user"]]
        skewed.log(_encode(layout, values), np.full(len(values["user"]), 0.5))
    assert cli(["validate", "--serving-log", str(tmp_path / "skewed.jsonl"), "--reference", model_dir]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "user: new_id_rate" in err, err
