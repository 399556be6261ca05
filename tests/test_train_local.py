"""Real Paddle parameter-server gangs on the local backend (tiny planted data, small model).

These start real pservers and trainers through the production entrypoint, in this environment,
where kfp (and so proto-plus, which shadows Paddle's ``proto`` package) is installed too.
"""
from __future__ import annotations

import glob
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from ctr_model.contract import GangContract, role_env, volcano_plugin_env
from ctr_model.infer import auc, load_model
from ctr_volcano.errors import TrainingJobFailed
from ctr_volcano.training.local.backend import train_local
from tests.gang_helpers import (
    SMALL,
    gang_job_id,
    kill_when_checkpointed,
    write_small_planted,
)


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    return write_small_planted(tmp_path_factory.mktemp("planted"))


@pytest.fixture
def job_id():
    yield from gang_job_id("trtest", grace_s=10, poll_s=0.2)


@pytest.mark.slow
def test_two_by_two_learns_on_planted_data(planted, job_id, tmp_path):
    data, oracle = planted
    assert importlib.util.find_spec("kfp") is not None   # proto-plus shadowing is in play
    logs = []
    result = train_local(data, str(tmp_path / "model"), {**SMALL, "epochs": 2}, pservers=2, trainers=2,
                         max_retry=0, workdir=str(tmp_path / "w"), job_id=job_id, log=logs.append)
    assert result.attempts == 1
    for trainer in ("trainer-0", "trainer-1"):     # the trainers' progress reaches the supervisor's log
        assert any(f": {trainer}: epoch 2 done: 8000 examples" in line for line in logs), logs
    assert any(": trainer-0: calibrated the output bias" in line for line in logs), logs
    # the pservers wrote their table files through the level-1 gzip (header XFL byte 4), not level 6
    parts = glob.glob(str(tmp_path / "w" / "output" / "checkpoints" / "epoch-2" / "00*" / "part-*"))
    assert parts and all(open(p, "rb").read(9)[8] == 4 for p in parts if os.path.getsize(p) > 20), parts
    m = result.metrics
    assert [e["epoch"] for e in m["epochs"]] == [1, 2]
    assert m["epochs"][0]["examples"] == 16_000                 # every row, no overlap, no loss
    assert m["epochs"][1]["examples_per_sec"] > 0
    assert [e["progress_errors"] for e in m["epochs"]] == [0, 0]   # every progress read succeeded
    scorer = load_model(result.model_dir)
    ys, ps = zip(*scorer.predict_files(sorted(
        os.path.join(data, "test", f) for f in os.listdir(os.path.join(data, "test"))
        if f.endswith(".parquet")), batch_size=1000))
    test_auc = auc(np.concatenate(ys), np.concatenate(ps))
    # the scorer runs in float32, whose sums differ in the last bits between batch shapes (1000 rows
    # here, 65536 in the gang): near-tied pairs may swap, each moving the AUC by ~3e-7
    assert test_auc == pytest.approx(m["test"]["auc"], abs=1e-5)
    assert test_auc > 0.7, f"did not learn: test AUC {test_auc:.3f} (oracle {oracle:.3f})"
    meta = scorer.meta
    assert meta["hash_buckets"] == 100_003 and meta["config"]["fc_sizes"] == [32, 16]
    train_rate = meta["calibration"]["click_rate"]         # calibrated in the large at export
    train_files = sorted(os.path.join(data, "train", f) for f in os.listdir(os.path.join(data, "train"))
                         if f.endswith(".parquet"))
    train_probs = np.concatenate([p for _, p in scorer.predict_files(train_files)])
    assert train_probs.mean() == pytest.approx(train_rate, abs=1e-4)


@pytest.mark.slow
def test_killed_trainer_resumes_from_checkpoint(planted, job_id, tmp_path):
    data, _ = planted
    workdir = str(tmp_path / "w")
    box: dict = {}
    killer = threading.Thread(target=kill_when_checkpointed,
                              args=(os.path.join(workdir, "output"), job_id, "trainer", 1, box))
    killer.start()
    result = train_local(data, str(tmp_path / "model"), {**SMALL, "epochs": 3}, max_retry=1,
                         workdir=workdir, job_id=job_id, log=lambda m: None)
    killer.join()
    assert "killed_at" in box
    assert result.attempts == 2
    assert result.metrics["resumed_from_epoch"] >= 1
    assert [e["epoch"] for e in result.metrics["epochs"]] == [1, 2, 3]
    assert result.metrics["test"]["auc"] > 0.6


@pytest.mark.slow
def test_killed_pserver_fails_clearly_and_fast(planted, job_id, tmp_path):
    data, _ = planted
    workdir = str(tmp_path / "w")
    box: dict = {}
    killer = threading.Thread(target=kill_when_checkpointed,
                              args=(os.path.join(workdir, "output"), job_id, "pserver", 1, box))
    killer.start()
    with pytest.raises(TrainingJobFailed) as err:
        train_local(data, str(tmp_path / "model"), {**SMALL, "epochs": 3}, max_retry=0,
                    stall_timeout_s=60, workdir=workdir, job_id=job_id, log=lambda m: None)
    killer.join()
    assert "killed_at" in box
    assert time.time() - box["killed_at"] < 30
    assert err.value.role == "pserver-1" and err.value.exit_code == -signal.SIGKILL


def _pod_env(tmp_path, role, index, ps_port, data_dir="/nonexistent"):
    contract = GangContract(job_id=f"pod-{uuid.uuid4().hex[:6]}", pservers=1, trainers=1,
                            data_dir=data_dir, output_dir=str(tmp_path / "out"), ps_port=ps_port,
                            ps_port_stride=1, gloo_port=ps_port + 1, train_config=SMALL)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VC_", "CTR_", "PADDLE_"))}
    env.update(volcano_plugin_env(role, index, {"pserver": ["127.0.0.1"], "trainer": ["127.0.0.1"]}))
    env.update(role_env(contract, role))
    return env


def test_taken_port_gives_a_clear_error(tmp_path):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "ctr_model.train"], env=_pod_env(tmp_path, "pserver", 0, port),
                              capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert f"CTR_PS_PORT={port}: already in use on 127.0.0.1" in proc.stderr


def test_missing_variables_are_named_and_refused(tmp_path):
    env = _pod_env(tmp_path, "trainer", 0, 7000)
    for var in ("VC_TASK_INDEX", "VK_TASK_INDEX", "VC_PSERVER_HOSTS"):
        env.pop(var)
    proc = subprocess.run([sys.executable, "-m", "ctr_model.train"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2
    assert "VC_TASK_INDEX" in proc.stderr and "VC_PSERVER_HOSTS" in proc.stderr
    assert "refusing to start" in proc.stderr


@pytest.mark.parametrize("role", ["pserver", "trainer"])
def test_unresolvable_pserver_host_fails_clearly_after_a_bounded_wait(tmp_path, role):
    # the pserver waits for its own name, a trainer for its pservers' (Gloo dials pserver 0 once)
    env = _pod_env(tmp_path, role, 0, 7000)
    env["VC_PSERVER_HOSTS"] = "ctr-no-such-job-pserver-0.invalid"
    env["CTR_DNS_WAIT_S"] = "2"
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "ctr_model.train"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "'ctr-no-such-job-pserver-0.invalid'" in proc.stderr and "did not resolve within 2s" in proc.stderr
    assert time.monotonic() - started >= 2


def test_own_host_name_is_retried_until_it_resolves():
    from ctr_model.train.peers import resolve_own_host

    assert resolve_own_host("localhost", timeout_s=0) == "127.0.0.1"
    started = time.monotonic()
    assert resolve_own_host("ctr-no-such-host.invalid", timeout_s=0.5, interval_s=0.1) is None
    assert time.monotonic() - started >= 0.5


@pytest.mark.slow
def test_short_epochs_checkpoint_only_at_the_end(planted, job_id, tmp_path):
    """With ``checkpoint_secs`` longer than the run, trainer 0 decides against the epoch checkpoints
    (every trainer follows its decision: the save is collective) and only the last epoch is saved."""
    data, _ = planted
    logs: list = []
    result = train_local(data, str(tmp_path / "model"), {**SMALL, "epochs": 3, "checkpoint_secs": 3600},
                         max_retry=0, workdir=str(tmp_path / "w"), job_id=job_id, log=logs.append)
    assert [e["epoch"] for e in result.metrics["epochs"]] == [1, 2, 3]
    assert sorted(os.listdir(tmp_path / "w" / "output" / "checkpoints")) == ["epoch-3"]
    for epoch in (1, 2):
        assert any(f"no checkpoint after epoch {epoch}" in line for line in logs), logs
    assert result.metrics["test"]["auc"] > 0.6


@pytest.mark.slow
def test_a_workdir_resumes_only_the_network_it_checkpointed(planted, job_id, tmp_path):
    """A later call with the same workdir resumes its checkpoint; one with another network (here
    ``fc_sizes``) is refused naming the key and both values, not resumed into a broken model (it once
    exported a model scoring every row alike, AUC 0.5000)."""
    from ctr_volcano.errors import BadInput

    data, _ = planted
    first = train_local(data, str(tmp_path / "m1"), {**SMALL, "epochs": 1}, max_retry=0,
                        workdir=str(tmp_path / "w"), job_id=job_id, log=lambda m: None)
    assert first.metrics["test"]["auc"] > 0.6
    with pytest.raises(BadInput) as err:
        train_local(data, str(tmp_path / "m2"), {**SMALL, "epochs": 1, "fc_sizes": [64, 32]}, max_retry=0,
                    workdir=str(tmp_path / "w"), job_id=job_id, log=lambda m: None)
    assert "written with fc_sizes [32, 16], this run has [64, 32]" in str(err.value), str(err.value)
    assert "exit code 2" in str(err.value)
    assert not (tmp_path / "m2" / "model_meta.json").exists()


def test_resume_refusal_names_the_first_network_key_that_differs():
    from ctr_model.checkpoint import Checkpoint, resume_refusal
    from ctr_model.config import TrainConfig

    config = TrainConfig(**{k: v for k, v in SMALL.items()}).to_dict()
    same = Checkpoint(3, "/o/checkpoints/epoch-3", {"pservers": 2, "config": dict(config, learning_rate=0.1)})
    assert resume_refusal(same, config, 2) is None          # the optimizer's step may change, not the network
    assert "written by 2 pservers" in resume_refusal(same, config, 1)
    other = Checkpoint(3, "/o/checkpoints/epoch-3", {"pservers": 2, "config": dict(config, model="deepfm")})
    assert "written with model 'deepfm', this run has 'dnn'" in resume_refusal(other, config, 2)


def test_trainer_fails_clearly_when_the_pservers_never_serve(planted, tmp_path):
    """Nobody listens on pserver 0's rendezvous port: the trainer gives up after CTR_PSERVER_WAIT_S
    with one line naming the endpoint, exit 1, instead of waiting forever as Paddle's check does."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = _pod_env(tmp_path, "trainer", 0, port, data_dir=planted[0])
    env["CTR_PSERVER_WAIT_S"] = "2"
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "ctr_model.train"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert f"did not accept connections within 2s (127.0.0.1:{port + 1}, CTR_PSERVER_WAIT_S)" in proc.stderr
    assert time.monotonic() - started >= 2


@pytest.mark.skipif(shutil.which("unshare") is None or os.geteuid() != 0,
                    reason="needs unshare(1) as root to make the role PID 1 of its own PID namespace")
def test_sigterm_ends_a_serving_pserver_that_is_pid_1(planted, tmp_path):
    """As in a pod: the role is PID 1 of its PID namespace, where the kernel drops a SIGTERM from
    outside unless PID 1 has a handler, and a serving pserver's main thread is inside C++. It exits
    143 within seconds, not after the grace period."""
    from ctr_model.rendezvous import wait_for_endpoints
    from ctr_volcano.training.local.gang import find_free_ports

    port = find_free_ports(1, consecutive=2)[0]
    env = _pod_env(tmp_path, "pserver", 0, port, data_dir=planted[0])   # pservers read its spec
    ns = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-m", "ctr_model.train"],
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert wait_for_endpoints([f"127.0.0.1:{port}"], timeout_s=120), "the pserver never served"
        role = int(Path(f"/proc/{ns.pid}/task/{ns.pid}/children").read_text().split()[0])
        nspid = next(line for line in Path(f"/proc/{role}/status").read_text().splitlines()
                     if line.startswith("NSpid:")).split()[1:]
        assert nspid == [str(role), "1"], nspid        # PID 1 inside, as in a pod
        started = time.monotonic()
        os.kill(role, signal.SIGTERM)
        out, _ = ns.communicate(timeout=60)
    finally:
        if ns.poll() is None:
            # the namespace's PID 1 first: SIGKILL to it ends every process inside; killing only
            # unshare(1) left the pserver and its rendezvous child running
            for pid in Path(f"/proc/{ns.pid}/task/{ns.pid}/children").read_text().split():
                os.kill(int(pid), signal.SIGKILL)
            ns.kill()
            ns.wait()
    assert time.monotonic() - started < 10
    assert ns.returncode == 143, out[-2000:]
    assert "SIGTERM: passing it on to the role" in out


def test_trainer_waits_for_pserver_ports_itself():
    """The trainer's own readiness poll (``wait_for_endpoints``) returns once every port accepts, and
    gives up after its timeout on a port nobody listens on."""
    import socket
    import threading

    from ctr_model.rendezvous import wait_for_endpoints

    late = socket.socket()
    late.bind(("127.0.0.1", 0))
    port = late.getsockname()[1]
    ready = socket.socket()
    ready.bind(("127.0.0.1", 0))
    ready.listen()
    timer = threading.Timer(0.3, late.listen)
    timer.start()
    try:
        eps = [f"127.0.0.1:{ready.getsockname()[1]}", f"127.0.0.1:{port}"]
        started = time.monotonic()
        assert wait_for_endpoints(eps, timeout_s=30, interval_s=0.02)
        assert time.monotonic() - started >= 0.25          # it did wait for the late one
    finally:
        timer.join()
        late.close()
        ready.close()
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    dead = f"127.0.0.1:{closed.getsockname()[1]}"
    closed.close()
    assert not wait_for_endpoints([dead], timeout_s=0.2, interval_s=0.05)
    assert not wait_for_endpoints(["ctr-no-such-host.invalid:1"], timeout_s=0.1, interval_s=0.05)
