"""Supervision semantics of the local gang with real (lightweight, non-Paddle) processes.

The role command is a tiny Python script that parses the same contract as the real entrypoint and
then misbehaves on demand, so these tests exercise the supervisor's logic quickly; the real Paddle
gang is covered in ``test_train_local.py``.
"""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from ctr_volcano.errors import (
    EXIT_BAD_INPUT,
    EXIT_TRANSIENT,
    BadInput,
    TrainingJobFailed,
    TransientError,
    exit_code_of,
    family_of,
)
from ctr_volcano.training.local.gang import GangSpec, LocalGang
from tests.gang_helpers import gang_job_id, job_processes
from tools.planted_prep import write_planted_prep

FAKE_ROLE = textwrap.dedent("""
    import json, os, subprocess, sys, time
    from ctr_model.contract import parse_role_env, paddle_env
    spec = parse_role_env()
    env = paddle_env(spec)
    print(spec.name, env["PADDLE_PSERVERS_IP_PORT_LIST"], env["POD_IP"], env["PADDLE_PORT"], flush=True)
    plan = json.loads(os.environ.get("FAKE_PLAN", "{}")).get(spec.name, "")
    if plan.startswith("refuse:"):
        print("ctr_model.train:", spec.name, "error:", plan[len("refuse:"):], file=sys.stderr, flush=True)
        sys.exit(2)
    if plan.startswith("exit:"):
        sys.exit(int(plan[5:]))
    if plan.startswith("outage"):   # as the entrypoint ends on an outage: its family's exit code
        flag = plan.partition(":")[2]
        if not flag or not os.path.exists(flag):
            if flag:
                open(flag, "w").close()
            from ctr_model.errors import exit_code_of
            from ctr_model.store import StoreUnreachable
            exc = StoreUnreachable("s3://b/out", "cannot reach the store at http://127.0.0.1:9")
            print("ctr_model.train:", spec.name, "error:", exc, file=sys.stderr, flush=True)
            sys.exit(exit_code_of(exc))
    if plan.startswith("fail_once:"):
        flag = plan[len("fail_once:"):]
        if not os.path.exists(flag):
            open(flag, "w").close()
            sys.exit(4)
    if spec.role == "pserver":
        if plan == "exit0":
            sys.exit(0)
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])   # a grandchild
        while True:
            time.sleep(1)
    if plan == "silent":
        time.sleep(600)
    for i in range(3):
        print("step", i, flush=True)
        print("2026-11-30T00:00:00 INFO    ctr_model.train:", spec.name, "epoch 1/1:", i, "examples", flush=True)
        time.sleep(0.3)
""")


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory):
    d = tmp_path_factory.mktemp("data")
    write_planted_prep(str(d), train_rows=40, test_rows=10, shards=2)
    return str(d)


@pytest.fixture
def job_id():
    yield from gang_job_id("gangtest", grace_s=5, poll_s=0.1)


def make_spec(job_id, tiny_data, tmp_path, plan=None, **kw):
    return GangSpec(job_id=job_id, pservers=2, trainers=2, data_dir=tiny_data,
                    output_dir=str(tmp_path / "out"), workdir=str(tmp_path / "work"),
                    command=(sys.executable, "-c", FAKE_ROLE), finish_timeout_s=1.0,
                    extra_env={"FAKE_PLAN": json.dumps(plan or {})}, **kw)


def test_success_sees_volcano_contract_and_stops_pservers(job_id, tiny_data, tmp_path):
    logs = []
    result = LocalGang(make_spec(job_id, tiny_data, tmp_path), log=logs.append).run()
    assert result.attempts == 1
    first = open(result.logs["pserver-1"]).readline().split()
    ps_list = first[1].split(",")
    assert first[0] == "pserver-1" and f"{first[2]}:{first[3]}" == ps_list[1]
    assert len(set(ps_list)) == 2
    host_file = tmp_path / "work" / "attempt-1" / "volcano" / "trainer.host"
    assert host_file.read_text() == "127.0.0.1\n127.0.0.1\n"


def test_trainer_progress_lines_reach_the_supervisors_log(job_id, tiny_data, tmp_path):
    logs = []
    LocalGang(make_spec(job_id, tiny_data, tmp_path), log=logs.append).run()
    for trainer in ("trainer-0", "trainer-1"):
        forwarded = [m for m in logs if f": {trainer} epoch 1/1:" in m]
        assert len(forwarded) == 3, logs      # every progress line once, none of the other output
    assert not any("step" in m for m in logs)


def test_failing_trainer_restarts_gang_then_fails_with_role_code_and_tail(job_id, tiny_data, tmp_path):
    spec = make_spec(job_id, tiny_data, tmp_path, {"trainer-1": "exit:3"}, max_retry=1)
    with pytest.raises(TrainingJobFailed) as err:
        LocalGang(spec, log=lambda m: None).run()
    exc = err.value
    assert (exc.role, exc.exit_code, exc.details["attempts"]) == ("trainer-1", 3, 2)
    assert "trainer-1" in exc.log_tail and "gave up after 2 attempt(s)" in str(exc)


def test_bad_input_exit_is_not_retried_and_names_the_reason(job_id, tiny_data, tmp_path):
    spec = make_spec(job_id, tiny_data, tmp_path, {"trainer-0": "refuse:test/schema.json is version 7"},
                     max_retry=2)
    with pytest.raises(TrainingJobFailed) as err:
        LocalGang(spec, log=lambda m: None).run()
    assert err.value.phase == "BadInput" and err.value.exit_code == 2
    assert "refused its input: test/schema.json is version 7" in err.value.reason
    assert not (tmp_path / "work" / "attempt-2").exists(), "a deterministic input error was retried"


def test_a_pserver_refusing_its_input_is_not_retried_either(job_id, tiny_data, tmp_path):
    """As the Volcano Job's ``exitCode: 2 -> TerminateJob``: a pserver that cannot reach the shared
    directory exits 2 first; restarting the gang cannot help."""
    spec = make_spec(job_id, tiny_data, tmp_path, {"pserver-0": "refuse:output directory /w is unreachable"},
                     max_retry=2)
    with pytest.raises(TrainingJobFailed) as err:
        LocalGang(spec, log=lambda m: None).run()
    assert (err.value.phase, err.value.role, err.value.exit_code) == ("BadInput", "pserver-0", 2)
    assert "refused its input: output directory /w is unreachable" in err.value.reason
    assert not (tmp_path / "work" / "attempt-2").exists(), "a deterministic input error was retried"


def test_transient_failure_is_retried_to_success(job_id, tiny_data, tmp_path):
    plan = {"trainer-0": f"fail_once:{tmp_path / 'flag'}"}
    result = LocalGang(make_spec(job_id, tiny_data, tmp_path, plan, max_retry=2), log=lambda m: None).run()
    assert result.attempts == 2


def test_a_role_exiting_75_is_an_outage_and_is_retried(job_id, tiny_data, tmp_path):
    """Exit 75 (the entrypoint gave up on an outage) restarts the gang, as on Volcano."""
    plan = {"trainer-1": f"outage:{tmp_path / 'flag'}"}
    logs = []
    result = LocalGang(make_spec(job_id, tiny_data, tmp_path, plan, max_retry=2), log=logs.append).run()
    assert result.attempts == 2
    assert any("trainer-1 gave up on an outage (exit code 75): s3://b/out: cannot reach the store" in m
               and "restarting the whole gang" in m for m in logs), logs


def test_an_outage_that_outlives_the_retries_is_reported_as_an_outage(job_id, tiny_data, tmp_path):
    spec = make_spec(job_id, tiny_data, tmp_path, {"pserver-0": "outage"}, max_retry=1)
    with pytest.raises(TrainingJobFailed) as err:
        LocalGang(spec, log=lambda m: None).run()
    assert (err.value.role, err.value.exit_code, err.value.details["attempts"]) == ("pserver-0", 75, 2)
    assert family_of(err.value) is TransientError and exit_code_of(err.value) == EXIT_TRANSIENT
    assert (tmp_path / "work" / "attempt-2").exists()


def _entrypoint_spec(job_id, tiny_data, tmp_path, **kw):
    """A 1x1 gang running the real ``python -m ctr_model.train``."""
    return GangSpec(job_id=job_id, pservers=1, trainers=1, data_dir=tiny_data, output_dir=str(tmp_path / "out"),
                    workdir=str(tmp_path / "work"), finish_timeout_s=1.0, **kw)


def test_the_entrypoint_refusing_its_config_exits_2_and_the_gang_does_not_retry(job_id, tiny_data, tmp_path):
    spec = _entrypoint_spec(job_id, tiny_data, tmp_path, train_config={"epochs": 0}, max_retry=2)
    with pytest.raises(TrainingJobFailed) as err:
        LocalGang(spec, log=lambda m: None).run()
    assert err.value.exit_code == EXIT_BAD_INPUT and err.value.phase == "BadInput"
    assert "refused its input: config.epochs=0: use an integer in 1..1000" in err.value.reason
    assert family_of(err.value) is BadInput and exit_code_of(err.value) == EXIT_BAD_INPUT
    assert not (tmp_path / "work" / "attempt-2").exists(), "a deterministic input error was retried"


def test_the_entrypoint_on_an_unreachable_store_exits_75_and_the_gang_retries(job_id, tiny_data, tmp_path):
    """Every role of the real entrypoint finds the object store down (no Paddle is started): each
    exits 75, the gang restarts, and the last failure is reported as the outage it is."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]          # nobody listens there
    spec = _entrypoint_spec(job_id, tiny_data, tmp_path, max_retry=1,
                            extra_env={"CTR_S3_ENDPOINT": f"http://127.0.0.1:{port}", "CTR_S3_RETRY_S": "1"})
    spec = GangSpec(**{**spec.__dict__, "output_dir": "s3://ctr-nowhere/out"})
    logs = []
    with pytest.raises(TrainingJobFailed) as err:
        LocalGang(spec, log=logs.append).run()
    assert err.value.exit_code == EXIT_TRANSIENT and err.value.details["attempts"] == 2
    assert "gave up on an outage (exit code 75)" in err.value.reason
    assert f"cannot reach the store at http://127.0.0.1:{port}" in err.value.reason
    assert family_of(err.value) is TransientError and exit_code_of(err.value) == EXIT_TRANSIENT
    assert sum("restarting the whole gang" in m for m in logs) == 1, logs


def test_pserver_exiting_zero_early_is_a_failure(job_id, tiny_data, tmp_path):
    spec = make_spec(job_id, tiny_data, tmp_path, {"pserver-0": "exit0", "trainer-0": "silent",
                                                    "trainer-1": "silent"}, max_retry=0)
    with pytest.raises(TrainingJobFailed, match="pserver-0 exited with code 0 before the trainers"):
        LocalGang(spec, log=lambda m: None).run()


def test_watchdog_names_the_stalled_trainer(job_id, tiny_data, tmp_path):
    spec = make_spec(job_id, tiny_data, tmp_path, {"trainer-1": "silent"}, max_retry=0,
                     stall_timeout_s=2.0)
    t0 = time.time()
    with pytest.raises(TrainingJobFailed) as err:
        LocalGang(spec, log=lambda m: None).run()
    assert err.value.phase == "Stalled" and err.value.role == "trainer-1"
    assert time.time() - t0 < 20


def test_sigterm_reaps_every_child(job_id, tiny_data, tmp_path):
    spec = make_spec(job_id, tiny_data, tmp_path, {"trainer-0": "silent", "trainer-1": "silent"},
                     max_retry=0, stall_timeout_s=600)
    driver = textwrap.dedent("""
        import json, sys
        from ctr_volcano.training.local.gang import GangSpec, LocalGang
        spec = GangSpec(**json.loads(sys.argv[1]))
        try:
            LocalGang(spec, log=print).run()
        except KeyboardInterrupt as exc:
            print("interrupted:", exc, flush=True)
            sys.exit(130)
    """)
    args = {k: (list(v) if isinstance(v, tuple) else dict(v) if k in ("extra_env", "train_config") else v)
            for k, v in spec.__dict__.items()}
    proc = subprocess.Popen([sys.executable, "-c", driver, json.dumps(args)], stdout=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.time() + 30
        while len(job_processes(job_id)) < 6 and time.time() < deadline:   # 4 roles + 2 grandchildren
            time.sleep(0.2)
        assert len(job_processes(job_id)) >= 6
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130 and "interrupted" in out
    assert job_processes(job_id) == []


def test_sigkill_of_the_supervisor_leaves_no_orphans(job_id, tiny_data, tmp_path):
    spec = make_spec(job_id, tiny_data, tmp_path, {"trainer-0": "silent", "trainer-1": "silent"},
                     max_retry=0, stall_timeout_s=600)
    driver = textwrap.dedent("""
        import json, sys
        from ctr_volcano.training.local.gang import GangSpec, LocalGang
        LocalGang(GangSpec(**json.loads(sys.argv[1])), log=print).run()
    """)
    args = {k: (list(v) if isinstance(v, tuple) else dict(v) if k in ("extra_env", "train_config") else v)
            for k, v in spec.__dict__.items()}
    proc = subprocess.Popen([sys.executable, "-c", driver, json.dumps(args)], stdout=subprocess.DEVNULL)
    try:
        deadline = time.time() + 30
        while len(job_processes(job_id)) < 6 and time.time() < deadline:
            time.sleep(0.2)
        assert len(job_processes(job_id)) >= 6
        proc.kill()
        proc.wait()
        deadline = time.time() + 10
        while job_processes(job_id) and time.time() < deadline:
            time.sleep(0.2)
        assert job_processes(job_id) == []
    finally:
        if proc.poll() is None:
            proc.kill()


def test_gang_spec_validation(tmp_path):
    with pytest.raises(BadInput, match="pservers"):
        GangSpec(job_id="x", pservers=0, trainers=1, data_dir="d", output_dir="o", workdir="w")
