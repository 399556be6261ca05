"""A real full volume for tests: Python code run where a directory is a tiny tmpfs.

Root ignores file modes, so a read-only directory proves nothing about ENOSPC; only a filesystem
that runs out of blocks does. :func:`run_on_tiny_volume` runs a script in a private mount namespace
(``unshare --mount``) in which ``mount_dir`` is a fresh tmpfs of ``size``: the kernel returns ENOSPC
when it fills, and the mount disappears with the process, whatever happens to the test.
Everything else of the host's file tree stays visible to the script, so it can read inputs the
test prepared; it reports what it saw on stdout (JSON) for the test to assert on.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Sequence

import pytest

__all__ = ["needs_mount_namespaces", "run_on_tiny_volume", "python_on_tiny_volume", "last_json"]

REPO = Path(__file__).resolve().parents[1]

needs_mount_namespaces = pytest.mark.skipif(
    shutil.which("unshare") is None or os.geteuid() != 0,
    reason="a real full volume needs root and unshare(1) (a private mount namespace with a tiny tmpfs)")

_MOUNT_THEN_RUN = 'mount -t tmpfs -o size="$1" ctr-tiny "$2" && shift 2 && exec "$@"'


def run_on_tiny_volume(mount_dir: Path, size: str, argv: Sequence[str], *, timeout: float = 300,
                       env: Dict[str, str] = None) -> subprocess.CompletedProcess:
    """Run ``argv`` with ``mount_dir`` (created if missing) a tmpfs of ``size`` (e.g. ``"256k"``).

    The command runs with this checkout on ``PYTHONPATH`` and ``$VOLUME`` set to ``mount_dir``.
    """
    mount_dir.mkdir(parents=True, exist_ok=True)
    full_env = dict(os.environ, PYTHONPATH=str(REPO), VOLUME=str(mount_dir), **(env or {}))
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", _MOUNT_THEN_RUN,
                           "sh", size, str(mount_dir), *argv],
                          capture_output=True, text=True, timeout=timeout, env=full_env, cwd=REPO)


def python_on_tiny_volume(mount_dir: Path, size: str, script: str, **kwargs: Any) -> subprocess.CompletedProcess:
    """:func:`run_on_tiny_volume` for a Python script (``-c``)."""
    return run_on_tiny_volume(mount_dir, size, [sys.executable, "-c", script], **kwargs)


def last_json(proc: subprocess.CompletedProcess) -> Dict[str, Any]:
    """The last line of the script's stdout, parsed (fails the test with its output otherwise)."""
    lines = proc.stdout.strip().splitlines()
    assert lines, f"exit {proc.returncode}, no output; stderr:\n{proc.stderr}"
    try:
        return json.loads(lines[-1])
    except ValueError:
        pytest.fail(f"exit {proc.returncode}, not JSON: {lines[-1]!r}; stderr:\n{proc.stderr}")
