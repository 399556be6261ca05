"""Host services for the process-backed pods: a loopback server on the host, reachable from the pods.

Why: the pods of the process nodes live in network namespaces on a bridge of their own and reach
nothing else, while the servers a test starts (the S3 server, say) listen on the host's 127.0.0.1;
this machine's rule is loopback only, no address in the root namespace. A real cluster has the same
shape (the store runs in the cluster, a workstation reaches it through a port-forward): the pods use
an in-cluster name, the test process uses 127.0.0.1.

:class:`HostService` gives such a server an address on the pod bridge: a network namespace of its
own (``<prefix>-s<k>``), attached to the bridge with a veth like a pod, at ``10.88.<k>.1`` (the node
agent gives pods ``.2`` to ``.251`` only). A listening socket is created inside that namespace (a
socket keeps the namespace it was created in: one short-lived thread ``setns``-es into it, binds and
listens, and ends), and a forwarder thread in this process accepts there and connects to the
target on the host's loopback. :func:`service_objects` publishes it as a selector-less Service plus
an EndpointSlice, so the node agent writes ``<name>.<namespace>.svc.cluster.local`` into the pods'
``/etc/hosts``. :meth:`HostService.stop` closes every connection and removes the namespace.
"""
from __future__ import annotations

import ctypes
import logging
import os
import selectors
import socket
import subprocess
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

__all__ = ["HostService", "service_objects", "service_host", "SUBNET"]

LOG = logging.getLogger("hostservice")
SUBNET = "10.88"
_CLONE_NEWNET = 0x40000000
_CHUNK = 1 << 16


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {proc.stderr.strip()}")
    return proc


def _listen_in_netns(netns: str, address: str, port: int) -> socket.socket:
    """A TCP socket listening on ``address:port`` inside network namespace ``netns``.

    ``setns`` moves only the calling thread, so it runs in a thread of its own that ends afterwards:
    no other thread of this process ever changes namespace.
    """
    box: Dict[str, Any] = {}

    def work() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        try:
            with open(f"/var/run/netns/{netns}", "rb") as fh:
                if libc.setns(fh.fileno(), _CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"setns into {netns}: {os.strerror(err)}")
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((address, port))
            sock.listen(64)
            box["sock"] = sock
        except BaseException as exc:   # handed to the caller's thread
            box["error"] = exc

    t = threading.Thread(target=work, name=f"setns-{netns}")
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["sock"]


def service_host(name: str, namespace: str, domain: str = "cluster.local") -> str:
    """The name the pods resolve for a published host service."""
    return f"{name}.{namespace}.svc.{domain}"


def service_objects(name: str, namespace: str, address: str, port: int) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """A selector-less headless Service and its hand-written EndpointSlice pointing at ``address``.

    No controller touches either (the EndpointSlice controller manages slices of Services with a
    selector only); the node agent turns the slice into ``/etc/hosts`` lines in the namespace's pods.
    """
    service = {"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": name, "namespace": namespace},
               "spec": {"clusterIP": "None", "ports": [{"name": "tcp", "port": port, "protocol": "TCP"}]}}
    slice_ = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
              "metadata": {"name": f"{name}-host", "namespace": namespace,
                           "labels": {"kubernetes.io/service-name": name,
                                      "endpointslice.kubernetes.io/managed-by": "minicluster.hostservice"}},
              "addressType": "IPv4",
              "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
              "ports": [{"name": "tcp", "port": port, "protocol": "TCP"}]}
    return service, slice_


@dataclass
class HostService:
    """``127.0.0.1:target_port`` on the host, served to the pods at ``address:port`` on the bridge.

    Attributes:
        bridge_ns: the network namespace holding the pods' bridge ``br0`` (``<prefix>-br``).
        netns: this service's own network namespace (created by :meth:`start`).
        index: ``k`` of the address ``10.88.<k>.1`` and of the veth ``s<k>`` in the bridge namespace.
        target_port: the host loopback port forwarded to.
        port: the port the pods connect to (default: ``target_port``).
        host: the name the pods resolve for it, if published (:func:`service_host`).
        on_stop: called once by :meth:`stop` (the owner forgets the service).
    """

    bridge_ns: str
    netns: str
    index: int
    target_port: int
    port: int = 0
    host: str = ""
    on_stop: Optional[Callable[[], object]] = field(default=None, repr=False)
    connections: int = 0
    _listener: Optional[socket.socket] = field(default=None, repr=False)
    _socks: List[socket.socket] = field(default_factory=list, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: Optional[threading.Thread] = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not 0 <= self.index < 256:
            raise ValueError(f"index={self.index}: use 0..255 (the address is {SUBNET}.<index>.1)")
        self.port = self.port or self.target_port

    @property
    def address(self) -> str:
        return f"{SUBNET}.{self.index}.1"

    @property
    def url(self) -> str:
        """``http://<host or address>:<port>``: the endpoint as the pods reach it."""
        return f"http://{self.host or self.address}:{self.port}"

    @property
    def veth(self) -> str:
        return f"s{self.index}"

    def start(self) -> "HostService":
        """Create the namespace and its veth on the bridge, listen there, start forwarding."""
        _ip("netns", "add", self.netns)
        try:
            _ip("-n", self.netns, "link", "set", "lo", "up")
            _ip("link", "add", self.veth, "netns", self.bridge_ns, "type", "veth", "peer", "name", "eth0",
                "netns", self.netns)
            _ip("-n", self.bridge_ns, "link", "set", self.veth, "master", "br0", "up")
            _ip("-n", self.netns, "addr", "add", f"{self.address}/16", "dev", "eth0")
            _ip("-n", self.netns, "link", "set", "eth0", "up")
            self._listener = _listen_in_netns(self.netns, self.address, self.port)
        except BaseException:
            self._remove_netns()
            raise
        self._listener.setblocking(False)
        self._thread = threading.Thread(target=self._serve, name=f"hostservice-{self.netns}", daemon=True)
        self._thread.start()
        LOG.info("host service %s:%s (namespace %s) -> 127.0.0.1:%s", self.address, self.port, self.netns,
                 self.target_port)
        return self

    def _serve(self) -> None:
        assert self._listener is not None
        sel = selectors.DefaultSelector()
        sel.register(self._listener, selectors.EVENT_READ)
        try:
            while not self._stop.is_set():
                if not sel.select(timeout=0.2):
                    continue
                try:
                    conn, _ = self._listener.accept()
                except (BlockingIOError, OSError):
                    continue
                conn.setblocking(True)
                try:
                    upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
                except OSError as exc:
                    LOG.warning("host service %s: 127.0.0.1:%s refused (%s)", self.address, self.target_port, exc)
                    conn.close()
                    continue
                upstream.settimeout(None)
                with self._lock:
                    self._socks += [conn, upstream]
                    self.connections += 1
                pending = [2]   # pumps of this pair still running; the last one closes both sockets
                for src, dst in ((conn, upstream), (upstream, conn)):
                    threading.Thread(target=self._pump, args=(src, dst, pending), daemon=True).start()
        finally:
            sel.close()

    def _pump(self, src: socket.socket, dst: socket.socket, pending: List[int]) -> None:
        try:
            while True:
                data = src.recv(_CHUNK)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            try:
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            with self._lock:
                pending[0] -= 1
                if pending[0] == 0:
                    for s in (src, dst):
                        s.close()
                        if s in self._socks:
                            self._socks.remove(s)

    def stop(self) -> None:
        """Stop accepting, close every forwarded connection, remove the namespace and its veth."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self.on_stop is not None:
            self.on_stop()
        if self._thread is not None:
            self._thread.join(5)
        if self._listener is not None:
            self._listener.close()
        with self._lock:
            for s in self._socks:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
            self._socks.clear()
        self._remove_netns()
        LOG.info("host service %s stopped after %d connection(s)", self.address, self.connections)

    def _remove_netns(self) -> None:
        # deleting the namespace deletes its veth end, and with it the peer on the bridge
        _ip("netns", "del", self.netns, check=False)
        _ip("-n", self.bridge_ns, "link", "del", self.veth, check=False)

    def __enter__(self) -> "HostService":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
