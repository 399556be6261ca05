"""The trainers' Gloo rendezvous store that pserver 0 serves (``ctr_model.rendezvous``), on real
sockets and processes: the protocol Paddle's Gloo HTTP store speaks, a taken port, a parent that
holds the GIL (``run_server`` does, for the pserver's whole life), and a parent that dies."""
from __future__ import annotations

import http.client
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from ctr_model.rendezvous import serve_rendezvous

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _request(port: int, method: str, path: str, body: bytes = b"", timeout: float = 5.0):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers={"Content-Length": str(len(body))})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def test_store_speaks_the_gloo_http_protocol():
    port = _free_port()
    stop = serve_rendezvous(port)
    try:
        assert _request(port, "GET", "/job-1/0")[0] == 404            # not there yet: ask again
        assert _request(port, "PUT", "/job-1/0", b"\x00addr-of-rank-0\xff")[0] == 200
        assert _request(port, "GET", "/job-1/0") == (200, b"\x00addr-of-rank-0\xff")
        assert _request(port, "GET", "/job-2/0")[0] == 404            # scopes are separate
        assert _request(port, "DELETE", "/job-1/0")[0] == 200
        assert _request(port, "GET", "/bad-path")[0] == 400
    finally:
        stop()
    with pytest.raises(ConnectionRefusedError):
        _request(port, "GET", "/job-1/0")


def test_a_taken_port_is_an_oserror_naming_the_reason():
    with socket.socket() as taken:
        taken.bind(("", 0))
        taken.listen()
        with pytest.raises(OSError, match="in use"):
            serve_rendezvous(taken.getsockname()[1], timeout_s=10)


def _parent(code: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": REPO}
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], env=env,
                            stdout=subprocess.PIPE, text=True)


def test_store_answers_while_its_parent_holds_the_gil():
    """The regression: served from a thread, a trainer that came late hung, because pserver 0 was
    inside ``run_server``, which never releases the GIL."""
    port = _free_port()
    parent = _parent(f"""
        from ctr_model.rendezvous import serve_rendezvous
        serve_rendezvous({port})
        print("up", flush=True)
        sum(range(10 ** 11))          # one C call: the GIL is never released
    """)
    try:
        assert parent.stdout.readline().strip() == "up"
        time.sleep(0.2)
        assert _request(port, "PUT", "/j/1", b"x", timeout=5)[0] == 200
        assert _request(port, "GET", "/j/1", timeout=5) == (200, b"x")
    finally:
        parent.kill()
        parent.wait()


def test_store_dies_with_its_parent():
    port = _free_port()
    parent = _parent(f"""
        import time
        from ctr_model.rendezvous import serve_rendezvous
        serve_rendezvous({port})
        print("up", flush=True)
        time.sleep(600)
    """)
    assert parent.stdout.readline().strip() == "up"
    assert _request(port, "GET", "/j/0")[0] == 404
    os.kill(parent.pid, signal.SIGKILL)          # no chance to stop its child
    parent.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            _request(port, "GET", "/j/0", timeout=1)
        except ConnectionRefusedError:
            return
        except (ConnectionResetError, http.client.RemoteDisconnected, TimeoutError):
            pass    # caught while the orphan was dying: it accepted, then went away; ask again
        time.sleep(0.1)
    pytest.fail(f"the store on port {port} outlived its parent")
