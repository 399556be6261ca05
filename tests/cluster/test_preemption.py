"""Priority that takes room and loses nothing (issue 40, scenario b), with real Paddle gangs.

Two low-priority 2x2 steps fill the cluster (2 process nodes of 4 CPUs) in a reclaimable ``batch``
queue deserving one gang; a high-priority step arrives in the ``prod`` queue, which deserves one gang
and is not reclaimable. Under the shipped scheduler configuration Volcano's ``gangreclaim`` evicts one
low gang whole and places the high one. Asserted: the high step's gang runs within 60 s of its
submission; the evicted step (``max_retry=0``: a crash would fail it) is restarted, waits, resumes
from its checkpoint and completes, its model's AUC within 0.01 of the uninterrupted low step's; its
log names the cause (``Reclaimed by <namespace>/ctr-high (queue prod-...)``) and what was trained
again; no gang is ever partly placed, never more than two at once.

Why a second queue and not a PriorityClass alone: in one queue that fills the cluster Volcano admits
no further gang (``capacity``'s enqueue check, docs/scheduling.md), and a gang that is not admitted
has no pods, so ``gangpreempt`` never sees it.
"""
from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from tests.cluster.helpers import GangMonitor, create_queue, job_phase, wait_for
from tests.cluster.test_process_nodes import StepThread, _claim, _evaluate_auc, _params
from tests.cluster.test_queues import _delete_queue

pytestmark = pytest.mark.cluster

GANG = 4


def _priority_classes(api, pool: str, cleanup) -> dict:
    from kubernetes import client

    sched = client.SchedulingV1Api(api)
    names = {"low": f"{pool}-low", "high": f"{pool}-high"}
    for level, value in (("low", 10), ("high", 1000)):
        sched.create_priority_class({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                     "metadata": {"name": names[level]}, "value": value})
        cleanup.append(lambda name=names[level]: sched.delete_priority_class(name))
    return names


def _checkpointed(output: Path) -> bool:
    from ctr_model import checkpoint as ckpt

    return output.is_dir() and ckpt.latest_complete(str(output)) is not None


def test_a_high_priority_step_reclaims_a_gang_which_resumes_from_its_checkpoint(sandbox, tmp_path, planted):
    api = sandbox.api()
    queues = {"batch": f"batch-{sandbox.pool}", "prod": f"prod-{sandbox.pool}"}
    create_queue(api, queues["batch"], reclaimable=True, deserved={"cpu": "4"})
    create_queue(api, queues["prod"], reclaimable=False, deserved={"cpu": "4"})
    for name in queues.values():
        sandbox.cleanup.append(lambda name=name: _delete_queue(api, name))
    classes = _priority_classes(api, sandbox.pool, sandbox.cleanup)
    sandbox.add_process_nodes(2, cpu="4")                      # room for exactly two 2x2 gangs
    claim = _claim(sandbox, tmp_path)
    config = {"checkpoint_secs": 0, "progress_secs": 2}       # a checkpoint after every epoch
    low = {job: StepThread(planted["prep"], str(tmp_path / job), _params(
        sandbox, claim, job, epochs=6, max_retry=0, queue=queues["batch"], priority_class=classes["low"],
        schedule_timeout_s=1200, config=config)) for job in ("ctr-low-a", "ctr-low-b")}
    monitor = GangMonitor(api, sandbox.namespace, [*low, "ctr-high"], GANG, interval=0.5).start()
    for step in low.values():
        step.start()
    wait_for("both low gangs past their first checkpoint", lambda: all(
        _checkpointed(claim / "ctr-runs" / job / "output") for job in low), timeout=600, interval=0.5,
        cluster=sandbox.cluster)
    t_submit = time.monotonic()
    high = StepThread(planted["prep"], str(tmp_path / "ctr-high"), _params(
        sandbox, claim, "ctr-high", epochs=1, queue=queues["prod"], priority_class=classes["high"],
        schedule_timeout_s=300)).start()
    wait_for("the high-priority gang whole", lambda: monitor.samples and monitor.samples[-1].get("ctr-high", 0) >= GANG,
             timeout=300, interval=0.2, cluster=sandbox.cluster)
    started_s = time.monotonic() - t_submit
    high.join(600)
    for step in low.values():
        step.join(1200)
    monitor.stop()

    high.succeeded()
    results = {job: step.succeeded() for job, step in low.items()}
    evicted = [job for job, r in results.items() if r.attempts > 1]
    assert len(evicted) == 1, {job: r.attempts for job, r in results.items()}
    victim, kept = evicted[0], next(job for job in low if job not in evicted)
    log = low[victim].log
    cause = next((line for line in log.splitlines() if "attempt 1 restarted:" in line), "")
    redone = next((line for line in log.splitlines() if "resumed from the checkpoint of epoch" in line), "")
    aucs = {job: _evaluate_auc(tmp_path / job, planted["prep"], tmp_path / f"eval-{job}") for job in low}
    print(f"\nhigh-priority gang whole {started_s:.1f}s after its step was submitted; {victim}: {cause.strip()}; "
          f"{redone.strip()}; test AUC {aucs[victim]:.4f} (evicted, attempts {results[victim].attempts}) vs "
          f"{aucs[kept]:.4f} (uninterrupted); oracle {planted['oracle_auc']:.4f}")
    assert started_s <= 60, started_s
    assert re.search(rf"Reclaimed by {sandbox.namespace}/ctr-high \(queue {queues['prod']}\)", cause), log
    assert "not counted against max_retry" in cause, log
    assert redone and results[victim].metrics.get("resumed_from_epoch", 0) >= 1, log
    assert abs(aucs[victim] - aucs[kept]) <= 0.01, aucs
    assert results[kept].attempts == 1
    for job in [*low, "ctr-high"]:
        assert job_phase(api, sandbox.namespace, job) == "Completed", job
    assert monitor.partial_jobs() == [], "a gang was placed in part"
    assert max(sum(1 for n in s.values() if n >= GANG) for s in monitor.samples) <= 2
