"""``train_ctr`` configured the KFP way: a task's ``dsl.TaskConfig`` lands on the gang's pods.

Two layers:

* the pure mapping (:mod:`ctr_volcano.training.task_config` and the step's hand-off choice), fed the
  TaskConfig in the JSON form KFP 2.17's Go driver writes (every key present, unset ones ``null``);
* the README's snippet, compiled by the real KFP compiler, turned into the executor input KFP's
  driver would give the training task (``tests/kfp_driver.py``), and run through **KFP's own
  executor** with the command from the compiled YAML, against the loopback API server that validates
  the Job against Volcano's CRD. The Job's pods must carry the task's settings.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ctr_volcano.errors import BadInput
from ctr_volcano.training.params import StepParams
from ctr_volcano.training.task_config import EMPTY, TaskPodConfig, check_claim_access
from ctr_volcano.training.volcano.backend import build_spec
from ctr_volcano.training.volcano.manifest import build_job, validate_against_crd, validate_job
from ctr_volcano.training.volcano.spec import role_resources
from tests.fake_k8s import FakeKube
from tests.kfp_driver import executor_input_for, task_config_for

REPO = Path(__file__).resolve().parents[1]

#: What KFP 2.17's driver puts under the TaskConfig input for a task with every field set: Go's
#: json.Marshal of its TaskConfig struct (driver.go), ResourceRequirements with the accelerator in
#: limits only, a workspace volume named kfp-workspace on the claim <workflow>-kfp-workspace.
DRIVER_JSON = {
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a", "b"]}]}]}}},
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "nodeSelector": {"pool": "gpu-a100"},
    "env": [{"name": "FLAGS_communicator_send_queue_size", "value": "20"},
            {"name": "AWS_ACCESS_KEY_ID", "valueFrom": {"secretKeyRef": {"name": "s3-creds", "key": "access_key"}}}],
    "volumes": [{"name": "kfp-workspace", "persistentVolumeClaim": {"claimName": "ctr-run-abc12-kfp-workspace"}}],
    "volumeMounts": [{"name": "kfp-workspace", "mountPath": "/kfp-workspace"}],
    "resources": {"limits": {"memory": "16Gi", "nvidia.com/gpu": "1"}, "requests": {"cpu": "4", "memory": "16Gi"}},
}


def _sdk_task_config(driver_json):
    """What kfp's executor makes of it (kfp/dsl/executor.py): a dsl.TaskConfig."""
    from kfp import dsl

    return dsl.TaskConfig(affinity=driver_json.get("affinity"), tolerations=driver_json.get("tolerations"),
                          node_selector=driver_json.get("nodeSelector"), env=driver_json.get("env"),
                          volumes=driver_json.get("volumes"), volume_mounts=driver_json.get("volumeMounts"),
                          resources=driver_json.get("resources"))


# ----------------------------------------------------------------------------- the pure mapping
def test_every_field_lands_on_the_gang_and_accelerators_only_on_trainers(volcano_job_crd):
    task = TaskPodConfig.from_kfp(_sdk_task_config(DRIVER_JSON))
    params = StepParams(backend="volcano", namespace="ml", image="img:1", workspace_path="/kfp-workspace",
                        task_config=task, cpu="1", memory="2Gi", gpus=0)
    assert params.handoff_volume == ("task_config", "ctr-run-abc12-kfp-workspace")
    job = build_job(build_spec(params, "/kfp-workspace/ctr-runs/j/data", "/kfp-workspace/ctr-runs/j/output",
                               name="ctr-j"))
    assert not validate_job(job)
    assert not validate_against_crd(job, volcano_job_crd)
    pods = {t["name"]: t["template"]["spec"] for t in job["spec"]["tasks"]}
    for role, pod in pods.items():
        assert pod["nodeSelector"] == {"pool": "gpu-a100"}, role
        assert pod["tolerations"] == DRIVER_JSON["tolerations"], role
        assert pod["affinity"] == DRIVER_JSON["affinity"], role
        assert pod["volumes"] == DRIVER_JSON["volumes"], role
        (box,) = pod["containers"]
        assert box["volumeMounts"] == DRIVER_JSON["volumeMounts"], role
        env = {e["name"]: e for e in box["env"]}
        assert env["FLAGS_communicator_send_queue_size"]["value"] == "20"
        assert env["AWS_ACCESS_KEY_ID"]["valueFrom"]["secretKeyRef"] == {"name": "s3-creds", "key": "access_key"}
        assert env["CTR_ROLE"]["value"] == role  # the contract is still there
        assert box["resources"]["requests"]["cpu"] == "4" and box["resources"]["requests"]["memory"] == "16Gi"
        assert box["resources"]["limits"]["memory"] == "16Gi"
    assert pods["trainer"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert pods["trainer"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] == "1"
    assert "nvidia.com/gpu" not in json.dumps(pods["pserver"]["containers"][0]["resources"])


def test_the_task_wins_per_resource_and_the_parameters_fill_the_rest():
    only_cpu = TaskPodConfig.from_kfp({"resources": {"requests": {"cpu": "3"}}})
    ps, tr = role_resources(only_cpu, cpu="1", memory="2Gi", gpus=2)
    assert (tr.cpu, tr.memory, tr.gpu, tr.gpu_resource) == ("3", "2Gi", 2, "nvidia.com/gpu")
    assert (ps.cpu, ps.memory, ps.gpu) == ("3", "2Gi", 0)
    # a limit alone: the request follows it (Kubernetes' own default), and the limit is kept
    only_limit = TaskPodConfig.from_kfp({"resources": {"limits": {"memory": "8Gi", "cpu": "2"}}})
    ps, tr = role_resources(only_limit, cpu="1", memory="2Gi", gpus=0)
    assert tr.to_k8s() == {"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {"memory": "8Gi", "cpu": "2"}}
    # an accelerator on the task replaces gpus, and its type is kept
    amd = TaskPodConfig.from_kfp({"resources": {"limits": {"amd.com/gpu": "2"}}})
    ps, tr = role_resources(amd, cpu="1", memory="2Gi", gpus=1)
    assert (tr.gpu, tr.gpu_resource, ps.gpu) == (2, "amd.com/gpu", 0)
    assert (tr.cpu, tr.memory) == ("1", "2Gi")
    # nothing on the task: the parameters, as before
    ps, tr = role_resources(EMPTY, cpu="1", memory="2Gi", gpus=1)
    assert (tr.cpu, tr.memory, tr.gpu, ps.gpu) == ("1", "2Gi", 1, 0)


def test_driver_nulls_and_empty_resources_mean_unset():
    task = TaskPodConfig.from_kfp(_sdk_task_config({"affinity": None, "tolerations": None, "nodeSelector": None,
                                                    "env": None, "volumes": None, "volumeMounts": None,
                                                    "resources": {}}))
    assert task == EMPTY
    assert TaskPodConfig.from_kfp(None) == EMPTY
    from kfp import dsl

    assert TaskPodConfig.from_kfp(dsl.TaskConfig()) == EMPTY  # what kfp.local hands the component


@pytest.mark.parametrize("config, field", [
    ({"env": [{"name": "CTR_ROLE", "value": "x"}]}, "task_config.env[0].name"),
    ({"env": [{"name": "PADDLE_TRAINERS_NUM", "value": "9"}]}, "task_config.env[0].name"),
    ({"resources": {"limits": {"nvidia.com/gpu": "1", "amd.com/gpu": "1"}}}, "task_config.resources"),
    ({"resources": {"limits": {"nvidia.com/gpu": "0.5"}}}, "task_config.resources.limits"),
    ({"resources": {"requests": {"ephemeral-storage": "1Gi"}}}, "task_config.resources.requests"),
    ({"volumes": [{"name": "a", "emptyDir": {}}], "volume_mounts": [{"name": "b", "mountPath": "/x"}]},
     "task_config.volume_mounts[0].name"),
    ({"volumes": [{"name": "a", "emptyDir": {}}, {"name": "b", "emptyDir": {}}],
      "volume_mounts": [{"name": "a", "mountPath": "/x"}, {"name": "b", "mountPath": "/x"}]},
     "task_config.volume_mounts"),
    ({"tolerations": {"key": "a"}}, "task_config.tolerations"),
])
def test_settings_the_gang_cannot_take_are_refused_naming_the_field(config, field):
    with pytest.raises(BadInput) as err:
        TaskPodConfig.from_kfp(config)
    assert err.value.field == field


def test_a_workspace_the_task_does_not_pass_through_is_refused_before_any_work():
    with pytest.raises(BadInput) as err:
        StepParams(backend="volcano", workspace_path="/kfp-workspace")
    assert err.value.field == "workspace_path" and "KUBERNETES_VOLUMES" in err.value.fix
    with pytest.raises(BadInput) as err:
        StepParams(backend="volcano")
    assert err.value.field == "pvc_name"
    # kfp.local: the local backend needs no hand-off, whatever the workspace
    assert StepParams(backend="local", workspace_path="/tmp/ws").handoff_volume is None


def test_a_claim_the_task_mounts_and_pvc_name_names_is_mounted_once():
    task = TaskPodConfig.from_kfp({"volumes": [{"name": "ctr-data", "persistentVolumeClaim": {"claimName": "ctr-data"}}],
                                   "volume_mounts": [{"name": "ctr-data", "mountPath": "/mnt/ctr"}]})
    params = StepParams(backend="volcano", namespace="ml", image="img:1", pvc_name="ctr-data",
                        pvc_mount_path="/mnt/ctr", task_config=task)
    assert params.handoff_volume == ("task_config", "ctr-data")
    spec = build_spec(params, "/mnt/ctr/r/data", "/mnt/ctr/r/output", name="ctr-j")
    pod = build_job(spec)["spec"]["tasks"][0]["template"]["spec"]
    assert [v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"]] == ["ctr-data"]
    assert [m["mountPath"] for m in pod["containers"][0]["volumeMounts"]] == ["/mnt/ctr"]


def test_read_write_once_claims_are_refused():
    rwo = {"metadata": {"name": "ws"}, "spec": {"accessModes": ["ReadWriteOnce"]},
           "status": {"accessModes": ["ReadWriteOnce"]}}
    with pytest.raises(BadInput) as err:
        check_claim_access(rwo, writes=True)
    assert err.value.field == "volumes.ws.accessModes" and "ReadWriteMany" in err.value.fix
    with pytest.raises(BadInput):
        check_claim_access(rwo, writes=False)
    rox = {"metadata": {"name": "ref"}, "spec": {"accessModes": ["ReadOnlyMany"]}}
    check_claim_access(rox, writes=False)  # read-only reference data is fine
    with pytest.raises(BadInput):
        check_claim_access(rox, writes=True)  # but not for the hand-off, which the gang writes
    check_claim_access({"metadata": {"name": "rwx"}, "spec": {"accessModes": ["ReadWriteMany"]}}, writes=True)


# ----------------------------------------------------------------------------- the README, end to end
def _readme_snippet() -> str:
    text = (REPO / "README.md").read_text()
    m = re.search(r"^## The training task, the KFP way\n(.*?)(?=^## )", text, flags=re.M | re.S)
    assert m, "README.md lost its 'The training task, the KFP way' section"
    (code,) = re.findall(r"^```python\n(.*?)^```", m.group(1), flags=re.M | re.S)
    return code


@pytest.fixture
def prep(tmp_path):
    from ctr_model.features import write_split_schema

    prep = tmp_path / "prep"
    (prep / "train").mkdir(parents=True)
    for i in range(4):
        (prep / "train" / f"part-{i:05d}.parquet").write_bytes(b"PAR1")
    write_split_schema(str(prep / "train"), hash_buckets=1000, rows=10)
    return prep


def _run_executor(component_docs, executor_input, env, cwd):
    """Run the task's container command from the compiled YAML, as the KFP launcher would."""
    container = next(iter(component_docs[0]["deploymentSpec"]["executors"].values()))["container"]
    args = [json.dumps(executor_input) if a == "{{$}}" else a for a in container["args"]]
    return subprocess.run(container["command"] + args, env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def test_readme_snippet_through_kfps_executor_puts_the_task_settings_on_the_volcano_pods(tmp_path, prep, volcano_job_crd):
    compile_dir = tmp_path / "compiled"
    compile_dir.mkdir()
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-c", _readme_snippet()], cwd=compile_dir, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    docs = list(yaml.safe_load_all((compile_dir / "ctr_on_gpus.yaml").read_text()))
    args = {"data_uri": "minio://mlpipeline/ctr-volcano/data/sample"}
    workspace = tmp_path / "kfp-workspace"  # /kfp-workspace in a real pod
    workspace.mkdir()
    config, own_pod = task_config_for(docs, "train-ctr", args, workspace_mount=str(workspace))
    # the step's own pod: env and the workspace (apply_to_task), not the gang's size or placement
    assert own_pod["volumes"] == config["volumes"] and own_pod["env"] == config["env"]
    assert own_pod["resources"] == {} and "nodeSelector" not in own_pod and "tolerations" not in own_pod
    assert config["resources"] == {"limits": {"memory": "16Gi", "nvidia.com/gpu": "1"},
                                   "requests": {"cpu": "4", "memory": "16Gi"}}

    out = tmp_path / "outputs"
    out.mkdir()
    executor_input = executor_input_for(docs, "train-ctr", args, output_dir=str(out),
                                        workspace_mount=str(workspace),
                                        input_artifacts={"train_data": ("system.Dataset", str(prep))})
    assert executor_input["inputs"]["parameterValues"]["task_config"] == config

    def gang_trains(fake):
        (ns, name), job = next(iter(fake.jobs.items()))
        trainer = next(t for t in job["spec"]["tasks"] if t["name"] == "trainer")
        env_ = {e["name"]: e.get("value") for e in trainer["template"]["spec"]["containers"][0]["env"]}
        output = Path(env_["CTR_OUTPUT_DIR"])
        (output / "model").mkdir(parents=True)
        (output / "model" / "model_meta.json").write_text('{"schema_version": 1}')
        (output / "metrics.json").write_text(json.dumps({"final_loss": 0.5, "rows": 10}))
        fake.set_phase(ns, name, "Completed", succeeded=6)

    fake = FakeKube(crd_path=volcano_job_crd).start()
    try:
        fake.put_pvc("default", "ctr-run-abc12-kfp-workspace")
        fake.script = [lambda f: None, gang_trains]
        run_env = dict(env, KUBECONFIG=fake.write_kubeconfig(str(tmp_path / "kubeconfig")),
                       TMPDIR=str(tmp_path))
        proc = _run_executor(list(yaml.safe_load_all((REPO / "components" / "train_ctr.yaml").read_text())),
                             dict(executor_input, inputs={**executor_input["inputs"], "parameterValues": {
                                 **executor_input["inputs"]["parameterValues"], "poll_interval_s": 0.05}}),
                             run_env, str(tmp_path))
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
        jobs = dict(fake.jobs)
    finally:
        fake.stop()
    assert len(jobs) == 1, f"the step created {len(jobs)} Jobs"
    ((ns, _), job), = jobs.items()
    assert ns == "default"
    assert not validate_against_crd(job, volcano_job_crd)
    pods = {t["name"]: t["template"]["spec"] for t in job["spec"]["tasks"]}
    assert set(pods) == {"pserver", "trainer"}
    for role, pod in pods.items():
        assert pod["nodeSelector"] == {"pool": "gpu-a100"}, role
        assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}], role
        assert pod["volumes"] == [{"name": "kfp-workspace",
                                   "persistentVolumeClaim": {"claimName": "ctr-run-abc12-kfp-workspace"}}], role
        (box,) = pod["containers"]
        assert box["volumeMounts"] == [{"name": "kfp-workspace", "mountPath": str(workspace)}]
        assert {"name": "FLAGS_communicator_send_queue_size", "value": "20"} in box["env"]
        assert box["resources"]["requests"]["cpu"] == "4" and box["resources"]["limits"]["memory"] == "16Gi"
        assert box["env"][0]["name"].startswith("CTR_")
        data_dir = next(e["value"] for e in box["env"] if e["name"] == "CTR_DATA_DIR")
        assert data_dir.startswith(str(workspace) + "/ctr-runs/")  # the hand-off is the run workspace
    assert pods["trainer"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert "nvidia.com/gpu" not in json.dumps(pods["pserver"]["containers"][0]["resources"])
    assert job["spec"]["tasks"][1]["replicas"] == 4 and job["spec"]["tasks"][0]["replicas"] == 2
    # the model came back through the workspace into the step's KFP output
    assert (out / "model" / "model_meta.json").is_file()
    assert json.loads((out / "executor_output.json").read_text())["artifacts"]["metrics"]


def test_legacy_yaml_runs_through_kfps_executor_on_explicit_parameters(tmp_path, prep, volcano_job_crd):
    """``compile --legacy-kfp``: the component has no TaskConfig input, so KFP's executor hands the
    function an empty one; the gang gets the explicit cpu/memory and the named claim."""
    import inspect

    from ctr_volcano.app.compile import compile_all
    from pipelines.ctr_training_pipeline import ctr_training_pipeline_legacy

    compile_all(str(tmp_path / "legacy"), legacy=True)
    docs = list(yaml.safe_load_all((tmp_path / "legacy" / "ctr_training_pipeline.yaml").read_text()))
    args = {n: p.default for n, p in inspect.signature(ctr_training_pipeline_legacy.pipeline_func).parameters.items()}
    args.update(cpu="3", memory="5Gi", pvc_name="ctr-data")
    config, own_pod = task_config_for(docs, "train-ctr", args)
    assert own_pod["volumes"] == [{"name": "ctr-data", "persistentVolumeClaim": {"claimName": "ctr-data"}}]
    out = tmp_path / "outputs"
    out.mkdir()
    executor_input = executor_input_for(docs, "train-ctr", args, output_dir=str(out),
                                        input_artifacts={"train_data": ("system.Dataset", str(prep))})
    params = executor_input["inputs"]["parameterValues"]
    assert "task_config" not in params and params["cpu"] == "3" and params["pvc_name"] == "ctr-data"
    claim_dir = tmp_path / "claim"  # where the driver's pvcMount puts the claim (/mnt/ctr in a pod)
    claim_dir.mkdir()
    params.update(pvc_mount_path=str(claim_dir), poll_interval_s=0.05)

    def gang_trains(fake):
        (ns, name), job = next(iter(fake.jobs.items()))
        trainer = next(t for t in job["spec"]["tasks"] if t["name"] == "trainer")
        env_ = {e["name"]: e.get("value") for e in trainer["template"]["spec"]["containers"][0]["env"]}
        (Path(env_["CTR_OUTPUT_DIR"]) / "model").mkdir(parents=True)
        (Path(env_["CTR_OUTPUT_DIR"]) / "model" / "model_meta.json").write_text("{}")
        (Path(env_["CTR_OUTPUT_DIR"]) / "metrics.json").write_text("{}")
        fake.set_phase(ns, name, "Completed", succeeded=4)

    fake = FakeKube(crd_path=volcano_job_crd).start()
    try:
        fake.put_pvc("default", "ctr-data")
        fake.script = [lambda f: None, gang_trains]
        env = dict(os.environ, PYTHONPATH=str(REPO), KUBECONFIG=fake.write_kubeconfig(str(tmp_path / "kc")),
                   TMPDIR=str(tmp_path))
        component = list(yaml.safe_load_all((tmp_path / "legacy" / "train_ctr.yaml").read_text()))
        proc = _run_executor(component, executor_input, env, str(tmp_path))
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
        jobs = dict(fake.jobs)
    finally:
        fake.stop()
    (job,) = jobs.values()
    for task in job["spec"]["tasks"]:
        pod = task["template"]["spec"]
        assert pod["containers"][0]["resources"]["requests"] == {"cpu": "3", "memory": "5Gi"}
        assert [v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"]] == ["ctr-data"]
        assert "nodeSelector" not in pod and "tolerations" not in pod
    assert (out / "model" / "model_meta.json").is_file()
