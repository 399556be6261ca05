"""Warm start on the Volcano backend: the init model travels over the claim and reaches every pod.

Same HTTP-level fake API server and CRD-validated Jobs as ``test_volcano_step``; the fake's script
plays the gang and checks what the pods would see.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from ctr_model.config import TrainConfig
from ctr_model.contract import ENV_INIT_MODEL
from ctr_model.features import SCHEMA_VERSION
from ctr_model.warm_start import WARM_START_DIR
from ctr_volcano.errors import BadInput
from ctr_volcano.training.params import StepParams
from ctr_volcano.training.step import run_training_step
from ctr_volcano.training.volcano.client import KubeClient
from tests.test_volcano_step import NS, fake, play_gang, pod_env, prep  # noqa: F401 (fixtures)


def _init_model(root: Path, pservers: int = 2, **config) -> Path:
    d = root / "champion"
    (d / WARM_START_DIR / "000").mkdir(parents=True)
    cfg = {**TrainConfig().to_dict(), "hash_buckets": 1000, **config}
    (d / "model_meta.json").write_text(json.dumps({"schema_version": SCHEMA_VERSION, "hash_buckets": 1000,
                                                   "config": cfg, "pservers": pservers}))
    (d / WARM_START_DIR / "meta.json").write_text(json.dumps({"pservers": pservers}))
    (d / WARM_START_DIR / "000" / "part-000-00000.gz").write_bytes(b"table")
    return d


def _params(tmp_path, **kw):
    return StepParams(backend="volcano", pservers=2, trainers=2, namespace=NS, image="img:1",
                      pvc_name="claim", pvc_mount_path=str(tmp_path / "pvc"), run_id="run-9",
                      task_name="train-ctr", poll_s=0.01, **kw)


def test_init_model_is_copied_to_the_claim_and_named_in_every_pod(fake, tmp_path, prep):  # noqa: F811
    (tmp_path / "pvc").mkdir()
    init = _init_model(tmp_path / "kfp-inputs")
    seen = {}
    script = play_gang(seen)
    inner = script[-1]

    def train(f):
        (_, _), job = next(iter(f.jobs.items()))
        for task in ("pserver", "trainer"):
            seen[task] = pod_env(job, task).get(ENV_INIT_MODEL)
        inner(f)

    fake.script = script[:-1] + [train]
    client = KubeClient(fake.api_client())
    try:
        run_training_step(str(prep), str(tmp_path / "out"), _params(tmp_path), log=lambda _m: None,
                          client=client, init_model=str(init))
    finally:
        client.close()
    on_claim = Path(seen["trainer"])
    assert seen["pserver"] == seen["trainer"]
    assert on_claim.is_relative_to(tmp_path / "pvc")
    assert (on_claim / WARM_START_DIR / "000" / "part-000-00000.gz").read_bytes() == b"table"


@pytest.mark.parametrize("kw,needle", [({"pservers": 1}, "pservers is 1 but this run's is 2"),
                                       ({"embedding_dim": 16}, "embedding_dim is 16 but this run's is 10")])
def test_mismatched_init_model_is_refused_before_submitting(fake, tmp_path, prep, kw, needle):  # noqa: F811
    (tmp_path / "pvc").mkdir()
    init = _init_model(tmp_path, **kw)
    client = KubeClient(fake.api_client())
    try:
        with pytest.raises(BadInput, match=needle):
            run_training_step(str(prep), str(tmp_path / "out"), _params(tmp_path), client=client,
                              init_model=str(init))
    finally:
        client.close()
    assert fake.requests == []
