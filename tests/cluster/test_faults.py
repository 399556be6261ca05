"""Faults of the cluster itself while a real gang trains on process nodes (issue 25).

Shares the tier's session cluster (``tests/cluster/conftest.py``): a fault here is put right
before the test ends (a restarted component is up again), so later tests see a healthy cluster.
Every assertion is on real outcomes: the step's result, the Job's identity, the process table and
the model's AUC.
"""
from __future__ import annotations

import threading
from typing import Dict, List

import pytest

from tests.cluster.helpers import get_job, job_phase, wait_for
from tests.cluster.test_process_nodes import GangSampler, _claim, _evaluate_auc, _params

pytestmark = pytest.mark.cluster


def test_a_restarted_apiserver_is_waited_out_and_the_step_succeeds(sandbox, tmp_path, planted):
    """kube-apiserver is killed and started again while a 2x2 gang trains: the launcher keeps
    polling with backoff, sees the same Job when the server answers, and the step succeeds with one
    attempt, one Job and the gang's processes never replaced; the model scores near the oracle."""
    from kubernetes import client

    from ctr_volcano.training.step import run_training_step

    sandbox.add_process_nodes(2)
    claim = _claim(sandbox, tmp_path)
    job = "ctr-api"
    lines: List[str] = []
    box: Dict[str, object] = {}

    def step() -> None:
        try:
            box["result"] = run_training_step(planted["prep"], str(tmp_path / "model"),
                                              _params(sandbox, claim, job, epochs=5), log=lines.append)
        except BaseException as exc:
            box["error"] = exc

    with GangSampler(job) as sampler:
        thread = threading.Thread(target=step, daemon=True)
        thread.start()
        wait_for("the four gang processes", lambda: len(sampler.live()) == 4, timeout=300,
                 cluster=sandbox.cluster)
        wait_for("training under way", lambda: any("[trainer-0]" in line and "epoch" in line
                                                   for line in list(lines)), timeout=300)
        uid = get_job(sandbox.api(), sandbox.namespace, job)["metadata"]["uid"]
        gang = sorted(sampler.live())
        unreachable_s = sandbox.cluster.restart_apiserver(down_s=3.0)
        still = sorted(pid for pid in gang if pid in sampler.live())
        thread.join(600)
    assert not thread.is_alive(), "the step did not finish"
    log = "\n".join(lines)
    assert "error" not in box, f"{box.get('error')}\n{log}"
    retries = [line for line in lines if "API error, retrying" in line]
    refused = [line for line in lines if "refused right after an outage" in line]
    back = [line for line in lines if "API server answers again" in line]
    print(f"\napiserver restart: unreachable {unreachable_s:.1f}s; {len(retries)} launcher retries, "
          f"{len(refused)} refusals (403) after it; "
          f"{back[0].strip() if back else 'no retry line'}")
    assert retries and back, log                      # the launcher saw the outage and got past it
    assert still == gang, (gang, still)               # the gang kept running meanwhile
    result = box["result"]
    assert result.attempts == 1, log                  # no gang restart
    api = sandbox.api()
    jobs = client.CustomObjectsApi(api).list_namespaced_custom_object(
        "batch.volcano.sh", "v1alpha1", sandbox.namespace, "jobs")["items"]
    assert [(j["metadata"]["name"], j["metadata"]["uid"]) for j in jobs] == [(job, uid)]   # no duplicate
    assert job_phase(api, sandbox.namespace, job) == "Completed"
    auc = _evaluate_auc(tmp_path / "model", planted["prep"], tmp_path / "eval")
    print(f"apiserver restart: test AUC {auc:.4f}, oracle {planted['oracle_auc']:.4f}")
    assert abs(auc - planted["oracle_auc"]) <= 0.02, (auc, planted["oracle_auc"])
    wait_for("no process of the gang left", lambda: not sampler.live(), timeout=60)

