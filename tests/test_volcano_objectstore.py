"""The Volcano step's object-store mode: no volume, the gang reads and writes S3 URIs.

The cluster is the HTTP-level fake of ``tests/fake_k8s.py`` (validating against the real Volcano
CRD); the store is the real SeaweedFS server of ``tests/s3store.py``. The fake's script plays the gang
by writing the model and metrics where the Job's env says, through the store.
"""
from __future__ import annotations

import json

import pytest

from ctr_model import store as s3
from ctr_model.features import write_split_schema
from ctr_volcano.errors import BadInput
from ctr_volcano.training.params import StepParams
from ctr_volcano.training.step import run_training_step
from ctr_volcano.training.store_access import KFP_ARTIFACT_SECRET, ObjectStore
from ctr_volcano.training.volcano.client import KubeClient
from ctr_volcano.training.volcano.manifest import build_job
from ctr_volcano.training.volcano.objectstore import to_s3_uri
from ctr_volcano.training.volcano.spec import TrainJobSpec
from tests.fake_k8s import FakeKube

NS = "ml"


def _containers(job):
    return [(t["name"], t["template"]["spec"]) for t in job["spec"]["tasks"]]


def test_manifest_references_the_secret_and_mounts_scratch_only():
    spec = TrainJobSpec(name="ctr-s3", namespace=NS, image="img:1", data_dir="s3://mlpipeline/p",
                        output_dir="s3://mlpipeline/ctr-runs/ctr-s3/output", object_store=ObjectStore())
    for role, pod in _containers(build_job(spec)):
        (container,) = pod["containers"]
        env = {e["name"]: e for e in container["env"]}
        for var, key in (("AWS_ACCESS_KEY_ID", "accesskey"), ("AWS_SECRET_ACCESS_KEY", "secretkey")):
            assert "value" not in env[var]
            assert env[var]["valueFrom"] == {"secretKeyRef": {"name": KFP_ARTIFACT_SECRET, "key": key}}
        assert env["CTR_S3_ENDPOINT"]["value"] == "http://minio-service.kubeflow:9000"
        assert env["CTR_SCRATCH_DIR"]["value"] == "/scratch"
        assert env["CTR_DATA_DIR"]["value"] == "s3://mlpipeline/p"
        assert pod["volumes"] == [{"name": "scratch", "emptyDir": {}}]     # no claim at all
        assert container["volumeMounts"] == [{"name": "scratch", "mountPath": "/scratch"}]


@pytest.mark.parametrize("kwargs,field", [
    ({"data_dir": "/mnt/data"}, "data_dir"),
    ({"output_dir": "s3://"}, "output_dir"),
    ({"object_store": ObjectStore(endpoint="http://minio-service.kubeflow:9000")}, None),
])
def test_object_store_spec_wants_uris(kwargs, field):
    base = dict(name="ctr-s3", namespace=NS, image="img:1", data_dir="s3://b/p", output_dir="s3://b/o",
                object_store=ObjectStore())
    base.update(kwargs)
    if field is None:
        TrainJobSpec(**base)
        return
    with pytest.raises(BadInput) as err:
        TrainJobSpec(**base)
    assert err.value.field == field and "s3://" in err.value.fix


@pytest.mark.parametrize("kwargs,field", [
    ({"endpoint": "minio-service:9000"}, "object_store.endpoint"),
    ({"secret": "Bad_Name"}, "object_store.secret"),
    ({"addressing": "dns"}, "object_store.addressing"),
])
def test_object_store_settings_are_validated(kwargs, field):
    with pytest.raises(BadInput) as err:
        ObjectStore(**kwargs)
    assert err.value.field == field


def test_kfp_artifact_uris_map_to_s3():
    assert to_s3_uri("minio://mlpipeline/v2/artifacts/p/r/prep/data") == "s3://mlpipeline/v2/artifacts/p/r/prep/data"
    assert to_s3_uri("s3://b/k/") == "s3://b/k"
    with pytest.raises(BadInput):
        to_s3_uri("gs://b/k")


def test_step_params_s3_needs_no_pvc():
    params = StepParams(backend="volcano", artifact_store="s3")
    assert params.object_store().secret == KFP_ARTIFACT_SECRET
    with pytest.raises(BadInput) as err:
        StepParams(backend="volcano")
    assert "artifact_store='s3'" in err.value.fix
    with pytest.raises(BadInput):
        StepParams(backend="volcano", artifact_store="nfs")


def test_step_endpoint_is_the_steps_own_and_never_reaches_the_manifest():
    """A step outside the cluster (a port-forward) reaches the store elsewhere than the pods do."""
    from ctr_volcano.training.volcano.backend import build_spec

    params = StepParams(backend="volcano", artifact_store="s3", s3_endpoint="http://s3.ml.svc:8333",
                        s3_step_endpoint="http://127.0.0.1:18333", namespace=NS, image="img:1", job_name="j")
    config = params.step_store_config({"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b"})
    assert (config.endpoint, config.access_key, config.addressing) == ("http://127.0.0.1:18333", "a", "path")
    job = build_job(build_spec(params, "s3://b/data", "s3://b/ctr-runs/j/output", name="j"))
    assert "127.0.0.1:18333" not in json.dumps(job)
    for _role, pod in _containers(job):
        env = {e["name"]: e for e in pod["containers"][0]["env"]}
        assert env["CTR_S3_ENDPOINT"]["value"] == "http://s3.ml.svc:8333"
    # unset: the step uses the pods' endpoint
    same = StepParams(backend="volcano", artifact_store="s3", s3_endpoint="http://s3.ml.svc:8333")
    assert same.step_store_config({}).endpoint == "http://s3.ml.svc:8333"


def test_a_bad_step_endpoint_is_one_line_exit_2(tmp_path, capsys):
    from ctr_volcano.app.cli.main import main

    with pytest.raises(BadInput) as err:
        StepParams(backend="volcano", artifact_store="s3", s3_step_endpoint="127.0.0.1:18333")
    assert err.value.field == "s3_step_endpoint" and "http://HOST:PORT" in err.value.fix
    rc = main(["train", "--backend", "volcano", "--artifact-store", "s3", "--data", str(tmp_path),
               "--model-out", str(tmp_path / "m"), "--s3-step-endpoint", "localhost:18333"])
    err_lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert rc == 2
    assert len(err_lines) == 1 and "--s3-step-endpoint" in err_lines[0] and "localhost:18333" in err_lines[0]


# ----------------------------------------------------------------- the step, with the real store
@pytest.fixture
def fake(volcano_job_crd):
    server = FakeKube(crd_path=volcano_job_crd).start()
    yield server
    server.stop()


@pytest.fixture
def store_env(s3_server, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_server.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_server.secret_key)
    return s3.Store(s3.StoreConfig(endpoint=s3_server.endpoint, access_key=s3_server.access_key,
                                   secret_key=s3_server.secret_key))


@pytest.fixture
def prep_uri(tmp_path, s3_bucket, store_env):
    d = tmp_path / "prep"
    (d / "train").mkdir(parents=True)
    for i in (0, 1):
        (d / "train" / f"part-{i:05d}.parquet").write_bytes(b"PAR1")   # not read on this path
    write_split_schema(str(d / "train"), hash_buckets=1000, rows=12)
    uri = s3.join(s3_bucket, "v2/artifacts/pipe/run-1/prep/data")
    store_env.upload(str(d), uri)
    return uri


def _play_gang_through_the_store(client, seen):
    def train(fake):
        (ns, name), job = next(iter(fake.jobs.items()))
        spec = job["spec"]["tasks"][1]["template"]["spec"]
        env = {e["name"]: e for e in spec["containers"][0]["env"]}
        seen["env"] = env
        out = env["CTR_OUTPUT_DIR"]["value"]
        client.write_bytes(s3.join(out, "model/model_meta.json"), b'{"schema_version": 1}')
        client.write_bytes(s3.join(out, "checkpoints/epoch-1/_COMPLETE"), b"ok")
        client.write_bytes(s3.join(out, "metrics.json"), json.dumps({"rows": 12}).encode())
        fake.set_phase(ns, name, "Completed", succeeded=2)

    def run(fake):
        (ns, name), _ = next(iter(fake.jobs.items()))
        fake.set_phase(ns, name, "Running", running=4)

    return [lambda f: None, run, train]


def test_step_hands_over_through_the_store_and_cleans_up(fake, s3_server, store_env, prep_uri,
                                                         s3_bucket, tmp_path):
    seen: dict = {}
    fake.script = _play_gang_through_the_store(store_env, seen)
    params = StepParams(backend="volcano", artifact_store="s3", s3_endpoint=s3_server.endpoint,
                        s3_secret="store-creds", namespace=NS, image="img:1", run_id="run-9",
                        task_name="train-ctr", poll_s=0.01)
    kfp_uri = "minio://" + prep_uri[len("s3://"):]           # what KFP's artifact.uri looks like
    client = KubeClient(fake.api_client())
    try:
        result = run_training_step(kfp_uri, str(tmp_path / "kfp-out" / "model"), params,
                                   log=lambda _m: None, client=client)
    finally:
        client.close()
    env = seen["env"]
    assert env["CTR_DATA_DIR"]["value"] == prep_uri            # the artifact itself, not a copy
    out = env["CTR_OUTPUT_DIR"]["value"]
    assert out.startswith(s3.join(s3_bucket, "ctr-runs") + "/") and out.endswith("/output")
    assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"]["name"] == "store-creds"
    assert s3_server.secret_key not in json.dumps(next(iter(fake.jobs.values())))
    assert (tmp_path / "kfp-out" / "model" / "model_meta.json").is_file()
    assert result.metrics == {"rows": 12}
    run_objects = [n for n, d in store_env.list(out.rsplit("/", 1)[0], recursive=True) if not d]
    assert run_objects == []                                    # run-scoped objects deleted
    assert store_env.exists(s3.join(prep_uri, "train/schema.json"))   # the input is untouched


def test_step_refuses_a_bad_input_before_submitting(fake, s3_server, store_env, s3_bucket, tmp_path):
    params = StepParams(backend="volcano", artifact_store="s3", s3_endpoint=s3_server.endpoint,
                        namespace=NS, image="img:1", run_id="run-9", poll_s=0.01)
    client = KubeClient(fake.api_client())
    try:
        with pytest.raises(BadInput) as err:
            run_training_step(s3.join(s3_bucket, "nothing"), str(tmp_path / "m"), params,
                              log=lambda _m: None, client=client)
    finally:
        client.close()
    assert err.value.field == "train_data" and "nothing under this prefix" in str(err.value)
    assert fake.jobs == {}
