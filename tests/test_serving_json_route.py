"""The plain-JSON infer route (:mod:`ctr_volcano.serving.json_infer`) ahead of KServe's: which requests it
answers and which it leaves to KServe's route (its own logic, on a small app whose stand-in for KServe's
route records what reaches it), that it reads inputs as KServe does, and, through a real server on
loopback, that its answer is KServe's answer byte for byte."""
from __future__ import annotations

import asyncio
import json
import sys
import urllib.request

import numpy as np
import pytest

pytest.importorskip("kserve")

from fastapi import FastAPI, Request

from ctr_volcano.errors import BadInput
from ctr_volcano.serving.json_infer import NotOurs, install, read_columns
from tests.serving_fixtures import raw_lines, trained_model  # noqa: F401
from tools.model_server import model_server
from tools.v2_client import rows_to_body

PLAIN = {"id": "r1", "inputs": [{"name": "a", "datatype": "BYTES", "shape": [2], "data": ["x", ""]},
                                {"name": "b", "datatype": "FP32", "shape": [2, 1], "data": [[1.5], [2.0]]}]}


class _Model:
    """Stands in for CtrModel: ``score`` refuses an input named ``bad`` as the transforms refuse a value."""

    name, ready = "ctr", True

    def __init__(self):
        self.scored = []

    def score(self, columns):
        if "bad" in columns:
            raise BadInput("bad", "?", "fix it")
        self.scored.append(columns)
        rows = len(next(iter(columns.values()))[1])
        return ["probability", "probability_cvr"], [np.full(rows, 0.25, np.float32), np.full(rows, 0.5, np.float32)]


async def _kserve_route(model_name: str, request: Request):   # where KServe's route would be
    request.app.state.reached.append((model_name, await request.body()))
    return {"answered_by": "kserve"}


@pytest.fixture
def app():
    api = FastAPI()
    api.state.reached = []
    api.add_api_route("/v2/models/{model_name}/infer", _kserve_route, methods=["POST"])
    model = _Model()
    install(api, model)
    return api, model, api.state.reached


class _Answer:
    def __init__(self, status: int, body: bytes):
        self.status_code, self.body = status, body

    def json(self):
        return json.loads(self.body)


def _post(api, body, model="ctr", headers=None) -> _Answer:
    """One POST through the ASGI app, as a server hands it over."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    path = f"/v2/models/{model}/infer"
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
             "scheme": "http", "path": path, "raw_path": path.encode(), "root_path": "", "query_string": b"",
             "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
             + [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()],
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 8080)}
    messages = [{"type": "http.request", "body": data, "more_body": False}]
    sent = []

    async def receive():
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)
    asyncio.run(api(scope, receive, send))
    return _Answer(sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:]))


def test_a_plain_request_is_answered_by_the_route_as_kserve_answers(app):
    api, model, reached = app
    response = _post(api, PLAIN)
    assert response.status_code == 200 and reached == []
    assert response.json() == {"model_name": "ctr", "model_version": None, "id": "r1", "parameters": None,
                               "outputs": [{"name": "probability", "shape": [2], "datatype": "FP64",
                                            "parameters": None, "data": [0.25, 0.25]},
                                           {"name": "probability_cvr", "shape": [2], "datatype": "FP64",
                                            "parameters": None, "data": [0.5, 0.5]}]}
    (columns,) = model.scored
    assert columns["a"][0] == "BYTES" and columns["a"][1].tolist() == ["x", ""]
    assert columns["b"][1].dtype == np.float32 and columns["b"][1].shape == (2, 1)
    without_id = _post(api, {"inputs": PLAIN["inputs"]}).json()["id"]
    assert len(without_id) == 36 and without_id != _post(api, {"inputs": PLAIN["inputs"]}).json()["id"]


def _with(**changes):
    body = json.loads(json.dumps(PLAIN))
    for key, value in changes.items():
        if key.startswith("input_"):
            body["inputs"][0][key[len("input_"):]] = value
        else:
            body[key] = value
    return body


@pytest.mark.parametrize("body,model,headers", [
    (_with(parameters={"binary_data_output": True}), "ctr", None),
    (_with(outputs=[{"name": "probability"}]), "ctr", None),
    (_with(input_parameters={"binary_data_size": 3}), "ctr", None),
    (_with(input_shape=[3]), "ctr", None),                       # data that does not fit its shape
    (_with(input_datatype="FP8"), "ctr", None),
    (_with(id=7), "ctr", None),
    ({"inputs": PLAIN["inputs"] + [{"name": "bad", "datatype": "BYTES", "shape": [2], "data": ["", ""]}]}, "ctr", None),
    (PLAIN, "other", None),
    (PLAIN, "ctr", {"Inference-Header-Content-Length": str(len(json.dumps(PLAIN)))}),
    (b"{not json", "ctr", None),
    (b"[]", "ctr", None),
    (json.dumps(_with(input_datatype="FP32", input_data=[1.0, float("nan")])).encode(), "ctr", None),  # NaN: not JSON
])
def test_every_other_request_reaches_kserves_route_with_its_body(app, body, model, headers):
    api, _, reached = app
    response = _post(api, body, model, headers)
    assert response.json() == {"answered_by": "kserve"}
    sent = body if isinstance(body, bytes) else json.dumps(body).encode()
    assert reached == [(model, sent)]


def test_a_model_not_ready_is_left_to_kserve(app):
    api, model, reached = app
    model.ready = False
    assert _post(api, PLAIN).json() == {"answered_by": "kserve"} and len(reached) == 1


@pytest.mark.parametrize("item", [
    {"name": "s", "datatype": "BYTES", "shape": [3], "data": ["a", "", "7"]},
    {"name": "f", "datatype": "FP32", "shape": [2], "data": [1.25, None]},
    {"name": "d", "datatype": "FP64", "shape": [2, 1], "data": [[1e300], [-2.5]]},
    {"name": "i", "datatype": "INT64", "shape": [2], "data": [3, 2 ** 40]},
    {"name": "j", "datatype": "INT32", "shape": [1, 2], "data": [[1, -1]]},
])
def test_inputs_are_read_as_kserves_as_numpy_reads_them(item):
    from kserve.protocol.infer_type import InferInput

    _, columns = read_columns(json.dumps({"inputs": [item]}).encode())
    datatype, got = columns[item["name"]]
    want = InferInput(item["name"], item["shape"], item["datatype"], item["data"]).as_numpy()
    assert datatype == item["datatype"] and got.dtype == want.dtype and got.shape == want.shape
    assert got.tolist() == want.tolist() or np.array_equal(got, want, equal_nan=True)


def test_a_repeated_input_name_is_not_read():
    with pytest.raises(NotOurs):
        read_columns(json.dumps({"inputs": [PLAIN["inputs"][0]] * 2}).encode())


@pytest.mark.slow
def test_the_real_server_answers_plain_json_as_its_kserve_route_does(trained_model, sample_dir, tmp_path):  # noqa: F811
    """The same request, sent plain (this route) and with the binary extension's header over a body with
    no binary part (left to KServe's route, which reads it as the same JSON): the same bytes back."""
    body = rows_to_body(raw_lines(sample_dir, 300))
    body["id"] = "same-id"
    data = json.dumps(body).encode()
    with model_server(sys.executable, trained_model[1], tmp_path / "server.log") as url:
        def post(headers):
            req = urllib.request.Request(f"{url}/v2/models/ctr/infer", data=data, method="POST",
                                         headers={"Content-Type": "application/json", **headers})
            with urllib.request.urlopen(req, timeout=60) as resp:
                return resp.read()
        ours, kserves = post({}), post({"Inference-Header-Content-Length": str(len(data))})
    assert ours == kserves
    # KServe's timing middleware names each request by the first route matching it: this one, installed
    assert "json_infer.JsonInferRoute" in (tmp_path / "server.log").read_text()
    assert len(json.loads(ours)["outputs"][0]["data"]) == 300

