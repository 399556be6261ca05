"""``ctr-volcano compile`` and ``submit`` (against a loopback fake KFP API server), parameter parsing."""
from __future__ import annotations

import http.server
import json
import threading

import pytest
import yaml

from ctr_volcano import cli
from ctr_volcano.errors import BadInput
from ctr_volcano.pipeline_run import parse_params, pipeline_parameters


class _FakeKfp(http.server.BaseHTTPRequestHandler):
    """Just enough of the KFP v2beta1 REST API for kfp.Client's submit paths; records every request."""

    requests: list = []

    def _reply(self, body):
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802
        self.requests.append(("GET", self.path, None))
        if self.path.startswith("/apis/v2beta1/healthz"):
            return self._reply({"multi_user": False})
        return self._reply({})  # experiment lookup by name: none yet

    def do_POST(self):  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            parsed = body
        self.requests.append(("POST", self.path, parsed))
        if self.path.startswith("/apis/v2beta1/experiments"):
            return self._reply({"experiment_id": "exp-1", "display_name": parsed["display_name"]})
        if self.path.startswith("/apis/v2beta1/runs"):
            return self._reply({"run_id": "run-1", "display_name": parsed["display_name"]})
        if self.path.startswith("/apis/v2beta1/recurringruns"):
            return self._reply({"recurring_run_id": "rr-1", "display_name": parsed["display_name"]})
        self.send_error(404)

    def log_message(self, *args):
        pass


@pytest.fixture
def fake_kfp():
    _FakeKfp.requests = []
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


def test_submit_one_run(fake_kfp, capsys):
    host, requests = fake_kfp
    rc = cli.main(["submit", "--host", host, "--experiment", "nightly", "--run-name", "try-1",
                   "-p", "epochs=3", "-p", "min_auc=0.75", "-p", "backend=volcano"])
    assert rc == 0
    printed = capsys.readouterr().out
    result = json.loads(printed[printed.index("{\n"):])
    assert result == {"kind": "run", "id": "run-1", "experiment_id": "exp-1",
                      "url": f"{host}/#/runs/details/run-1"}
    assert _posts(requests, "/apis/v2beta1/experiments")[0]["display_name"] == "nightly"
    (run,) = _posts(requests, "/apis/v2beta1/runs")
    assert run["display_name"] == "try-1" and run["experiment_id"] == "exp-1"
    assert run["runtime_config"]["parameters"] == {"epochs": 3, "min_auc": 0.75, "backend": "volcano"}
    spec = run["pipeline_spec"]["pipeline_spec"]
    assert spec["pipelineInfo"]["name"] == "ctr-training-pipeline"
    assert "platform_spec" in run["pipeline_spec"]  # the PVC mount travels with the run
    assert not _posts(requests, "/apis/v2beta1/recurringruns")


def test_submit_recurring_run(fake_kfp, capsys):
    host, requests = fake_kfp
    rc = cli.main(["submit", "--host", host, "--cron", "0 0 2 * * *", "--max-concurrency", "2"])
    assert rc == 0
    printed = capsys.readouterr().out
    result = json.loads(printed[printed.index("{\n"):])
    assert result["kind"] == "recurring_run" and result["id"] == "rr-1"
    (rec,) = _posts(requests, "/apis/v2beta1/recurringruns")
    assert rec["trigger"] == {"cron_schedule": {"cron": "0 0 2 * * *"}}
    assert rec["max_concurrency"] == 2 and rec["no_catchup"] is True and rec["mode"] == "ENABLE"
    assert rec["experiment_id"] == "exp-1"
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
    assert "pvcMount" in json.dumps(platform)
    root = doc["root"]["inputDefinitions"]["parameters"]
    assert set(root) == set(params)
    for name, spec in root.items():
        assert spec.get("isOptional") is True and "defaultValue" in spec, name
        assert len(spec.get("description", "")) > 15, f"{name}: UI text missing"
    assert doc["pipelineInfo"]["description"].startswith("Train a click-through-rate model")
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == ["check_auc_gate.yaml", "ctr_training_pipeline.yaml", "evaluate_ctr.yaml",
                       "prepare_ctr_data.yaml", "publish_model.yaml", "train_ctr.yaml"]
