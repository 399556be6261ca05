"""Wide&Deep's crosses: the spec's ``crosses`` read and refused in one line, the cross ids computed in
one place (prep's column, the server's raw request and the reference forms agree; stable across
processes), only Wide&Deep takes them and only in its wide part, its Paddle program, numpy scorer and
ONNX graph agree on a spec with crosses, and gen-data plants an interaction per cross. The model
trained on a real 2x2 gang, exported and served is in tests/test_serving_families.py (layout
``csv_crosses``)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from ctr_model.config import ConfigError, TrainConfig
from ctr_model.errors import BadInput, exit_code_of
from ctr_model.feature_spec import SpecError, spec_from_dict
from ctr_model.models import FAMILIES, family
from ctr_model.transforms import categorical_ids, cross_column
from ctr_volcano.app.cli.main import main as cli

REPO = Path(__file__).resolve().parents[1]

DOC = {"format": "csv", "header": True, "label": "y", "hash_buckets": 300, "embedding_dim": 4,
       "dense": [{"name": "price", "transform": "log1p"}],
       "categorical": [{"name": "user"}, {"name": "site"}, {"name": "ad", "embedding_dim": 6},
                       {"name": "tags", "multivalued": True, "pooling": "mean"}],
       "crosses": [{"features": ["user", "ad"]}, {"features": ["site", "ad", "user"], "hash_buckets": 97,
                                                  "name": "site_ad_user"}]}


def _doc(**change):
    return {**json.loads(json.dumps(DOC)), **change}


def test_crosses_are_read_with_defaults_and_written_back():
    spec = spec_from_dict(DOC)
    first, second = spec.crosses
    assert (first.features, first.hash_buckets, first.name) == (("user", "ad"), 300, "user_x_ad")
    assert (second.hash_buckets, second.name) == (97, "site_ad_user")
    assert spec_from_dict(spec.to_dict()) == spec
    assert [c.name for c in spec.slot_features] == ["user", "site", "ad", "tags", "user_x_ad", "site_ad_user"]
    assert spec.prepped_columns[-2:] == ("user_x_ad", "site_ad_user")
    assert "crosses" not in spec_from_dict(_doc(crosses=[])).to_dict()    # older documents unchanged
    assert spec_from_dict(_doc(crosses=[["user", "site"]])).crosses[0].name == "user_x_site"


@pytest.mark.parametrize("crosses,key,words", [
    ([{"features": ["user", "add"]}], "crosses[0].features='add'", "did you mean 'ad'?"),
    ([{"features": ["user", "tags"]}], "crosses[0].features='tags'", "multi-valued"),
    ([{"features": ["user"]}], "crosses[0].features=['user']", "two or more distinct"),
    ([{"features": ["user", "user"]}], "crosses[0].features=['user', 'user']", "two or more distinct"),
    ([{"features": ["user", "price"]}], "crosses[0].features='price'", "a dense feature"),
    ([{"features": ["user", "ad"], "buckets": 9}], "crosses[0].buckets=9", "did you mean 'hash_buckets'?"),
    ([{"features": ["user", "ad"], "hash_buckets": 1}], "crosses[0].hash_buckets=1", "integer >= 2"),
    ([{"features": ["user", "ad"], "name": "site"}], "crosses[0].name='site'", "another name"),
    ([{"features": ["user", "ad"], "name": "ids"}], "crosses[0].name='ids'", "another name"),
    ([["user", "ad"], ["user", "ad"]], "crosses[1].name='user_x_ad'", "another name"),
    ({"features": ["user", "ad"]}, "crosses=", "write a list"),
    (["user"], "crosses[0]='user'", "features: [a, b]"),
])
def test_bad_crosses_are_refused_in_one_line_naming_the_key_value_and_fix(crosses, key, words):
    with pytest.raises(SpecError) as info:
        spec_from_dict(_doc(crosses=crosses))
    text = str(info.value)
    assert key in text and words in text and "\n" not in text, text
    assert exit_code_of(info.value) == 2


def test_the_criteo_preset_takes_no_crosses():
    with pytest.raises(SpecError, match="crosses="):
        spec_from_dict({"format": "criteo", "crosses": [["C1", "C2"]]})


def test_only_wide_deep_trains_crosses_refused_in_one_line_naming_the_model():
    from ctr_model.train.program import with_features
    from ctr_volcano.training.checks import _check_dims

    spec = spec_from_dict(DOC)
    for model in [f for f in FAMILIES if family(f).tasks is None and f != "wide_deep"]:
        with pytest.raises(ConfigError) as info:
            with_features(TrainConfig(model=model), spec)
        assert "--model wide_deep" in str(info.value) and "\n" not in str(info.value)
        with pytest.raises(BadInput, match="train --model wide_deep"):
            _check_dims(model, spec)          # the step's check, before a gang starts
    config = with_features(TrainConfig(model="wide_deep"), spec)
    assert config.model_config["crosses"] == 2 and config.embedding_dim == 4
    assert with_features(TrainConfig(model="wide_deep"), spec_from_dict(_doc(crosses=[]))).model_config == {
        "crosses": 0}


def test_cross_ids_are_one_hash_of_the_features_ids_stable_across_processes():
    spec = spec_from_dict(DOC)
    rows = {"user": ["u1", "u2", "", "u1"], "site": ["s1", "s1", "s2", ""], "ad": ["a", "b", "a", "a"]}
    ids = {n: np.array([categorical_ids(spec, spec.categorical[k], v)[0] for v in rows[n]])
           for k, n in enumerate(("user", "site", "ad"))}
    first, second = cross_column(spec, 0, ids), cross_column(spec, 1, ids)
    assert first.dtype == np.int64 and ((0 <= first) & (first < 300)).all() and ((second < 97) & (second >= 0)).all()
    assert first[0] == first[3] and first[0] != first[1]         # (u1, a) twice: one id
    code = ("import json, numpy as np; from ctr_model.feature_spec import spec_from_dict; "
            "from ctr_model.transforms import cross_column; import sys; d = json.loads(sys.argv[1]); "
            "print(cross_column(spec_from_dict(d['spec']), 0, {k: np.array(v) for k, v in d['ids'].items()}).tolist())")
    other = subprocess.run([sys.executable, "-c", code, json.dumps({"spec": DOC, "ids": {k: v.tolist() for k, v in ids.items()}})],
                           capture_output=True, text=True, check=True, env={**os.environ, "PYTHONHASHSEED": "123"})
    assert json.loads(other.stdout) == first.tolist()
    from ctr_model.features import column_salt_int, mix64_int

    def reference(row: int, k: int) -> int:         # the docstring's formula, one integer at a time
        x = spec.crosses[k]
        h = column_salt_int(len(spec.categorical) + k + 1)
        for name in x.features:
            h = mix64_int(h ^ (int(ids[name][row]) % 2 ** 64))
        return h % x.hash_buckets

    assert first.tolist() == [reference(i, 0) for i in range(4)]
    assert second.tolist() == [reference(i, 1) for i in range(4)]


def test_prep_and_the_server_compute_the_same_cross_ids(tmp_path):
    from ctr_volcano.serving.raw import model_inputs

    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(DOC))
    assert cli(["gen-data", "--feature-spec", str(spec_file), "--rows", "3000", "--seed", "3",
                "--out", str(tmp_path / "raw"), "--oracle-rows", "2000"]) == 0
    assert cli(["prep", "--input", str(tmp_path / "raw"), "--out", str(tmp_path / "prep"), "--feature-spec",
                str(spec_file), "--test-fraction", "0.5", "--shards", "1", "--test-shards", "1"]) == 0
    schema = json.loads((tmp_path / "prep" / "train" / "schema.json").read_text())
    assert schema["columns"][-2:] == ["user_x_ad", "site_ad_user"]
    spec = spec_from_dict(schema["feature_spec"])
    prepped = pa.concat_tables([pq.read_table(str(p)) for p in sorted((tmp_path / "prep").glob("*/part-*.parquet"))])
    ids = {n: prepped.column(n).to_numpy() for n in ("user", "site", "ad")}
    for k, x in enumerate(spec.crosses):
        assert (prepped.column(x.name).to_numpy() == cross_column(spec, k, ids)).all()
        assert len(np.unique(prepped.column(x.name).to_numpy())) > 50
    (raw_file,) = (tmp_path / "raw").glob("part-*")
    raw = pacsv.read_csv(raw_file, convert_options=pacsv.ConvertOptions(
        column_types={n: pa.string() for n in ("user", "site", "ad", "tags", "price")},
        strings_can_be_null=False)).slice(0, 200)
    columns = {n: ("BYTES", raw.column(n).to_pylist()) for n in ("price", "user", "site", "ad", "tags")}
    feed = model_inputs(spec, columns)
    expected = {n: np.array([categorical_ids(spec, c, v)[0] for v in columns[n][1]])
                for n, c in ((c.name, c) for c in spec.categorical if not c.multivalued)}
    assert (feed["ids"][:, 3] == cross_column(spec, 0, expected)).all()
    assert (feed["ids"][:, 4] == cross_column(spec, 1, expected)).all()


def test_gen_data_plants_the_crosses_interaction_on_the_same_draws(tmp_path):
    without = _doc(crosses=[])
    out = {}
    for name, doc in (("with", DOC), ("without", without)):
        spec_file = tmp_path / f"{name}.json"
        spec_file.write_text(json.dumps(doc))
        assert cli(["gen-data", "--feature-spec", str(spec_file), "--rows", "4000", "--seed", "3",
                    "--out", str(tmp_path / name), "--oracle-rows", "20000"]) == 0
        (path,) = (tmp_path / name).glob("part-*")
        out[name] = (pacsv.read_csv(path), json.loads((tmp_path / name / "oracle.json").read_text()))
    features = ["price", "user", "site", "ad", "tags"]
    assert out["with"][0].select(features).equals(out["without"][0].select(features))   # same draws
    assert out["with"][0].column("y") != out["without"][0].column("y")                  # another click
    assert out["with"][1]["feature_spec"]["crosses"][0]["name"] == "user_x_ad"


def test_wide_deep_reads_crosses_in_its_wide_part_only():
    """A cross's embedding column moves nothing; its wide weight moves the score (numpy and ONNX)."""
    import onnxruntime as ort

    from ctr_model.onnx_export import build_graph
    from ctr_model.onnx_inputs import feeds, layout_of
    from tests.onnx_models import random_scorer

    spec = spec_from_dict(DOC)
    scorer = random_scorer(spec, "wide_deep", {"crosses": 2}, keys=[np.arange(300)] * 3, seed=1)
    rng = np.random.default_rng(0)
    n = 200
    cols = {"price": rng.normal(0, 1, n).astype(np.float32)}
    for c in spec.slot_features:
        if c.multivalued:
            offsets = np.arange(0, 2 * n + 1, 2, dtype=np.int32)
            cols[c.name] = pa.ListArray.from_arrays(pa.array(offsets), pa.array(rng.integers(0, 300, 2 * n)))
        else:
            cols[c.name] = rng.integers(0, min(300, c.hash_buckets), n)
    table = pa.table(cols)
    session = ort.InferenceSession(build_graph(scorer).SerializeToString())
    base = scorer.predict(table)
    assert np.abs(session.run(["probability"], feeds(layout_of(spec), table))[0] - base).max() <= 1e-6
    cross_table = scorer.tables[-1]
    assert cross_table.features == ("user_x_ad", "site_ad_user") and cross_table.dim == 1
    rows = scorer.extra_tables[-1][1]
    rows[:, 1] += 5.0                       # the unused embedding column
    assert np.abs(replace(scorer).predict(table) - base).max() == 0.0      # (a fresh scorer: no cached rows)
    rows[:, 0] += 0.5                       # the wide weight
    scorer = replace(scorer)
    moved = scorer.predict(table)
    assert np.abs(moved - base).min() > 1e-4
    session = ort.InferenceSession(build_graph(scorer).SerializeToString())
    assert np.abs(session.run(["probability"], feeds(layout_of(spec), table))[0] - moved).max() <= 1e-6


def test_the_paddle_program_with_crosses_is_the_numpy_scorer_and_the_onnx_graph():
    from tests.test_any_spec import _PARITY

    cfg = {"model": "wide_deep", "fc_sizes": [8, 4], "hash_buckets": 300, "base_rate": 0.2,
           "model_config": {"crosses": 2}}
    out = subprocess.run([sys.executable, "-c", _PARITY, json.dumps(cfg), json.dumps({"crosses": DOC})],
                         env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=REPO, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])["crosses"]
    assert abs(r["start_mean"] - 0.2) < 0.03 and r["spread"] > 1e-3, r
    assert r["max_diff"] < 2e-5 and r["onnx_max_diff"] < 1e-6, r


# ------------------------------------------------------------------------------------------------
# real gangs: resume, warm start, the refusal before any gang

GANG_DOC = _doc(hash_buckets=100003)


@pytest.fixture(scope="module")
def crossed(tmp_path_factory):
    """4,000 planted rows with crosses prepped into 2 training shards and a test split, and the same
    raw rows prepped without the crosses."""
    root = tmp_path_factory.mktemp("crosses")
    for name, doc in (("prep", GANG_DOC), ("prep-plain", dict(GANG_DOC, crosses=[]))):
        (root / f"{name}.json").write_text(json.dumps(doc))
    assert cli(["gen-data", "--feature-spec", str(root / "prep.json"), "--rows", "4000", "--seed", "3",
                "--out", str(root / "raw"), "--oracle-rows", "20000"]) == 0
    for name in ("prep", "prep-plain"):
        assert cli(["prep", "--feature-spec", str(root / f"{name}.json"), "--input", str(root / "raw"),
                    "--out", str(root / name), "--shards", "2", "--test-shards", "1", "--test-fraction", "0.2"]) == 0
    return root


@pytest.fixture
def job_id():
    from tests.gang_helpers import gang_job_id

    yield from gang_job_id("crosstest", grace_s=10, poll_s=0.2)


def _config(epochs: int) -> dict:
    from tests.gang_helpers import SMALL

    return {**SMALL, "epochs": epochs, "model": "wide_deep", "learning_rate": 0.03}


def _check_export(model_dir: str, data: Path) -> None:
    import onnxruntime as ort

    from ctr_model.infer import load_model
    from ctr_model.onnx_inputs import feeds, layout_of

    scorer = load_model(model_dir)
    assert scorer.config.model_config == {"crosses": 2}
    test = pq.read_table(str(next((data / "test").glob("part-*.parquet"))))
    session = ort.InferenceSession(os.path.join(model_dir, "model.onnx"))
    served = session.run(["probability"], feeds(layout_of(scorer.features), test))[0]
    expected = scorer.predict(test)
    assert np.abs(served - expected).max() <= 1e-6 and expected.std() > 1e-3


@pytest.mark.slow
def test_wide_deep_with_crosses_resumes_after_a_killed_trainer(crossed, job_id, tmp_path):
    import threading

    from ctr_volcano.training.local.backend import train_local
    from tests.gang_helpers import kill_when_checkpointed

    workdir = str(tmp_path / "w")
    box: dict = {}
    killer = threading.Thread(target=kill_when_checkpointed,
                              args=(os.path.join(workdir, "output"), job_id, "trainer", 1, box))
    killer.start()
    result = train_local(str(crossed / "prep"), str(tmp_path / "model"), _config(3), pservers=2, trainers=2,
                         max_retry=1, workdir=workdir, job_id=job_id, log=lambda m: None)
    killer.join()
    assert "killed_at" in box and result.attempts == 2
    assert result.metrics["resumed_from_epoch"] >= 1
    assert [e["epoch"] for e in result.metrics["epochs"]] == [1, 2, 3]
    _check_export(result.model_dir, crossed / "prep")


@pytest.mark.slow
def test_warm_start_continues_with_crosses_and_refuses_data_without_them(crossed, tmp_path):
    from ctr_volcano.errors import BadInput
    from ctr_volcano.training.local.backend import train_local

    data = str(crossed / "prep")
    first = train_local(data, str(tmp_path / "first"), _config(1), pservers=1, trainers=1, max_retry=0,
                        job_id="cross-first", log=lambda m: None, workdir=str(tmp_path / "w1"))
    warm = train_local(data, str(tmp_path / "warm"), _config(1), pservers=1, trainers=1, max_retry=0,
                       job_id="cross-warm", log=lambda m: None, workdir=str(tmp_path / "w2"),
                       init_model=first.model_dir)
    assert warm.metrics["epochs"][0]["loss"] < first.metrics["epochs"][0]["loss"] - 0.01
    _check_export(warm.model_dir, crossed / "prep")
    with pytest.raises(BadInput) as err:
        train_local(str(crossed / "prep-plain"), str(tmp_path / "m"), _config(1), pservers=1, trainers=1,
                    init_model=first.model_dir)
    assert "cross 'user_x_ad'" in str(err.value) and len(str(err.value).splitlines()) == 1
    assert not os.path.exists(tmp_path / "m")


def test_another_family_on_crosses_is_refused_before_any_gang(crossed, tmp_path):
    from ctr_volcano.errors import BadInput
    from ctr_volcano.training.local.backend import train_local

    with pytest.raises(BadInput) as err:
        train_local(str(crossed / "prep"), str(tmp_path / "m"), {"model": "deepfm"}, pservers=1, trainers=1)
    assert str(err.value).startswith("config.model='deepfm': the feature spec's crosses (e.g. 'user_x_ad') "
                                     "feed Wide&Deep's wide part")
    assert not os.path.exists(tmp_path / "m"), "a refused run must not start"


def test_a_wide_deep_model_exported_before_crosses_existed_still_warm_starts():
    """Its meta's model_config is ``{}``: the family's defaults fill it in (``crosses`` 0), while a
    model trained with crosses is refused for data without them."""
    from ctr_model.features import SCHEMA_VERSION
    from ctr_model.warm_start import WarmStart, WarmStartError, check_compatible

    config = TrainConfig(model="wide_deep").to_dict()
    old = {"schema_version": SCHEMA_VERSION, "hash_buckets": config["hash_buckets"],
           "config": dict(config, model_config={})}
    check_compatible(WarmStart("m", "m/warm_start", old, 2), config, 2, SCHEMA_VERSION)
    crossed = dict(old, config=dict(config, model_config={"crosses": 2}))
    with pytest.raises(WarmStartError, match="its model_config is {'crosses': 2} but this run's is {'crosses': 0}"):
        check_compatible(WarmStart("m", "m/warm_start", crossed, 2), config, 2, SCHEMA_VERSION)
