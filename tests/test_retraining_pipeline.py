"""The compiled retraining pipeline's wiring (no run needed): what feeds what, and the one conditional
branch (scoring the day's candidates with a newly promoted champion)."""
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
                          "train-ctr", "champion-challenger-gate", "register-model", "condition-1"}
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
    # the training path runs unconditionally: the only condition is the scoring branch's
    assert [n for n, t in tasks.items() if "triggerPolicy" in t] == ["condition-1"]
    mounted = json.dumps(platform)
    for executor in ("exec-resolve-data-window", "exec-find-champion", "exec-validate-ctr-data", "exec-train-ctr",
                     "exec-register-model", "exec-resolve-data-window-2", "exec-score-ctr"):
        assert executor in mounted


def test_candidates_are_scored_only_with_a_uri_and_a_promoted_model():
    doc, _ = yaml.safe_load_all((REPO / "pipelines" / "ctr_retraining_pipeline.yaml").read_text())
    outer = _tasks(doc)["condition-1"]
    assert outer["taskInfo"]["name"] == "score-candidates"
    assert outer["triggerPolicy"]["condition"] == "inputs.parameter_values['pipelinechannel--score_data_uri'] != ''"
    inner = doc["components"]["comp-condition-1"]["dag"]["tasks"]["condition-2"]
    assert inner["taskInfo"]["name"] == "promoted"
    # on register_model's single output: what the registry did, not the gate's named output
    assert inner["inputs"]["parameters"]["pipelinechannel--register-model-Output"] == {
        "componentInputParameter": "pipelinechannel--register-model-Output"}
    assert outer["inputs"]["parameters"]["pipelinechannel--register-model-Output"] == {
        "taskOutputParameter": {"producerTask": "register-model", "outputParameterKey": "Output"}}
    assert "register-model-Output'] == true" in inner["triggerPolicy"]["condition"]
    branch = doc["components"]["comp-condition-2"]["dag"]["tasks"]
    assert set(branch) == {"resolve-data-window-2", "score-ctr"}
    window = branch["resolve-data-window-2"]["inputs"]["parameters"]
    assert window["data_uri"] == {"componentInputParameter": "pipelinechannel--score_data_uri"}
    assert window["run_date"] == {"componentInputParameter": "pipelinechannel--run_date"}
    assert (window["window_days"]["runtimeValue"]["constant"], window["lag_days"]["runtimeValue"]["constant"]) == (1, 0)
    score = branch["score-ctr"]["inputs"]
    assert score["artifacts"]["candidates"]["taskOutputArtifact"] == {"producerTask": "resolve-data-window-2",
                                                                     "outputArtifactKey": "raw_data"}
    # scored with this run's model, which the condition says is now the champion
    assert score["artifacts"]["model"] == {"componentInputArtifact": "pipelinechannel--train-ctr-model"}
    assert outer["inputs"]["artifacts"]["pipelinechannel--train-ctr-model"] == {
        "taskOutputArtifact": {"producerTask": "train-ctr", "outputArtifactKey": "model"}}
    params = score["parameters"]
    assert params["keep_columns"] == {"componentInputParameter": "pipelinechannel--score_keep_columns"}
    assert params["fanout"] == {"componentInputParameter": "pipelinechannel--score_fanout"}
    assert params["pvc_name"] == {"componentInputParameter": "pipelinechannel--pvc_name"}
    defaults = doc["root"]["inputDefinitions"]["parameters"]
    assert defaults["score_data_uri"]["defaultValue"] == "" and defaults["score_fanout"]["defaultValue"] == 0


def test_local_variant_differs_only_in_the_two_time_placeholders(tmp_path):
    from kfp import compiler

    from pipelines.ctr_retraining_pipeline import ctr_retraining_pipeline, ctr_retraining_pipeline_local

    compiler.Compiler().compile(ctr_retraining_pipeline, str(tmp_path / "a.yaml"))
    compiler.Compiler().compile(ctr_retraining_pipeline_local, str(tmp_path / "b.yaml"))
    a, _ = yaml.safe_load_all((tmp_path / "a.yaml").read_text())
    b, _ = yaml.safe_load_all((tmp_path / "b.yaml").read_text())
    for dag_a, dag_b, task in ((_tasks(a), _tasks(b), "resolve-data-window"),   # the data's window, the candidates'
                               (a["components"]["comp-condition-2"]["dag"]["tasks"],
                                b["components"]["comp-condition-2"]["dag"]["tasks"], "resolve-data-window-2")):
        wa, wb = dag_a[task]["inputs"]["parameters"], dag_b[task]["inputs"]["parameters"]
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
    (["--days", "1", "--start-date", "2026-01-01", "--data", "d/day={date}", "--score-data-uri", "c/day={day}"],
     "--score-data-uri='c/day={day}': unknown template field {day}"),
    (["--days", "1", "--start-date", "2026-01-01", "--data", "d/day={date}", "--score-data-uri", " "],
     "--score-data-uri=' '"),
    (["--days", "1", "--start-date", "2026-01-01", "--data", "d/day={date}", "-p", "score_fanout=-1"],
     "score_fanout=-1"),
    (["--days", "1", "--start-date", "2026-01-01", "--data", "d/day={date}", "-p", "score_data_uri=c/day={date}"],
     "--score-data-uri"),
    (["--score-data-uri", "c/day={date}"], "--score-data-uri"),     # only with --days
])
def test_backfill_refuses_bad_input_before_any_run(tmp_path, capsys, argv, field):
    assert cli.main(["run", "--workdir", str(tmp_path / "w")] + argv) == 2
    assert field in capsys.readouterr().err
    assert not (tmp_path / "w" / "runs").exists()
