"""Every gang restart explained (``diagnosis.explain_restarts``), on objects recorded from a Volcano
Job that was restarted: a trainer that exited 3, then a pod evicted by a lost node."""
from __future__ import annotations

from ctr_volcano.training.volcano.diagnosis import evicted, explain_restarts, failure_of, is_failure

JOB = "vol-a"


def _pod(name, retry, phase="Running", exit_code=None, deleting=False, conditions=(), reason=None):
    status = {"phase": phase, "conditions": list(conditions)}
    if reason:
        status["reason"] = reason
    if exit_code is not None:
        status["containerStatuses"] = [{"name": "c", "state": {"terminated": {
            "exitCode": exit_code, "reason": "Error" if exit_code not in (137, 143) else "Killed"}}}]
    meta = {"name": name, "uid": f"{name}-{retry}", "labels": {"volcano.sh/task-spec": name.split("-")[2]},
            "annotations": {"volcano.sh/job-retry-count": str(retry)}}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-01T10:00:05Z"
    return {"metadata": meta, "status": status}


EVENTS = [  # as vc-controller-manager records them on the Job
    {"reason": "ExecuteAction", "message": "Start to execute action RestartJob ", "type": "Normal",
     "lastTimestamp": "2026-12-01T10:00:05Z", "count": 1},
    {"reason": "PodGroupPending", "message": "PodGroup ns:vol-a unschedule", "type": "Warning",
     "lastTimestamp": "2026-12-01T10:00:06Z"},
    {"reason": "ExecuteAction", "message": "Start to execute action RestartJob ", "type": "Normal",
     "lastTimestamp": "2026-12-01T10:01:00Z", "count": 1},
]


def test_each_restart_gets_its_pod_exit_code_or_eviction_and_volcano_event():
    trainer = _pod("vol-a-trainer-1", 0, "Failed", exit_code=3)
    killed = _pod("vol-a-pserver-0", 0, "Failed", exit_code=143, deleting=True)  # Volcano's kill
    lost = _pod("vol-a-pserver-1", 1, "Running", deleting=True, conditions=[
        {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager",
         "message": "Taint manager: deleting due to NoExecute taint"}])
    assert is_failure(trainer) and not is_failure(killed) and is_failure(lost)
    # seen late (the job's count had moved on): the pod's own annotation keeps the attempt right
    failures = [failure_of(JOB, trainer, 1, "ValueError: boom"), failure_of(JOB, lost, 2, "")]
    causes = explain_restarts(2, failures, EVENTS)
    assert [c.attempt for c in causes] == [1, 2] and all(c.explained for c in causes)
    assert causes[0].describe() == ("attempt 1 restarted: pod vol-a-trainer-1 (trainer) Error, exit code 3; "
                                    "Volcano: Start to execute action RestartJob")
    assert causes[0].failure.log_tail == "ValueError: boom"
    assert "DeletionByTaintManager: Taint manager" in causes[1].describe()


def test_a_restart_without_a_failed_pod_is_unexplained():
    causes = explain_restarts(1, [], EVENTS[:1])
    assert not causes[0].explained
    assert causes[0].describe() == ("attempt 1 restarted: no failed or evicted pod was seen; "
                                    "Volcano: Start to execute action RestartJob")
    assert explain_restarts(0, [], EVENTS) == []


def test_evicted_reads_status_reason_and_disruption_condition():
    assert evicted(_pod("vol-a-trainer-0", 0, "Failed", reason="Evicted")) == ("Evicted", "")
    assert evicted(_pod("vol-a-trainer-0", 0)) is None
