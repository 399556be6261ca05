"""``train_ctr`` under ``kfp.local`` with ``backend="volcano"``: the real component, executor and
artifacts; the API server is the loopback fake (the cluster tier has the real one).

The fake's script plays the gang: it reads the submitted Job's pod env, checks the training data was
copied onto the "PVC" (a temp dir), writes the model and metrics there and completes the Job. The
test then checks the KFP outputs: the Model directory, the Metrics file and metadata, and the
job_info artifact holding the Job's identity.
"""

import json
from pathlib import Path

from kfp import dsl, local

from components.train import train_ctr
from tests.fake_k8s import FakeKube


@dsl.pipeline(name="train-volcano-local")
def _pipeline(prep_uri: str, pvc_mount_path: str):
    data = dsl.importer(artifact_uri=prep_uri, artifact_class=dsl.Dataset, reimport=False)
    train_ctr(train_data=data.output, backend="volcano", pservers=1, trainers=2, epochs=1,
              namespace="ml", image="img:1", pvc_name="claim", pvc_mount_path=pvc_mount_path,
              run_id="kfp-local-run", task_name="train-ctr", poll_interval_s=0.05)


def test_train_ctr_component_volcano_backend_under_kfp_local(tmp_path, monkeypatch, volcano_job_crd):
    from ctr_model.features import write_split_schema

    prep = tmp_path / "prep"
    (prep / "train").mkdir(parents=True)
    for i in (0, 1):
        (prep / "train" / f"part-{i:05d}.parquet").write_bytes(b"PAR1")
    write_split_schema(str(prep / "train"), hash_buckets=1000, rows=10)
    pvc = tmp_path / "pvc"
    pvc.mkdir()
    seen = {}

    def gang_trains(fake):
        (ns, name), job = next(iter(fake.jobs.items()))
        trainer = next(t for t in job["spec"]["tasks"] if t["name"] == "trainer")
        env = {e["name"]: e.get("value") for e in trainer["template"]["spec"]["containers"][0]["env"]}
        seen["shards"] = sorted(p.name for p in Path(env["CTR_DATA_DIR"], "train").glob("part-*"))
        out = Path(env["CTR_OUTPUT_DIR"])
        (out / "model").mkdir(parents=True)
        (out / "model" / "model_meta.json").write_text('{"schema_version": 1}')
        (out / "metrics.json").write_text(json.dumps({"final_loss": 0.5, "rows": 10}))
        fake.set_phase(ns, name, "Completed", succeeded=2)

    fake = FakeKube(crd_path=volcano_job_crd).start()
    fake.put_pvc("ml", "claim")
    try:
        fake.script = [lambda f: None, lambda f: None, gang_trains]
        monkeypatch.setenv("KUBECONFIG", fake.write_kubeconfig(str(tmp_path / "kubeconfig")))
        local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path / "root"),
                   workspace_root=str(tmp_path / "ws"))
        _pipeline(prep_uri=str(prep), pvc_mount_path=str(pvc))
        (job_name,) = [name for (_, name) in fake.jobs]
    finally:
        fake.stop()
    assert seen["shards"] == ["part-00000.parquet", "part-00001.parquet"]
    (task_dir,) = list((tmp_path / "root").glob("train-volcano-local-*/train-ctr"))
    assert (task_dir / "model" / "model_meta.json").is_file()
    assert json.loads((task_dir / "metrics").read_text()) == {"final_loss": 0.5, "rows": 10}
    info = json.loads((task_dir / "job_info").read_text())
    assert info["name"] == job_name and info["namespace"] == "ml" and info["action"] == "created"
    executor_output = json.loads((task_dir / "executor_output.json").read_text())
    metrics_meta = executor_output["artifacts"]["metrics"]["artifacts"][0]["metadata"]
    assert metrics_meta["final_loss"] == 0.5 and metrics_meta["attempts"] == 1
