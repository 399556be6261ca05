"""Golden tests: the committed pipeline/component YAML matches a fresh compile and is valid KFP IR."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from google.protobuf import json_format
from kfp import components
from kfp.pipeline_spec import pipeline_spec_pb2

from ctr_volcano.app.compile import compiled_files
from ctr_volcano.app.submit import _needs_task_config

REPO = Path(__file__).resolve().parents[1]
REGENERATE = "ctr-volcano compile   (then review and commit pipelines/*.yaml and components/*.yaml)"
COMMITTED = sorted(compiled_files())


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """A fresh compile, in a clean interpreter without image overrides (they change base images)."""
    out = tmp_path_factory.mktemp("compiled")
    env = {k: v for k, v in os.environ.items() if not (k.startswith("CTR_VOLCANO_") and k.endswith("_IMAGE"))}
    code = f"from ctr_volcano.app.compile import compile_all; compile_all({str(out)!r})"
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def _docs(path: Path):
    return list(yaml.safe_load_all(path.read_text()))


@pytest.mark.parametrize("rel", COMMITTED)
def test_committed_yaml_matches_fresh_compile(rel, fresh):
    committed = REPO / rel
    assert committed.is_file(), f"{rel} is missing; regenerate with: {REGENERATE}"
    want, got = _docs(committed), _docs(fresh / committed.name)
    assert got == want, (f"{rel} is stale: the code compiles to something else. Regenerate with: "
                         f"{REGENERATE}")


@pytest.mark.parametrize("rel", COMMITTED)
def test_committed_yaml_parses_strictly_as_kfp_ir(rel):
    docs = _docs(REPO / rel)
    spec = json_format.ParseDict(docs[0], pipeline_spec_pb2.PipelineSpec())  # unknown field -> ParseError
    assert spec.sdk_version == "kfp-2.17.3"
    assert spec.schema_version == "2.1.0"
    if len(docs) > 1:
        json_format.ParseDict(docs[1], pipeline_spec_pb2.PlatformSpec())
        from kfp.kubernetes import kubernetes_executor_config_pb2 as kec

        for cfg in docs[1]["platforms"]["kubernetes"].get("deploymentSpec", {}).get("executors", {}).values():
            json_format.ParseDict(cfg, kec.KubernetesExecutorConfig())
    loaded = components.load_component_from_file(str(REPO / rel))
    assert loaded.component_spec.inputs is not None


def test_pipeline_shape_and_gate():
    spec, platform = _docs(REPO / "pipelines" / "ctr_training_pipeline.yaml")
    tasks = spec["root"]["dag"]["tasks"]
    assert {"importer", "prepare-ctr-data", "train-ctr", "evaluate-ctr", "check-auc-gate",
            "condition-1"} <= set(tasks)
    # the gate condition reads the single output of the gate task, not a named output
    cond = tasks["condition-1"]["triggerPolicy"]["condition"]
    assert "check-auc-gate-Output" in cond, cond
    inner = spec["components"]["comp-condition-1"]["dag"]["tasks"]
    assert list(inner) == ["publish-model"]
    # the training step is configured the KFP way: its resources come from the pipeline's cpu/memory
    # parameters, set on the task, and data and model travel through the run workspace
    res = spec["deploymentSpec"]["executors"]["exec-train-ctr"]["container"]["resources"]
    assert res == {"resourceCpuRequest": "{{$.inputs.parameters['pipelinechannel--cpu']}}",
                   "resourceMemoryRequest": "{{$.inputs.parameters['pipelinechannel--memory']}}",
                   "resourceMemoryLimit": "{{$.inputs.parameters['pipelinechannel--memory']}}"}
    train_inputs = tasks["train-ctr"]["inputs"]["parameters"]
    assert train_inputs["workspace_path"]["runtimeValue"]["constant"] == "{{$.workspace_path}}"
    assert "pvc_name" not in train_inputs and "pvc_name" not in spec["root"]["inputDefinitions"]["parameters"]
    kube = platform["platforms"]["kubernetes"]
    # no named claim to create or mount; only KFP's store keys for artifact_store="s3"
    assert kube["deploymentSpec"]["executors"] == {"exec-train-ctr": {"secretAsEnv": [{
        "keyToEnv": [{"envVar": "AWS_ACCESS_KEY_ID", "secretKey": "accesskey"},
                     {"envVar": "AWS_SECRET_ACCESS_KEY", "secretKey": "secretkey"}],
        "optional": False, "secretName": "mlpipeline-minio-artifact",
        "secretNameParameter": {"runtimeValue": {"constant": "mlpipeline-minio-artifact"}}}]}}
    workspace = kube["pipelineConfig"]["workspace"]
    assert workspace["kubernetes"]["pvcSpecPatch"]["accessModes"] == ["ReadWriteMany"]  # 2.17 requires it
    assert workspace["size"]
    # raw data enters as an imported artifact whose URI is the data_uri parameter
    imp = spec["deploymentSpec"]["executors"]["exec-importer"]["importer"]
    assert imp["artifactUri"]["runtimeParameter"] == "uri"
    assert tasks["importer"]["inputs"]["parameters"]["uri"]["componentInputParameter"] == "data_uri"


def test_client_accepts_the_committed_package():
    from kfp.client.client import _extract_pipeline_yaml  # what kfp.Client runs before submitting

    doc = _extract_pipeline_yaml(str(REPO / "pipelines" / "ctr_training_pipeline.yaml"))
    assert doc.pipeline_spec.pipeline_info.name == "ctr-training-pipeline"
    assert "kubernetes" in json.dumps(doc.to_dict())


def test_train_component_declares_its_passthroughs_and_task_config_input():
    spec = _docs(REPO / "components" / "train_ctr.yaml")[0]
    comp = spec["components"]["comp-train-ctr"] if "components" in spec else None
    comp = comp or next(iter(spec["components"].values()))
    assert comp["inputDefinitions"]["parameters"]["task_config"]["parameterType"] == "TASK_CONFIG"
    assert comp["taskConfigPassthroughs"] == [
        {"field": "RESOURCES"}, {"field": "ENV", "applyToTask": True}, {"field": "KUBERNETES_NODE_SELECTOR"},
        {"field": "KUBERNETES_TOLERATIONS"}, {"field": "KUBERNETES_AFFINITY"},
        {"field": "KUBERNETES_VOLUMES", "applyToTask": True}]
    pipeline = _docs(REPO / "pipelines" / "ctr_training_pipeline.yaml")[0]
    assert pipeline["components"]["comp-train-ctr"]["taskConfigPassthroughs"] == comp["taskConfigPassthroughs"]


def test_legacy_kfp_yaml_has_no_task_config_and_no_workspace(tmp_path):
    """``ctr-volcano compile --legacy-kfp``: what a KFP 2.14 backend accepts (it rejects TASK_CONFIG)."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-m", "ctr_volcano.app.cli.main", "compile", "--legacy-kfp", "--out-dir",
                           str(tmp_path)], env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = (tmp_path / "ctr_training_pipeline.yaml").read_text()
    assert "TASK_CONFIG" not in text and "taskConfigPassthroughs" not in text and "workspace_path}}" not in text
    assert "TASK_CONFIG" not in (tmp_path / "train_ctr.yaml").read_text()
    spec, platform = _docs(tmp_path / "ctr_training_pipeline.yaml")
    json_format.ParseDict(spec, pipeline_spec_pb2.PipelineSpec())
    kube = platform["platforms"]["kubernetes"]
    assert "pipelineConfig" not in kube
    mounts = kube["deploymentSpec"]["executors"]["exec-train-ctr"]["pvcMount"]
    assert mounts[0]["mountPath"] == "/mnt/ctr"
    assert mounts[0]["pvcNameParameter"]["componentInputParameter"] == "pvc_name"
    train_inputs = spec["root"]["dag"]["tasks"]["train-ctr"]["inputs"]["parameters"]
    assert {"pvc_name", "cpu", "memory"} <= set(train_inputs)
    assert "resources" not in spec["deploymentSpec"]["executors"]["exec-train-ctr"]["container"]
    # the default YAML differs: same code, KFP-way interface
    default = (REPO / "pipelines" / "ctr_training_pipeline.yaml").read_text()
    assert "TASK_CONFIG" in default and "taskConfigPassthroughs" in default
    # the retraining pipeline too (what `submit --legacy-kfp --schedule` uploads): only train_ctr changes
    retrain, retrain_platform = _docs(tmp_path / "ctr_retraining_pipeline.yaml")
    json_format.ParseDict(retrain, pipeline_spec_pb2.PipelineSpec())
    assert "TASK_CONFIG" not in json.dumps(retrain) and "taskConfigPassthroughs" not in json.dumps(retrain)
    committed, committed_platform = _docs(REPO / "pipelines" / "ctr_retraining_pipeline.yaml")
    assert retrain["root"] == committed["root"] and retrain_platform == committed_platform
    assert set(retrain["components"]) == set(committed["components"])
    # what `submit` checks to add its --legacy-kfp hint to a refused upload
    for name in ("ctr_training_pipeline.yaml", "ctr_retraining_pipeline.yaml"):
        assert _needs_task_config(str(REPO / "pipelines" / name))
        assert not _needs_task_config(str(tmp_path / name))


def test_legacy_kfp_needs_an_out_dir():
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-m", "ctr_volcano.app.cli.main", "compile", "--legacy-kfp"], env=env,
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "--out-dir" in proc.stderr


def test_the_legacy_variant_has_no_field_a_2_14_server_refuses(tmp_path):
    """kfp-kubernetes writes ``optional: false`` into each ``secretAsEnv``; a 2.14.3 API server
    refused the run for it ("unknown field \"optional\""), so the legacy YAML drops it."""
    import yaml

    from ctr_volcano.app.compile import compile_all

    compile_all(str(tmp_path), legacy=True)
    docs = list(yaml.safe_load_all((tmp_path / "ctr_training_pipeline.yaml").read_text()))
    secrets = docs[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]["exec-train-ctr"]["secretAsEnv"]
    assert secrets and all("optional" not in s for s in secrets)
    assert secrets[0]["secretName"] == "mlpipeline-minio-artifact"
