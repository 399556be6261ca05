"""Signal a container of a process-node pod: the kill command the node agent names for Argo.

Argo's controller stops or terminates a workflow's running containers through ``pods/exec``
(``argoexec kill SIG 1`` inside the container). A process node cannot exec inside a container --
kwok serves ``pods/exec`` by running the command on the host -- so for Argo's pods the node agent
sets Argo's documented per-container kill command (the ``workflows.argoproj.io/kill-cmd-<container>``
annotation) to this script, and publishes a kwok ``Exec`` object for those pods only. kwok then runs

    python podsignal.py PIDFILE NETNS SIGNAL

on the host, which sends SIGNAL to the container's first process (its PID 1 as the container sees
it: Argo's emissary, which passes it on to the command it runs), after checking that the PID still
belongs to the pod's network namespace (a PID reused by another process is never signalled).

Stdlib only; Linux only.
"""
from __future__ import annotations

import os
import sys
from typing import List

__all__ = ["main"]


def main(argv: List[str]) -> int:
    if len(argv) != 4:
        print("usage: podsignal.py PIDFILE NETNS SIGNAL", file=sys.stderr)
        return 2
    pid_file, netns, sig = argv[1], argv[2], int(argv[3])
    try:
        pid = int(open(pid_file, encoding="utf-8").read().strip())
        if os.stat(f"/proc/{pid}/ns/net").st_ino != os.stat(f"/run/netns/{netns}").st_ino:
            print(f"process {pid} is not in the pod's network namespace {netns} any more", file=sys.stderr)
            return 1
        os.kill(pid, sig)
    except (OSError, ValueError) as exc:
        print(f"cannot signal the container ({pid_file}): {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
