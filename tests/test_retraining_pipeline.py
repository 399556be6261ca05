"""The compiled retraining pipeline's wiring (no run needed): what feeds what, and no conditions."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from ctr_volcano.app.cli import main as cli

REPO = Path(__file__).resolve().parents[1]


def _tasks(doc):
    return doc["root"]["dag"]["tasks"]


def test_wiring_window_champion_warm_start_gate_register():
    doc, platform = yaml.safe_load_all((REPO / "pipelines" / "ctr_retraining_pipeline.yaml").read_text())
    tasks = _tasks(doc)
    assert set(tasks) == {"resolve-data-window", "prepare-ctr-data", "find-champion", "validate-ctr-data",
                          "train-ctr", "champion-challenger-gate", "register-model"}
    # the day is validated against the champion, before training (which waits for it), and the gate
    # reads the verdict
    check = tasks["validate-ctr-data"]["inputs"]["artifacts"]
    assert check["data"]["taskOutputArtifact"] == {"producerTask": "prepare-ctr-data", "outputArtifactKey": "train_data"}
    assert check["champion"]["taskOutputArtifact"]["producerTask"] == "find-champion"
    assert "validate-ctr-data" in tasks["train-ctr"]["dependentTasks"]
    assert tasks["champion-challenger-gate"]["inputs"]["artifacts"]["validation"]["taskOutputArtifact"] == {
        "producerTask": "validate-ctr-data", "outputArtifactKey": "metrics"}
    window = tasks["resolve-data-window"]["inputs"]["parameters"]
    assert window["schedule_time"]["runtimeValue"]["constant"] == "{{$.pipeline_job_schedule_time_utc}}"
    assert window["create_time"]["runtimeValue"]["constant"] == "{{$.pipeline_job_create_time_utc}}"
    train = tasks["train-ctr"]["inputs"]["artifacts"]
    assert train["init_model"]["taskOutputArtifact"] == {"producerTask": "find-champion",
                                                         "outputArtifactKey": "champion"}
    gate = tasks["champion-challenger-gate"]["inputs"]["artifacts"]
    # champion and challenger are scored on the same (this run's) test split
    assert gate["test_data"]["taskOutputArtifact"]["producerTask"] == "prepare-ctr-data"
    assert gate["champion"]["taskOutputArtifact"]["producerTask"] == "find-champion"
    reg = tasks["register-model"]["inputs"]["parameters"]
    assert reg["promote"]["taskOutputParameter"] == {"producerTask": "champion-challenger-gate",
                                                     "outputParameterKey": "Output"}
    assert reg["version"]["runtimeValue"]["constant"] == "{{$.pipeline_job_uuid}}"
    assert not any("triggerPolicy" in t for t in tasks.values())     # no dsl.If anywhere
    mounted = json.dumps(platform)
    for executor in ("exec-resolve-data-window", "exec-find-champion", "exec-validate-ctr-data", "exec-train-ctr",
                     "exec-register-model"):
        assert executor in mounted


def test_local_variant_differs_only_in_the_two_time_placeholders(tmp_path):
    from kfp import compiler

    from pipelines.ctr_retraining_pipeline import ctr_retraining_pipeline, ctr_retraining_pipeline_local

    compiler.Compiler().compile(ctr_retraining_pipeline, str(tmp_path / "a.yaml"))
    compiler.Compiler().compile(ctr_retraining_pipeline_local, str(tmp_path / "b.yaml"))
    a, _ = yaml.safe_load_all((tmp_path / "a.yaml").read_text())
    b, _ = yaml.safe_load_all((tmp_path / "b.yaml").read_text())
    wa = _tasks(a)["resolve-data-window"]["inputs"]["parameters"]
    wb = _tasks(b)["resolve-data-window"]["inputs"]["parameters"]
    for key in ("schedule_time", "create_time"):
        assert wb[key]["runtimeValue"]["constant"] == ""
        wa[key] = wb[key]
    assert a == b


@pytest.mark.parametrize("argv,field", [
    (["--days", "2", "--data", "d/day={date}"], "--start-date"),
    (["--days", "2", "--start-date", "2026-01-01"], "--data"),
    (["--days", "2", "--start-date", "1/2/2026", "--data", "d/day={date}"], "--start-date"),
    (["--days", "0", "--start-date", "2026-01-01", "--data", "d/day={date}"], "--days"),
    (["--days", "2", "--start-date", "2026-01-01", "--data", "d/fixed"], "--data='d/fixed'"),
    (["--days", "1", "--start-date", "2026-01-01", "--data", "d/day={day}"], "data_uri"),
    (["--days", "1", "--start-date", "2026-01-01", "--data", "d/day={date}", "-p", "epochz=1"], "--param"),
    (["--days", "1", "--start-date", "2026-01-01", "--data", "d/day={date}", "-p", "run_date=2026-01-01"],
     "params"),
    (["--registry", "r"], "--registry"),
    (["--days", "1", "--start-date", "2026-01-01", "--data", "d/day={date}", "-p",
      'validation_thresholds={"js_divergense": 0.5}'], "validation_thresholds"),
    (["--days", "1", "--start-date", "2026-01-01", "--data", "d/day={date}", "-p",
      'validation_thresholds={"features": {"I1": {"new_id_rate": 0.1}}}'], "I1.new_id_rate"),
    (["--days", "1", "--start-date", "2026-01-01", "--data", "d/day={date}", "-p",
      "validation_baseline=no/such/profile"], "validation_baseline='no/such/profile'"),
])
def test_backfill_refuses_bad_input_before_any_run(tmp_path, capsys, argv, field):
    assert cli.main(["run", "--workdir", str(tmp_path / "w")] + argv) == 2
    assert field in capsys.readouterr().err
    assert not (tmp_path / "w" / "runs").exists()
