"""The trainer's progress thread surfaces its own failures instead of swallowing them: a failed read is
counted and logged once per run of failures, a recovery is logged, and a trainer that cannot read its
progress at all fails its role (exit 1) instead of waiting for the stall watchdog."""
from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import time

from ctr_model.contract import RoleSpec
from ctr_model.train.progress import GIVE_UP_TICKS, Progress, ProgressLost

SPEC = RoleSpec(role="trainer", index=0, job_id="prog", pserver_hosts=("127.0.0.1",), trainer_hosts=("127.0.0.1",),
                ps_port=7000, ps_port_stride=1, gloo_port=7100, data_dir="d", output_dir="o")


class _Counters:
    """Reads that fail ``failures`` times (from the ``after``-th read on), else return counts that move."""

    def __init__(self, failures: int, after: int = 0):
        self.calls, self.failures, self.after = 0, failures, after

    def __call__(self):
        import numpy as np

        self.calls += 1
        if self.after < self.calls <= self.after + self.failures:
            raise RuntimeError(f"tensor not initialized (read {self.calls})")
        n = 100.0 * self.calls
        return n, 0.5 * n, np.array([n / 2]), np.array([n / 2])


def _run(progress: Progress, until, timeout_s: float = 10.0) -> None:
    progress.start()
    deadline = time.monotonic() + timeout_s
    while not until() and time.monotonic() < deadline:
        time.sleep(0.01)
    progress.stop_event.set()
    progress.join(5)


def test_failed_reads_are_counted_logged_once_and_the_recovery_too(caplog):
    read = _Counters(failures=3, after=1)
    fatal = []
    progress = Progress(SPEC, read, secs=0.02, on_fatal=fatal.append)
    progress.rows_per_epoch, progress.last_epoch, progress.epoch = 1000, 1, 1
    with caplog.at_level(logging.INFO, logger="ctr_model.train"):
        _run(progress, lambda: read.calls >= 7)
    assert progress.errors == 3 and fatal == []
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "trainer-0: cannot read the training progress (RuntimeError: tensor not initialized (read 2)); "
        f"counting the failures, giving up after {GIVE_UP_TICKS} in a row",
        "trainer-0: reading the training progress works again after 3 failed read(s)"]
    lines = [r.getMessage() for r in caplog.records if "examples," in r.getMessage()]
    assert len(lines) >= 3 and lines[0].startswith("trainer-0: epoch 1/1: 100 of 1000 examples")


def test_progress_that_cannot_be_read_at_all_fails_the_role_after_the_bound(caplog):
    read = _Counters(failures=10 ** 6)
    fatal = []
    progress = Progress(SPEC, read, secs=0.02, on_fatal=fatal.append)
    with caplog.at_level(logging.INFO, logger="ctr_model.train"):
        _run(progress, lambda: bool(fatal))
    assert not progress.is_alive(), "the thread goes on after failing the role"
    assert read.calls == GIVE_UP_TICKS == progress.errors
    assert len(fatal) == 1 and isinstance(fatal[0], ProgressLost)
    assert fatal[0].role == "trainer-0" and "6 reads in a row failed" in str(fatal[0])
    # silent between the first failure and the end: the watchdog must not mistake errors for progress
    assert len([r for r in caplog.records if r.levelno >= logging.WARNING]) == 1


def test_the_role_process_exits_1_with_one_line_while_its_main_thread_is_busy():
    """A real trainer-like process: its main thread blocked (as inside Paddle's C++ training loop),
    the progress thread ends the process with the failure's exit code and one error line."""
    script = textwrap.dedent("""
        import time
        from ctr_model.contract import RoleSpec
        from ctr_model.logs import setup_logging
        from ctr_model.train.exits import fail_now
        from ctr_model.train.progress import Progress

        SPEC = RoleSpec(role="trainer", index=0, job_id="prog", pserver_hosts=("127.0.0.1",),
                        trainer_hosts=("127.0.0.1",), ps_port=7000, ps_port_stride=1, gloo_port=7100,
                        data_dir="d", output_dir="o")

        def broken():
            raise RuntimeError("no such variable: auc_stat_pos")

        setup_logging()
        Progress(SPEC, broken, secs=0.05, on_fatal=lambda exc: fail_now(SPEC, exc)).start()
        time.sleep(120)   # the main thread busy, as inside Paddle's training loop
    """)
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert time.monotonic() - started < 60
    errors = [line for line in proc.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1, proc.stderr
    assert ("ctr_model.train: trainer-0: error: job 'prog' Failed: could not read the training progress"
            in errors[0]) and "RuntimeError: no such variable: auc_stat_pos" in errors[0], errors
