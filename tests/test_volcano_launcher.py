"""Every launcher path against an HTTP-level fake API server, through the real ``kubernetes`` client.

Paths: create, re-attach (running and completed), re-create after an earlier failed attempt,
pending -> explain -> timeout (job deleted), failure with the failed pods' log tails (kept although
Volcano deleted the pods), cancel (method and a real SIGTERM to a launcher process), success with
outputs, transient API errors (retried, bounded), RBAC refusal, the stall watchdog (a silent Running
trainer fails the step and the Job is deleted; progressing, Pending or unreadable ones do not). Every request any test makes is
checked against the Role of :mod:`ctr_volcano.training.volcano.rbac`.

The real-cluster evidence is in the cluster tier (``tests/cluster``).
"""
from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from ctr_volcano.errors import BadInput, TrainingJobFailed, TransientError, exit_code_of
from ctr_volcano.training.api import RoleOutage, RoleRefused
from ctr_volcano.training.volcano.client import KubeClient, WatchExpired
from ctr_volcano.training.volcano.launcher import JobCancelled, VolcanoLauncher
from ctr_volcano.training.volcano.manifest import build_job
from ctr_volcano.training.volcano.spec import TrainJobSpec
from ctr_volcano.training.volcano.stall import StallWatchdog

REPO = Path(__file__).resolve().parents[1]
NS = "ml"
JOB = "ctr-t"


@pytest.fixture
def spec(tmp_path):
    return TrainJobSpec(name=JOB, namespace=NS, image="img:1", data_dir=str(tmp_path / "data"),
                        output_dir=str(tmp_path / "out"), pservers=1, trainers=2, max_retry=1,
                        schedule_timeout_s=60, run_id="run-1", task_name="train")


def launcher(client, spec, logs, **kw):
    kw.setdefault("poll_s", 0.01)
    kw.setdefault("explain_every_s", 0.05)
    kw.setdefault("handle_signals", False)
    return VolcanoLauncher(client, spec, log=logs.append, **kw)


# ----------------------------------------------------------------------------- scenario steps
def noop(_fake):
    pass


def running(fake, retry=0):
    fake.put_podgroup(NS, JOB, "Running", [{"type": "Scheduled", "status": "True",
                                            "reason": "tasks in gang are ready to be scheduled",
                                            "lastTransitionTime": "2026-01-01T00:00:00Z"}])
    for task, i in (("pserver", 0), ("trainer", 0), ("trainer", 1)):
        fake.put_pod(NS, JOB, task, i, "Running")
    fake.log(NS, f"{JOB}-pserver-0", "pserver-0: serving on ctr-t-pserver-0.ctr-t:36001")
    fake.log(NS, f"{JOB}-trainer-0", "trainer-0: epoch 1 step 10 loss 0.52")
    fake.set_phase(NS, JOB, "Running", running=3, retryCount=retry)


def more_logs(fake):
    fake.log(NS, f"{JOB}-trainer-0", "trainer-0: epoch 2 step 20 loss 0.47")


def complete(out_dir):
    def step(fake):
        (out_dir / "model").mkdir(parents=True, exist_ok=True)
        (out_dir / "model" / "model_meta.json").write_text(json.dumps({"schema_version": 1}))
        (out_dir / "metrics.json").write_text(json.dumps({"final_loss": 0.47, "rows": 1000}))
        fake.log(NS, f"{JOB}-trainer-0", "trainer-0: exported model")
        for i in (0, 1):
            fake.finish_pod(NS, f"{JOB}-trainer-{i}", 0)
        fake.finish_pod(NS, f"{JOB}-pserver-0", 137)  # CompleteJob kills the pservers
        fake.set_phase(NS, JOB, "Completed", succeeded=2, running=0)
    return step


def trainer_fails(fake, retry):
    fake.log(NS, f"{JOB}-trainer-1", "Traceback (most recent call last):",
             '  File "ctr_model/train.py", line 1, in main', f"ValueError: boom on attempt {retry + 1}")
    fake.finish_pod(NS, f"{JOB}-trainer-1", 3)
    fake.set_phase(NS, JOB, "Running", running=2, failed=1, retryCount=retry)


def volcano_kills(fake):
    # RestartJob: Volcano kills the healthy members first (they end with SIGTERM while being deleted)
    pod = fake.pods[(NS, f"{JOB}-pserver-0")]
    pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    fake.finish_pod(NS, f"{JOB}-pserver-0", 143)
    fake.pods[(NS, f"{JOB}-pserver-0")]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"


def volcano_restarts(fake, retry):
    # ... then all pods (and so their logs) are gone and the job is Restarting
    for key in list(fake.pods):
        fake.delete_pod(*key)
    fake.set_phase(NS, JOB, "Restarting", retryCount=retry)


# ----------------------------------------------------------------------------- paths
def test_create_watch_stream_and_collect_outputs(fake, client, spec, tmp_path):
    fake.script = [noop, lambda f: running(f), more_logs, noop, complete(tmp_path / "out")]
    logs, ids = [], []
    result = launcher(client, spec, logs, on_identity=ids.append).run()

    assert result.metrics == {"final_loss": 0.47, "rows": 1000}
    assert result.attempts == 1
    assert Path(result.model_dir, "model_meta.json").is_file()
    assert result.output_dir == str(tmp_path / "out")
    # the identity went out once, right after creation, with the server-assigned uid
    created = fake.job(NS, JOB)
    assert ids == [{"backend": "volcano", "kind": "batch.volcano.sh/v1alpha1/Job", "name": JOB,
                    "namespace": NS, "uid": created["metadata"]["uid"], "action": "created",
                    "queue": "default"}]
    assert fake.count("create", "jobs") == 1
    assert created["spec"] == build_job(spec)["spec"]
    # pod logs streamed with role prefixes, each line exactly once
    text = "\n".join(logs)
    for line in ("[trainer-0] trainer-0: epoch 1 step 10 loss 0.52", "[trainer-0] trainer-0: epoch 2 step 20 loss 0.47",
                 "[trainer-0] trainer-0: exported model", "[pserver-0] pserver-0: serving on ctr-t-pserver-0.ctr-t:36001"):
        assert logs.count(line) == 1, text
    assert "Completed after 1 attempt(s)" in text
    assert "failed" not in text.replace("failed 0", "")  # killed pservers are not failures
    assert fake.count("delete", "jobs") == 0


def test_reattach_to_running_job_of_same_run(fake, client, spec, tmp_path):
    fake.put_job(copy.deepcopy(build_job(spec)), phase="Running")
    fake.script = [lambda f: running(f), complete(tmp_path / "out")]
    logs, ids = [], []
    result = launcher(client, spec, logs, on_identity=ids.append).run()
    assert fake.count("create", "jobs") == 0
    assert ids[0]["action"] == "reattached"
    assert result.metrics["rows"] == 1000


def test_reattach_to_completed_job_collects_without_creating(fake, client, spec, tmp_path):
    fake.put_job(copy.deepcopy(build_job(spec)), phase="Completed", retryCount=1)
    running(fake, 1)
    complete(tmp_path / "out")(fake)
    result = launcher(client, spec, []).run()
    assert fake.count("create", "jobs") == 0 and result.attempts == 2


def test_failed_job_of_earlier_attempt_is_deleted_and_recreated(fake, client, spec, tmp_path):
    old = fake.put_job(copy.deepcopy(build_job(spec)), phase="Failed")
    fake.deletion_lingers = 3  # the API server keeps it (deletionTimestamp) for a few reads
    fake.script = [noop, lambda f: running(f), complete(tmp_path / "out")]
    logs, ids = [], []
    launcher(client, spec, logs, on_identity=ids.append).run()
    assert fake.count("delete", "jobs") == 1 and fake.count("create", "jobs") == 1
    assert ids[0]["action"] == "recreated" and ids[0]["uid"] != old["metadata"]["uid"]


def test_job_of_another_run_with_same_name_is_refused(fake, client, spec):
    other = copy.deepcopy(build_job(spec))
    other["metadata"]["annotations"]["ctr-volcano/kfp-run-id"] = "someone-else"
    fake.put_job(other, phase="Running")
    with pytest.raises(BadInput, match="belongs to KFP run 'someone-else'"):
        launcher(client, spec, []).run()
    assert fake.count("delete", "jobs") == 0


def test_pending_gang_is_explained_then_times_out_and_is_deleted(fake, client, tmp_path, spec):
    spec = TrainJobSpec(**{**spec.__dict__, "schedule_timeout_s": 1})
    message = ("3/3 tasks in gang unschedulable: pod group is not ready, 3 Pending, 3 minAvailable; "
               "Pending: 3 Unschedulable. Origin reason is ctr-t-trainer-1: 0/2 nodes are available: "
               "2 Insufficient cpu.")

    def unschedulable(f):
        pg = f.put_podgroup(NS, JOB, "Pending", [{"type": "Unschedulable", "status": "True",
                                                  "reason": "NotEnoughResources", "message": message,
                                                  "lastTransitionTime": "2026-01-01T00:00:00Z"}])
        f.add_event(NS, "PodGroup", pg["metadata"]["name"], "Unschedulable", message)
        f.add_event(NS, "Job", JOB, "PodGroupPending",
                    f"PodGroup {NS}:{JOB} unschedulable, reason: {message}")

    fake.script = [noop, unschedulable]
    logs = []
    started = time.monotonic()
    with pytest.raises(TrainingJobFailed) as exc:
        launcher(client, spec, logs, poll_s=0.05, explain_every_s=0.2).run()
    err = exc.value
    assert err.phase == "Unschedulable"
    assert "Unschedulable (NotEnoughResources): 3/3 tasks in gang unschedulable" in err.reason
    assert "Insufficient cpu" in err.reason and "PodGroupPending" in err.reason
    assert 1.0 <= time.monotonic() - started < 10
    assert fake.job(NS, JOB) is None and fake.count("delete", "jobs") == 1
    explained = [line for line in logs if "Pending for" in line]
    assert len(explained) >= 2, logs  # printed periodically while waiting
    assert any("Insufficient cpu" in line for line in explained)


def test_explain_without_podgroup_and_with_image_pull_errors(fake, client, spec):
    fake.put_job(copy.deepcopy(build_job(spec)), phase="Pending")
    lch = launcher(client, spec, [])
    assert "no PodGroup yet (is vc-controller-manager running?)" in lch.explain(fake.job(NS, JOB), [])
    fake.put_podgroup(NS, JOB, "Pending")
    assert "has not admitted the gang" in lch.explain(fake.job(NS, JOB), [])
    # Once Volcano says why (an enqueue event on the Job), the guess about the scheduler is dropped.
    fake.add_event(NS, "Job", JOB, "PodGroupPending", "queue resource quota insufficient: insufficient cpu")
    text = lch.explain(fake.job(NS, JOB), [])
    assert "queue resource quota insufficient" in text and "has not admitted the gang" not in text
    fake.put_podgroup(NS, JOB, "Inqueue")
    pod = fake.put_pod(NS, JOB, "trainer", 0, "Pending", waiting="ImagePullBackOff")
    fake.add_event(NS, "Pod", pod["metadata"]["name"], "Failed", "Failed to pull image img:1: not found")
    text = lch.explain(fake.job(NS, JOB), client.list_pods(NS, f"volcano.sh/job-name={JOB}"))
    assert "ImagePullBackOff" in text and "Failed to pull image img:1" in text


def test_failure_keeps_failed_pods_reason_exit_code_and_log_tail(fake, client, spec):
    fake.script = [
        noop, lambda f: running(f, 0), lambda f: trainer_fails(f, 0), volcano_kills,
        lambda f: volcano_restarts(f, 1),
        lambda f: f.set_phase(NS, JOB, "Pending", retryCount=1), lambda f: running(f, 1),
        lambda f: trainer_fails(f, 1),
        lambda f: (volcano_restarts(f, 2), f.set_phase(NS, JOB, "Failed", reason="", message="",
                                                        retryCount=2)),
    ]
    logs = []
    with pytest.raises(TrainingJobFailed) as exc:
        launcher(client, spec, logs, tail_lines=2).run()
    err = exc.value
    assert (err.job, err.phase, err.role, err.exit_code) == (JOB, "Failed", "trainer", 3)
    # the failure that ended the Job is the last attempt's; tail_lines=2 keeps two lines of it
    assert "ValueError: boom on attempt 2" in err.log_tail and "Traceback" not in err.log_tail
    pods = err.details["failed_pods"]
    assert [p["retry"] for p in pods] == [0, 1] and len({p["uid"] for p in pods}) == 2
    assert {p["role"] for p in pods} == {"trainer"}  # the pserver Volcano killed is not a cause
    assert "ValueError: boom on attempt 2" in pods[1]["log_tail"]
    assert err.details["retry_count"] == 2
    assert "pod ctr-t-trainer-1 Error" in str(err) and "exit code 3" in str(err)
    # the pods were gone when the job failed: the tails come from the moment the launcher saw them
    assert fake.pods == {}
    assert any("attempt 2/2" in line for line in logs)
    # the restart is explained in the step's log: the pod, its exit code, its last log lines
    said = [line for line in logs if "attempt 1 restarted:" in line]
    assert len(said) == 1 and "pod ctr-t-trainer-1 (trainer) Error, exit code 3" in said[0], said
    assert "ValueError: boom on attempt 1" in said[0]
    assert fake.count("delete", "jobs") == 0  # kept for inspection; ttlSecondsAfterFinished cleans up


def test_cancel_deletes_job_and_raises(fake, client, spec):
    fake.script = [lambda f: running(f)]
    lch = launcher(client, spec, [], poll_s=0.02)
    box = {}

    def run():
        try:
            lch.run()
        except BaseException as exc:  # the test inspects it
            box["exc"] = exc

    t = threading.Thread(target=run)
    t.start()
    deadline = time.monotonic() + 10
    while fake.job_gets < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    lch.cancel()
    t.join(10)
    assert not t.is_alive()
    assert isinstance(box.get("exc"), JobCancelled) and box["exc"].phase == "Cancelled"
    assert fake.job(NS, JOB) is None and fake.count("delete", "jobs") == 1


def test_sigterm_to_launcher_process_deletes_job_and_exits_nonzero(fake, tmp_path):
    kubeconfig = fake.write_kubeconfig(str(tmp_path / "kubeconfig"))
    script = tmp_path / "launch.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        from ctr_volcano.training.volcano.client import KubeClient
        from ctr_volcano.training.volcano.launcher import VolcanoLauncher
        from ctr_volcano.training.volcano.spec import TrainJobSpec
        spec = TrainJobSpec(name={JOB!r}, namespace={NS!r}, image="img:1", data_dir="/d", output_dir="/o")
        client = KubeClient.from_kubeconfig({kubeconfig!r})
        def ready(identity):
            print("IDENTITY", identity["uid"], flush=True)
        VolcanoLauncher(client, spec, poll_s=0.05, on_identity=ready).run()
    """))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, cwd=str(REPO))
    try:
        seen = []
        for line in proc.stdout:  # the launcher's own progress lines come first
            seen.append(line)
            if line.startswith("IDENTITY"):
                break
        assert seen and seen[-1].startswith("IDENTITY"), (seen, proc.stderr.read() if proc.poll() is not None else "")
        assert fake.job(NS, JOB) is not None
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0
    assert "JobCancelled" in err and "SIGTERM" in err
    assert fake.job(NS, JOB) is None and fake.count("delete", "jobs") == 1


def test_transient_api_errors_are_retried(fake, client, spec, tmp_path):
    fake.fail_next = [("get jobs", 503), ("get jobs", 500), ("list pods", 429), ("create jobs", 504)]
    fake.script = [lambda f: running(f), complete(tmp_path / "out")]
    logs = []
    result = launcher(client, spec, logs).run()
    assert result.metrics["rows"] == 1000
    assert sum("API error, retrying" in line for line in logs) == 4
    assert fake.count("create", "jobs") == 2  # the 504 attempt and the retry


def test_transient_errors_are_bounded(fake, client, spec):
    fake.fail_next = [("get jobs", 503)] * 3
    with pytest.raises(TransientError, match="gave up after 3 attempts"):
        launcher(client, spec, [], max_api_retries=2, api_outage_s=0).run()


def test_an_api_outage_is_waited_out_for_its_time_bound(fake, client, spec, tmp_path):
    """Beyond max_api_retries, for api_outage_s: 8 failures in a row (2.6 s of backoff) pass with
    2 retries and a 5 s bound; with a 0.5 s bound, 100 failures give up after the bound."""
    fake.fail_next = [("get jobs", 503)] * 8
    fake.script = [lambda f: running(f), complete(tmp_path / "out")]
    logs = []
    result = launcher(client, spec, logs, max_api_retries=2, api_outage_s=5).run()
    assert result.metrics["rows"] == 1000
    assert any("API server answers again after" in line and "(8 retries)" in line for line in logs), logs
    assert fake.count("create", "jobs") == 1

    fake.fail_next = [("get jobs", 503)] * 100
    started = time.monotonic()
    with pytest.raises(TransientError, match="gave up after"):
        launcher(client, spec, [], max_api_retries=0, api_outage_s=0.5).run()
    assert 0.5 <= time.monotonic() - started < 5


def test_a_refusal_right_after_an_outage_is_part_of_it(fake, client, spec, tmp_path):
    """A restarted API server answers 403 until its RBAC caches fill: after a transient error a
    403 is retried (within api_outage_s); the first call's 403 still fails at once (below)."""
    fake.fail_next = [("get jobs", 503), ("get jobs", 403), ("get jobs", 403)]
    fake.script = [lambda f: running(f), complete(tmp_path / "out")]
    logs = []
    result = launcher(client, spec, logs).run()
    assert result.metrics["rows"] == 1000
    assert sum("refused right after an outage" in line for line in logs) == 2, logs


def test_forbidden_names_rbac_fix(fake, client, spec):
    fake.forbid = "create jobs"
    with pytest.raises(BadInput) as exc:
        launcher(client, spec, []).run()
    assert exc.value.field == "rbac" and "ctr-volcano rbac" in str(exc.value)


def test_job_deleted_by_someone_else_fails_clearly(fake, client, spec):
    fake.script = [lambda f: running(f), lambda f: f._cascade(NS, JOB)]
    with pytest.raises(TrainingJobFailed) as exc:
        launcher(client, spec, []).run()
    assert exc.value.phase == "Deleted"


def test_client_from_kubeconfig_talks_to_the_server(fake, tmp_path):
    c = KubeClient.from_kubeconfig(fake.write_kubeconfig(str(tmp_path / "kc"), context="fake"), context="fake")
    try:
        assert c.get_job(NS, "nope") is None
        assert c.list_pods(NS, "volcano.sh/job-name=nope") == []
    finally:
        c.close()
    with pytest.raises(BadInput, match="kubeconfig"):
        KubeClient.from_kubeconfig(str(tmp_path / "missing"))


def test_unreadable_pod_logs_never_fail_the_step(fake, client, spec, tmp_path):
    # e.g. kubelet unreachable (or kwok nodes, which serve no logs): every log read answers 502
    fake.fail_next = [("get pods/log", 502)] * 100
    fake.script = [lambda f: running(f), more_logs, complete(tmp_path / "out")]
    logs = []
    result = launcher(client, spec, logs, max_api_retries=1).run()
    assert result.metrics["rows"] == 1000
    # once per pod: the two streamed (pserver-0, trainer-0) and trainer-1, read by the stall watchdog
    assert sum("cannot read the log of pod" in line for line in logs) == 3


# ----------------------------------------------------------------------------- stall watchdog
def trainers_log(*indexes):
    def step(fake):
        for i in indexes:
            fake.log(NS, f"{JOB}-trainer-{i}", f"trainer-{i}: epoch 1: {fake.job_gets} examples")
    return step


def test_silent_trainer_fails_the_step_naming_it_and_the_job_is_deleted(fake, client, spec):
    spec = TrainJobSpec(**{**spec.__dict__, "stall_timeout_s": 0.5})

    def start(f):
        running(f)
        f.log(NS, f"{JOB}-trainer-1", "trainer-1: 1 shard(s) converted", "trainer-1: epoch 1: 100 examples")

    # trainer-0 keeps logging on every poll; trainer-1 logs twice at start, then nothing
    fake.script = [noop, start] + [trainers_log(0)] * 2000
    logs = []
    t0 = time.monotonic()
    with pytest.raises(TrainingJobFailed) as exc:
        launcher(client, spec, logs, tail_lines=5).run()
    waited = time.monotonic() - t0
    err = exc.value
    assert err.phase == "Stalled" and err.role == f"{JOB}-trainer-1", err
    assert [p["pod"] for p in err.details["silent_pods"]] == [f"{JOB}-trainer-1"]
    assert err.details["silent_pods"][0]["silent_s"] >= 0.5
    assert "trainer-1: epoch 1: 100 examples" in err.details["silent_pods"][0]["last_line"]
    assert "1 shard(s) converted" in err.log_tail  # kept before the Job (and its logs) went away
    assert f"{JOB}-trainer-0" not in str(err) and "stall_timeout_s=0.5" in str(err)
    assert 0.5 <= waited < 10
    assert fake.job(NS, JOB) is None and fake.count("delete", "jobs") == 1
    assert fake.pods == {}
    assert any("no progress from ctr-t-trainer-1" in line for line in logs)


def test_trainers_that_keep_logging_are_never_stalled_nor_a_long_pending_gang(fake, client, spec, tmp_path):
    spec = TrainJobSpec(**{**spec.__dict__, "stall_timeout_s": 0.3})
    pending = [noop] * 40  # >= 0.4 s Pending: silence before the gang runs is not a stall
    progress = [trainers_log(0, 1)] * 40  # >= 0.4 s Running, both trainers progressing
    fake.script = pending + [lambda f: running(f)] + progress + [complete(tmp_path / "out")]
    logs = []
    result = launcher(client, spec, logs, explain_every_s=60).run()
    assert result.metrics["rows"] == 1000
    assert fake.count("delete", "jobs") == 0
    assert fake.count("get", "pods/log") > 10  # the watchdog really looked


def test_watchdog_clock_new_lines_restart_silence_and_restarted_pods_start_afresh():
    dog = StallWatchdog(10)
    dog.observe("t-0", "uid-a", "", now=0.0)
    dog.observe("t-1", "uid-b", "2026-01-01T00:00:01Z line 1", now=0.0)
    dog.observe("t-0", "uid-a", "2026-01-01T00:00:05Z started", now=5.0)
    dog.observe("t-1", "uid-b", "2026-01-01T00:00:01Z line 1", now=9.0)  # same line: still silent
    assert dog.silent(9.9) == []
    assert [(s.pod, s.silent_s) for s in dog.silent(10.0)] == [("t-1", 10.0)]
    # the gang restarts: same pod name, new uid -> a fresh heartbeat, the old silence is forgotten
    dog.observe("t-1", "uid-c", "2026-01-01T00:00:01Z line 1", now=12.0)
    assert [s.pod for s in dog.silent(16.0)] == ["t-0"]  # t-0's last line was at 5.0
    # an unreadable log is the benefit of the doubt, never a stall
    dog.observe("t-0", "uid-a", None, now=16.0)
    assert dog.silent(21.0) == []
    # longest silence first; pods no longer Running are forgotten
    assert [s.pod for s in dog.silent(40.0)] == ["t-1", "t-0"]
    dog.keep_only(["t-0"])
    assert [s.pod for s in dog.silent(40.0)] == ["t-0"]
    dog.reset()
    assert dog.silent(1e9) == []


def test_unreadable_logs_are_never_a_stall(fake, client, spec, tmp_path):
    spec = TrainJobSpec(**{**spec.__dict__, "stall_timeout_s": 0.2})
    fake.fail_next = [("get pods/log", 502)] * 1000
    fake.script = [lambda f: running(f)] + [noop] * 30 + [complete(tmp_path / "out")]
    result = launcher(client, spec, [], max_api_retries=0).run()
    assert result.metrics["rows"] == 1000


@pytest.mark.parametrize("bad", [0, -5, True, "300"])
def test_stall_timeout_is_validated(spec, bad):
    with pytest.raises(BadInput, match="stall_timeout_s"):
        TrainJobSpec(**{**spec.__dict__, "stall_timeout_s": bad})


def test_bad_input_exit_fails_in_one_line_naming_the_path_without_restarts(fake, client, spec):
    """A role that exits 2 (its mount unreachable) makes Volcano terminate the Job (the exitCode
    policy); the step fails as bad input (exit 2, as on the local backend) with the role's own error
    line, no traceback, no restart."""
    line = ("ctr-t-pserver-0: error: output directory /w/ctr-data/runs/j (CTR_OUTPUT_DIR) is "
            "unreachable: /w (mode 0700, owner 0:0) does not let uid 1000 traverse")

    def pserver_bad_input(f):
        f.log(NS, f"{JOB}-pserver-0", "pserver-0: starting", line)
        f.finish_pod(NS, f"{JOB}-pserver-0", 2)
        f.set_phase(NS, JOB, "Terminating", running=2, failed=1)

    fake.script = [noop, lambda f: running(f, 0), pserver_bad_input,
                   lambda f: f.set_phase(NS, JOB, "Terminated", failed=1)]
    logs = []
    with pytest.raises(BadInput) as exc:
        launcher(client, spec, logs).run()
    err = exc.value
    assert isinstance(err, RoleRefused) and not isinstance(err, TrainingJobFailed)
    assert exit_code_of(err) == 2
    assert (err.phase, err.role, err.exit_code) == ("Terminated", "pserver", 2)
    assert str(err).splitlines() == [f"training job 'ctr-t' Terminated: pod ctr-t-pserver-0 exited 2: {line} "
                                     "(role pserver, exit code 2)"]
    assert err.details["retry_count"] == 0 and line in err.details["failed_pods"][0]["log_tail"]
    assert not [x for x in logs if "restarted:" in x]


def test_a_role_that_gives_up_on_an_outage_is_restarted_then_fails_the_step_as_an_outage(fake, client, spec):
    """Exit 75 (a role gave up on an outage after its own retries) is not in the Job's terminate
    policy: Volcano restarts the gang; when the outage outlasts every attempt the step's error is a
    TransientError (exit 75), not a failed job and not the user's input."""
    assert [p for p in build_job(spec)["spec"]["policies"] if "exitCode" in p] == [
        {"exitCode": 2, "action": "TerminateJob"}]

    def gives_up(retry):
        def step(f):
            f.log(NS, f"{JOB}-trainer-0", "trainer-0: error: the object store did not answer in 300 s")
            f.finish_pod(NS, f"{JOB}-trainer-0", 75)
            f.set_phase(NS, JOB, "Running", running=2, failed=1, retryCount=retry)
        return step

    fake.script = [noop, lambda f: running(f, 0), gives_up(0), lambda f: volcano_restarts(f, 1),
                   lambda f: running(f, 1), gives_up(1),
                   lambda f: (volcano_restarts(f, 2), f.set_phase(NS, JOB, "Failed", retryCount=2))]
    logs = []
    with pytest.raises(TransientError) as exc:
        launcher(client, spec, logs).run()
    err = exc.value
    assert isinstance(err, RoleOutage) and exit_code_of(err) == 75
    assert (err.role, err.exit_code) == ("trainer", 75) and "did not answer" in err.log_tail
    assert len([x for x in logs if "restarted:" in x]) == 2 and err.details["retry_count"] == 2


def test_the_pod_watch_resumes_across_a_lost_connection_and_restarts_after_a_refusal(spec):
    """The resume point survives a dropped connection (the API server restarting); a server
    answer such as 410 Gone (the point is too old) makes the next watch start from now. Each error
    is logged and counted."""
    calls = []

    class Client:
        def watch_pods(self, namespace, selector, timeout_s, resource_version=None):
            calls.append(resource_version)
            if len(calls) == 1:
                yield {"metadata": {"name": f"{JOB}-trainer-0", "resourceVersion": "7"}}
                raise TransientError("watch pods: ConnectionResetError: the API server went away")
            if len(calls) == 2:
                raise WatchExpired("watch pods: HTTP 410 Gone")
            watch.stop()
            return
            yield

    logs = []
    lch = launcher(Client(), spec, logs)
    watch = lch.pod_watch
    watch.retry_s = 0.01
    watch.run()
    assert calls == [None, "7", None]
    assert watch.counts() == {"transient": 1, "expired": 1}
    said = [line for line in logs if "pod watch error" in line]
    assert len(said) == 2 and "ConnectionResetError" in said[0] and "watching from now" in said[1], logs
