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

from ctr_volcano.pipeline_run import compiled_files

REPO = Path(__file__).resolve().parents[1]
REGENERATE = "ctr-volcano compile   (then review and commit pipelines/*.yaml and components/*.yaml)"
COMMITTED = sorted(compiled_files())


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """A fresh compile, in a clean interpreter without image overrides (they change base images)."""
    out = tmp_path_factory.mktemp("compiled")
    env = {k: v for k, v in os.environ.items() if not (k.startswith("CTR_VOLCANO_") and k.endswith("_IMAGE"))}
    code = f"from ctr_volcano.pipeline_run import compile_all; compile_all({str(out)!r})"
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

        for cfg in docs[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"].values():
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
    # the training step gets the shared PVC on a cluster
    mounts = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]["exec-train-ctr"]["pvcMount"]
    assert mounts[0]["mountPath"] == "/mnt/ctr"
    assert mounts[0]["pvcNameParameter"]["componentInputParameter"] == "pvc_name"
    # raw data enters as an imported artifact whose URI is the data_uri parameter
    imp = spec["deploymentSpec"]["executors"]["exec-importer"]["importer"]
    assert imp["artifactUri"]["runtimeParameter"] == "uri"
    assert tasks["importer"]["inputs"]["parameters"]["uri"]["componentInputParameter"] == "data_uri"


def test_client_accepts_the_committed_package():
    from kfp.client.client import _extract_pipeline_yaml  # what kfp.Client runs before submitting

    doc = _extract_pipeline_yaml(str(REPO / "pipelines" / "ctr_training_pipeline.yaml"))
    assert doc.pipeline_spec.pipeline_info.name == "ctr-training-pipeline"
    assert "kubernetes" in json.dumps(doc.to_dict())
