"""As PID 1 of a pod, the role runs as a child of a small supervisor that passes SIGTERM on.

Why: in a container the entrypoint is PID 1 of its PID namespace, and the kernel drops a signal sent
to PID 1 when PID 1's handler for it is the default one. Importing Paddle installs glog's
failure-signal handler for SIGTERM, which prints ``*** SIGTERM ... received by PID 1`` and sends the
signal again with the default action, which PID 1 then ignores: the role went on serving (seen on a
pserver in its own PID namespace), and deleting a gang's pods (a terminated KFP run, a deleted Job,
a drained node) waited the whole grace period for the SIGKILL. Blocking the signal does not help
either: Paddle's and brpc's threads take it with their own masks.

A role that is not PID 1 dies of SIGTERM as any process does, so the supervisor (no Paddle in it)
starts the same command as its child, forwards SIGTERM and SIGINT, reaps every orphan that lands
on it (PID 1's duty), and exits with the child's status (128 + the signal if it was killed).
Outside a container (the local backend) nothing changes.
"""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from typing import List, Optional

__all__ = ["supervise_if_pid1"]

log = logging.getLogger(__name__)


def supervise_if_pid1(module: str, argv: List[str]) -> Optional[int]:
    """If this process is PID 1, run ``python -m module argv...`` as its child and return the exit
    status to end with; otherwise ``None`` (run the role in this process)."""
    if os.getpid() != 1:
        return None
    child = subprocess.Popen([sys.executable, "-m", module, *argv])

    def forward(signum: int, _frame) -> None:
        log.warning(f"{signal.Signals(signum).name}: passing it on to the role (pid {child.pid})")
        child.send_signal(signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, forward)
    while True:
        pid, status = os.wait()          # any child: orphans are reparented to PID 1
        if pid == child.pid:
            code = os.waitstatus_to_exitcode(status)
            return 128 - code if code < 0 else code
