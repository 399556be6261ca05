"""The trainers' Gloo rendezvous server, run by pserver 0 itself in a thread.

Paddle's parameter-server mode meets its trainers through an HTTP key-value store
(``PADDLE_GLOO_RENDEZVOUS=3``) served from ``PADDLE_GLOO_HTTP_ENDPOINT``. Left to Paddle, pserver 0
starts it inside ``fleet.init`` in a child process that checks whether the trainers are done every
5 s, and ``fleet.init`` blocks until it is: every gang start waited 5 s there before pserver 0 even
built its program (docs/performance.md). Here pserver 0 serves the same store (Paddle's own
``KVServer`` handler) from a thread that lives as long as the pserver, and runs Paddle with Gloo off
(pservers never join the Gloo group; only the trainers' barriers use it).
"""
from __future__ import annotations

import threading
from typing import Callable

__all__ = ["serve_rendezvous"]


def serve_rendezvous(port: int) -> Callable[[], None]:
    """Serve the Gloo HTTP store on ``port`` (all interfaces); returns the function that stops it.

    Raises:
        OSError: the port is taken.
    """
    from paddle.distributed.fleet.utils.http_server import KVHandler, KVHTTPServer

    server = KVHTTPServer(port, KVHandler)
    thread = threading.Thread(target=server.serve_forever, name="gloo-rendezvous", daemon=True)
    thread.start()

    def stop() -> None:
        server.shutdown()
        thread.join()
        server.server_close()

    return stop
