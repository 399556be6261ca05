"""A pipeline run executed by a real KFP backend, as a user would start one.

The scenario: ``ctr-volcano submit --legacy-kfp`` compiles the training pipeline, uploads it to the
real KFP 2.14.3 API server and creates a run; Argo's real workflow-controller runs the Workflow the
server wrote, its pods (KFP's real driver and launcher, Argo's real executor, our component image,
built from its Dockerfile) run on process nodes; the train step's pod creates the Volcano Job with the run's
ServiceAccount and the shipped Role (``deploy/rbac.yaml``), whose gang trains on the process nodes;
the persistence agent reports the run back to the API server. Nothing of the run path is faked; what
is ours is listed in ``docs/kfpserver.md`` (the MLMD gRPC front, the node agent, the host services).

One cluster for the module (process nodes only, so nothing lands on a simulated node), with its own
API server and backend; the sample data goes to SeaweedFS at the pipeline's default ``data_uri``.
"""
from __future__ import annotations

import datetime
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List

import pytest

from tests.cluster.conftest import _pid_alive, image_dirs
from tests.cluster.helpers import SHIPPED_RBAC, assert_trained, ctr_volcano_cli, wait_for
from tests.cluster.kfp_fixtures import _BUILD as _KFP_BUILD

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "kfpserver"))
sys.path.insert(0, str(REPO / "tools" / "minicluster"))

import kfpbackend  # noqa: E402
import kfpserver  # noqa: E402
import minicluster as mc  # noqa: E402

NAMESPACE = "kubeflow"
SAMPLE = REPO / "data" / "sample"
#: The training pipeline's default data_uri is minio://mlpipeline/ctr-volcano/data/sample.
SAMPLE_KEY = "ctr-volcano/data/sample"
#: What the sample needs (ctr_volcano.app.local_run.LOCAL_OVERRIDES): the pipeline's cluster default,
#: 512 rows x 2 epochs, makes too few steps on 180k rows (test AUC 0.747 against the oracle's 0.775).
SAMPLE_TRAINING = ("-p", "batch_size=32", "-p", "epochs=1")


@dataclass
class KfpStack:
    cluster: Any
    server: Any
    backend: Any
    s3: Any
    host: str
    claim_dir: Path
    timings: Dict[str, float] = field(default_factory=dict)

    def client(self):
        import kfp

        return kfp.Client(host=self.host, namespace=NAMESPACE)

    def dead(self) -> List[str]:
        return ([n for n, ok in self.cluster.alive().items() if not ok]
                + [n for n, ok in self.backend.alive().items() if not ok])


@pytest.fixture(scope="module")
def kfp_stack(minicluster_bin, s3_server, tmp_path_factory):
    root = Path(str(_KFP_BUILD.result(kfpserver.build_server)))
    missing = kfpserver.mariadb_missing()
    if missing:
        pytest.skip(f"the KFP run tests need MySQL: {missing}")
    work = tmp_path_factory.mktemp("kfprun")
    t0 = time.monotonic()
    venv = kfpbackend.build_mlmd_env()
    images = image_dirs("trainer", "component")   # the steps' and the gang's built images
    cluster = mc.MiniCluster(minicluster_bin, work / "cluster", schedule_period="500ms", process_nodes=True,
                             kube_scheduler=True, images=images, binary_images=kfpbackend.binary_images(root))
    db = server = backend = None
    try:
        cluster.start()
        cluster.add_process_nodes(2, mc.NodeShape(cpu="8", memory="16Gi"))
        db = kfpserver.MariaDB.start(work / "db")
        kfpserver.prepare_cluster(cluster.api_client(), root / "crd")
        server = kfpserver.KfpApiServer.start(
            root, work / "apiserver", kubeconfig=cluster.kubeconfig, db_port=db.port,
            s3_endpoint=s3_server.endpoint, s3_access_key=s3_server.access_key,
            s3_secret_key=s3_server.secret_key, s3_region=s3_server.region, cache_enabled=False,
            env={"V2_DRIVER_IMAGE": kfpbackend.IMAGES["kfp-driver"],
                 "V2_LAUNCHER_IMAGE": kfpbackend.IMAGES["kfp-launcher"]})
        s3_port = int(s3_server.endpoint.rsplit(":", 1)[1].rstrip("/"))
        backend = kfpbackend.KfpBackend.start(root, work / "backend", cluster=cluster, api_server=server,
                                              s3_port=s3_port, s3_access_key=s3_server.access_key,
                                              s3_secret_key=s3_server.secret_key, mlmd_venv=venv)
        # The launcher's Role, as the user applies it once per namespace (pipeline-runner in kubeflow).
        import yaml

        kfpbackend.apply_manifests(cluster.api_client(),
                                   [d for d in yaml.safe_load_all(SHIPPED_RBAC.read_text()) if d], NAMESPACE)
        # The legacy pipeline's hand-off claim (pvc_name's default), on a host directory.
        claim_dir = work / "ctr-data"
        cluster.create_host_volume("kfp-ctr-data", claim_dir, NAMESPACE, "ctr-data")
        from kubernetes import client as kclient

        kclient.CoreV1Api(cluster.api_client()).create_namespaced_persistent_volume_claim(NAMESPACE, {
            "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "ctr-data"},
            "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "",
                     "resources": {"requests": {"storage": "20Gi"}}}})
        fs = s3_server.filesystem()   # byte for byte: pyarrow would gzip a .gz path once more
        for f in sorted(SAMPLE.glob("*.tsv.gz")):
            with open(f, "rb") as src, fs.open_output_stream(f"mlpipeline/{SAMPLE_KEY}/{f.name}", compression=None) as dst:
                dst.write(src.read())
        stack = KfpStack(cluster, server, backend, s3_server, server.host, claim_dir)
        stack.timings["up_s"] = time.monotonic() - t0
        print(f"\nkfprun: cluster + API server + backend up in {stack.timings['up_s']:.1f}s", file=sys.stderr)
        yield stack
    finally:
        pids = (cluster.pids() + (backend.pids() if backend else [])
                + [p.pid for p in (server.proc if server else None, db.proc if db else None) if p])
        if backend is not None:
            backend.stop()
        if server is not None:
            server.stop()
        if db is not None:
            db.stop()
        cluster.stop()
        left = [p for p in pids if _pid_alive(p)]
        assert not left, f"processes left running: {left}"
        assert not cluster.process_namespaces(), f"network namespaces left: {cluster.process_namespaces()}"


def _submit(stack: KfpStack, *args: str) -> Dict[str, Any]:
    proc = ctr_volcano_cli("submit", "--host", stack.host, "--legacy-kfp", *args)
    # the JSON document is the last thing printed (kfp.Client may print before it)
    lines = proc.stdout.splitlines()
    start = max(i for i, line in enumerate(lines) if line.startswith("{"))
    return json.loads("\n".join(lines[start:]))


def _wait_run(stack: KfpStack, run_id: str, timeout: float) -> Any:
    client = stack.client()
    terminal = {"SUCCEEDED", "FAILED", "SKIPPED", "CANCELED"}

    def done():
        run = client.get_run(run_id)
        return run if str(run.state) in terminal else None

    return wait_for(f"run {run_id} to end", done, timeout=timeout, interval=3, cluster=stack.cluster)


def _workflow(stack: KfpStack, run_id: str) -> Dict[str, Any]:
    from kubernetes import client

    wfs = client.CustomObjectsApi(stack.cluster.api_client()).list_namespaced_custom_object(
        "argoproj.io", "v1alpha1", NAMESPACE, "workflows", label_selector=f"pipeline/runid={run_id}")["items"]
    assert len(wfs) == 1, f"run {run_id}: {len(wfs)} workflows"
    return wfs[0]


def _step_times(wf: Dict[str, Any]) -> Dict[str, float]:
    """Seconds per executed pod of the workflow, by display name (Argo's node times)."""
    import datetime

    def t(s: str) -> float:
        return datetime.datetime.strptime(s, "%Y-%m-%dT%H:%M:%SZ").timestamp()

    out = {}
    for node in (wf.get("status") or {}).get("nodes", {}).values():
        if node.get("type") == "Pod" and node.get("finishedAt"):
            # "<workflow>.root.<task>.executor" / "<workflow>.root.<task>-driver": the task's path
            key = ".".join(node["name"].split(".")[2:]) or node.get("displayName", node["id"])
            out[key] = t(node["finishedAt"]) - t(node["startedAt"])
    return out


def _failure_report(stack: KfpStack, run_id: str) -> str:
    from kubernetes import client

    core = client.CoreV1Api(stack.cluster.api_client())
    lines = []
    try:
        wf = _workflow(stack, run_id)
        for node in wf["status"].get("nodes", {}).values():
            if node.get("phase") not in ("Succeeded", "Skipped"):
                lines.append(f"node {node.get('displayName')}: {node.get('phase')} {node.get('message', '')}")
    except Exception as exc:  # the report must not hide the failure
        lines.append(f"(no workflow: {exc})")
    for pod in core.list_namespaced_pod(NAMESPACE).items:
        if pod.status.phase == "Failed":
            for c in (pod.spec.init_containers or []) + pod.spec.containers:
                try:
                    log = core.read_namespaced_pod_log(pod.metadata.name, NAMESPACE, container=c.name, tail_lines=25)
                except Exception as exc:
                    log = str(exc)
                lines.append(f"--- {pod.metadata.name}/{c.name}:\n{log}")
    for name in ("workflow-controller", "persistence-agent"):
        lines.append(f"--- {name}:\n{stack.backend.log_tail(name, 15)}")
    return "\n".join(lines)


_MLMD_QUERY = """
import json, sys
from ml_metadata.metadata_store import metadata_store
from ml_metadata.proto import metadata_store_pb2 as pb
store = metadata_store.MetadataStore(pb.MetadataStoreClientConfig(host="127.0.0.1", port=int(sys.argv[1])))
out = []
if sys.argv[2] == "run":   # every artifact of a run's context
    ctx = store.get_context_by_type_and_name("system.PipelineRun", sys.argv[3])
    arts = store.get_artifacts_by_context(ctx.id)
else:
    arts = store.get_artifacts_by_id([int(i) for i in sys.argv[2:]])
types = {t.id: t.name for t in store.get_artifact_types()}
for a in arts:
    props = {}
    for k, v in a.custom_properties.items():
        kind = v.WhichOneof("value")
        props[k] = getattr(v, kind) if kind in ("int_value", "double_value", "string_value") else str(v)
    out.append({"id": a.id, "uri": a.uri, "type": types.get(a.type_id, ""), "properties": props})
print(json.dumps(out))
"""


def _mlmd_artifacts(stack: KfpStack, ids: List[Any]) -> List[Dict[str, Any]]:
    """Artifacts by MLMD id (or ``["run", RUN_ID]``: all of a run's), read through the MLMD front
    with MLMD's own Python client."""
    import subprocess

    venv = kfpbackend.build_mlmd_env()
    proc = subprocess.run([str(venv / "bin" / "python"), "-c", _MLMD_QUERY, str(stack.backend.mlmd.port),
                           *map(str, ids)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _task_outputs(run: Any) -> Dict[str, Dict[str, List[int]]]:
    """task display name -> output name -> MLMD artifact ids, from kfp.Client's run details."""
    out: Dict[str, Dict[str, List[int]]] = {}
    for task in (run.run_details.task_details or []):
        arts = {}
        for name, lst in (task.outputs or {}).items():
            arts[name] = [int(i) for i in (lst.artifact_ids or [])]
        out[task.display_name] = arts
    return out


def test_training_run_succeeds_on_the_real_backend(kfp_stack):
    stack = kfp_stack
    t0 = time.monotonic()
    res = _submit(stack, "--run-name", "e2e-training", "-p", "backend=volcano", "-p", "artifact_store=s3",
                  *SAMPLE_TRAINING)
    run = _wait_run(stack, res["id"], timeout=1500)
    wall = time.monotonic() - t0
    assert str(run.state) == "SUCCEEDED", _failure_report(stack, res["id"])
    wf = _workflow(stack, res["id"])
    steps = _step_times(wf)
    print(f"\nkfprun: training run SUCCEEDED in {wall:.0f}s; steps: "
          + ", ".join(f"{k} {v:.0f}s" for k, v in sorted(steps.items())), file=sys.stderr)
    # Argo ran every step of the DAG, the gate included (the sample's model passes min_auc 0.7)
    for task in ("prepare-ctr-data.executor", "train-ctr.executor", "evaluate-ctr.executor",
                 "check-auc-gate.executor", "condition-1.publish-model.executor"):
        assert task in steps, f"{task} did not run: {sorted(steps)}"
    # The evaluation metrics: kfp.Client's task details name the artifacts (MLMD ids), MLMD holds them
    outputs = _task_outputs(stack.client().get_run(res["id"]))
    evaluate = next((v for k, v in outputs.items() if k in ("evaluate", "evaluate-ctr")), {})
    train = next((v for k, v in outputs.items() if k.startswith("train")), {})
    if evaluate.get("metrics") and train.get("model"):
        via = "kfp.Client task details"
        metrics = _mlmd_artifacts(stack, evaluate["metrics"])[0]
        model = _mlmd_artifacts(stack, train["model"])[0]
    else:   # the server listed no output artifacts: the run's context in MLMD has them all
        via = f"the run's MLMD context (kfp.Client task outputs: {outputs})"
        arts = _mlmd_artifacts(stack, ["run", res["id"]])
        metrics = next(a for a in arts if a["type"] == "system.Metrics" and "auc" in a["properties"])
        model = next(a for a in arts if a["type"] == "system.Model" and "/train-ctr/" in a["uri"])
    auc = float(metrics["properties"]["auc"])
    oracle = float(json.loads((SAMPLE / "oracle.json").read_text())["auc"])
    print(f"kfprun: metrics and model found through {via}", file=sys.stderr)
    print(f"kfprun: model AUC {auc:.4f} vs oracle {oracle:.4f} (metrics {metrics['properties']}); "
          f"model at {model['uri']}", file=sys.stderr)
    assert_trained(auc, oracle)
    # The model artifact is in SeaweedFS where KFP's launcher put it
    import pyarrow.fs as pafs

    assert model["uri"].startswith("minio://mlpipeline/v2/artifacts/"), model["uri"]
    files = stack.s3.filesystem().get_file_info(pafs.FileSelector(model["uri"][len("minio://"):], recursive=True))
    names = {Path(f.path).name for f in files if f.type == pafs.FileType.File}
    assert "model_meta.json" in names, sorted(names)
    # The object-store hand-off: the gang read and wrote s3:// and mounted no volume of the run
    job = next(j for j in _volcano_jobs(stack)
               if j["metadata"].get("annotations", {}).get("ctr-volcano/kfp-run-id") == res["id"])
    for task in job["spec"]["tasks"]:
        pod = task["template"]["spec"]
        env = {e["name"]: e.get("value", "") for c in pod["containers"] for e in c.get("env", [])}
        assert env["CTR_DATA_DIR"].startswith("s3://") and env["CTR_OUTPUT_DIR"].startswith("s3://"), env
        assert not [v for v in pod.get("volumes", []) if "persistentVolumeClaim" in v], pod.get("volumes")


def _gang_pods(stack: KfpStack) -> List[Any]:
    from kubernetes import client

    return client.CoreV1Api(stack.cluster.api_client()).list_namespaced_pod(
        NAMESPACE, label_selector="volcano.sh/job-name").items


def _volcano_jobs(stack: KfpStack) -> List[Dict[str, Any]]:
    from kubernetes import client

    return client.CustomObjectsApi(stack.cluster.api_client()).list_namespaced_custom_object(
        "batch.volcano.sh", "v1alpha1", NAMESPACE, "jobs")["items"]


def test_terminating_a_run_deletes_its_volcano_job_and_leaves_no_gang_process(kfp_stack):
    stack = kfp_stack
    res = _submit(stack, "--run-name", "e2e-terminate", "-p", "backend=volcano", "-p", "epochs=20")
    run_id = res["id"]
    before = {j["metadata"]["name"] for j in _volcano_jobs(stack)}
    job = wait_for("the train step's Volcano Job with its gang running", lambda: next(
        (j["metadata"]["name"] for j in _volcano_jobs(stack) if j["metadata"]["name"] not in before
         and sum(1 for p in _gang_pods(stack) if p.metadata.labels.get("volcano.sh/job-name") == j["metadata"]["name"]
                 and p.status.phase == "Running") == 4), None), timeout=900, interval=2, cluster=stack.cluster)
    netns = {p.metadata.annotations.get("minicluster.process/netns") for p in _gang_pods(stack)
             if p.metadata.labels.get("volcano.sh/job-name") == job}
    assert len(netns) == 4, netns
    stack.client().terminate_run(run_id)
    t0 = time.monotonic()
    wait_for(f"Volcano Job {job} deleted after the run was terminated",
             lambda: job not in {j["metadata"]["name"] for j in _volcano_jobs(stack)}, timeout=300, interval=2)
    deleted_s = time.monotonic() - t0
    wait_for("the gang's pods gone", lambda: not any(
        p.metadata.labels.get("volcano.sh/job-name") == job for p in _gang_pods(stack)), timeout=120)
    left = [ns for ns in netns if ns in stack.cluster.process_namespaces()]
    assert not left, f"gang network namespaces (and their processes) left: {left}"
    run = _wait_run(stack, run_id, timeout=300)
    print(f"\nkfprun: terminated run {run.state}; Volcano Job {job} deleted {deleted_s:.0f}s after terminate_run",
          file=sys.stderr)
    assert str(run.state) in ("CANCELED", "FAILED"), run.state


def test_a_recurring_retraining_run_fires_and_trains_on_the_day_it_runs(kfp_stack):
    """The product's nightly shape, on the real backend: ``submit --pipeline retraining --schedule``
    without ``run_date``; the scheduled-workflow controller fires a run, whose data window is the
    day it ran (the sample is under today's and tomorrow's dates, UTC, in case it runs past
    midnight); it validates, trains, registers and becomes the champion. KFP 2.14.3's driver leaves
    the run's schedule and create time placeholders unset (seen here), so the date comes from the
    executor's clock (``today``; docs/retraining.md); a backend that fills them makes it
    ``schedule_time`` and this test says so."""
    stack = kfp_stack
    client = stack.client()
    today = datetime.datetime.now(datetime.timezone.utc).date()
    for date in (today, today + datetime.timedelta(days=1)):
        day = stack.claim_dir / "clicks" / f"day={date.isoformat()}"
        day.mkdir(parents=True, exist_ok=True)
        for f in sorted(SAMPLE.glob("*.tsv.gz")):
            (day / f.name).write_bytes(f.read_bytes())
        os.chmod(day, 0o777)
    res = _submit(stack, "--pipeline", "retraining", "--experiment", "e2e-recurring", "--schedule",
                  "*/20 * * * * *", "-p", "data_uri=/mnt/ctr/clicks/day={date}", "-p", "registry=/mnt/ctr/registry",
                  *SAMPLE_TRAINING)
    rec_id, exp_id = res["id"], res["experiment_id"]

    def fired():
        runs = client.list_runs(experiment_id=exp_id, page_size=10).runs or []
        return [r for r in runs if getattr(r, "recurring_run_id", None) == rec_id] or None

    runs = wait_for("the recurring run to fire", fired, timeout=180, interval=2)
    client.disable_recurring_run(rec_id)   # one run is the point; the schedule would go on
    run_id = runs[0].run_id
    run = _wait_run(stack, run_id, timeout=1500)
    assert str(run.state) == "SUCCEEDED", _failure_report(stack, run_id)
    client.delete_recurring_run(rec_id)
    champion = json.loads((stack.claim_dir / "registry" / "ctr-dnn" / "champion.json").read_text())
    assert run_id in json.dumps(champion), champion
    # the validation step ran on the backend, before training (no champion yet: the schema alone), and
    # the registry entry records its verdict and the window of the scheduled day; the model carries its
    # training data's profile
    from ctr_volcano.retraining.registry import ModelRegistry

    version = ModelRegistry(str(stack.claim_dir / "registry"), "ctr-dnn").get(run_id)
    assert version is not None and version.meta["validation"]["verdict"] == "pass", version
    window = version.meta["window"]
    assert window["date_source"] == "today" and window["run_date"] in (
        today.isoformat(), (today + datetime.timedelta(days=1)).isoformat()), window
    model_meta = json.loads((Path(version.model_uri) / "model_meta.json").read_text())
    assert model_meta["data_profile"]["rows"] > 0, model_meta
