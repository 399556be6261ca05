"""Scenario d: a trainer that hangs (SIGSTOP) on real process nodes.

Volcano sees a healthy Running pod; only the launcher's stall watchdog (log recency, see
:mod:`ctr_volcano.training.volcano.stall`) notices. The step must fail within the stall timeout naming the
stopped trainer's pod, and the Job and every process of the gang must be gone (checked on the
process table: a stopped process ignores SIGTERM until it is killed).
"""
from __future__ import annotations

import os
import signal
import threading
import time
from typing import Dict, List

import pytest

from ctr_volcano.errors import TrainingJobFailed
from tests.cluster.helpers import get_job, wait_for
from tests.cluster.test_process_nodes import GangSampler, _claim, _params

pytestmark = pytest.mark.cluster

STALL_S = 30


def test_a_stopped_trainer_fails_the_step_naming_it_and_the_gang_is_gone(sandbox, tmp_path, planted):
    from ctr_volcano.training.step import run_training_step

    sandbox.add_process_nodes(2)
    claim = _claim(sandbox, tmp_path)
    job = "ctr-stall"
    lines: List[str] = []
    box: Dict[str, object] = {}

    def step() -> None:
        try:
            box["result"] = run_training_step(
                planted["prep"], str(tmp_path / "model"),
                _params(sandbox, claim, job, epochs=5, stall_timeout_s=STALL_S, max_retry=0),
                log=lines.append)
        except BaseException as exc:
            box["error"] = exc

    with GangSampler(job) as sampler:
        thread = threading.Thread(target=step, daemon=True)
        thread.start()
        # wait until trainer-1 trains (its progress lines reach the launcher's heartbeat)
        wait_for("trainer 1 training", lambda: len(sampler.live("trainer", "1")) == 1 and any(
            "examples" in line for line in lines if "[trainer-0]" in line), timeout=300, interval=0.5,
            cluster=sandbox.cluster)
        victim = sampler.live("trainer", "1")[0]
        os.kill(victim, signal.SIGSTOP)
        stopped_at = time.monotonic()
        thread.join(STALL_S * 4 + 120)
        took = time.monotonic() - stopped_at
        assert not thread.is_alive(), "the step did not fail"
        log = "\n".join(lines)
        err = box.get("error")
        assert isinstance(err, TrainingJobFailed), f"{box}\n{log}"
        assert err.phase == "Stalled", err
        silent = [p["pod"] for p in err.details["silent_pods"]]
        # the stopped trainer is named; a peer blocked on it (epoch barrier) goes silent too and may
        # be named as well: log recency cannot tell which one hung first (docs/training.md)
        assert f"{job}-trainer-1" in silent and set(silent) <= {f"{job}-trainer-0", f"{job}-trainer-1"}, \
            (silent, str(err))
        assert f"{job}-trainer-1" in str(err)
        # within the stall timeout (plus the heartbeat interval and the poll): not minutes later
        assert took <= STALL_S + 20, (took, log)
        # the Job is deleted and every process of the gang is gone, the stopped one included
        wait_for("the Job deleted", lambda: get_job(sandbox.api(), sandbox.namespace, job) is None, timeout=60)
        wait_for("no process of the gang left", lambda: not sampler.live(), timeout=90)
    print(f"\nscenario d: stall detected {took:.0f}s after SIGSTOP (stall_timeout_s={STALL_S}); silent: {silent}")
