"""The InferenceService manifest, validated against the kserve package's V1beta1InferenceService
(the serve extra brings kserve), its one-line refusals, and the serving image's Dockerfile
installing the same extra, tagged as ctr_volcano/images.py names it."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from ctr_volcano import images
from ctr_volcano.app.cli import main as cli
from tests.conftest import REPO

URI = "s3://models/registry/ctr-dnn/versions/run-1/model"


def _render(capsys, *extra: str):
    rc = cli.main(["render-inference-service", "--model-uri", URI, "--service-account", "kserve-s3", *extra])
    out = capsys.readouterr()
    return rc, out


def test_manifest_is_v2_with_the_model_the_image_and_credentials_by_reference(capsys):
    rc, out = _render(capsys, "--namespace", "ml", "--cpu", "2", "--memory", "3Gi")
    manifest = yaml.safe_load(out.out)
    assert rc == 0 and manifest["kind"] == "InferenceService"
    assert manifest["metadata"]["annotations"]["serving.kserve.io/protocol-version"] == "v2"
    predictor = manifest["spec"]["predictor"]
    container = predictor["containers"][0]
    assert predictor["serviceAccountName"] == "kserve-s3" and "AWS" not in out.out
    assert container["image"] == images.serving_image()
    assert {"name": "STORAGE_URI", "value": URI} in container["env"]
    assert container["args"][:2] == ["--model", "/mnt/models"]
    assert container["resources"]["limits"] == {"cpu": "2", "memory": "3Gi"}


@pytest.mark.parametrize("args,field", [
    (["--model-uri", "/local/model"], "storage_uri"),
    (["--model-uri", URI, "--name", "Bad_Name"], "--name"),
    (["--model-uri", URI, "--memory", "lots"], "--memory"),
])
def test_bad_values_are_one_line_errors(capsys, args, field):
    rc = cli.main(["render-inference-service", *args])
    err = capsys.readouterr().err
    assert rc == 2 and f"error: {field}=" in err and "Traceback" not in err


def test_a_registry_without_a_champion_is_refused(capsys, tmp_path):
    rc = cli.main(["render-inference-service", "--registry", str(tmp_path / "reg")])
    err = capsys.readouterr().err
    assert rc == 2 and "has no champion yet" in err


_CHECK = """
import json, sys
from ctr_volcano.errors import BadInput
from ctr_volcano.serving.inference_service import check
m = json.loads(sys.argv[1])
check(m)
m["spec"]["predictor"]["containers"][0]["imagee"] = "x"
try:
    check(m)
except BadInput as exc:
    print("REFUSED", exc)
"""


def test_manifest_validates_against_kserves_model_and_a_typo_does_not(capsys):
    rc, out = _render(capsys)
    manifest = yaml.safe_load(out.out)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-c", _CHECK, json.dumps(manifest)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "REFUSED manifest.spec.predictor.containers[0].imagee=" in done.stdout
    via_cli = subprocess.run([sys.executable, "-m", "ctr_volcano.app.cli.main", "render-inference-service",
                              "--model-uri", URI, "--check"], env=env, capture_output=True, text=True, timeout=120)
    assert via_cli.returncode == 0, via_cli.stderr[-2000:]
    checked = yaml.safe_load(via_cli.stdout)
    assert checked["spec"]["predictor"]["containers"][0]["env"] == [{"name": "STORAGE_URI", "value": URI}]


def test_serving_image_installs_the_serve_extra_and_is_tagged_as_images_names_it():
    """One environment: the image installs the package with the serve extra, as the Quick start's
    environment does (no second list of pins to drift)."""
    dockerfile = (REPO / "dockerfiles" / "Dockerfile.serving").read_text()
    assert f"-t {images.SERVING_IMAGE} ." in dockerfile
    assert 'pip install ".[serve]"' in dockerfile and "requirements" not in dockerfile
    assert not (REPO / "serving" / "requirements.txt").exists()


def test_publish_writes_the_manifest_beside_an_object_store_model_only(tmp_path):
    from ctr_volcano.serving.inference_service import MANIFEST_NAME, write_beside

    path = write_beside(str(tmp_path), "minio://mlpipeline/v2/artifacts/run/publish-model/published_model")
    manifest = yaml.safe_load((tmp_path / MANIFEST_NAME).read_text())
    env = manifest["spec"]["predictor"]["containers"][0]["env"]
    assert path and env == [{"name": "STORAGE_URI", "value": "s3://mlpipeline/v2/artifacts/run/publish-model/published_model"}]
    assert write_beside(str(tmp_path / "x"), str(tmp_path / "local")) is None
