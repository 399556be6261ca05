"""``ctr-volcano compile``, ``submit``'s checks made before any request, parameter parsing.

What ``submit`` does against a KFP API server is tested against the real one (KFP 2.14.3) in
``tests/cluster/test_kfp_server.py``.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil

import pytest
import yaml

from ctr_volcano.app.catalogue import parse_params, pipeline_parameters
from ctr_volcano.app.cli import main as cli
from ctr_volcano.errors import BadInput


@pytest.fixture
def closed_port_host():
    """A loopback URL nothing listens on: a request there would fail with another message."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


@pytest.mark.parametrize("argv,field", [
    (["--cron", "0 2 * * *"], "--cron"),                 # 5 fields: KFP wants seconds first
    (["--cron", "0 0 2 * * *", "--max-concurrency", "0"], "--max-concurrency"),
    (["-p", "epoch=3"], "--param"),                      # typo in the name
    (["-p", "epochs=three"], "--param"),
    (["-p", "epochs"], "--param"),
    (["-p", "registry=/x"], "not a parameter of the training pipeline"),  # a retraining parameter
    (["--legacy-kfp", "-p", "pvc_nam=x"], "--param"),
    (["-p", "pvc_name=x"], "only the training pipeline for KFP backends < 2.15 (--legacy-kfp)"),  # the default one has no claim
    (["--pipeline", "retraining", "-p", 'validation_thresholds={"js_divergense": 0.5}'], "did you mean 'js_divergence'"),
    (["-p", 'validation_thresholds={"features": {"I1": {"new_id_rate": 0.1}}}'], "I1.new_id_rate"),
    # a spec on the claim (not here): the features cannot be checked, the statistics and levels can
    (["--pipeline", "retraining", "-p", "feature_spec=/mnt/ctr/spec.yaml", "-p",
      'validation_thresholds={"rows_drop": {"warn": 0.6, "fail": 0.4}, "features": {"x": {"js_divergence": 1}}}'],
     "warn above fail"),
    (["--pipeline", "retraining", "-p", "score_data_uri=/mnt/ctr/candidates/day={day}"],
     "score_data_uri='/mnt/ctr/candidates/day={day}': unknown template field {day}"),
    (["--pipeline", "retraining", "-p", "score_fanout=-1"], "score_fanout=-1: use 0 to score in the step"),
])
def test_submit_bad_flags_fail_before_any_request(closed_port_host, capsys, argv, field):
    assert cli.main(["submit", "--host", closed_port_host] + argv) == 2
    err = capsys.readouterr().err
    assert field in err and "no KFP API answers there" not in err


def test_parse_params_follow_the_chosen_variant():
    assert parse_params(["pvc_name=claim"], legacy=True) == {"pvc_name": "claim"}
    assert parse_params(["registry=/r"], "retraining", legacy=True) == {"registry": "/r"}
    assert set(pipeline_parameters(legacy=True)) == set(pipeline_parameters()) | {"pvc_name"}
    assert pipeline_parameters("retraining", legacy=True) == pipeline_parameters("retraining")


@pytest.mark.parametrize("status,hinted", [(500, True), (400, True), (403, False), (404, False)])
def test_upload_refusal_gets_the_legacy_hint_only_when_the_package_was_called_invalid(status, hinted):
    """A 2.14 server answers a TaskConfig package with 500 (InvalidInputError); a refusal for another
    reason (no access, wrong namespace) must not send the user to --legacy-kfp."""
    import kfp_server_api

    from ctr_volcano.app.submit import LEGACY_KFP_HINT, _kfp_call

    with pytest.raises(BadInput) as info:
        with _kfp_call("http://kfp:8080", "upload", LEGACY_KFP_HINT):
            raise kfp_server_api.ApiException(status=status, reason="refused")
    assert str(info.value).startswith(f"upload='http://kfp:8080': the KFP API server refused it: HTTP {status}: ")
    assert str(info.value).endswith("submit with --legacy-kfp") is hinted


def test_parse_params_types_follow_defaults():
    got = parse_params(["epochs=3", "min_auc=0.8", "backend=local", "data_uri=/tmp/x=y"])
    assert got == {"epochs": 3, "min_auc": 0.8, "backend": "local", "data_uri": "/tmp/x=y"}
    assert isinstance(got["min_auc"], float)
    with pytest.raises(BadInput) as info:
        parse_params(["learning_rate=fast"])
    assert "float" in info.value.fix


def test_every_pipeline_parameter_has_a_default_and_a_description(tmp_path):
    params = pipeline_parameters()
    assert all(v is not None for v in params.values())
    assert cli.main(["compile", "--out-dir", str(tmp_path)]) == 0
    doc, platform = yaml.safe_load_all((tmp_path / "ctr_training_pipeline.yaml").read_text())
    assert "workspace" in json.dumps(platform)  # the run workspace is the hand-off: no claim to name
    root = doc["root"]["inputDefinitions"]["parameters"]
    assert set(root) == set(params)
    for name, spec in root.items():
        assert spec.get("isOptional") is True and "defaultValue" in spec, name
        assert len(spec.get("description", "")) > 15, f"{name}: UI text missing"
    assert doc["pipelineInfo"]["description"].startswith("Train a click-through-rate model")
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == ["champion_challenger_gate.yaml", "check_auc_gate.yaml",
                       "ctr_retraining_pipeline.yaml", "ctr_scoring_pipeline.yaml", "ctr_training_pipeline.yaml",
                       "evaluate_ctr.yaml", "find_champion.yaml", "prepare_ctr_data.yaml", "publish_model.yaml",
                       "register_model.yaml", "resolve_data_window.yaml", "score_ctr.yaml", "train_ctr.yaml",
                       "validate_ctr_data.yaml"]
    doc, platform = yaml.safe_load_all((tmp_path / "ctr_retraining_pipeline.yaml").read_text())
    params = pipeline_parameters("retraining")
    root = doc["root"]["inputDefinitions"]["parameters"]
    assert set(root) == set(params) and all(v is not None for v in params.values())
    for name, spec in root.items():
        assert spec.get("isOptional") is True and "defaultValue" in spec, name
        assert len(spec.get("description", "")) > 15, f"{name}: UI text missing"


def test_run_refuses_missing_data_and_unknown_params(tmp_path, capsys):
    assert cli.main(["run", "--data", str(tmp_path / "nope"), "--workdir", str(tmp_path / "w")]) == 2
    assert "data=" in capsys.readouterr().err
    assert cli.main(["run", "--workdir", str(tmp_path / "w"), "-p", "epochz=1"]) == 2
    assert "not a parameter of the training pipeline" in capsys.readouterr().err
    assert not (tmp_path / "w" / "summary.json").exists()


@pytest.mark.skipif(importlib.util.find_spec("paddle") is None, reason="ctr-volcano run trains: needs the train extra")
def test_run_with_bad_raw_data_fails_clearly_in_the_prep_step(tmp_path, capsys):
    raw = tmp_path / "raw.tsv"
    raw.write_text("this is not criteo\n" * 50)
    rc = cli.main(["run", "--data", str(raw), "--workdir", str(tmp_path / "w")])
    err = capsys.readouterr().err
    assert rc == 2
    assert "error: step prepare-ctr-data: max_bad_fraction=" in err and "\x1b[" not in err
    log = re.search(r"\(detail: (\S+)\)$", err.strip())[1]
    assert log.startswith(str(tmp_path / "w" / "runs")) and log.endswith("/run.log")
    assert not (tmp_path / "w" / "summary.json").exists()
    scratch = re.search(r"scratch files \(gang logs\) kept under (\S+)", open(log).read())[1]
    assert os.path.isdir(scratch)  # kept for diagnosis after a failure, named in the log
    shutil.rmtree(scratch)


def test_submit_refuses_a_host_without_scheme(capsys):
    assert cli.main(["submit", "--host", "localhost:8080"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--host='localhost:8080'" in err and "http://localhost:8080" in err


def test_an_unknown_parameter_gets_one_answer_from_run_submit_and_parse(tmp_path, closed_port_host):
    """run, submit and the -p parser share one check: the same fix text for the same typo, and the
    legacy-only parameter named as such by each."""
    from ctr_volcano.app.local_run import run_local
    from ctr_volcano.app.submit import submit

    fixes = []
    for call in (lambda: parse_params(["epochz=1"]), lambda: run_local(workdir=str(tmp_path), params={"epochz": 1}),
                 lambda: submit(closed_port_host, params={"epochz": 1})):
        with pytest.raises(BadInput) as info:
            call()
        fixes.append(info.value.fix)
    assert len(set(fixes)) == 1 and fixes[0].startswith("not a parameter of the training pipeline; known:")
    with pytest.raises(BadInput, match="only the training pipeline for KFP backends < 2.15"):
        submit(closed_port_host, params={"pvc_name": "c"})
