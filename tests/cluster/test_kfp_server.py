"""``ctr-volcano submit``, recurring runs and the KFP UI's upload path against the real KFP API server.

The server (KFP 2.14.3, built from its Go module; see ``kfp_fixtures.py``) stores pipelines in
MariaDB and SeaweedFS and turns runs into Argo ``Workflow`` objects and recurring runs into
``ScheduledWorkflow`` objects in the mini cluster's ``kubeflow`` namespace. Nothing executes them:
the tests read what the server wrote.

2.14.3 refuses the default packages (``TaskConfig`` needs a backend >= 2.15), so every submit here
uses ``--legacy-kfp`` and the UI test uploads what ``compile --legacy-kfp`` writes; one test checks
the refusal of the default package and its hint.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Dict, List

import pytest
import requests
import yaml

from ctr_volcano.app.catalogue import pipeline_parameters
from ctr_volcano.app.cli import main as cli

REPO = Path(__file__).resolve().parents[2]
#: What every submit here adds: the package variant a 2.14 backend accepts.
LEGACY = "--legacy-kfp"


@pytest.fixture(scope="module")
def legacy_yaml(tmp_path_factory) -> Path:
    """The directory ``ctr-volcano compile --legacy-kfp --out-dir`` writes (what a 2.14 user uploads)."""
    out = tmp_path_factory.mktemp("legacy-yaml")
    proc = subprocess.run([sys.executable, "-m", "ctr_volcano.app.cli.main", "compile", "--legacy-kfp", "--out-dir",
                           str(out)], env=dict(os.environ, PYTHONPATH=str(REPO)), cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def k8s(cluster):
    from kubernetes import client

    return client.CustomObjectsApi(cluster.api_client())


@pytest.fixture
def kfp_client(kfp_server):
    from kfp import Client

    return Client(host=kfp_server.host)


def _submit(capsys, *argv: str) -> Dict[str, Any]:
    rc = cli.main(["submit", LEGACY, *argv])
    out, err = capsys.readouterr()
    assert rc == 0, err
    return json.loads(out[out.index("{\n"):])


def _fails(capsys, *argv: str) -> str:
    rc = cli.main(["submit", *argv])
    err = capsys.readouterr().err
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"expected one line, got:\n{err}"
    return lines[0]


def _workflow_of(k8s, run_id: str, timeout_s: float = 30.0) -> Dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        items = k8s.list_namespaced_custom_object("argoproj.io", "v1alpha1", "kubeflow", "workflows",
                                                  label_selector=f"pipeline/runid={run_id}")["items"]
        if items:
            return items[0]
        assert time.monotonic() < deadline, f"no Workflow labelled pipeline/runid={run_id}"
        time.sleep(0.3)


def _runtime_parameters(workflow: Dict[str, Any]) -> Dict[str, Any]:
    """The pipeline-level inputs the root DAG driver of a KFP v2 Workflow receives (``runtime-config``)."""
    found: List[Dict[str, Any]] = []
    for template in workflow["spec"]["templates"]:
        for task in (template.get("dag") or {}).get("tasks", []):
            for arg in (task.get("arguments") or {}).get("parameters", []):
                if arg["name"] == "runtime-config":
                    found.append(json.loads(arg["value"]))
    assert len(found) == 1, f"expected one runtime-config argument, found {len(found)}"
    return found[0].get("parameterValues", found[0].get("parameters", {}))


def _versions(kfp_client, pipeline_id: str) -> List[Any]:
    return kfp_client.list_pipeline_versions(pipeline_id, page_size=100).pipeline_versions or []


# ----------------------------------------------------------------------------------------- submit
def test_submit_uploads_reuses_and_versions_the_pipeline(kfp_server, kfp_client, legacy_yaml, capsys,
                                                        monkeypatch):
    host = kfp_server.host
    first = _submit(capsys, "--host", host, "--experiment", "kfp-versions")
    pipeline = kfp_client.get_pipeline(first["pipeline_id"])
    assert pipeline.display_name == "ctr-training-pipeline"
    version = kfp_client.get_pipeline_version(first["pipeline_id"], first["version_id"])
    assert version.display_name == first["version_name"]
    # the server stored exactly what `ctr-volcano compile --legacy-kfp` writes
    compiled = list(yaml.safe_load_all((legacy_yaml / "ctr_training_pipeline.yaml").read_text()))
    assert version.pipeline_spec["pipeline_spec"] == compiled[0]
    assert version.pipeline_spec["platform_spec"] == compiled[1]
    n_versions = len(_versions(kfp_client, first["pipeline_id"]))

    second = _submit(capsys, "--host", host, "--experiment", "kfp-versions")
    assert (second["pipeline_id"], second["version_id"]) == (first["pipeline_id"], first["version_id"])
    assert len(_versions(kfp_client, first["pipeline_id"])) == n_versions

    # changed code (another default) -> a new version of the same pipeline, found by the server's filter
    from kfp import compiler

    orig = compiler.Compiler.compile

    def compile_with_override(self, func, path, **kw):
        return orig(self, func, path, pipeline_parameters={"min_auc": 0.5 + uuid.uuid4().int % 1000 / 1e4}, **kw)

    monkeypatch.setattr(compiler.Compiler, "compile", compile_with_override)
    third = _submit(capsys, "--host", host, "--experiment", "kfp-versions")
    assert third["pipeline_id"] == first["pipeline_id"] and third["version_id"] != first["version_id"]
    names = {v.display_name: v.pipeline_version_id for v in _versions(kfp_client, first["pipeline_id"])}
    assert len(names) == n_versions + 1 and names[third["version_name"]] == third["version_id"]
    # three runs, one Workflow each, all in the experiment named on the command line
    exp = kfp_client.get_experiment(experiment_id=first["experiment_id"])
    assert exp.display_name == "kfp-versions"
    assert len({first["id"], second["id"], third["id"]}) == 3


def test_run_workflow_carries_given_parameters_and_defaults(kfp_server, kfp_client, k8s, capsys):
    res = _submit(capsys, "--host", kfp_server.host, "--run-name", "params-1",
                  "-p", "epochs=3", "-p", "min_auc=0.75", "-p", "queue=nightly", "-p", "backend=volcano")
    assert res["kind"] == "run" and res["url"] == f"{kfp_server.host}/#/runs/details/{res['id']}"
    run = kfp_client.get_run(res["id"])
    assert run.display_name == "params-1"
    assert run.pipeline_version_reference.pipeline_version_id == res["version_id"]
    assert run.runtime_config.parameters == {"epochs": 3, "min_auc": 0.75, "queue": "nightly",
                                             "backend": "volcano"}
    wf = _workflow_of(k8s, res["id"])
    expected = {**pipeline_parameters(legacy=True), "epochs": 3, "min_auc": 0.75, "queue": "nightly"}
    assert _runtime_parameters(wf) == expected
    assert wf["spec"]["serviceAccountName"] == "pipeline-runner"


def test_submit_service_account_lands_in_the_workflow(kfp_server, k8s, capsys):
    res = _submit(capsys, "--host", kfp_server.host, "--service-account", "ctr-trainer")
    assert _workflow_of(k8s, res["id"])["spec"]["serviceAccountName"] == "ctr-trainer"


# --------------------------------------------------------------------------------- recurring runs
def test_recurring_run_becomes_a_scheduled_workflow(kfp_server, kfp_client, k8s, capsys):
    res = _submit(capsys, "--host", kfp_server.host, "--experiment", "nightly", "--run-name", "nightly-rr",
                  "--schedule", "0 0 2 * * *", "-p", "epochs=4")
    assert res["kind"] == "recurring_run"
    rec = kfp_client.get_recurring_run(res["id"])
    assert rec.trigger.cron_schedule.cron == "0 0 2 * * *"
    assert int(rec.max_concurrency) == 1 and rec.no_catchup is True and rec.mode == "ENABLE"
    assert rec.runtime_config.parameters == {"epochs": 4}

    def swf() -> Dict[str, Any]:
        items = k8s.list_namespaced_custom_object("kubeflow.org", "v1beta1", "kubeflow",
                                                  "scheduledworkflows")["items"]
        mine = [i for i in items if i["metadata"]["name"].startswith("nightly-rr")]
        assert len(mine) == 1, [i["metadata"]["name"] for i in items]
        return mine[0]

    spec = swf()["spec"]
    assert spec["trigger"]["cronSchedule"]["cron"] == "0 0 2 * * *"
    assert spec["maxConcurrency"] == 1 and spec["noCatchup"] is True and spec["enabled"] is True
    params = {p["name"]: json.loads(p["value"]) for p in spec["workflow"]["parameters"]}
    assert params == {"epochs": 4}

    # The README's way to pause and remove it: kfp.Client().disable_recurring_run / delete_recurring_run.
    kfp_client.disable_recurring_run(res["id"])
    assert swf()["spec"]["enabled"] is False
    assert kfp_client.get_recurring_run(res["id"]).mode == "DISABLE"
    kfp_client.delete_recurring_run(res["id"])
    items = k8s.list_namespaced_custom_object("kubeflow.org", "v1beta1", "kubeflow", "scheduledworkflows")["items"]
    assert not [i for i in items if i["metadata"]["name"].startswith("nightly-rr")]


def _dag_task_names(workflow: Dict[str, Any]) -> List[str]:
    return [t["name"] for tpl in workflow["spec"]["templates"] for t in (tpl.get("dag") or {}).get("tasks", [])]


def test_submit_schedule_runs_the_retraining_pipeline(kfp_server, kfp_client, k8s, legacy_yaml, capsys):
    """A schedule runs the retraining pipeline: the ScheduledWorkflow references its version and
    carries its Workflow (the retraining steps) and the given parameters."""
    res = _submit(capsys, "--host", kfp_server.host, "--experiment", "nightly-retraining", "--run-name",
                  "retrain-rr", "--schedule", "0 0 2 * * *", "-p", "lag_days=1", "-p", "registry=/mnt/ctr/registry")
    assert res["kind"] == "recurring_run" and res["pipeline"] == "retraining"
    assert kfp_client.get_pipeline(res["pipeline_id"]).display_name == "ctr-retraining-pipeline"
    stored = kfp_client.get_pipeline_version(res["pipeline_id"], res["version_id"]).pipeline_spec
    compiled = list(yaml.safe_load_all((legacy_yaml / "ctr_retraining_pipeline.yaml").read_text()))
    assert stored["pipeline_spec"] == compiled[0] and stored["platform_spec"] == compiled[1]

    items = k8s.list_namespaced_custom_object("kubeflow.org", "v1beta1", "kubeflow", "scheduledworkflows")["items"]
    (swf,) = [i for i in items if i["metadata"]["name"].startswith("retrain-rr")]
    spec = swf["spec"]
    # 2.14.3 records the version's name as pipelineName
    assert (spec["pipelineId"], spec["pipelineVersionId"], spec["pipelineName"]) == (
        res["pipeline_id"], res["version_id"], res["version_name"])
    assert {p["name"]: json.loads(p["value"]) for p in spec["workflow"]["parameters"]} == {
        "lag_days": 1, "registry": "/mnt/ctr/registry"}
    workflow = json.loads(spec["workflow"]["spec"])
    assert workflow["metadata"]["generateName"] == "ctr-retraining-pipeline-"
    steps = {"resolve-data-window", "prepare-ctr-data", "find-champion", "train-ctr", "champion-challenger-gate",
             "register-model"}
    assert steps <= set(_dag_task_names(workflow)), _dag_task_names(workflow)
    kfp_client.delete_recurring_run(res["id"])


# ------------------------------------------------------------------------------------ the KFP UI
def test_ui_upload_then_run_with_no_parameters(kfp_server, kfp_client, k8s, legacy_yaml):
    """What the UI does: Pipelines > Upload pipeline (multipart, field ``uploadfile``) of the
    ``compile --legacy-kfp`` YAML, then Create run on the newest version without touching a parameter."""
    api = kfp_server.host + "/apis/v2beta1"
    name = f"ctr-ui-{uuid.uuid4().hex[:8]}"
    package = legacy_yaml / "ctr_training_pipeline.yaml"
    with open(package, "rb") as f:
        resp = requests.post(f"{api}/pipelines/upload", params={"name": name, "display_name": name,
                                                               "description": "uploaded as the UI does"},
                             files={"uploadfile": (package.name, f, "application/x-yaml")},
                             timeout=30)
    assert resp.status_code == 200, resp.text
    pipeline_id = resp.json()["pipeline_id"]
    resp = requests.get(f"{api}/pipelines/{pipeline_id}/versions",
                        params={"page_size": 1, "sort_by": "created_at desc"}, timeout=30)
    (version,) = resp.json()["pipeline_versions"]
    # The UI lists the root parameters with their defaults and descriptions from the stored spec.
    root = version["pipeline_spec"]["pipeline_spec"]["root"]["inputDefinitions"]["parameters"]
    assert set(root) == set(pipeline_parameters(legacy=True))
    assert all("defaultValue" in p and p.get("description") for p in root.values())

    run = {"display_name": f"{name}-run",
           "pipeline_version_reference": {"pipeline_id": pipeline_id,
                                          "pipeline_version_id": version["pipeline_version_id"]},
           "runtime_config": {}}
    resp = requests.post(f"{api}/runs", json=run, timeout=30)
    assert resp.status_code == 200, resp.text
    run_id = resp.json()["run_id"]
    # every parameter got its (cluster-oriented) default
    assert _runtime_parameters(_workflow_of(k8s, run_id)) == pipeline_parameters(legacy=True)
    assert kfp_client.get_run(run_id).state in ("PENDING", "RUNNING")


# ---------------------------------------------------------------------------------------- errors
def test_submit_to_a_stopped_server_fails_in_one_line(capsys):
    import socket

    with socket.socket() as s:  # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        host = f"http://127.0.0.1:{s.getsockname()[1]}"
    line = _fails(capsys, "--host", host)
    assert f"--host='{host}'" in line and "no KFP API answers there" in line
    assert "Connection refused" in line and "port-forward" in line


def test_submit_to_a_server_that_is_not_kfp_fails_in_one_line(s3_server, capsys):
    line = _fails(capsys, "--host", s3_server.endpoint)
    assert f"--host='{s3_server.endpoint}'" in line and "not a KFP API endpoint" in line
    assert "HTTP 4" in line


@pytest.mark.parametrize("argv,name", [((), "ctr-training-pipeline"),
                                       (("--cron", "0 0 2 * * *"), "ctr-retraining-pipeline")],
                         ids=["training", "retraining"])
def test_default_package_is_refused_with_the_legacy_hint(kfp_server, kfp_client, capsys, argv, name):
    """KFP 2.14.3 does not know TaskConfig parameters (kfp 2.15+): it refuses the default packages
    at upload. The one line quotes the server and says what to do: --legacy-kfp."""
    def versions() -> List[str]:
        pipeline_id = kfp_client.get_pipeline_id(name)
        return [v.pipeline_version_id for v in _versions(kfp_client, pipeline_id)] if pipeline_id else []

    before = versions()
    line = _fails(capsys, "--host", kfp_server.host, "--experiment", "refused", *argv)
    assert line.startswith(f"ctr-volcano submit: error: upload='{kfp_server.host}': ")
    # 2.14.3's own words (it answers 500 for this InvalidInputError), then the hint
    assert "the KFP API server refused it: HTTP 500:" in line
    assert "InvalidInputError: unknown template format: pipeline spec is invalid" in line
    assert line.endswith("; this package needs a KFP backend >= 2.15 (TaskConfig); for older backends "
                         "submit with --legacy-kfp")
    assert versions() == before  # nothing stored


# -------------------------------------------------------------------------- the retraining pipeline
def test_submit_params_are_checked_against_the_chosen_pipeline(kfp_server, kfp_client, k8s, capsys):
    host = kfp_server.host
    # registry is a retraining parameter, not a training one; a one-off run defaults to training
    line = _fails(capsys, LEGACY, "--host", host, "-p", "registry=/x")
    assert "--param='registry': not a parameter of the training pipeline" in line
    res = _submit(capsys, "--host", host, "--experiment", "one-off-retraining", "--pipeline", "retraining",
                  "-p", "registry=/x")
    assert res["kind"] == "run" and res["pipeline"] == "retraining"
    assert kfp_client.get_pipeline(res["pipeline_id"]).display_name == "ctr-retraining-pipeline"
    assert kfp_client.get_run(res["id"]).pipeline_version_reference.pipeline_version_id == res["version_id"]
    expected = {**pipeline_parameters("retraining", legacy=True), "registry": "/x"}
    assert _runtime_parameters(_workflow_of(k8s, res["id"])) == expected
    # one run, no schedule
    recurring = kfp_client.list_recurring_runs(experiment_id=res["experiment_id"]).recurring_runs
    assert not recurring
