"""Finding the gang's peers: host names that resolve, ports that are free, servers that accept.

On Volcano the svc plugin's headless Service publishes a pod's name a little after the pod starts, and
Paddle, given a name that does not resolve yet, logs an error and returns as if it had finished (exit
0); its own wait for the pservers (``wait_server_ready``) polls every 3 s without a bound. So every
role waits here first, each wait bounded by the contract (``CTR_DNS_WAIT_S``, ``CTR_PSERVER_WAIT_S``).
"""
from __future__ import annotations

import socket
import time
from typing import Optional, Sequence

from ctr_model.contract import RoleSpec
from ctr_model.errors import BadInput, JobFailed
from ctr_model.rendezvous import wait_for_endpoints
from ctr_model.train import log

__all__ = ["PeersUnreachable", "resolve_own_host", "resolved_address", "check_pserver_hosts",
           "port_is_free", "wait_for_peers"]


class PeersUnreachable(JobFailed):
    """The pservers (or pserver 0's rendezvous server) never accepted a connection: a failure of the
    gang, not bad input.

    Paddle's own check (``wait_server_ready``) polls every 3 s without a bound, so a gang whose
    pservers died before serving would hang until the stall watchdog. The trainer fails instead,
    after ``CTR_PSERVER_WAIT_S``: exit 1, which both backends treat as a failure of the gang (it
    restarts, up to ``max_retry``).
    """

    what = "training gang"

    def __init__(self, spec: RoleSpec, what: str, endpoints: Sequence[str], waited_s: float):
        self.endpoints = list(endpoints)
        super().__init__(spec.job_id, "PeersUnreachable",
                         f"{what} did not accept connections within {waited_s:.0f}s ({', '.join(endpoints)}, "
                         f"CTR_PSERVER_WAIT_S): see the pservers' logs for why they are not serving",
                         role=spec.name)


def resolve_own_host(host: str, timeout_s: float, interval_s: float = 1.0) -> Optional[str]:
    """The IP address of ``host``, retrying until ``timeout_s``; ``None`` if it never resolves."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return socket.gethostbyname(host)
        except OSError:
            if time.monotonic() >= deadline:
                return None
            time.sleep(min(interval_s, max(0.0, deadline - time.monotonic())))


def _unresolved(spec: RoleSpec, host: str, what: str) -> BadInput:
    return BadInput("VC_PSERVER_HOSTS", host, f"{what} did not resolve within {spec.dns_wait_s:.0f}s "
                                              f"(CTR_DNS_WAIT_S): check cluster DNS and that the Job's svc "
                                              f"plugin publishes not-ready addresses")


def resolved_address(spec: RoleSpec, host: str) -> str:
    """A pserver's own address, once its name resolves.

    Raises:
        BadInput: the name did not resolve within ``CTR_DNS_WAIT_S``.
    """
    address = resolve_own_host(host, spec.dns_wait_s)
    if address is None:
        raise _unresolved(spec, host, "this pserver's host name")
    return address


def check_pserver_hosts(spec: RoleSpec) -> None:
    """Wait until every pserver's name resolves: Paddle's Gloo rendezvous dials pserver 0 by name
    once and dies on a name that does not resolve yet.

    Raises:
        BadInput: a name did not resolve within ``CTR_DNS_WAIT_S``.
    """
    for host in dict.fromkeys(spec.pserver_hosts):
        if resolve_own_host(host, spec.dns_wait_s) is None:
            raise _unresolved(spec, host, "the pserver host name")


def port_is_free(host: str, port: int) -> bool:
    """Whether ``host:port`` (an address) can be bound here (a pserver whose port is taken would exit 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host if host != "localhost" else "127.0.0.1", port))
        except OSError:
            return False
    return True


def wait_for_peers(spec: RoleSpec, what: str, endpoints: Sequence[str]) -> None:
    """Wait until every endpoint accepts a connection, at most ``CTR_PSERVER_WAIT_S``.

    Raises:
        PeersUnreachable: one did not within the wait.
    """
    t = time.time()
    ready = wait_for_endpoints(endpoints, spec.pserver_wait_s)
    waited = time.time() - t
    if not ready:
        raise PeersUnreachable(spec, what, endpoints, waited)
    log.info(f"{what} ready after {waited:.2f}s of waiting ({', '.join(endpoints)})")
