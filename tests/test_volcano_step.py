"""The training step's Volcano path end to end (fake API server, real files), RBAC and deploy files.

The "cluster" here is the HTTP-level fake from ``tests/fake_k8s.py``; its script plays the gang: it
reads the data directory and output directory from the submitted Job's pod env (as the pods would),
checks the data arrived on the "PVC" (a temp dir), and writes the model and metrics there.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from ctr_volcano.app.cli.main import build_parser
from ctr_volcano.errors import BadInput, TrainingJobFailed
from ctr_volcano.training.params import StepParams
from ctr_volcano.training.step import run_training_step
from ctr_volcano.training.volcano.client import KubeClient
from ctr_volcano.training.volcano.handoff import build_pvc, copy_model_out, prepare_run_dir
from ctr_volcano.training.volcano.rbac import RULES, allows, build_rbac
from ctr_volcano.training.volcano.spec import PREEMPTION_RESTARTS
from tests.fake_k8s import FakeKube

REPO = Path(__file__).resolve().parents[1]
NS = "ml"


@pytest.fixture
def fake(volcano_job_crd):
    server = FakeKube(crd_path=volcano_job_crd).start()
    server.put_pvc(NS, "claim")  # the RWX claim the tests hand data over through
    yield server
    server.stop()
    refused = [v for v in server.verbs() if not allows(v[1], v[2], v[0])]
    assert not refused, f"requests outside the launcher's Role: {refused}"


def pod_env(job, task="trainer"):
    spec = next(t for t in job["spec"]["tasks"] if t["name"] == task)
    return {e["name"]: e.get("value") for e in spec["template"]["spec"]["containers"][0]["env"]}


def play_gang(seen):
    """Script steps: Pending, Running, then the trainers 'train' and the job completes."""
    def train(fake):
        (ns, name), job = next(iter(fake.jobs.items()))
        env = pod_env(job)
        data = Path(env["CTR_DATA_DIR"])
        seen["data_files"] = sorted(p.name for p in data.iterdir())
        seen["config"] = json.loads(env["CTR_TRAIN_CONFIG"])
        out = Path(env["CTR_OUTPUT_DIR"])
        (out / "model").mkdir(parents=True)
        (out / "model" / "model_meta.json").write_text('{"schema_version": 1}')
        (out / "metrics.json").write_text(json.dumps({"final_loss": 0.4, "rows": 12, "note": "x"}))
        fake.set_phase(ns, name, "Completed", succeeded=2)

    def run(fake):
        (ns, name), _ = next(iter(fake.jobs.items()))
        fake.set_phase(ns, name, "Running", running=4)

    return [lambda f: None, run, train]


@pytest.fixture
def prep(tmp_path):
    # the layout of a `ctr-volcano prep` output (shard contents are not read on this path)
    from ctr_model.features import write_split_schema

    d = tmp_path / "kfp-inputs" / "prep"
    (d / "train").mkdir(parents=True)
    for i in (0, 1):
        (d / "train" / f"part-{i:05d}.parquet").write_bytes(b"PAR1")
    write_split_schema(str(d / "train"), hash_buckets=1000, rows=12)
    return d


def test_volcano_step_hands_data_in_and_model_out_through_the_pvc(fake, tmp_path, prep):
    pvc = tmp_path / "pvc"
    pvc.mkdir()
    seen, ids = {}, []
    fake.script = play_gang(seen)
    params = StepParams(backend="volcano", pservers=2, trainers=2, epochs=3, batch_size=64,
                        learning_rate=0.01, namespace=NS, image="img:1", pvc_name="claim",
                        pvc_mount_path=str(pvc), run_id="run-7", task_name="train-ctr", poll_s=0.01)
    client = KubeClient(fake.api_client())
    try:
        result = run_training_step(str(prep), str(tmp_path / "kfp-out" / "model"), params,
                                   on_identity=ids.append, log=lambda _m: None, client=client)
    finally:
        client.close()
    assert seen["data_files"] == [".ctr-copy-complete", "train"]
    assert seen["config"] == {"epochs": 3, "batch_size": 64, "learning_rate": 0.01, "model": "dnn"}
    assert result.model_dir == str(tmp_path / "kfp-out" / "model")
    assert (tmp_path / "kfp-out" / "model" / "model_meta.json").is_file()
    assert result.metrics["rows"] == 12 and result.attempts == 1
    assert ids[0]["action"] == "created" and ids[0]["namespace"] == NS
    job = next(iter(fake.jobs.values()))
    vol = job["spec"]["tasks"][0]["template"]["spec"]["volumes"][0]
    assert vol["persistentVolumeClaim"]["claimName"] == "claim"
    assert pod_env(job)["CTR_OUTPUT_DIR"].startswith(str(pvc) + "/ctr-runs/")


def test_job_is_owned_by_the_kfp_runs_workflow(fake, tmp_path, prep, monkeypatch):
    # the step's own pod, as Argo creates it: a dependent of the run's Workflow
    pod = fake.put_pod(NS, "wf", "step", 1)
    pod["metadata"]["ownerReferences"] = [{"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
                                           "name": "ctr-pipeline-x7k2p", "uid": "wf-uid-1", "controller": True}]
    monkeypatch.setenv("KFP_POD_NAME", pod["metadata"]["name"])
    monkeypatch.setenv("KFP_POD_UID", pod["metadata"]["uid"])
    (tmp_path / "pvc").mkdir()
    fake.script = play_gang({})
    logs = []
    client = KubeClient(fake.api_client())
    try:
        run_training_step(str(prep), str(tmp_path / "model"),
                          StepParams(backend="volcano", namespace=NS, image="img:1", pvc_name="claim",
                                     pvc_mount_path=str(tmp_path / "pvc"), run_id="r", poll_s=0.01),
                          log=logs.append, client=client)
    finally:
        client.close()
    job = next(j for (_, n), j in fake.jobs.items())
    assert job["metadata"]["ownerReferences"] == [{
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "name": "ctr-pipeline-x7k2p",
        "uid": "wf-uid-1", "controller": False, "blockOwnerDeletion": False}]
    assert any("owned by Workflow ctr-pipeline-x7k2p" in line for line in logs)


def test_no_owner_outside_a_pod_or_for_another_pod(fake, monkeypatch):
    from ctr_volcano.training.volcano.backend import run_owner_references

    client = KubeClient(fake.api_client())
    try:
        for var in ("KFP_POD_NAME", "KFP_POD_UID", "KUBERNETES_SERVICE_HOST"):
            monkeypatch.delenv(var, raising=False)
        assert run_owner_references(client, NS, log=lambda _m: None) == ()
        assert run_owner_references(client, NS, pod_name="missing", log=lambda _m: None) == ()
        pod = fake.put_pod(NS, "wf", "step", 2)
        pod["metadata"]["ownerReferences"] = [{"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
                                               "name": "w", "uid": "u"}]
        monkeypatch.setenv("KFP_POD_UID", "someone-else")
        assert run_owner_references(client, NS, pod_name=pod["metadata"]["name"], log=lambda _m: None) == ()
        monkeypatch.delenv("KFP_POD_UID")
        assert run_owner_references(client, NS, pod_name=pod["metadata"]["name"], log=lambda _m: None) == (
            {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "name": "w", "uid": "u"},)
    finally:
        client.close()


def _train_args(*flags):
    """A ``ctr-volcano train`` command line parsed by the real parser."""
    return build_parser().parse_args(["train", *flags])


def test_cli_train_volcano_uses_the_same_step(fake, tmp_path, prep, capsys):
    pvc = tmp_path / "pvc"
    pvc.mkdir()
    fake.script = play_gang({})
    args = _train_args("--backend", "volcano", "--data", str(prep), "--model-out", str(tmp_path / "model"),
                       "--pservers", "1", "--trainers", "1", "--epochs", "1", "--batch-size", "32",
                       "--lr", "0.001", "--max-retry", "0", "--namespace", NS, "--image", "img:1",
                       "--pvc-name", "claim", "--pvc-mount-path", str(pvc), "--run-id", "cli-1",
                       "--poll", "0.01", "--kubeconfig", fake.write_kubeconfig(str(tmp_path / "kc")))
    assert args.func(args) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["attempts"] == 1 and Path(out["model_dir"], "model_meta.json").is_file()
    # one attempt, plus room for restarts after the scheduler's evictions (not counted: preemption.py)
    assert next(iter(fake.jobs.values()))["spec"]["maxRetry"] == 1 + PREEMPTION_RESTARTS


def test_cli_stall_timeout_reaches_the_launchers_watchdog(fake, tmp_path, prep):
    """``--stall-timeout`` -> StepParams -> TrainJobSpec -> the launcher: a silent gang fails fast."""
    (tmp_path / "pvc").mkdir()

    def run_silently(f):
        (ns, name), _ = next(iter(f.jobs.items()))
        for task, i in (("pserver", 0), ("trainer", 0)):
            f.put_pod(ns, name, task, i, "Running")
        f.set_phase(ns, name, "Running", running=2)

    fake.script = [lambda f: None, run_silently]
    args = _train_args("--backend", "volcano", "--data", str(prep), "--model-out", str(tmp_path / "model"),
                       "--pservers", "1", "--trainers", "1", "--epochs", "1", "--batch-size", "32",
                       "--max-retry", "0", "--stall-timeout", "0.3", "--namespace", NS, "--image", "img:1",
                       "--pvc-name", "claim", "--pvc-mount-path", str(tmp_path / "pvc"), "--run-id", "cli-stall",
                       "--poll", "0.01", "--kubeconfig", fake.write_kubeconfig(str(tmp_path / "kc")))
    with pytest.raises(TrainingJobFailed) as exc:
        args.func(args)
    assert exc.value.phase == "Stalled" and exc.value.details["stall_timeout_s"] == 0.3
    assert exc.value.role.endswith("-trainer-0") and fake.jobs == {}


def test_stall_timeout_from_the_component_reaches_the_spec(tmp_path):
    from ctr_volcano.training.volcano.backend import build_spec

    params = StepParams.from_component(backend="volcano", pvc_name="claim", namespace="ml", image="img:1",
                                       stall_timeout_s=45.0)
    assert build_spec(params, "/mnt/d", "/mnt/o", name="ctr-x").stall_timeout_s == 45.0
    assert StepParams(backend="volcano", pvc_name="claim").stall_timeout_s == 300.0  # on by default
    with pytest.raises(BadInput, match="stall_timeout_s"):
        StepParams(stall_timeout_s=0)


def test_volcano_step_checks_data_and_config_before_submitting(fake, tmp_path, prep):
    (tmp_path / "pvc").mkdir()
    base = dict(backend="volcano", namespace=NS, image="img:1", pvc_name="claim",
                pvc_mount_path=str(tmp_path / "pvc"), run_id="r", poll_s=0.01)
    client = KubeClient(fake.api_client())
    try:
        with pytest.raises(BadInput, match="only 2 shard"):
            run_training_step(str(prep), str(tmp_path / "m"), StepParams(trainers=3, **base), client=client)
        with pytest.raises(BadInput, match=r"^data='.*': has neither train/ nor schema.json"):
            run_training_step(str(tmp_path), str(tmp_path / "m"), StepParams(**base), client=client)
    finally:
        client.close()
    assert fake.requests == []  # nothing was submitted


def test_step_params_sentinels_and_errors():
    p = StepParams.from_component(backend="volcano", namespace="", image="", priority_class="",
                                  pvc_name="claim", run_id="", ttl_seconds_after_finished=-1, queue="")
    assert (p.namespace, p.image, p.priority_class, p.run_id, p.ttl_seconds_after_finished, p.queue) == \
        (None, None, None, None, None, "default")
    with pytest.raises(BadInput, match="pvc_name"):
        StepParams(backend="volcano")
    with pytest.raises(BadInput, match="backend"):
        StepParams(backend="slurm")
    with pytest.raises(BadInput, match="learning_rate"):
        StepParams(learning_rate=0)


def test_handoff_copies_once_reuses_and_links_data_already_on_the_claim(tmp_path, prep):
    pvc = tmp_path / "pvc"
    pvc.mkdir()
    first = prepare_run_dir(str(pvc), "ctr-a", str(prep))
    assert first.copied and Path(first.data_dir, "train", "part-00000.parquet").read_bytes() == b"PAR1"
    assert oct(os.stat(first.output_dir).st_mode & 0o777) == "0o777"
    again = prepare_run_dir(str(pvc), "ctr-a", str(prep))  # a retried step: no second copy
    assert not again.copied and again.data_dir == first.data_dir
    on_claim = prepare_run_dir(str(pvc), "ctr-b", first.data_dir)  # prep wrote to the claim itself
    assert not on_claim.copied and on_claim.data_dir == os.path.realpath(first.data_dir)
    with pytest.raises(BadInput, match="mount the shared ReadWriteMany PVC"):
        prepare_run_dir(str(tmp_path / "not-mounted"), "ctr-c", str(prep))
    with pytest.raises(BadInput, match="no model/"):
        copy_model_out(first.output_dir, str(tmp_path / "m"))


def _docs(path):
    with open(path, encoding="utf-8") as fh:
        return [d for d in yaml.safe_load_all(fh) if d]


def test_deploy_rbac_yaml_is_generated_from_the_builder():
    expected = build_rbac("kubeflow", "pipeline-runner", create_service_account=False)
    assert _docs(REPO / "deploy" / "rbac.yaml") == expected, (
        "deploy/rbac.yaml is stale; regenerate it with: ctr-volcano rbac --namespace kubeflow "
        "--service-account pipeline-runner --existing-service-account (keep the comment header)")


def test_deploy_pvc_example_is_generated_from_the_builder():
    assert _docs(REPO / "deploy" / "pvc-example.yaml") == [build_pvc("ctr-data", "kubeflow", "20Gi")], (
        "deploy/pvc-example.yaml is stale; regenerate from ctr_volcano.training.volcano.handoff.build_pvc")


def test_rbac_is_namespaced_and_exactly_the_launcher_verbs():
    docs = build_rbac("ml", "runner")
    assert [d["kind"] for d in docs] == ["ServiceAccount", "Role", "RoleBinding"]
    assert all(d["metadata"]["namespace"] == "ml" for d in docs)
    rules = {(r["apiGroups"][0], r["resources"][0]): set(r["verbs"]) for r in docs[1]["rules"]}
    assert rules == {
        ("batch.volcano.sh", "jobs"): {"create", "get", "list", "watch", "delete"},
        ("scheduling.volcano.sh", "podgroups"): {"get", "list", "watch"},
        ("", "pods"): {"get", "list", "watch"},
        ("", "pods/log"): {"get"},
        ("", "events"): {"list", "watch"},
        ("", "persistentvolumeclaims"): {"get"},
    }
    assert len(RULES) == 6
    assert docs[2]["subjects"] == [{"kind": "ServiceAccount", "name": "runner", "namespace": "ml"}]
    with pytest.raises(BadInput, match="namespace"):
        build_rbac("Bad NS")


def test_a_read_write_once_handoff_claim_is_refused_before_any_copy_or_submit(fake, tmp_path, prep):
    fake.put_pvc(NS, "rwo-claim", access_modes=("ReadWriteOnce",))
    pvc = tmp_path / "pvc"
    pvc.mkdir()
    client = KubeClient(fake.api_client())
    try:
        with pytest.raises(BadInput) as err:
            run_training_step(str(prep), str(tmp_path / "model"),
                              StepParams(backend="volcano", namespace=NS, image="img:1", pvc_name="rwo-claim",
                                         pvc_mount_path=str(pvc), run_id="r", poll_s=0.01), client=client)
        with pytest.raises(BadInput, match="no PersistentVolumeClaim 'missing'"):
            run_training_step(str(prep), str(tmp_path / "model"),
                              StepParams(backend="volcano", namespace=NS, image="img:1", pvc_name="missing",
                                         pvc_mount_path=str(pvc), run_id="r", poll_s=0.01), client=client)
    finally:
        client.close()
    assert err.value.field == "volumes.rwo-claim.accessModes" and "ReadWriteMany" in err.value.fix
    assert not fake.jobs and list(pvc.iterdir()) == []  # nothing copied, nothing submitted


def test_render_job_prints_what_train_submits_for_the_same_flags(fake, tmp_path, prep, capsys):
    """The same flags give ``render-job``'s Job and the one ``train --backend volcano`` submits:
    name, run directory on the claim, training config (the step's defaults: epochs included)."""
    from ctr_volcano.app.cli.main import main

    pvc = tmp_path / "pvc"
    pvc.mkdir()
    fake.script = play_gang({})
    flags = ["--pservers", "1", "--trainers", "1", "--model", "deepfm", "--namespace", NS, "--image", "img:1",
             "--pvc-name", "claim", "--pvc-mount-path", str(pvc), "--run-id", "same-1", "--data", str(prep)]
    args = _train_args("--backend", "volcano", "--model-out", str(tmp_path / "model"), "--poll", "0.01",
                       "--kubeconfig", fake.write_kubeconfig(str(tmp_path / "kc")), *flags)
    assert args.func(args) == 0
    submitted = next(iter(fake.jobs.values()))
    capsys.readouterr()
    assert main(["render-job", "-o", "json", *flags]) == 0
    rendered = json.loads(capsys.readouterr().out)
    assert rendered["spec"] == submitted["spec"]
    assert rendered["metadata"]["name"] == submitted["metadata"]["name"]
    assert {k: v for k, v in submitted["metadata"].items() if k in rendered["metadata"]} == rendered["metadata"]
    env = pod_env(rendered)
    assert json.loads(env["CTR_TRAIN_CONFIG"])["epochs"] == StepParams().epochs
    assert env["CTR_DATA_DIR"].startswith(str(pvc / "ctr-runs"))


def test_render_job_puts_an_s3_run_in_the_datas_bucket(capsys):
    from ctr_volcano.app.cli.main import main

    assert main(["render-job", "-o", "json", "--namespace", NS, "--artifact-store", "s3", "--run-id", "r",
                 "--data", "s3://clicks/prep/day-1"]) == 0
    env = pod_env(json.loads(capsys.readouterr().out))
    assert env["CTR_DATA_DIR"] == "s3://clicks/prep/day-1"
    assert env["CTR_OUTPUT_DIR"].startswith("s3://clicks/ctr-runs/ctr-train-ctr-")
    assert main(["render-job", "--namespace", NS, "--artifact-store", "s3"]) == 2
    assert "--data=None" in capsys.readouterr().err
