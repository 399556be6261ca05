"""``ctr-volcano compile`` and ``submit`` (against a loopback fake KFP API server), parameter parsing."""
from __future__ import annotations

import http.server
import json
import os
import re
import shutil
import threading
import urllib.parse

import pytest
import yaml

from ctr_volcano import cli
from ctr_volcano.errors import BadInput
from ctr_volcano.pipeline_run import parse_params, pipeline_parameters


class _FakeKfp(http.server.BaseHTTPRequestHandler):
    """Just enough of the KFP v2beta1 REST API for kfp.Client's upload/run/schedule paths.

    Stateful (pipelines and versions persist between requests of one test) and records every request.
    """

    requests: list = []
    pipelines: dict = {}   # pipeline id -> display name
    versions: dict = {}    # pipeline id -> [(version id, display name, spec text)]

    def _reply(self, body):
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _query(self):
        return {k: v[0] for k, v in urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query).items()}

    def _name_filter(self):
        f = self._query().get("filter")
        return json.loads(f)["predicates"][0]["stringValue"] if f else None

    def do_GET(self):
        self.requests.append(("GET", self.path, None))
        path = urllib.parse.urlsplit(self.path).path
        if path == "/apis/v2beta1/healthz":
            return self._reply({"multi_user": False})
        if path == "/apis/v2beta1/pipelines":
            name = self._name_filter()
            found = [{"pipeline_id": i, "display_name": n} for i, n in self.pipelines.items() if n == name]
            return self._reply({"pipelines": found} if found else {})
        m = re.fullmatch(r"/apis/v2beta1/pipelines/([^/]+)/versions", path)
        if m:
            name = self._name_filter()
            found = [{"pipeline_version_id": v, "display_name": n} for v, n, _ in self.versions.get(m[1], [])
                     if name is None or n == name]
            return self._reply({"pipeline_versions": found} if found else {})
        return self._reply({})  # experiment lookup by name: none yet

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        path, q = urllib.parse.urlsplit(self.path).path, self._query()
        if path.startswith("/apis/v2beta1/pipelines/upload"):
            # multipart/form-data with one file part: keep the file's bytes
            spec = body.split(b"\r\n\r\n", 1)[1].rsplit(b"\r\n--", 1)[0].decode("utf-8")
            self.requests.append(("POST", self.path, spec))
            if path.endswith("upload_version"):
                pid = q["pipelineid"]
                vid = f"v-{sum(map(len, self.versions.values())) + 1}"
                self.versions[pid].append((vid, q["name"], spec))
                return self._reply({"pipeline_id": pid, "pipeline_version_id": vid, "display_name": q["name"]})
            pid = f"p-{len(self.pipelines) + 1}"
            self.pipelines[pid] = q["name"]
            self.versions[pid] = [(f"v-{pid}-0", q["name"], spec)]
            return self._reply({"pipeline_id": pid, "display_name": q["name"]})
        parsed = json.loads(body) if body else None
        self.requests.append(("POST", self.path, parsed))
        if path == "/apis/v2beta1/experiments":
            return self._reply({"experiment_id": "exp-1", "display_name": parsed["display_name"]})
        if path == "/apis/v2beta1/runs":
            return self._reply({"run_id": "run-1", "display_name": parsed["display_name"]})
        if path == "/apis/v2beta1/recurringruns":
            return self._reply({"recurring_run_id": "rr-1", "display_name": parsed["display_name"]})
        self.send_error(404)

    def log_message(self, *args):
        pass


@pytest.fixture
def fake_kfp():
    _FakeKfp.requests, _FakeKfp.pipelines, _FakeKfp.versions = [], {}, {}
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _FakeKfp)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", _FakeKfp.requests
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=10)


def _posts(requests, prefix):
    return [body for method, path, body in requests if method == "POST" and path.startswith(prefix)]


def _printed_json(capsys):
    printed = capsys.readouterr().out
    return json.loads(printed[printed.index("{\n"):])


def _uploads(requests):
    return [(path, body) for method, path, body in requests if path.startswith("/apis/v2beta1/pipelines/upload")]


def test_submit_uploads_then_runs_the_version(fake_kfp, capsys):
    host, requests = fake_kfp
    rc = cli.main(["submit", "--host", host, "--experiment", "nightly", "--run-name", "try-1",
                   "-p", "epochs=3", "-p", "min_auc=0.75", "-p", "backend=volcano"])
    assert rc == 0
    result = _printed_json(capsys)
    assert result["kind"] == "run" and result["id"] == "run-1" and result["pipeline_id"] == "p-1"
    assert result["url"] == f"{host}/#/runs/details/run-1"
    # first submit: the pipeline is created, then this package is added as a content-named version
    (p_path, p_spec), (v_path, v_spec) = _uploads(requests)
    assert "/upload?" in p_path and "name=ctr-training-pipeline" in p_path
    assert "upload_version" in v_path and f"name={result['version_name']}" in v_path
    assert "pipelineInfo" in v_spec and "taskConfigPassthroughs" in v_spec and "workspace" in v_spec and v_spec == p_spec
    assert _posts(requests, "/apis/v2beta1/experiments")[0]["display_name"] == "nightly"
    (run,) = _posts(requests, "/apis/v2beta1/runs")
    assert run["display_name"] == "try-1" and run["experiment_id"] == "exp-1"
    assert run["runtime_config"]["parameters"] == {"epochs": 3, "min_auc": 0.75, "backend": "volcano"}
    assert run["pipeline_version_reference"] == {"pipeline_id": "p-1",
                                                 "pipeline_version_id": result["version_id"]}
    assert not _posts(requests, "/apis/v2beta1/recurringruns")


def test_submit_twice_reuses_the_version_and_new_code_adds_one(fake_kfp, capsys, monkeypatch):
    host, requests = fake_kfp
    assert cli.main(["submit", "--host", host]) == 0
    first = _printed_json(capsys)
    assert cli.main(["submit", "--host", host]) == 0
    second = _printed_json(capsys)
    assert second["version_id"] == first["version_id"] and second["pipeline_id"] == first["pipeline_id"]
    assert len(_uploads(requests)) == 2  # unchanged code: nothing uploaded by the second submit
    # changed code (here: another default) -> a new version of the same pipeline
    from kfp import compiler

    from pipelines.ctr_training_pipeline import PIPELINE_NAME

    orig = compiler.Compiler.compile

    def compile_with_override(self, func, path, **kw):
        return orig(self, func, path, pipeline_parameters={"min_auc": 0.8}, **kw)

    monkeypatch.setattr(compiler.Compiler, "compile", compile_with_override)
    assert cli.main(["submit", "--host", host]) == 0
    third = _printed_json(capsys)
    assert third["pipeline_id"] == first["pipeline_id"] and third["version_id"] != first["version_id"]
    (path, spec) = _uploads(requests)[-1]
    assert "upload_version" in path and f"pipelineid={first['pipeline_id']}" in path
    assert PIPELINE_NAME in third["version_name"]


def test_submit_recurring_run(fake_kfp, capsys):
    host, requests = fake_kfp
    rc = cli.main(["submit", "--host", host, "--cron", "0 0 2 * * *", "--max-concurrency", "2"])
    assert rc == 0
    result = _printed_json(capsys)
    assert result["kind"] == "recurring_run" and result["id"] == "rr-1"
    (rec,) = _posts(requests, "/apis/v2beta1/recurringruns")
    assert rec["trigger"] == {"cron_schedule": {"cron": "0 0 2 * * *"}}
    assert rec["max_concurrency"] == 2 and rec["no_catchup"] is True and rec["mode"] == "ENABLE"
    assert rec["experiment_id"] == "exp-1"
    assert rec["pipeline_version_reference"]["pipeline_version_id"] == result["version_id"]
    assert not _posts(requests, "/apis/v2beta1/runs")


@pytest.mark.parametrize("argv,field", [
    (["--cron", "0 2 * * *"], "--cron"),                 # 5 fields: KFP wants seconds first
    (["--cron", "0 0 2 * * *", "--max-concurrency", "0"], "--max-concurrency"),
    (["-p", "epoch=3"], "--param"),                      # typo in the name
    (["-p", "epochs=three"], "--param"),
    (["-p", "epochs"], "--param"),
])
def test_submit_bad_flags_fail_before_any_request(fake_kfp, capsys, argv, field):
    host, requests = fake_kfp
    assert cli.main(["submit", "--host", host] + argv) == 2
    err = capsys.readouterr().err
    assert field in err
    assert not [r for r in requests if r[0] == "POST"]


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
                       "ctr_retraining_pipeline.yaml", "ctr_training_pipeline.yaml", "evaluate_ctr.yaml",
                       "find_champion.yaml", "prepare_ctr_data.yaml", "publish_model.yaml",
                       "register_model.yaml", "resolve_data_window.yaml", "train_ctr.yaml"]
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
    assert "not a pipeline parameter" in capsys.readouterr().err
    assert not (tmp_path / "w" / "summary.json").exists()


def test_run_with_bad_raw_data_fails_clearly_in_the_prep_step(tmp_path, capsys):
    raw = tmp_path / "raw.tsv"
    raw.write_text("this is not criteo\n" * 50)
    rc = cli.main(["run", "--data", str(raw), "--workdir", str(tmp_path / "w")])
    err = capsys.readouterr().err
    assert rc == 2
    assert "Inner task failed: 'prepare-ctr-data'" in err and "\x1b[" not in err
    assert str(tmp_path / "w" / "runs") in err
    assert not (tmp_path / "w" / "summary.json").exists()
    scratch = re.search(r"scratch files \(gang logs\) under (\S+)", err)[1]
    assert os.path.isdir(scratch)  # kept for diagnosis after a failure
    shutil.rmtree(scratch)


def test_submit_schedule_runs_the_retraining_pipeline(fake_kfp, capsys):
    host, requests = fake_kfp
    rc = cli.main(["submit", "--host", host, "--schedule", "0 0 2 * * *", "-p", "lag_days=1",
                   "-p", "registry=/mnt/ctr/registry"])
    assert rc == 0
    result = _printed_json(capsys)
    assert result["kind"] == "recurring_run" and result["pipeline"] == "retraining"
    (path, spec) = _uploads(requests)[0]   # the pipeline is created, then the versioned upload
    assert "name=ctr-retraining-pipeline" in path
    doc = next(yaml.safe_load_all(spec))
    assert doc["pipelineInfo"]["name"] == "ctr-retraining-pipeline"
    (rec,) = _posts(requests, "/apis/v2beta1/recurringruns")
    assert rec["runtime_config"]["parameters"] == {"lag_days": 1, "registry": "/mnt/ctr/registry"}
    assert rec["trigger"] == {"cron_schedule": {"cron": "0 0 2 * * *"}}


def test_submit_params_are_checked_against_the_chosen_pipeline(fake_kfp, capsys):
    host, requests = fake_kfp
    # registry is a retraining parameter, not a training one; a one-off run defaults to training
    assert cli.main(["submit", "--host", host, "-p", "registry=/x"]) == 2
    assert "not a pipeline parameter" in capsys.readouterr().err
    assert cli.main(["submit", "--host", host, "--pipeline", "retraining", "-p", "registry=/x"]) == 0
    assert _printed_json(capsys)["kind"] == "run"
    assert not _posts(requests, "/apis/v2beta1/recurringruns")
