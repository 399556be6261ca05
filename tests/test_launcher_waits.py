"""The launcher's waits, retries and pod watch, decided by error family, against the HTTP-level fake
API server (``tests/fake_k8s.py``) through the real ``kubernetes`` client.

* every wait ends at once on a cancel or SIGTERM, an API outage's backoff included, and the Job is
  still deleted (the training launcher and the prep fan-out's runner);
* the client maps each failure by what it is (409 AlreadyExists vs a write conflict, 410, 403);
* :class:`ApiCalls` retries transient errors with a bound, never bad input, and a refusal only
  right after an outage;
* the pod watch logs and counts its errors, ends on a refusal, restarts from now after a 410.

The real-cluster evidence (an API server killed and restarted under a training gang, a SIGTERM to a
launcher process) is in ``tests/cluster``.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from ctr_volcano.errors import BadInput, Interrupted, TransientError, exit_code_of
from ctr_volcano.training.volcano.api_calls import ApiCalls, Cancelled
from ctr_volcano.training.volcano.client import Forbidden, JobExists, WatchExpired
from ctr_volcano.training.volcano.launcher import JobCancelled, VolcanoLauncher
from ctr_volcano.training.volcano.prep_job import PrepPods, VolcanoRunner
from ctr_volcano.training.volcano.spec import TrainJobSpec
from tests.test_volcano_launcher import JOB, NS, complete, noop, running

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def spec(tmp_path):
    return TrainJobSpec(name=JOB, namespace=NS, image="img:1", data_dir=str(tmp_path / "data"),
                        output_dir=str(tmp_path / "out"), pservers=1, trainers=2, max_retry=1,
                        schedule_timeout_s=60, run_id="run-1", task_name="train")


def _outage(verb: str = "get jobs"):
    """A script step: from the next request on, every ``verb`` (``""``: every request) answers 503."""
    def step(fake):
        fake.fail_next.extend([(verb, 503)] * 100_000)
    return step


def _wait_for(what, predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def _in_thread(fn):
    box = {}

    def run():
        try:
            box["result"] = fn()
        except BaseException as exc:  # the test inspects it
            box["exc"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, box


def _failed_gets(fake, verb="get", resource="jobs"):
    with fake.lock:
        return sum(1 for v, _, r, _ in fake.requests if v == verb and r == resource)


# ----------------------------------------------------------------------------- cancel during an outage
def test_a_cancel_during_an_api_outage_ends_the_backoff_at_once_and_deletes_the_job(fake, client, spec):
    """The API server stops answering GETs while the gang runs; the launcher backs off (0.5, 1,
    2, 4 ... s, for up to api_outage_s=600). A cancel in the middle of a 2 s wait returns in well
    under a second, and the Job is deleted (deletes still answer)."""
    fake.script = [noop, lambda f: running(f), _outage("get jobs")]
    logs = []
    lch = VolcanoLauncher(client, spec, log=logs.append, poll_s=0.5, explain_every_s=60, api_outage_s=600,
                          handle_signals=False)
    t, box = _in_thread(lch.run)
    _wait_for("three failed polls", lambda: sum("API error, retrying in 2.0s" in x for x in logs) == 1)
    time.sleep(0.2)              # inside the 2 s wait
    cancelled_at = time.monotonic()
    lch.cancel()
    t.join(10)
    took = time.monotonic() - cancelled_at
    assert not t.is_alive()
    assert isinstance(box.get("exc"), JobCancelled), box
    assert took < 1.0, f"the cancel took {took:.2f}s"
    assert fake.job(NS, JOB) is None and fake.count("delete", "jobs") == 1
    assert any("deleted job ml/ctr-t" in x for x in logs), logs


def test_a_cancel_when_even_deletes_fail_gives_up_the_cleanup_after_cleanup_s(fake, client, spec):
    """Nothing answers at all: the cancel still ends the wait at once; deleting the Job is tried
    for cleanup_s (KFP's SIGKILL comes 30 s after its SIGTERM), then the step says it could not."""
    fake.script = [noop, lambda f: running(f), _outage("")]
    logs = []
    lch = VolcanoLauncher(client, spec, log=logs.append, poll_s=0.5, explain_every_s=60, api_outage_s=600,
                          handle_signals=False, cleanup_s=1.0)
    t, box = _in_thread(lch.run)
    _wait_for("the outage", lambda: sum("API error, retrying in 1.0s" in x for x in logs) >= 1)
    cancelled_at = time.monotonic()
    lch.cancel()
    t.join(10)
    took = time.monotonic() - cancelled_at
    assert isinstance(box.get("exc"), JobCancelled), box
    assert 0.9 <= took < 2.5, f"the cleanup took {took:.2f}s"
    assert any("could not delete job ml/ctr-t" in x and "gave up" in x for x in logs), logs
    assert fake.job(NS, JOB) is not None       # the server never answered: it is still there


def test_sigterm_to_a_launcher_process_during_an_api_outage_ends_it_at_once(fake, tmp_path):
    """The same through a real signal: the handler's cancel wakes the backoff's wait."""
    kubeconfig = fake.write_kubeconfig(str(tmp_path / "kubeconfig"))
    script = tmp_path / "launch.py"
    script.write_text(textwrap.dedent(f"""
        from ctr_volcano.training.volcano.client import KubeClient
        from ctr_volcano.training.volcano.launcher import VolcanoLauncher
        from ctr_volcano.training.volcano.spec import TrainJobSpec
        spec = TrainJobSpec(name={JOB!r}, namespace={NS!r}, image="img:1", data_dir="/d", output_dir="/o")
        VolcanoLauncher(KubeClient.from_kubeconfig({kubeconfig!r}), spec, poll_s=0.5, api_outage_s=600,
                        log=lambda line: print(line, flush=True)).run()
    """))
    fake.script = [noop, _outage("get jobs")]
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=str(REPO))
    try:
        for line in proc.stdout:
            if "API error, retrying in 2.0s" in line:
                break
        time.sleep(0.2)
        signalled = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        took = time.monotonic() - signalled
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0 and "JobCancelled" in err and "SIGTERM" in err, err[-2000:]
    assert took < 1.5, f"SIGTERM took {took:.2f}s"
    assert fake.job(NS, JOB) is None and fake.count("delete", "jobs") == 1


# ----------------------------------------------------------------------------- the prep fan-out's runner
def _prep_pods(tmp_path, **over):
    fields = dict(namespace=NS, image="img:1", claim_name="ctr-data", mount_path=str(tmp_path),
                  job_name="ctr-prep-run1", poll_s=0.5, api_outage_s=600.0)
    fields.update(over)
    return PrepPods(**fields)


def test_the_prep_runner_is_cancelled_during_an_outage_at_once_and_deletes_its_job(fake, client, tmp_path):
    fake.script = [noop, _outage("get jobs")]
    logs = []
    runner = VolcanoRunner(client, _prep_pods(tmp_path), log=logs.append, handle_signals=False)
    t, box = _in_thread(lambda: runner.run("parse", f"{tmp_path}/w", 2))
    _wait_for("the outage", lambda: sum("API error, retrying in 2.0s" in x for x in logs) == 1)
    cancelled_at = time.monotonic()
    runner.cancel()
    t.join(10)
    took = time.monotonic() - cancelled_at
    err = box.get("exc")
    assert isinstance(err, Interrupted) and err.signum == signal.SIGTERM, box
    assert took < 1.0, f"the cancel took {took:.2f}s"
    assert fake.job(NS, "ctr-prep-run1-parse") is None and fake.count("delete", "jobs") == 2  # before, after
    assert any("deleted Volcano Job ml/ctr-prep-run1-parse" in x for x in logs), logs


def test_the_prep_runner_waits_out_an_outage_for_its_bound_then_reports_it(fake, client, tmp_path):
    """An outage is no longer waited out forever (a Job read as Running meanwhile): past
    api_outage_s it is a TransientError, and the phase's Job is still deleted."""
    fake.script = [noop, _outage("get jobs")]
    runner = VolcanoRunner(client, _prep_pods(tmp_path, poll_s=0.01, api_outage_s=0.5), log=lambda line: None,
                           handle_signals=False)
    fake_deletes_answer = fake.count("delete", "jobs")
    with pytest.raises(TransientError, match="gave up after"):
        runner.run("parse", f"{tmp_path}/w", 2)
    assert fake.count("delete", "jobs") == fake_deletes_answer + 2 and fake.job(NS, "ctr-prep-run1-parse") is None


# ----------------------------------------------------------------------------- errors mapped by what they are
def test_409_already_exists_is_job_exists_and_the_launcher_reattaches(fake, client, spec, tmp_path):
    """Another attempt of the step creates the Job between this one's GET and POST: the POST's 409
    AlreadyExists is JobExists (bad input where nobody catches it), and the launcher watches that Job."""
    first = {"done": False}
    real_get = client.get_job

    def racing_get(namespace, name):
        if not first["done"]:        # this attempt sees no Job ... and the other creates it now
            first["done"] = True
            from ctr_volcano.training.volcano.manifest import build_job
            fake.put_job(build_job(spec), phase="Running")
            return None
        return real_get(namespace, name)

    client.get_job = racing_get
    fake.script = [lambda f: running(f), complete(tmp_path / "out")]
    ids = []
    VolcanoLauncher(client, spec, log=lambda line: None, poll_s=0.01, handle_signals=False,
                    on_identity=ids.append).run()
    assert ids[0]["action"] == "reattached" and fake.count("create", "jobs") == 1

    with pytest.raises(JobExists) as exc:     # outside the launcher: bad input, exit 2
        client.create_job(build_job_again(spec))
    assert isinstance(exc.value, BadInput) and exit_code_of(exc.value) == 2 and exc.value.field == "name"


def build_job_again(spec):
    from ctr_volcano.training.volcano.manifest import build_job
    return build_job(spec)


def test_a_409_that_is_a_write_conflict_is_transient_and_retried(fake, client, spec, tmp_path):
    fake.fail_next = [("create jobs", 409)]        # a Status without reason AlreadyExists
    fake.script = [lambda f: running(f), complete(tmp_path / "out")]
    logs = []
    VolcanoLauncher(client, spec, log=logs.append, poll_s=0.01, handle_signals=False).run()
    assert fake.count("create", "jobs") == 2
    assert any("API error, retrying" in x and "HTTP 409" in x for x in logs), logs


def test_bad_input_from_the_api_server_is_never_retried(fake, client, spec):
    fake.fail_next = [("create jobs", 422)]
    logs = []
    with pytest.raises(BadInput, match="rejected it"):
        VolcanoLauncher(client, spec, log=logs.append, poll_s=0.01, handle_signals=False).run()
    assert fake.count("create", "jobs") == 1 and not [x for x in logs if "retrying" in x]


def test_the_watch_maps_410_403_and_503(fake, client):
    for status, family in ((410, WatchExpired), (403, Forbidden), (503, TransientError)):
        fake.fail_next = [("watch pods", status)]
        with pytest.raises(family):
            list(client.watch_pods(NS, f"volcano.sh/job-name={JOB}", timeout_s=1))
    assert list(client.watch_pods(NS, f"volcano.sh/job-name={JOB}", timeout_s=1)) == []


# ----------------------------------------------------------------------------- ApiCalls by family
class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def _calls(clock, logs):
    return ApiCalls(logs.append, base_delay_s=0.001, max_retries=2, outage_s=120.0, clock=clock)


def test_a_refusal_is_transient_only_right_after_an_outage():
    clock, logs = _Clock(), []
    calls = _calls(clock, logs)
    refusal = Forbidden("get jobs ml/x", 403, "forbidden")

    def answers(*results):
        seq = list(results)

        def fn():
            r = seq.pop(0)
            if isinstance(r, Exception):
                raise r
            return r
        return fn

    with pytest.raises(Forbidden):                        # no outage yet: the Role is missing
        calls.call(answers(refusal))
    assert calls.call(answers(TransientError("down"), "up")) == "up"     # an outage at t=0
    clock.now = 60.0
    assert calls.call(answers(refusal, refusal, "ok")) == "ok"           # within 120 s of it
    assert sum("refused right after an outage" in x for x in logs) == 2
    clock.now = 200.0
    with pytest.raises(Forbidden):                        # long after it: bad input again
        calls.call(answers(refusal))


def test_a_cancel_wakes_a_wait_and_cleanup_calls_are_not_interrupted():
    calls = ApiCalls(lambda line: None, base_delay_s=5.0, max_retries=5, outage_s=600.0)
    threading.Timer(0.2, calls.cancel, args=(signal.SIGTERM,)).start()
    started = time.monotonic()
    with pytest.raises(Cancelled) as exc:
        calls.call(lambda: (_ for _ in ()).throw(TransientError("down")))
    assert time.monotonic() - started < 1.0 and exc.value.signum == signal.SIGTERM
    tries = []

    def flaky():
        tries.append(1)
        if len(tries) < 2:
            raise TransientError("down")
        return "deleted"

    cleanup = ApiCalls(lambda line: None, base_delay_s=0.05, max_retries=0, outage_s=600.0)
    cleanup.cancel()
    assert cleanup.call(flaky, interruptible=False, outage_s=1.0) == "deleted" and len(tries) == 2


# ----------------------------------------------------------------------------- the pod watch's errors
def test_pod_watch_errors_are_logged_counted_and_reported_with_the_failure(fake, client, spec):
    fake.fail_next = [("watch pods", 503)] * 3
    logs = []
    lch = VolcanoLauncher(client, spec, log=logs.append, poll_s=0.01, handle_signals=False)
    lch.pod_watch.retry_s = 0.01
    fake.script = [noop, lambda f: running(f),
                   lambda f: _wait_for("3 watch errors", lambda: lch.pod_watch.errors["transient"] == 3),
                   lambda f: f.set_phase(NS, JOB, "Failed")]
    with pytest.raises(Exception) as exc:
        lch.run()
    assert exc.value.details["pod_watch_errors"] == {"transient": 3}
    said = [x for x in logs if "pod watch error" in x]
    assert len(said) == 3 and all("HTTP 503" in x for x in said), logs
    assert f"[volcano] pod watch of job {JOB}: 3 error(s) (transient: 3)" in logs


def test_a_refused_pod_watch_ends_and_the_poll_carries_on(fake, client, spec, tmp_path):
    fake.forbid = "watch pods"
    logs = []
    lch = VolcanoLauncher(client, spec, log=logs.append, poll_s=0.01, handle_signals=False)
    fake.script = [noop, lambda f: running(f),
                   lambda f: _wait_for("the refusal", lambda: lch.pod_watch.errors["refused"] == 1),
                   noop, complete(tmp_path / "out")]
    assert lch.run().metrics["rows"] == 1000
    assert lch.pod_watch.counts() == {"refused": 1} and fake.count("watch", "pods") == 1
    assert any("stopping the watch" in x and "rbac=" in x for x in logs), logs
