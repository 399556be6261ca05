"""Signals to ``ctr-volcano run``'s own PID stop the whole run: the kfp executor and the training gang.

Real processes throughout: the CLI runs the pipeline through ``kfp.local``, the training step starts a
real pserver/trainer gang, and the test signals only the CLI's PID (as ``kill PID``, a supervisor or a
notebook kernel restart do), then checks the process table.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from ctr_volcano.training.local.gang import gang_processes, processes_with_env

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_to_run_pid_stops_executor_and_gang(sig, code, tmp_path):
    mark = f"CTRTEST_SIGNAL_RUN={uuid.uuid4().hex}"
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch), mark.split("=")[0]: mark.split("=")[1]}
    cmd = [sys.executable, "-m", "ctr_volcano.app.cli.main", "run", "--workdir", str(tmp_path / "w"),
           "-p", "epochs=50"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)   # only the PID is signalled, not a process group
    try:
        deadline = time.time() + 240
        gang = []
        while time.time() < deadline and proc.poll() is None:
            gang = sorted(set(processes_with_env(mark)) & set(gang_processes()))
            if len(gang) >= 4:      # 2 pservers + 2 trainers
                break
            time.sleep(0.5)
        assert len(gang) >= 4, f"the gang never started (rc={proc.poll()})"
        time.sleep(1.0)
        os.kill(proc.pid, sig)
        _, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == code, err[-2000:]
    assert "interrupted" in err.strip().splitlines()[-1]
    assert processes_with_env(mark) == []
    assert not list(scratch.glob("ctr-run-*")), "the interrupted run's scratch dir was left behind"


def test_sigterm_to_train_exits_143_and_reaps_the_gang(tmp_path):
    from tools.planted_prep import write_planted_prep

    write_planted_prep(str(tmp_path / "prep"), train_rows=4000, test_rows=500, shards=2)
    mark = f"CTRTEST_SIGNAL_TRAIN={uuid.uuid4().hex}"
    env = {**os.environ, mark.split("=")[0]: mark.split("=")[1]}
    cmd = [sys.executable, "-m", "ctr_volcano.app.cli.main", "train", "--data", str(tmp_path / "prep"),
           "--model-out", str(tmp_path / "model"), "--epochs", "200", "--workdir", str(tmp_path / "w")]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and proc.poll() is None:
            if len(set(processes_with_env(mark)) & set(gang_processes())) >= 4:
                break
            time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143, err[-2000:]
    assert "interrupted (SIGTERM" in err.strip().splitlines()[-1]
    assert processes_with_env(mark) == []
