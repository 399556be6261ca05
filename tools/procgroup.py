"""Processes in a group of their own: run a build script with live output, and stop a whole group.

Shared by the test servers built from Go modules (``tools/s3server/s3server.py``,
``tools/kfpserver/kfpserver.py``, ``tools/minicluster/minicluster.py``; their ``build.sh`` scripts
share ``tools/gobuild.sh``). Stdlib only; ``tools/`` is not a package, so those modules put this
directory on ``sys.path`` and ``import procgroup``.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, List, Mapping, Optional, Type

__all__ = ["TAIL_LINES", "build_dir", "run_build_script", "kill_group"]

REPO = Path(__file__).resolve().parents[1]
#: How many of a failed build's last output lines its error carries.
TAIL_LINES = 40


def build_dir(script: Path) -> Path:
    """The cache directory ``script --print-dir`` names (where the outputs are or will be built)."""
    out = subprocess.run(["bash", str(script), "--print-dir"], check=True, capture_output=True, text=True)
    return Path(out.stdout.strip().splitlines()[-1])


def run_build_script(script: Path, error: Type[Exception], stream: Optional[IO[str]] = None,
                     env: Optional[Mapping[str, str]] = None, grace: float = 10.0) -> Path:
    """Run ``bash script`` (it builds or finds its outputs) and return the directory it prints last.

    Its output goes to ``stream`` (default: stderr) line by line, so a cold build (minutes) is
    visible. The script runs in its own session; an interrupt (Ctrl-C, a test timeout) stops the
    whole group (:func:`kill_group` with ``grace``) and propagates.

    Raises:
        error: the script failed (its exit status, the time taken and its last output lines), or
            printed no directory.
    """
    stream = stream or sys.stderr
    shown = script.relative_to(REPO) if script.is_relative_to(REPO) else script
    started = time.monotonic()
    proc = subprocess.Popen(["bash", str(script)], stdout=subprocess.PIPE, env=env,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    tail: List[str] = []
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            tail = (tail + [line.rstrip()])[-TAIL_LINES:]
            print(line.rstrip(), file=stream, flush=True)
        rc = proc.wait()
    except BaseException:
        kill_group(proc, grace=grace)
        raise
    if rc != 0:
        raise error("%s failed (exit %d) after %.0fs:\n%s"
                    % (shown, rc, time.monotonic() - started, "\n".join(tail)))
    if not tail:
        raise error(f"{shown} printed no output directory")
    return Path(tail[-1].strip())


def kill_group(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """SIGTERM the process group of ``proc``, then SIGKILL it after ``grace`` seconds."""
    if proc.poll() is not None:
        # The leader is gone; children of the group may survive, so signal the group anyway.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:  # pragma: no cover - a zombie we cannot reap
        pass
