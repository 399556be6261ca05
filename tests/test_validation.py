"""Data validation (``ctr_volcano.validation``) on real prepped data: a drifting next day passes, and each
of five broken days planted from it fails with the right finding; the rule's edges on hand-made
profiles; the thresholds (spec section, run override); the verdict through the CLI, the gate and the
registry."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from ctr_model.feature_spec import SpecError, criteo_spec, spec_from_dict
from ctr_model.validation_spec import Level, Thresholds
from ctr_volcano.app.cli.main import main as cli
from ctr_volcano.data.bad_days import KINDS, parse_bad_day, plant
from ctr_volcano.data.daily import generate_days
from ctr_volcano.data.prep import PrepConfig, prep
from ctr_volcano.data.profile import DataProfile, read_profile
from ctr_volcano.data.profile.sketches import DenseSketch, IdSketch
from ctr_volcano.errors import BadInput
from ctr_volcano.retraining.gate import decide as gate_decide
from ctr_volcano.validation import decide, refuse_failed, thresholds_for, validate_profiles
from ctr_volcano.validation.checks import linf_distance, new_id_rate

CONFIG = PrepConfig(shards=2, workers=1)
#: Each planted bad day, and the one (feature, statistic) that must fail it.
EXPECTED = {"empty-column": ("I5", "missing_rate_jump"), "rekey": ("C3", "new_id_rate"),
            "unit-x1000": ("I6", "js_divergence"), "label-x2": ("(label)", "label_rate_shift"),
            "rows-10pct": ("(rows)", "rows_drop")}


@pytest.fixture(scope="module")
def days(tmp_path_factory):
    """Two drifting days of 20,000 rows (as the back-fill's), prepped, and the five bad days planted
    from the second, prepped."""
    root = tmp_path_factory.mktemp("validation")
    generate_days(str(root / "raw"), days=2, rows=20_000, drift=0.1, seed=3, oracle_rows=2000)
    out = {}
    for name in ("2026-01-01", "2026-01-02"):
        prep([str(root / "raw" / f"day={name}")], str(root / name), CONFIG)
        out[name] = str(root / name)
    for kind in KINDS:
        plant(str(root / "raw" / "day=2026-01-02"), str(root / "planted" / kind), kind)
        prep([str(root / "planted" / kind)], str(root / kind), CONFIG)
        out[kind] = str(root / kind)
    return out


def test_the_next_day_passes(days):
    result = validate_profiles(days["2026-01-02"], days["2026-01-01"], thresholds_for(None))
    assert result["verdict"] == "pass", result["summary"]
    assert not result["findings"]
    stats = result["statistics"]
    assert stats["(rows)"]["rows_drop"] == 0.0 and stats["I1"]["js_divergence"] < 0.01
    assert stats["C3"]["new_id_rate"] < 0.2


@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_each_planted_bad_day_fails_with_its_finding(days, kind):
    result = validate_profiles(days[kind], days["2026-01-01"], thresholds_for(None))
    fails = {(f["feature"], f["statistic"]) for f in result["findings"] if f["severity"] == "fail"}
    assert result["verdict"] == "fail" and fails == {EXPECTED[kind]}, result["summary"]
    first = result["findings"][0]
    assert (first["feature"], first["statistic"]) == EXPECTED[kind]
    # one line that names the feature, the statistic, its value and the threshold
    with pytest.raises(BadInput) as err:
        refuse_failed(result, "2026-01-02")
    line = str(err.value)
    assert "\n" not in line and EXPECTED[kind][0] in line and EXPECTED[kind][1] in line
    assert f"> fail threshold {first['threshold']:g}" in line


def test_the_planted_days_are_what_they_say(days):
    day = read_profile(days["2026-01-02"])[0]
    assert read_profile(days["empty-column"])[0].dense["I5"].n == 0
    assert read_profile(days["rows-10pct"])[0].rows == day.rows // 10
    assert read_profile(days["label-x2"])[0].label_rate == pytest.approx(2 * day.label_rate, rel=0.1)
    assert read_profile(days["unit-x1000"])[0].dense["I6"].mean == pytest.approx(1000 * day.dense["I6"].mean)
    assert read_profile(days["rekey"])[0].categorical["C3"].distinct() == pytest.approx(
        day.categorical["C3"].distinct(), rel=0.2)
    with pytest.raises(BadInput):
        plant(days["2026-01-02"], "/nonexistent", "rekey", "I3")
    assert parse_bad_day("2026-01-05:rekey:C7") == {"date": "2026-01-05", "kind": "rekey", "column": "C7"}
    with pytest.raises(BadInput):
        parse_bad_day("2026-01-05:nope")


def test_thresholds_from_the_spec_and_the_run(days):
    # the run's override turns the re-keyed column's check off; what is left is a warning
    levels = thresholds_for(None, '{"features": {"C3": {"new_id_rate": "off", "linf_distance": 0.5}}}')
    result = validate_profiles(days["rekey"], days["2026-01-01"], levels)
    assert result["verdict"] == "pass", result["summary"]
    # the spec's section, and the run's over it
    spec = spec_from_dict({"format": "criteo", "validation": {"rows_drop": {"warn": 0.95, "fail": None}}})
    lenient = validate_profiles(days["rows-10pct"], days["2026-01-01"], thresholds_for(spec))
    assert lenient["verdict"] != "fail" and "rows_drop" not in {f["statistic"] for f in lenient["findings"]}
    levels = thresholds_for(spec, {"rows_drop": 0.8})
    assert levels.level("rows_drop") == Level(0.4, 0.8)
    assert validate_profiles(days["rows-10pct"], days["2026-01-01"], levels)["verdict"] == "fail"
    with pytest.raises(BadInput) as err:
        thresholds_for(None, '{"js": 1, "features": {"I1": {"new_id_rate": 0.1}, "Z9": {}}}')
    assert "js" in str(err.value) and "I1.new_id_rate" in str(err.value) and "Z9" in str(err.value)


def test_the_spec_section_is_checked_with_the_rest_of_the_spec():
    with pytest.raises(SpecError) as err:
        spec_from_dict({"format": "csv", "header": True, "label": "y", "dense": [{"name": "x"}],
                        "validation": {"js_divergence": {"warn": -1}, "features": {"x": {"linf_distance": 1}}}})
    assert len(err.value.problems) == 2
    spec = spec_from_dict({"format": "csv", "header": True, "label": "y", "dense": [{"name": "x"}],
                           "validation": {"js_divergence": 0.6}})
    assert spec_from_dict(spec.to_dict()) == spec and spec.to_dict()["validation"] == {"js_divergence": 0.6}
    assert "validation" not in criteo_spec().to_dict()       # documents written before it stay the same


def _ids(ids, rows=None):
    ids = np.asarray(ids, dtype=np.int64)
    return IdSketch.of(ids, 0, 26)


def test_new_id_rate_estimates_the_share_of_rows():
    rng = np.random.default_rng(5)
    vocab = 26 + rng.choice(10_000_000, 200_000, replace=False)
    ref_ids = vocab[rng.zipf(1.1, 300_000) % 100_000]
    ref = _ids(ref_ids)
    for share in (0.0, 0.3, 1.0):
        n = 300_000
        old = vocab[rng.zipf(1.1, n) % 100_000]
        new = vocab[100_000 + rng.integers(0, 100_000, n)]
        day_ids = np.where(rng.random(n) < share, new, old)
        truth = float(np.mean(~np.isin(day_ids, ref_ids)))     # a long tail: some "old" ids are new too
        assert new_id_rate(_ids(day_ids), ref) == pytest.approx(truth, abs=0.05), (share, truth)
    small = _ids(np.repeat([30, 40, 50], 1000))
    assert new_id_rate(_ids(np.repeat([30, 40, 60], 1000)), small) == pytest.approx(1 / 3, abs=0.05)


def test_linf_distance_takes_the_noise_of_a_small_sample_off_even_where_it_missed_an_id():
    """A day whose 25 sampled rows happened not to hold an id with a 15% share (a 2% chance) is noise,
    not drift: under the default warn threshold (0.1; the unpooled error, 0 on the day's side, once
    made it 0.13, a warning). The same gap over 3000 sampled rows is drift."""
    rng = np.random.default_rng(3)
    ref = _ids(np.where(rng.random(48_000) < 0.15, 30, 1026 + rng.integers(0, 500, 48_000)))
    small_day = _ids(1026 + rng.integers(0, 500, 400))
    assert (small_day.sample_rows, ref.sample_rows) == (25, 3000)
    assert linf_distance(small_day, ref)[0] < 0.1
    distance, raw, worst = linf_distance(_ids(1026 + rng.integers(0, 500, 48_000)), ref)
    assert worst == 30 and 0.1 < distance < raw == pytest.approx(0.15, abs=0.02)


def _profile(rows=1000, rate=0.25, **dense):
    p = DataProfile(label="label", rows=rows, positives=int(rows * rate))
    for name, x in dense.items():
        p.dense[name] = DenseSketch.of(np.asarray(x, dtype=np.float64))
    return p


def test_decide_without_reference_and_on_schema_changes():
    day = _profile(I1=np.arange(1000))
    verdict = decide(day, None)
    assert verdict.verdict == "pass" and not verdict.reference and "schema only" in verdict.summary()
    ref = _profile(I1=np.arange(1000), I2=np.arange(1000))
    result = decide(day, ref)
    assert result.verdict == "fail" and result.findings[0].feature == "I2" and result.findings[0].statistic == "schema"
    spec = {"dense": [{"name": "I1", "transform": "log1p"}]}
    warned = decide(day, _profile(I1=np.arange(1000)), day_spec=spec,
                    reference_spec={"dense": [{"name": "I1", "transform": "none"}]})
    assert warned.verdict == "warn" and "transform" in warned.findings[0].value
    assert decide(day, day).verdict == "pass"


def test_levels():
    th = Thresholds({"js_divergence": 0.4, "rows_drop": "off", "features": {"I1": {"js_divergence": {"warn": 0.1}}}})
    assert th.level("js_divergence") == Level(0.2, 0.4)
    assert th.level("rows_drop") == Level(None, None)
    assert th.level("js_divergence", "I1") == Level(0.1, None) and th.level("js_divergence", "I2") == Level(0.2, 0.4)
    assert Level(0.1, 0.3).severity(0.2) == "warn" and Level(0.1, 0.3).severity(0.31) == "fail"
    assert Level(0.1, 0.3).severity(0.1) is None


def test_the_gate_holds_a_warned_day_back_unless_allowed():
    d = gate_decide(0.78, 0.77, 0.7, 0.002, data_verdict="warn", data_findings="I5: missing_rate_jump 0.1 > warn")
    assert not d.publish and "data validation warned (I5: missing_rate_jump" in d.reason and "allow_warnings" in d.reason
    assert gate_decide(0.78, 0.77, 0.7, 0.002, data_verdict="warn", allow_warnings=True).publish
    assert gate_decide(0.78, 0.77, 0.7, 0.002, data_verdict="pass").publish
    assert not gate_decide(0.6, 0.77, 0.7, 0.002, data_verdict="warn", allow_warnings=True).publish
    with pytest.raises(BadInput):
        gate_decide(0.78, 0.77, 0.7, 0.002, data_verdict="fail")


def test_cli_validate(days, tmp_path, capsys):
    assert cli(["validate", "--data", days["2026-01-02"], "--reference", days["2026-01-01"],
                "--out", str(tmp_path / "v")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("pass: 0 finding(s)")
    doc = json.loads((tmp_path / "v" / "validation.json").read_text())
    assert doc["verdict"] == "pass" and (tmp_path / "v" / "validation.html").read_text().startswith("<!doctype html>")
    assert cli(["validate", "--data", days["unit-x1000"], "--reference", days["2026-01-01"]]) == 2
    captured = capsys.readouterr()
    assert "fail: I6: js_divergence" in captured.out
    err = captured.err.strip()
    assert err.count("\n") == 0 and err.startswith("ctr-volcano validate: error: --data=") and "I6: js_divergence" in err
    # a warning exits 0, or 2 with --fail-on warn
    argv = ["validate", "--data", days["rekey"], "--reference", days["2026-01-01"], "--thresholds",
            '{"new_id_rate": "off"}']
    assert cli(argv) == 0 and "warn: C3: linf_distance" in capsys.readouterr().out
    assert cli(argv + ["--fail-on", "warn"]) == 2
    assert cli(["validate", "--data", str(tmp_path / "nothing"), "--reference", days["2026-01-01"]]) == 2
    assert "no profile.json there" in capsys.readouterr().err


def test_a_model_carries_its_training_profile(days, tmp_path):
    """What the training step does after export: the model keeps the profile, and a model is a reference."""
    from ctr_volcano.data.profile import attach_to_model

    model = tmp_path / "model"
    model.mkdir()
    (model / "model_meta.json").write_text(json.dumps({"schema_version": 1}))
    assert attach_to_model(os.path.join(days["2026-01-01"], "train"), str(model))
    meta = json.loads((model / "model_meta.json").read_text())
    assert meta["data_profile"]["file"] == "data_profile.json" and meta["data_profile"]["rows"] == 20_000
    result = validate_profiles(days["label-x2"], str(model), thresholds_for(None))
    assert result["verdict"] == "fail" and result["reference"]["path"].endswith("data_profile.json")
    (model / "model_meta.json").write_text(json.dumps({"schema_version": 1}))
    with pytest.raises(BadInput) as err:
        validate_profiles(days["label-x2"], str(model), thresholds_for(None))
    assert "carries no profile" in str(err.value)


def test_the_registry_records_the_verdict(tmp_path):
    from ctr_volcano.retraining.registry import ModelRegistry

    model = tmp_path / "m"
    model.mkdir()
    (model / "model_meta.json").write_text("{}")
    reg = ModelRegistry(str(tmp_path / "reg"), "ctr-dnn")
    v = reg.register(str(model), "v1", metrics={}, validation={"verdict": "warn", "findings": ["I5: ..."]})
    assert reg.get("v1").meta["validation"] == {"verdict": "warn", "findings": ["I5: ..."]} == v.meta["validation"]
    assert reg.register(str(model), "v2", metrics={}).meta["validation"]["verdict"] == "skipped"


@pytest.mark.parametrize("params,field", [
    (["validation_thresholds=[1, 2]"], "validation_thresholds"),
    (["validation_thresholds={\"rows_drop\": {\"warn\": 0.6, \"fail\": 0.4}}"], "warn above fail"),
    (["validate_data=true", "validation_baseline=no/such/dir"], "validation_baseline='no/such/dir'"),
])
def test_run_refuses_bad_validation_params_before_any_step(tmp_path, capsys, params, field):
    """A threshold or baseline the validation step would refuse after prep, refused before kfp.local
    starts: exit 2, one line naming it, no run directory."""
    argv = ["run", "--workdir", str(tmp_path / "w")] + [a for p in params for a in ("-p", p)]
    assert cli(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and field in err, err
    assert not (tmp_path / "w" / "runs").exists()


def test_thirty_drifting_days_raise_no_alarm(tmp_path):
    """The back-fill's case without the training: 30 gen-data days with day-to-day noise and drift, each
    validated against the day before (the champion's training data when every day is promoted), with
    the default thresholds: no finding at all, and the statistics' worst values below the warnings."""
    generate_days(str(tmp_path / "raw"), days=30, rows=20_000, drift=0.1, seed=3, oracle_rows=2000)
    dirs = sorted((tmp_path / "raw").iterdir())
    worst: dict = {}
    previous = None
    for raw in dirs:
        out = str(tmp_path / "prepped" / raw.name)
        prep([str(raw)], out, CONFIG)
        if previous:
            result = validate_profiles(out, previous, thresholds_for(None))
            assert result["verdict"] == "pass" and not result["findings"], (raw.name, result["summary"])
            for stats in result["statistics"].values():
                for key, value in stats.items():
                    worst[key] = max(worst.get(key, 0.0), value)
        previous = out
    levels = thresholds_for(None)
    assert set(worst) == {"rows_drop", "label_rate_shift", "missing_rate_jump", "js_divergence", "linf_distance",
                          "new_id_rate"}
    for key, value in worst.items():
        assert value <= levels.level(key).warn, (key, value)


def test_gen_data_plants_bad_days(tmp_path, capsys):
    out = tmp_path / "days"
    assert cli(["gen-data", "--rows", "3000", "--days", "3", "--out", str(out), "--oracle-rows", "1000",
                "--bad-day", "2026-01-02:unit-x1000:I2", "--bad-day", "2026-01-03:rows-10pct"]) == 0
    assert "2026-01-03: planted rows-10pct (300 of 3000 rows kept)" in capsys.readouterr().out
    day3 = sorted((out / "day=2026-01-03").glob("part-*"))
    assert len(day3[0].read_text().splitlines()) == 300 and (out / "day=2026-01-02" / "oracle.json").exists()
    prepped = {}
    for d in (1, 2):
        prep([str(out / f"day=2026-01-0{d}")], str(tmp_path / f"p{d}"), CONFIG)
        prepped[d] = read_profile(str(tmp_path / f"p{d}"))[0]
    assert prepped[2].dense["I2"].mean > 100 * prepped[1].dense["I2"].mean      # planted x1000
    for bad, field in ((["--bad-day", "2026-02-02:rekey"], "among the 3 days"),
                       (["--bad-day", "2026-01-02:rekey:I3"], "C1..C26"),
                       (["--bad-day", "2026-01-02:label-x2:C1"], "takes no column"),
                       (["--bad-day", "Jan 2:rekey"], "ISO date")):
        assert cli(["gen-data", "--rows", "10", "--days", "3", "--out", str(tmp_path / "no")] + bad) == 2
        assert field in capsys.readouterr().err
    assert not (tmp_path / "no").exists()


def _log_rows(path, rows, sample=1.0, seed=0):
    """What the model server does per request (:class:`RequestLog`): the raw columns as V2 BYTES inputs."""
    from ctr_model.features import DENSE_COLUMNS, SPARSE_COLUMNS
    from ctr_volcano.serving.request_log import RequestLog

    log = RequestLog(str(path), sample, seed=seed)
    written = 0
    for start in range(0, len(rows), 500):
        chunk = rows[start:start + 500]
        columns = {c: ("BYTES", np.array([r[1 + j].encode() for r in chunk], dtype=object))
                   for j, c in enumerate(DENSE_COLUMNS + SPARSE_COLUMNS)}
        written += log.log(columns, np.full(len(chunk), 0.25))
    return written


@pytest.fixture(scope="module")
def sample_prepped(sample_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("sample-prepped")
    prep([str(sample_dir)], str(out), CONFIG)
    return str(out)


def test_serving_log_of_the_training_traffic_passes_and_a_skewed_one_fails(sample_dir, sample_prepped, tmp_path,
                                                                          capsys):
    """Training/serving skew: requests that look like the training data pass against its profile
    (through the real request log and the transforms prep uses); the same requests after a unit
    change in I6 upstream of the server fail on I6, in one line, exit 2."""
    from tests.serving_fixtures import raw_lines

    rows = raw_lines(sample_dir, 20_000)
    assert _log_rows(tmp_path / "sampled.jsonl", rows, sample=0.1) == pytest.approx(2000, rel=0.1)
    log = tmp_path / "requests.jsonl"
    assert _log_rows(log, rows) == 20_000
    first = json.loads(log.read_text().splitlines()[0])
    assert first["columns"]["C1"] == rows[0][14] and first["probability"] == 0.25 and first["model"] == "ctr"
    assert cli(["validate", "--serving-log", str(log), "--reference", sample_prepped, "--out", str(tmp_path / "v")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("pass: 0 finding(s)"), out
    doc = json.loads((tmp_path / "v" / "validation.json").read_text())
    assert doc["statistics"]["C1"]["new_id_rate"] < 0.05 and "(label)" not in doc["statistics"]
    assert doc["data"]["rows"] == 20_000 and doc["data"]["mean_probability"] == pytest.approx(0.25)
    # a small log (1 row in 10: ~130 rows in its row sample) is no false alarm either
    assert cli(["validate", "--serving-log", str(tmp_path / "sampled.jsonl"), "--reference", sample_prepped]) == 0
    assert capsys.readouterr().out.startswith("pass: 0 finding(s)")
    skewed = [r[:6] + [str(int(r[6]) * 1000) if r[6] else ""] + r[7:] for r in rows]
    _log_rows(tmp_path / "skewed.jsonl", skewed)
    assert cli(["validate", "--serving-log", str(tmp_path / "skewed.jsonl"), "--reference", sample_prepped]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "I6: js_divergence" in err


def test_serving_log_refusals(tmp_path, sample_prepped, capsys):
    from ctr_volcano.serving.request_log import RequestLog, check_log_args

    (tmp_path / "bad.jsonl").write_text('{"columns": {"I1": "1"}}\nnot json\n')
    for argv, phrase in ((["--serving-log", str(tmp_path / "bad.jsonl"), "--reference", sample_prepped], ":2"),
                         (["--serving-log", str(tmp_path / "none.jsonl"), "--reference", sample_prepped], "cannot read"),
                         (["--serving-log", str(tmp_path / "bad.jsonl")], "--reference")):
        assert cli(["validate"] + argv) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and phrase in err, err
    (tmp_path / "short.jsonl").write_text('{"columns": {"I1": "1"}, "probability": 0.5}\n')
    assert cli(["validate", "--serving-log", str(tmp_path / "short.jsonl"), "--reference", sample_prepped]) == 2
    assert "lack the model's column(s) I2" in capsys.readouterr().err
    for rate in (0, 1.5, True):
        with pytest.raises(BadInput, match="--log-sample"):
            check_log_args(None, rate)
    with pytest.raises(BadInput, match="--request-log"):
        RequestLog(str(tmp_path / "no" / "dir" / "log.jsonl"))


def test_a_spec_s_days_are_validated_too(tmp_path):
    """Data shaped like a public log, not like Criteo: named CSV columns, string user ids, a price written
    as a float (``260.0``), a multi-valued history. Two normal days pass; a re-keyed user column and a
    price in cents fail on their own feature."""
    from ctr_model.feature_spec import spec_from_dict

    spec = spec_from_dict({"format": "csv", "header": True, "label": "click",
                           "dense": [{"name": "price"}],
                           "categorical": [{"name": "user"}, {"name": "history", "multivalued": True,
                                                                "separator": "|"}]})

    def day(name, seed, user="u", scale=1.0):
        rng = np.random.default_rng(seed)
        users = rng.zipf(1.3, 20_000) % 3000
        rows = ["click,user,price,history"] + [
            f"{int(rng.random() < 0.2)},{user}{u},{round(rng.lognormal(4, 1)) * scale:.1f},"
            f"i{rng.integers(50)}|i{rng.integers(50)}" for u in users]
        (tmp_path / f"{name}.csv").write_text("\n".join(rows) + "\n")
        prep([str(tmp_path / f"{name}.csv")], str(tmp_path / name), PrepConfig(shards=1), spec=spec)
        return str(tmp_path / name)

    base, normal = day("base", 1), day("normal", 2)
    levels = thresholds_for(spec)
    assert validate_profiles(normal, base, levels)["verdict"] == "pass"
    for bad, expected in ((day("rekeyed", 3, user="user-"), ("user", "new_id_rate")),
                          (day("cents", 4, scale=100.0), ("price", "js_divergence"))):
        result = validate_profiles(bad, base, levels)
        fails = {(f["feature"], f["statistic"]) for f in result["findings"] if f["severity"] == "fail"}
        assert fails == {expected}, result["summary"]


def test_the_step_s_metrics_and_report(days):
    """What validate_ctr_data logs as KFP Metrics and writes as its HTML artifact."""
    import html

    from ctr_volcano.validation.report import metric_scalars, render_html

    result = validate_profiles(days["unit-x1000"], days["2026-01-01"], thresholds_for(None))
    scalars = metric_scalars(result)
    assert scalars["verdict"] == 2.0 and scalars["fail_findings"] == 1.0
    assert scalars["max_js_divergence"] == result["statistics"]["I6"]["js_divergence"] > 0.3
    assert set(scalars) >= {"max_rows_drop", "max_label_rate_shift", "max_missing_rate_jump", "max_linf_distance",
                            "max_new_id_rate"}
    page = render_html(result)
    assert ">FAIL<" in page and html.escape(result["findings"][0]["line"]) in page
    assert "color:#cf222e;font-weight:bold\">0.9" in page           # the failed cell, I6's js_divergence
    passed = validate_profiles(days["2026-01-02"], days["2026-01-01"], thresholds_for(None))
    assert metric_scalars(passed)["verdict"] == 0.0 and ">PASS<" in render_html(passed)
    shifted = dict(result, statistics={"(label)": {"label_rate_shift": float("inf")}}, findings=[])
    assert metric_scalars(shifted)["max_label_rate_shift"] == 1e9        # a label rate from 0: a finite metric
