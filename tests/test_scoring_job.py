"""The scoring fan-out's Volcano Job: prep's fan-out Job with the scoring worker's module, valid
against the real CRD schema. The pods themselves run in the cluster tier
(tests/cluster/test_score_pods.py)."""
from __future__ import annotations

import dataclasses

from ctr_volcano.scoring.unit import main as worker_main
from ctr_volcano.scoring.volcano import SCORE_ENTRYPOINT, VolcanoScoringRunner
from ctr_volcano.training.volcano.manifest import validate_against_crd, validate_job
from ctr_volcano.training.volcano.prep_job import PrepPods, build_prep_job


def test_the_scoring_job_is_a_gang_of_n_running_the_scoring_worker(tmp_path, volcano_job_crd):
    pods = PrepPods(namespace="ml", image="reg.local/ctr-component:1", claim_name="ctr-data",
                    mount_path=str(tmp_path), job_name="ctr-score-run1")
    runner = VolcanoScoringRunner(client=None, pods=pods)
    assert runner.shared_dirs and runner.inner.pods == dataclasses.replace(pods, entrypoint=SCORE_ENTRYPOINT)
    job = build_prep_job(runner.inner.pods, "score", f"{tmp_path}/w", 3)
    assert validate_against_crd(job, volcano_job_crd) == [] and validate_job(job) == []
    (task,) = job["spec"]["tasks"]
    assert job["spec"]["minAvailable"] == task["replicas"] == 3
    assert task["template"]["spec"]["containers"][0]["command"] == [
        "python", "-m", "ctr_volcano.scoring.unit", "score", "--work", f"{tmp_path}/w", "--count", "3"]


def test_the_worker_takes_its_index_from_the_volcano_env_plugin(tmp_path, monkeypatch):
    """A pod's worker: ``score --work W --count N`` and VC_TASK_INDEX; an empty plan scores nothing."""
    import json

    (tmp_path / "plan.json").write_text(json.dumps({"units": []}))
    monkeypatch.setenv("VC_TASK_INDEX", "2")
    assert worker_main(["score", "--work", str(tmp_path), "--count", "3"]) == 0
