"""Gangs evicted by the scheduler (``preemption.py``): the action and the gang that took the room, read
from objects shaped as vc-scheduler leaves them (the cluster tier's kwok run, docs/scheduling.md); the
work trained again, read from trainer-0's lines; and the launcher path: an eviction does not use up
``max_retry`` (0 here), a crash still does."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from ctr_volcano.errors import TrainingJobFailed
from ctr_volcano.training.volcano.client import KubeClient
from ctr_volcano.training.volcano.diagnosis import Eviction, RestartCause, explain_restarts, failure_of
from ctr_volcano.training.volcano.launcher import VolcanoLauncher
from ctr_volcano.training.volcano.preemption import (
    EvictionReader,
    WorkLedger,
    annotate,
    crash_restarts,
    eviction_of,
    position_of,
    preemptors,
)
from ctr_volcano.training.volcano.spec import TrainJobSpec

NS, JOB = "ml", "ctr-low"
AT = "2026-12-05T09:10:00Z"


def _at(seconds: float) -> str:
    t = datetime(2026, 12, 5, 9, 10, tzinfo=timezone.utc) + timedelta(seconds=seconds)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _victim(name="ctr-low-trainer-0", node="n-1", retry=0):
    return {"metadata": {"name": name, "uid": f"{name}-{retry}", "deletionTimestamp": _at(1),
                         "labels": {"volcano.sh/job-name": JOB, "volcano.sh/task-spec": "trainer"},
                         "annotations": {"volcano.sh/job-retry-count": str(retry)}},
            "spec": {"nodeName": node},
            "status": {"phase": "Running", "conditions": [
                {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
                 "message": "volcano: preempting to accommodate a higher priority pod",
                 "lastTransitionTime": AT}]}}


def _pod(name, job, queue, node=None, nominated=None, scheduled=None):
    pod = {"metadata": {"name": name, "labels": {"volcano.sh/job-name": job, "volcano.sh/queue-name": queue}},
           "spec": {"nodeName": node} if node else {}, "status": {"phase": "Pending"}}
    if nominated:
        pod["status"]["nominatedNodeName"] = nominated
    if scheduled:
        pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": scheduled}]
    return pod


def _event(reason, message, name, when=AT):
    return {"reason": reason, "message": message, "involvedObject": {"kind": "Pod", "name": name},
            "lastTimestamp": when}


ASSIGNABLE = "Pod ml/{} can possibly be assigned to {}, once resource is released and minAvailable is satisfied"


def test_the_gang_placed_in_the_room_is_found_by_nomination_binding_or_event():
    failure = failure_of(JOB, _victim(), 0, "")
    assert failure.by_scheduler and (failure.node, failure.at) == ("n-1", AT)
    pods = [_pod("ctr-low-pserver-0", JOB, "batch", node="n-1", scheduled=_at(2)),           # itself
            _pod("ctr-a-trainer-0", "ctr-a", "prod", nominated="n-1"),                       # nominated
            _pod("ctr-b-pserver-0", "ctr-b", "prod", node="n-1", scheduled=_at(3)),          # bound since
            _pod("ctr-c-pserver-0", "ctr-c", "prod", node="n-1", scheduled=_at(-600)),       # long there
            _pod("ctr-d-pserver-0", "ctr-d", "prod", nominated="n-2")]                       # elsewhere
    events = [_event("FailedScheduling", ASSIGNABLE.format("ctr-e-trainer-1", "n-1"), "ctr-e-trainer-1", _at(1)),
              _event("FailedScheduling", ASSIGNABLE.format("ctr-f-trainer-0", "n-1"), "ctr-f-trainer-0", _at(-300)),
              _event("FailedScheduling", "0/2 nodes are unavailable", "ctr-g-trainer-0")]
    assert preemptors(failure, JOB, NS, pods, events) == (
        "ml/ctr-a (queue prod)", "ml/ctr-b (queue prod)", "ml/ctr-e")


def test_times_as_the_kubernetes_client_writes_them_are_read_too():
    """The launcher's pods and events come from the Kubernetes client's objects turned into dicts,
    whose times read ``2026-12-05T09:10:00+00:00``, not the API server's ``...Z``: with those, a gang
    bound in the room (its nominated node cleared) and a pipelining event are found as with ``Z``.
    (Reading only ``Z`` lost both: the cluster tier's preemption test then named no preemptor.)"""
    def client_form(text):
        return text.replace("Z", "+00:00")
    victim = _victim()
    victim["status"]["conditions"][0]["lastTransitionTime"] = client_form(AT)
    failure = failure_of(JOB, victim, 0, "")
    pods = [_pod("ctr-b-pserver-0", "ctr-b", "prod", node="n-1", scheduled=client_form(_at(3))),
            _pod("ctr-c-pserver-0", "ctr-c", "prod", node="n-1", scheduled=client_form(_at(-600)))]
    events = [_event("FailedScheduling", ASSIGNABLE.format("ctr-e-trainer-1", "n-1"), "ctr-e-trainer-1",
                     client_form(_at(1)) + ".123456")]
    assert preemptors(failure, JOB, NS, pods, events) == ("ml/ctr-b (queue prod)", "ml/ctr-e")


def test_the_room_is_every_node_the_gang_was_evicted_from():
    """The gang placed may fit on the node of another evicted pod of the gang, not on this one's."""
    failure = failure_of(JOB, _victim(), 0, "")
    pods = [_pod("ctr-high-pserver-0", "ctr-high", "prod", nominated="n-2")]
    assert preemptors(failure, JOB, NS, pods, []) == ()
    assert preemptors(failure, JOB, NS, pods, [], nodes=("n-2",)) == ("ml/ctr-high (queue prod)",)
    bound = [_pod("ctr-high-pserver-0", "ctr-high", "prod", node="n-3", scheduled=_at(4)),
             _pod("ctr-old-pserver-0", "ctr-old", "prod", node="n-4", scheduled=_at(-600))]
    assert preemptors(failure, JOB, NS, bound, []) == ("ml/ctr-high (queue prod)",)   # bound as it was made


@pytest.mark.parametrize("message, kind, action", [
    ("Pod is evicted, because of gangreclaim", "Reclaimed", "gangreclaim"),
    ("Pod is evicted, because of gangpreempt", "Preempted", "gangpreempt"),
    ("Pod is evicted, because of reclaim", "Reclaimed", "reclaim"),
    (None, "Evicted", ""),
])
def test_the_action_comes_from_the_pods_evict_event(message, kind, action):
    failure = failure_of(JOB, _victim(), 0, "")
    pod_events = [_event("Evict", message, failure.pod)] if message else []
    eviction = eviction_of(failure, JOB, NS, pod_events, [_pod("ctr-a-trainer-0", "ctr-a", "prod", nominated="n-1")], [])
    assert eviction == Eviction(kind=kind, action=action, by=("ml/ctr-a (queue prod)",))


class _PlacedLate:
    """A client whose namespace shows the gang placed in the room from the ``placed_at``-th pod list on."""

    def __init__(self, placed_at: int):
        self.placed_at, self.lists = placed_at, 0

    def list_events(self, namespace, selector):
        return [_event("Evict", "Pod is evicted, because of gangreclaim", "ctr-low-trainer-0")] \
            if selector.startswith("involvedObject") else []

    def list_pods(self, namespace, selector):
        self.lists += 1
        return [_pod("ctr-a-trainer-0", "ctr-a", "prod", nominated="n-1")] if self.lists >= self.placed_at else []


@pytest.mark.parametrize("placed_at, reads, by", [(3, 6, ("ml/ctr-a (queue prod)",)), (9, 6, ())])
def test_the_room_is_read_again_until_the_gang_placed_in_it_shows(placed_at, reads, by):
    """Volcano nominates the gang it made room for in the eviction's scheduling cycle, which can come
    after the launcher notices the evicted pod: the reader waits for it, ``reads`` times at most."""
    client, waits = _PlacedLate(placed_at), []
    reader = EvictionReader(client, NS, JOB, lambda fn, *a: fn(*a), waits.append, reads=reads, interval_s=2.0)
    eviction = reader.read(failure_of(JOB, _victim(), 0, ""))
    assert eviction == Eviction("Reclaimed", "gangreclaim", by)
    assert client.lists == min(placed_at, reads) and waits == [2.0] * (client.lists - 1)


def test_an_eviction_ends_its_attempt_and_does_not_use_up_max_retry():
    crash = failure_of(JOB, {"metadata": {"name": "ctr-low-trainer-1", "uid": "t1",
                                          "annotations": {"volcano.sh/job-retry-count": "0"}},
                             "status": {"phase": "Failed", "containerStatuses": [
                                 {"state": {"terminated": {"exitCode": 1, "reason": "Error"}}}]}}, 0, "")
    evicted = failure_of(JOB, _victim(retry=0), 0, "")
    crashed_later = failure_of(JOB, {"metadata": {"name": "ctr-low-trainer-1", "uid": "t2",
                                                  "annotations": {"volcano.sh/job-retry-count": "1"}},
                                     "status": {"phase": "Failed", "containerStatuses": [
                                         {"state": {"terminated": {"exitCode": 3, "reason": "Error"}}}]}}, 1, "")
    # attempt 1: a trainer lost its pserver to the eviction and exited 1: the eviction is the cause
    causes = explain_restarts(3, [crash, evicted, crashed_later], [])
    assert causes[0].failure is evicted
    annotated = annotate(causes, {evicted.uid: Eviction("Reclaimed", "gangreclaim", ("ml/ctr-a (queue prod)",))})
    assert [c.counts_against_max_retry for c in annotated] == [False, True, True]   # the last: unexplained
    assert crash_restarts(annotated) == 2
    assert annotated[0].describe() == (
        "attempt 1 restarted: Reclaimed by ml/ctr-a (queue prod) (Volcano's gangreclaim): pod ctr-low-trainer-0 "
        "(trainer) PreemptionByScheduler: volcano: preempting to accommodate a higher priority pod; "
        "not counted against max_retry")
    unseen = Eviction("Evicted")
    assert "by a gang not seen in this namespace (another namespace's, or not placed yet)" in unseen.describe()


TRAINER_ATTEMPT_1 = [
    "2026-12-05 09:09:00 INFO ctr_model.train: trainer-0: epoch 1/3: 500 of 1000 examples, 100 ex/s, loss 0.6, auc 0.6",
    "2026-12-05 09:09:05 INFO ctr_model.train: trainer-0: epoch 1 done: 1000 examples in 10.0s (100 ex/s), loss 0.5",
    "2026-12-05 09:09:20 INFO ctr_model.train: trainer-0: epoch 2/3: 800 of 1000 examples, 80 ex/s, loss 0.5, auc 0.7",
    "2026-12-05 09:09:25 INFO ctr_model.train: trainer-0: epoch 2 done: 1000 examples in 12.5s (80 ex/s), loss 0.4",
    "2026-12-05 09:09:35 INFO ctr_model.train: trainer-0: epoch 3/3: 300 of 1000 examples, 100 ex/s, loss 0.4, auc 0.7",
]


def test_the_position_counts_whole_epochs_and_the_part_of_the_last():
    pos = position_of(TRAINER_ATTEMPT_1)
    assert (pos.done, pos.examples, pos.rows) == (2, 300, 1000)
    assert pos.since(1) == (1300, pytest.approx(15.5))   # epoch 2 (12.5 s) and 300 examples (3 s)
    assert pos.since(2) == (300, pytest.approx(3.0))


def _evicted_cause(attempt=1):
    failure = failure_of(JOB, _victim(), attempt - 1, "")
    return RestartCause(attempt, failure, "", Eviction("Reclaimed", "gangreclaim", ("ml/ctr-a",)))


@pytest.mark.parametrize("resume, expected", [
    ("trainer-0: resumed from /c/checkpoints/epoch-1 (epoch 1)",
     "attempt 2 resumed from the checkpoint of epoch 1 after it was reclaimed; trained again: 1300 "
     "examples (at least: epochs 2-3, up to trainer-0's last progress line), about 16s of training"),
    ("trainer-0: epoch 1/3: 100 of 1000 examples, 100 ex/s, loss 0.6, auc 0.6",
     "attempt 2 resumed from the start (no checkpoint was complete) after it was reclaimed; trained "
     "again: 2300 examples (at least: epochs 1-3, up to trainer-0's last progress line), about 26s of training"),
])
def test_the_ledger_says_what_the_next_attempt_trains_again(resume, expected):
    lines = []
    ledger = WorkLedger(JOB, lines.append)
    sink = ledger.tap(lambda _line: None)
    for line in TRAINER_ATTEMPT_1[:3]:           # streamed before the eviction
        sink(f"[trainer-0] {line}")
    ledger.restarted(_evicted_cause(), trainer_tail="\n".join(TRAINER_ATTEMPT_1))  # the captured tail: further
    sink("[trainer-0] --- pod re-created (gang restart) ---")
    sink(f"[trainer-0] 2026-12-05 09:10:40 INFO ctr_model.train: {resume}")
    assert lines == [f"[volcano] job {JOB}: {expected}"]
    assert ledger.redone[0]["attempt"] == 2 and ledger.redone[0]["cause"] == "Reclaimed by ml/ctr-a (Volcano's gangreclaim)"


def test_a_crash_restart_leaves_the_ledger_silent():
    lines = []
    ledger = WorkLedger(JOB, lines.append)
    ledger.restarted(RestartCause(1, None, ""), "\n".join(TRAINER_ATTEMPT_1))
    ledger.observe("[trainer-0] --- pod re-created (gang restart) ---")
    ledger.observe("[trainer-0] trainer-0: resumed from /c/checkpoints/epoch-2 (epoch 2)")
    assert lines == [] and ledger.redone == []


# ----------------------------------------------------------------------------- the launcher's path
def _gang(fake, retry, *lines):
    fake.put_podgroup(NS, JOB, "Running")
    for task in ("pserver", "trainer"):
        fake.put_pod(NS, JOB, task, 0, "Running")
    fake.log(NS, f"{JOB}-trainer-0", *lines)
    fake.set_phase(NS, JOB, "Running", running=2, retryCount=retry)


def _reclaimed(fake):
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    for task in ("pserver", "trainer"):
        pod = fake.pods[(NS, f"{JOB}-{task}-0")]
        pod["metadata"]["deletionTimestamp"] = now
        pod["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
                                        "message": "volcano: preempting to accommodate a higher priority pod",
                                        "lastTransitionTime": now}]
        fake.add_event(NS, "Pod", f"{JOB}-{task}-0", "Evict", "Pod is evicted, because of gangreclaim")
    high = fake.put_pod(NS, "ctr-high", "trainer", 0, "Pending")
    high["spec"].pop("nodeName")
    high["status"]["nominatedNodeName"] = "node-1"
    high["metadata"]["labels"]["volcano.sh/queue-name"] = "prod"
    fake.add_event(NS, "Pod", "ctr-high-trainer-0", "FailedScheduling", ASSIGNABLE.format("ctr-high-trainer-0", "node-1"))


def _restarted(fake, retry):
    for key in [k for k in fake.pods if k[1].startswith(JOB)]:
        fake.delete_pod(*key)
    fake.set_phase(NS, JOB, "Restarting", retryCount=retry)


def _crashes(fake, retry):
    fake.finish_pod(NS, f"{JOB}-trainer-0", 1)
    fake.set_phase(NS, JOB, "Running", running=1, failed=1, retryCount=retry)


def _spec(tmp_path):
    return TrainJobSpec(name=JOB, namespace=NS, image="img:1", data_dir=str(tmp_path / "data"),
                        output_dir=str(tmp_path / "out"), pservers=1, trainers=1, max_retry=0,
                        schedule_timeout_s=60)


def _complete(out):
    def step(fake):
        (out / "model").mkdir(parents=True, exist_ok=True)
        (out / "metrics.json").write_text(json.dumps({"auc": 0.75}))
        fake.finish_pod(NS, f"{JOB}-trainer-0", 0)
        fake.set_phase(NS, JOB, "Completed", succeeded=1, retryCount=1)
    return step


def test_a_reclaimed_gang_with_max_retry_0_resumes_and_succeeds_naming_who_took_its_room(fake, tmp_path):
    fake.script = [lambda f: None, lambda f: _gang(f, 0, *TRAINER_ATTEMPT_1), _reclaimed, lambda f: _restarted(f, 1),
                   lambda f: f.set_phase(NS, JOB, "Pending", retryCount=1),
                   lambda f: _gang(f, 1, "trainer-0: resumed from /out/checkpoints/epoch-2 (epoch 2)"),
                   _complete(tmp_path / "out")]
    logs = []
    client = KubeClient(fake.api_client(), request_timeout_s=5)
    launcher = VolcanoLauncher(client, _spec(tmp_path), log=logs.append, poll_s=0.01, handle_signals=False)
    result = launcher.run()
    text = "\n".join(logs)
    assert result.attempts == 2, text
    assert [c.eviction.describe() for c in launcher.failures.restarts] == [
        "Reclaimed by ml/ctr-high (queue prod) (Volcano's gangreclaim)"], text
    assert "not counted against max_retry" in text and "attempt 2/2" in text
    assert launcher.ledger.redone == [{"attempt": 2, "resumed_epoch": 2, "examples": 300, "seconds": 3.0,
                                       "cause": "Reclaimed by ml/ctr-high (queue prod) (Volcano's gangreclaim)"}]
    assert f"[volcano] job {JOB}: attempt 2 resumed from the checkpoint of epoch 2 after it was reclaimed" in text


def test_a_crash_after_an_eviction_still_uses_up_max_retry_and_the_job_is_deleted(fake, tmp_path):
    fake.script = [lambda f: None, lambda f: _gang(f, 0, *TRAINER_ATTEMPT_1), _reclaimed, lambda f: _restarted(f, 1),
                   lambda f: _gang(f, 1, "trainer-0: resumed from /out/checkpoints/epoch-2 (epoch 2)"),
                   lambda f: _crashes(f, 1), lambda f: _restarted(f, 2)]
    logs = []
    client = KubeClient(fake.api_client(), request_timeout_s=5)
    launcher = VolcanoLauncher(client, _spec(tmp_path), log=logs.append, poll_s=0.01, handle_signals=False)
    with pytest.raises(TrainingJobFailed) as info:
        launcher.run()
    text = "\n".join(logs)
    assert info.value.phase == "Failed" and info.value.exit_code == 1, text
    assert "1 restarts after failures, more than max_retry=0; deleting the job" in text
    assert fake.job(NS, JOB) is None
