"""Start ``ctr-volcano serve`` as a child process on a free loopback port and wait until it is
ready: what the tests and bench/serve.py talk to (a real server, not one in the caller's process)."""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Iterator, Sequence

__all__ = ["model_server", "free_port"]

_REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_ready(proc: "subprocess.Popen[bytes]", url: str, log: Path, timeout_s: float) -> None:
    deadline = time.time() + timeout_s
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{url}/v2/health/ready", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        if time.time() > deadline:
            raise RuntimeError(f"not ready in {timeout_s:.0f} s: {log.read_text()[-2000:]}")
        time.sleep(0.3)


@contextlib.contextmanager
def model_server(python: str, model_dir: str, log: Path, timeout_s: float = 90.0,
                 extra_args: Sequence[str] = ()) -> Iterator[str]:
    """Yield the base URL of a ready server (``python`` is the serving environment's interpreter;
    this checkout goes first on its path; ``extra_args``: more ``serve`` flags); SIGTERM, then SIGKILL,
    on the way out."""
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(_REPO))
    with open(log, "wb") as out:
        proc = subprocess.Popen([python, "-m", "ctr_volcano.app.cli.main", "serve", "--model", str(model_dir),
                                 "--port", str(port), *extra_args], env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(proc, url, log, timeout_s)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
