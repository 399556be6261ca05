"""The launcher against a real Volcano: the eight scenarios of the cluster tier.

Every scenario drives the product's own :class:`~ctr_volcano.training.volcano.launcher.VolcanoLauncher` (in a
thread, or as its own process where a signal or a kill is the point), authenticated as the
launcher's ServiceAccount bound to the shipped Role (scenario 8 checks that this identity is not an
admin). Real vc-scheduler and vc-controller-manager decide; kwok plays the nodes, and the test plays
the training: it labels trainer pods to succeed or fail (see tools/minicluster/kwok-stages.yaml) and
writes the outputs trainer-0 would write.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path

import pytest

from tests.cluster.helpers import (
    GangMonitor,
    LauncherThread,
    bound_pods,
    create_queue,
    finish_trainers,
    get_job,
    get_podgroups,
    job_phase,
    job_pods,
    make_spec,
    running_pods,
    set_outcome,
    wait_for,
)

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
GANG = 4  # 2 pservers + 2 trainers, 1 cpu each


def _out(tmp_path: Path, name: str) -> str:
    d = tmp_path / name
    d.mkdir()
    return str(d)


def _all_running(api, ns: str, job: str, n: int = GANG):
    return len(running_pods(api, ns, job)) == n


def _spec_json(spec) -> dict:
    fields = asdict(spec)
    for key in ("train_config", "node_selector", "env", "labels", "annotations"):
        fields[key] = dict(getattr(spec, key))
    for key in ("tolerations", "image_pull_secrets", "volumes", "env_from_secrets"):
        fields[key] = list(fields[key])
    return fields


def _driver(kubeconfig: str, spec, log_path: Path) -> subprocess.Popen:
    """The launcher as its own process (``tests/cluster/launcher_driver.py``)."""
    arg = json.dumps({"kubeconfig": kubeconfig, "spec": _spec_json(spec), "poll_s": 0.3})
    fh = open(log_path, "w")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen([sys.executable, "-m", "tests.cluster.launcher_driver", arg], cwd=REPO,
                            stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


# 1 ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("room", [4, 6], ids=["room-for-4", "room-for-6"])
def test_gang_all_or_nothing(cluster, sandbox, tmp_path, room):
    """Nodes fit 4 (or 6) pods; two 2x2 gangs submitted together: one runs whole, the other gets no
    pod bound until the first finishes (with room for 6, even though 2 of its 4 pods would fit);
    never a partial gang."""
    api, ns = sandbox.api(), sandbox.namespace
    sandbox.add_nodes(room // 2, cpu="2")
    out = {j: _out(tmp_path, j) for j in ("gang-a", "gang-b")}
    monitor = GangMonitor(api, ns, list(out), GANG).start()
    runs = {j: LauncherThread(sandbox.launcher_kubeconfig, make_spec(sandbox, j, out[j])).start()
            for j in out}
    try:
        first = wait_for("one gang fully Running", lambda: next(
            (j for j in out if _all_running(api, ns, j)), None), timeout=90, cluster=cluster)
        second = next(j for j in out if j != first)
        # The other gang must stay entirely unbound while the first holds the nodes.
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            assert bound_pods(api, ns, second) == [], f"{second} got pods bound while {first} runs"
            time.sleep(0.2)
        assert job_phase(api, ns, second) == "Pending"

        finish_trainers(api, ns, first, out[first])
        runs[first].join(90)
        assert runs[first].error is None, runs[first].log
        wait_for(f"{second} fully Running after {first} finished",
                 lambda: _all_running(api, ns, second), timeout=90, cluster=cluster)
        # Let the monitor (one sample per 0.2 s) see the whole gang before its trainers finish:
        # kwok completes pods within milliseconds, so the window could fall between two samples.
        wait_for(f"the monitor to sample {second} whole",
                 lambda: bool(monitor.samples) and monitor.samples[-1][second] == GANG, timeout=10,
                 cluster=cluster)
        finish_trainers(api, ns, second, out[second])
        runs[second].join(90)
        assert runs[second].error is None, runs[second].log
    finally:
        monitor.stop()
        for r in runs.values():
            r.launcher.cancel()
    assert monitor.partial_jobs() == [], monitor.samples
    assert max(s[second] for s in monitor.samples) == GANG
    for j in out:
        assert runs[j].result.metrics["auc"] == 0.75
        assert job_phase(api, ns, j) == "Completed"


# 2 ------------------------------------------------------------------------------------------------
def test_stuck_gang_reports_reason_and_is_deleted(cluster, sandbox, tmp_path):
    """A gang larger than the cluster: the launcher prints the PodGroup's reason, fails after its
    schedule timeout, and deletes the Job."""
    from ctr_volcano.errors import TrainingJobFailed

    api, ns = sandbox.api(), sandbox.namespace
    sandbox.add_nodes(1, cpu="2")
    spec = make_spec(sandbox, "too-big", _out(tmp_path, "too-big"), schedule_timeout_s=8)
    run = LauncherThread(sandbox.launcher_kubeconfig, spec, explain_every_s=2).start().join(90)

    assert isinstance(run.error, TrainingJobFailed), run.log
    assert run.error.phase == "Unschedulable"
    reason = run.error.reason
    print(f"\nstuck gang reason: {reason}")
    assert "PodGroup" in reason
    # Volcano's own words, from the PodGroup's events/conditions (gang or enqueue gating).
    assert any(w in reason for w in ("unschedulable", "Unschedulable", "overused", "insufficient",
                                     "Insufficient")), reason
    assert "Pending for" in run.log  # the periodic explanation while waiting
    wait_for("the Job deleted", lambda: get_job(api, ns, "too-big") is None, timeout=30)
    wait_for("its pods gone", lambda: not job_pods(api, ns, "too-big"), timeout=60)


# 3 ------------------------------------------------------------------------------------------------
def test_completion_ends_pservers_and_step_succeeds(cluster, sandbox, tmp_path):
    """Trainers succeed -> TaskCompleted -> CompleteJob ends the pservers -> the step succeeds."""
    api, ns = sandbox.api(), sandbox.namespace
    sandbox.add_nodes(2, cpu="2")
    out = _out(tmp_path, "done")
    run = LauncherThread(sandbox.launcher_kubeconfig, make_spec(sandbox, "done", out)).start()
    try:
        wait_for("gang Running", lambda: _all_running(api, ns, "done"), timeout=90, cluster=cluster)
        wait_for("Job Running", lambda: job_phase(api, ns, "done") == "Running", timeout=30)
        pservers = [p.metadata.name for p in running_pods(api, ns, "done")
                    if p.metadata.labels.get("volcano.sh/task-spec") == "pserver"]
        assert len(pservers) == 2
        finish_trainers(api, ns, "done", out)
        run.join(90)
    finally:
        run.launcher.cancel()
    assert run.error is None, run.log
    assert run.result.attempts == 1 and run.result.metrics["auc"] == 0.75
    assert job_phase(api, ns, "done") == "Completed"
    # CompleteJob killed the pservers (they never exit on their own).
    wait_for("pservers ended", lambda: not any(
        p.metadata.name in pservers for p in running_pods(api, ns, "done")), timeout=30)
    assert "Completed" in run.log
    # The pods' logs reached the step log (pods/log -> kube-apiserver -> kwok's kubelet API).
    assert "[trainer-0] kwok: simulated container" in run.log, run.log


# 4 ------------------------------------------------------------------------------------------------
def test_pod_failure_restarts_then_fails_with_pod_reason(cluster, sandbox, tmp_path):
    """A trainer fails -> RestartJob -> retry count rises -> after max_retry restarts the launcher
    deletes the Job (Volcano's maxRetry leaves room for evictions by the scheduler, which do not
    count) and the step fails with the failed pod's reason and exit code."""
    from ctr_volcano.errors import TrainingJobFailed

    api, ns = sandbox.api(), sandbox.namespace
    sandbox.add_nodes(2, cpu="2")
    spec = make_spec(sandbox, "flaky", _out(tmp_path, "flaky"), max_retry=1)
    failed_uids = set()
    stop = threading.Event()

    def fail_trainer0() -> None:
        while not stop.is_set():
            for p in running_pods(api, ns, "flaky"):
                if p.metadata.name.endswith("-trainer-0") and p.metadata.uid not in failed_uids \
                        and len(running_pods(api, ns, "flaky")) == GANG:
                    failed_uids.add(p.metadata.uid)
                    set_outcome(api, ns, p.metadata.name, "fail", exit_code=137,
                                message="simulated: trainer ran out of memory")
            stop.wait(0.2)

    killer = threading.Thread(target=fail_trainer0, daemon=True)
    killer.start()
    run = LauncherThread(sandbox.launcher_kubeconfig, spec).start()
    try:
        run.join(150)
    finally:
        stop.set()
        killer.join(5)
        run.launcher.cancel()

    assert isinstance(run.error, TrainingJobFailed), run.log
    err = run.error
    assert err.phase == "Failed"
    assert len(failed_uids) == 2  # one failure per attempt
    assert err.details["retry_count"] >= 2
    assert err.role == "trainer" and err.exit_code == 137
    assert "flaky-trainer-0" in err.reason and "Error" in err.reason
    messages = {f["message"] for f in err.details["failed_pods"]}
    assert "simulated: trainer ran out of memory" in messages
    assert "attempt 2/2" in run.log  # the retry count rose before the end
    assert "2 restarts after failures, more than max_retry=1; deleting the job" in run.log
    wait_for("the job deleted", lambda: job_phase(api, ns, "flaky") is None, timeout=30)


# 5 ------------------------------------------------------------------------------------------------
def test_sigterm_cancels_job_and_pods(cluster, sandbox, tmp_path):
    """SIGTERM to the launcher process deletes the Job; its pods and PodGroup go with it."""
    api, ns = sandbox.api(), sandbox.namespace
    sandbox.add_nodes(2, cpu="2")
    spec = make_spec(sandbox, "cancel-me", _out(tmp_path, "cancel-me"))
    log = tmp_path / "driver.log"
    proc = _driver(sandbox.launcher_kubeconfig, spec, log)
    try:
        wait_for("gang Running", lambda: _all_running(api, ns, "cancel-me"), timeout=90, cluster=cluster)
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(30)
    finally:
        _stop(proc)
    text = log.read_text()
    assert rc == 3, text
    assert "cancelled by signal SIGTERM" in text
    assert get_job(api, ns, "cancel-me") is None
    wait_for("pods removed", lambda: not job_pods(api, ns, "cancel-me"), timeout=60)
    wait_for("PodGroup removed", lambda: not get_podgroups(api, ns), timeout=60)


# 6 ------------------------------------------------------------------------------------------------
def test_restarted_launcher_reattaches_without_duplicate(cluster, sandbox, tmp_path):
    """A launcher killed mid-run and started again attaches to the existing Job: same uid, same
    pods, no second Job; it then sees the run through."""
    from kubernetes import client

    api, ns = sandbox.api(), sandbox.namespace
    sandbox.add_nodes(2, cpu="2")
    out = _out(tmp_path, "resume")
    spec = make_spec(sandbox, "resume", out)
    proc = _driver(sandbox.launcher_kubeconfig, spec, tmp_path / "first.log")
    try:
        wait_for("gang Running", lambda: _all_running(api, ns, "resume"), timeout=90, cluster=cluster)
    finally:
        _stop(proc)  # SIGKILL: no cleanup, as when the step's pod is lost
    uid = get_job(api, ns, "resume")["metadata"]["uid"]
    pod_uids = {p.metadata.uid for p in job_pods(api, ns, "resume")}

    run = LauncherThread(sandbox.launcher_kubeconfig, spec).start()
    try:
        wait_for("re-attached", lambda: "reattached" in run.log, timeout=30)
        assert run.launcher.uid == uid
        jobs = client.CustomObjectsApi(api).list_namespaced_custom_object(
            "batch.volcano.sh", "v1alpha1", ns, "jobs")["items"]
        assert [j["metadata"]["name"] for j in jobs] == ["resume"]
        assert {p.metadata.uid for p in job_pods(api, ns, "resume")} == pod_uids
        finish_trainers(api, ns, "resume", out)
        run.join(90)
    finally:
        run.launcher.cancel()
    assert run.error is None, run.log
    assert run.result.attempts == 1
    assert get_job(api, ns, "resume")["metadata"]["uid"] == uid


# 7 ------------------------------------------------------------------------------------------------
def test_queue_capability_keeps_gang_pending_with_queue_reason(cluster, sandbox, tmp_path):
    """A queue whose capability is below the gang keeps it Pending; the launcher reports the
    queue's reason and gives up after its schedule timeout."""
    from kubernetes import client

    from ctr_volcano.errors import TrainingJobFailed

    api, ns = sandbox.api(), sandbox.namespace
    queue = f"small-{sandbox.pool}"
    create_queue(api, queue, capability={"cpu": "2", "memory": "64Gi"})
    try:
        sandbox.add_nodes(2, cpu="4")  # room enough on the nodes: only the queue says no
        spec = make_spec(sandbox, "capped", _out(tmp_path, "capped"), queue=queue, schedule_timeout_s=8)
        run = LauncherThread(sandbox.launcher_kubeconfig, spec, explain_every_s=2).start().join(90)
        assert isinstance(run.error, TrainingJobFailed), run.log
        print(f"\nqueue reason: {run.error.reason}")
        assert "queue resource quota insufficient" in run.error.reason, run.log
        assert bound_pods(api, ns, "capped") == []
    finally:
        client.CustomObjectsApi(api).delete_cluster_custom_object(
            "scheduling.volcano.sh", "v1beta1", "queues", queue)


def test_higher_priority_pending_gang_is_scheduled_first(cluster, sandbox, tmp_path):
    """Of two pending gangs, the one with the higher PriorityClass gets the capacity first."""
    from kubernetes import client

    api, ns = sandbox.api(), sandbox.namespace
    sched = client.SchedulingV1Api(api)
    classes = {"low": (f"{sandbox.pool}-low", 10), "high": (f"{sandbox.pool}-high", 1000)}
    for name, value in classes.values():
        sched.create_priority_class({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                     "metadata": {"name": name}, "value": value})
    runs = {}
    try:
        # No node in this test's pool yet: both gangs wait. Low priority is submitted first.
        for level in ("low", "high"):
            spec = make_spec(sandbox, f"prio-{level}", _out(tmp_path, level),
                             priority_class=classes[level][0])
            runs[level] = LauncherThread(sandbox.launcher_kubeconfig, spec).start()
            wait_for(f"prio-{level} PodGroup", lambda: any(
                pg["metadata"]["name"].startswith(f"prio-{level}") for pg in get_podgroups(api, ns)),
                timeout=30)
        time.sleep(2)
        assert bound_pods(api, ns, "prio-low") == [] and bound_pods(api, ns, "prio-high") == []
        sandbox.add_nodes(2, cpu="2")  # room for exactly one gang
        wait_for("a gang Running", lambda: _all_running(api, ns, "prio-high")
                 or _all_running(api, ns, "prio-low"), timeout=90, cluster=cluster)
        assert _all_running(api, ns, "prio-high"), "the low-priority gang was scheduled first"
        assert bound_pods(api, ns, "prio-low") == []
        pg_high = next(pg for pg in get_podgroups(api, ns) if pg["metadata"]["name"].startswith("prio-high"))
        assert pg_high["spec"].get("priorityClassName") == classes["high"][0]
    finally:
        for r in runs.values():
            r.launcher.cancel()
        for r in runs.values():
            r.join(60)
        for name, _ in classes.values():
            sched.delete_priority_class(name)


# 8 ------------------------------------------------------------------------------------------------
def test_launcher_identity_is_the_shipped_role_not_admin(cluster, sandbox, tmp_path):
    """The launcher's token (every scenario above uses it) is the ServiceAccount bound by the shipped
    deploy/rbac.yaml: it can run a gang here, and nothing cluster-wide or in other namespaces."""
    import yaml
    from kubernetes import client, config

    from tests.cluster.helpers import SHIPPED_RBAC

    binding = next(d for d in yaml.safe_load_all(SHIPPED_RBAC.read_text()) if d and d["kind"] == "RoleBinding")
    account = binding["subjects"][0]["name"]
    sa_api = config.new_client_from_config(config_file=sandbox.launcher_kubeconfig)
    try:
        review = client.AuthenticationV1Api(sa_api).create_self_subject_review(
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
        user = review.status.user_info
        assert user.username == f"system:serviceaccount:{sandbox.namespace}:{account}"
        assert "system:masters" not in (user.groups or [])

        def forbidden(call) -> bool:
            try:
                call()
            except client.ApiException as exc:
                return exc.status == 403
            return False

        core, co = client.CoreV1Api(sa_api), client.CustomObjectsApi(sa_api)
        assert forbidden(lambda: core.list_node())
        assert forbidden(lambda: co.list_namespaced_custom_object(
            "batch.volcano.sh", "v1alpha1", "default", "jobs"))
        assert forbidden(lambda: co.create_cluster_custom_object(
            "scheduling.volcano.sh", "v1beta1", "queues",
            {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": "x"}}))
        assert forbidden(lambda: core.create_namespaced_pod(sandbox.namespace, {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"},
            "spec": {"containers": [{"name": "x", "image": "x"}]}}))
    finally:
        sa_api.close()

    # ... and with exactly that identity a gang runs to completion.
    api, ns = sandbox.api(), sandbox.namespace
    sandbox.add_nodes(2, cpu="2")
    out = _out(tmp_path, "rbac")
    run = LauncherThread(sandbox.launcher_kubeconfig, make_spec(sandbox, "rbac", out)).start()
    try:
        wait_for("gang Running", lambda: _all_running(api, ns, "rbac"), timeout=90, cluster=cluster)
        finish_trainers(api, ns, "rbac", out)
        run.join(90)
    finally:
        run.launcher.cancel()
    assert run.error is None, run.log
