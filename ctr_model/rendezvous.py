"""The trainers' Gloo rendezvous store, served by pserver 0 from a small child process.

Paddle's parameter-server mode meets its trainers through an HTTP key-value store
(``PADDLE_GLOO_RENDEZVOUS=3``) at ``PADDLE_GLOO_HTTP_ENDPOINT``: each trainer PUTs its address under
``/<job>/<rank>`` and GETs the others' until they are there (404 until then), and DELETEs its keys
when done. Left to Paddle, pserver 0 starts that store inside ``fleet.init`` and blocks there, checking
every 5 s whether the trainers are done: every gang start waited 5 s before pserver 0 even built its
program (docs/performance.md). Here pserver 0 starts the store first, as a child process that lives
as long as it does (a thread would not do: ``run_server`` holds the GIL for the pserver's whole life,
so a trainer that rendezvoused late hung), and runs Paddle with Gloo off (pservers never join the
Gloo group; only the trainers' barriers use it).

``python -m ctr_model.rendezvous PORT`` is the child.
"""
from __future__ import annotations

import http.server
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Callable, Dict, Optional, Sequence, Tuple

from ctr_model.errors import EXIT_BAD_INPUT

__all__ = ["serve_rendezvous", "wait_for_endpoints"]

_LISTENING = "listening"


class _Store(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int):
        super().__init__(("", port), _Handler)
        self.lock = threading.Lock()
        self.values: Dict[Tuple[str, str], bytes] = {}


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Store

    def _key(self) -> Optional[Tuple[str, str]]:
        parts = self.path.split("/")
        if len(parts) != 3:
            self._reply(400)
            return None
        return parts[1], parts[2]

    def _reply(self, code: int, body: bytes = b"") -> None:
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body:
            self.wfile.write(body)

    def do_GET(self) -> None:
        key = self._key()
        if key is not None:
            with self.server.lock:
                value = self.server.values.get(key)
            if value is None:
                self._reply(404)       # not there yet: the client asks again
            else:
                self._reply(200, value)

    def do_PUT(self) -> None:
        key = self._key()
        if key is not None:
            value = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with self.server.lock:
                self.server.values[key] = value
            self._reply(200)

    def do_DELETE(self) -> None:
        if self._key() is not None:
            self._reply(200)       # a trainer saying it is done; the values stay for late readers

    def log_message(self, format: str, *args) -> None:
        pass


def _die_with_parent(parent: int) -> None:
    """Linux: SIGTERM this process when its parent (pserver 0) dies, even by SIGKILL."""
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)
    if os.getppid() != parent:      # the parent died before prctl took effect
        sys.exit(0)


def _child_main(argv) -> int:
    port, parent = int(argv[0]), int(argv[1])
    _die_with_parent(parent)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        store = _Store(port)
    except OSError as exc:   # the port is taken: the parent refuses CTR_GLOO_PORT as bad input
        print(f"{exc.strerror}", file=sys.stderr, flush=True)
        return EXIT_BAD_INPUT
    print(_LISTENING, flush=True)          # the parent waits for this line
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    store.serve_forever()
    return 0


def wait_for_endpoints(endpoints: Sequence[str], timeout_s: float, interval_s: float = 0.05) -> bool:
    """Poll ``host:port`` endpoints until every one accepts a connection; ``False`` after ``timeout_s``.

    Paddle's ``wait_server_ready`` (called inside ``minimize``) makes the same check but sleeps 3 s
    between attempts, and the pservers are still starting when the trainers get there: every run
    slept 3-6 s there (docs/performance.md). Waiting here at ``interval_s`` lets Paddle's check pass
    at once. On timeout the trainer fails (``ctr_model.train.peers.PeersUnreachable``).
    """
    pending = list(dict.fromkeys(endpoints))
    deadline = time.monotonic() + timeout_s
    while pending:
        host, port = pending[0].rsplit(":", 1)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.settimeout(2)
            try:
                ready = sock.connect_ex((host, int(port))) == 0
            except OSError:       # a name the cluster DNS has not published yet
                ready = False
        if ready:
            pending.pop(0)
            continue
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval_s)
    return True


def serve_rendezvous(port: int, timeout_s: float = 30.0) -> Callable[[], None]:
    """Start the store on ``port`` (all interfaces) and wait until it listens; returns its stop.

    Raises:
        OSError: the port is taken (or the store did not come up within ``timeout_s``).
    """
    import select
    import tempfile

    errors = tempfile.TemporaryFile()
    proc = subprocess.Popen([sys.executable, "-m", "ctr_model.rendezvous", str(port), str(os.getpid())],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=errors)
    stop = _stopper(proc)
    assert proc.stdout is not None
    with proc.stdout:
        ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
        line = proc.stdout.readline().decode(errors="replace").strip() if ready else ""
    if line != _LISTENING:
        stop()
        errors.seek(0)
        reason = errors.read().decode(errors="replace").strip() or f"not listening after {timeout_s:.0f}s"
        errors.close()
        raise OSError(reason)
    errors.close()
    return stop


def _stopper(proc: subprocess.Popen) -> Callable[[], None]:
    def stop() -> None:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    return stop


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1:]))
