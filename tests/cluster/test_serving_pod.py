"""The model server run from the serving image on a process node, as KServe would run it.

The pod's container is the predictor of the product's own InferenceService
(``ctr_volcano.serving.inference_service.render``: the serving image, no command, so the image's
``ENTRYPOINT ["ctr-volcano", "serve"]`` with the manifest's ``--model /mnt/models --host 0.0.0.0
--port 8080``), the model where KServe's storage initializer puts it (``/mnt/models``, here a
read-only claim), the image's user. A V2 client in the pod network (the pod's own network namespace,
as a sidecar would be) sends raw Criteo rows to the pod's address; the probabilities equal the numpy
scorer's on prep's transform of the same rows.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.cluster.conftest import built_images
from tests.cluster.helpers import root_image, wait_for
from tests.cluster.test_process_nodes import _claim
from tests.serving_fixtures import raw_lines, trained_model  # noqa: F401  (session fixture)

pytestmark = pytest.mark.cluster

ROWS = 5000
#: Run with the host's interpreter inside the pod's network namespace: wait for readiness, POST.
CLIENT = r"""
import json, sys, time, urllib.request
url, body = sys.argv[1], open(sys.argv[2]).read().encode()
deadline = time.time() + 180
while True:
    try:
        with urllib.request.urlopen(url + "/v2/health/ready", timeout=2) as r:
            if r.status == 200:
                break
    except OSError:
        if time.time() > deadline:
            raise
        time.sleep(0.5)
req = urllib.request.Request(url + "/v2/models/ctr/infer", data=body, headers={"Content-Type": "application/json"})
with urllib.request.urlopen(req, timeout=120) as r:
    print(r.read().decode())
"""


def _body(rows):
    """The V2 request of raw rows: one BYTES input per raw column, as any V2 client sends it."""
    from ctr_volcano.serving.raw import BYTES, RAW_INPUTS

    columns = list(zip(*[r[1:1 + len(RAW_INPUTS)] for r in rows]))
    return {"inputs": [{"name": n, "datatype": BYTES, "shape": [len(rows)], "data": list(c)}
                       for n, c in zip(RAW_INPUTS, columns)]}


def _expected(model_dir: Path, rows):
    """The numpy scorer on prep's per-line transform of the same raw rows."""
    from ctr_model.features import DENSE_COLUMNS, SPARSE_COLUMNS, transform_line
    from ctr_model.infer import load_model

    scorer = load_model(str(model_dir))
    parsed = [transform_line("\t".join(r), int(scorer.meta["hash_buckets"])) for r in rows]
    cols = {c: np.array([p[1][i] for p in parsed], dtype=np.float32) for i, c in enumerate(DENSE_COLUMNS)}
    cols.update({c: np.array([p[2][i] for p in parsed], dtype=np.int64) for i, c in enumerate(SPARSE_COLUMNS)})
    return scorer.predict(cols)


def _server_roots(netns: str):
    """(root image, UID) of each process of the pod's network namespace."""
    out = []
    for pid in subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True).stdout.split():
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            mountinfo = Path(f"/proc/{pid}/mountinfo").read_text()
        except OSError:
            continue
        uid = int(next(line.split()[1] for line in status.splitlines() if line.startswith("Uid:")))
        out.append((root_image(mountinfo), uid))
    return out


def test_the_serving_image_answers_v2_requests_like_the_scorer(sandbox, tmp_path, trained_model, sample_dir):  # noqa: F811
    from kubernetes import client

    from ctr_volcano.images import serving_image
    from ctr_volcano.serving.inference_service import render

    serving = built_images()["serving"]
    core = client.CoreV1Api(sandbox.api())
    ns = sandbox.namespace
    sandbox.add_process_nodes(1)
    claim = _claim(sandbox, tmp_path)
    shutil.copytree(trained_model[1], claim / "model")
    manifest = render("ctr", "pvc://ctr-data/model", serving_image(), namespace=ns)
    (container,) = manifest["spec"]["predictor"]["containers"]
    assert "command" not in container and container["image"] == serving.ref
    container["volumeMounts"] = [{"name": "model", "mountPath": "/mnt/models", "subPath": "model", "readOnly": True}]
    core.create_namespaced_pod(ns, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "ctr-predictor"},
                                    "spec": {"schedulerName": "volcano", "nodeSelector": sandbox.node_selector,
                                             "containers": [container], "volumes": [{"name": "model", "persistentVolumeClaim": {
                                                 "claimName": "ctr-data", "readOnly": True}}]}})
    pod = wait_for("the predictor pod Running", lambda: (lambda p: p if p.status.phase == "Running" else None)(
        core.read_namespaced_pod("ctr-predictor", ns)), timeout=120, cluster=sandbox.cluster)
    netns = pod.metadata.annotations["minicluster.process/netns"]
    rows = raw_lines(sample_dir, ROWS)
    (tmp_path / "body.json").write_text(json.dumps(_body(rows)))
    (tmp_path / "client.py").write_text(CLIENT)
    proc = subprocess.run(["ip", "netns", "exec", netns, sys.executable, str(tmp_path / "client.py"),
                           f"http://{pod.status.pod_ip}:8080", str(tmp_path / "body.json")],
                          capture_output=True, text=True, timeout=300)
    log = core.read_namespaced_pod_log("ctr-predictor", ns)
    assert proc.returncode == 0, f"{proc.stderr[-2000:]}\nserver log:\n{log[-3000:]}"
    served = np.array(json.loads(proc.stdout)["outputs"][0]["data"])
    assert len(served) == ROWS and np.abs(served - _expected(trained_model[1], rows)).max() <= 1e-6
    # the server is the image's ENTRYPOINT, in the serving image's tree, as its non-root user
    assert (str(serving.rootfs), 1000) in _server_roots(netns), _server_roots(netns)
    assert core.read_namespaced_pod("ctr-predictor", ns).status.phase == "Running", log[-3000:]
