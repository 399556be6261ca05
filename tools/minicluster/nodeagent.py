"""Node agent of the process-backed nodes: runs the pods bound to them as real Linux processes.

kwok keeps part of the kubelet's bookkeeping for these nodes (a second kwok instance manages only
nodes labelled ``type=process``: node status, and the kubelet API that serves ``pods/log`` from the
files named by ``Logs`` objects). This agent does the rest, as a kubelet does:

* runs the pod's init containers one after the other (a failing one fails the pod), then all its
  containers at once, each as its own process with its own mount namespace (``podinit.py``), in
  the pod's network and UTS namespaces;
* writes the pod's status itself: phase, conditions, ``podIP``/``hostIP``, and for every container
  (``initContainerStatuses``, ``containerStatuses``) waiting, running or terminated with its exit
  code (a SIGKILL is 137); the pod is Succeeded when every container exited 0, else Failed, which
  Volcano's policies and Argo's controller act on;
* gives every container the pod's volumes (one directory per emptyDir or content volume, shared by
  the containers that mount it; ``subPath`` inside it), a private ``/tmp``, and the variables a
  kubelet adds (``--service-env``: ``KUBERNETES_SERVICE_HOST``/``PORT`` of the API server as the pods
  reach it);
* runs each container from its image: one of the project's images, built from its Dockerfile and
  unpacked by ``tools/images/imagebuild.py`` (``--image REF=DIR``: the exact reference a pod names), is the
  container's root filesystem (an overlay with a writable layer per container, ``podinit.py``), with
  the image's ``Env``, ``Entrypoint``, ``Cmd``, ``WorkingDir`` and ``User`` as the container's defaults;
  the images of Go programs built on the host (``--binary-image``: Argo's and KFP's, by repository
  name) run those binaries on the host's tree;
* writes each container's stdout/stderr in CRI log format to its own file, listed per container in
  the pod's ``Logs`` object (``pods/log?container=``).

Annotations are kept for people reading a pod: ``minicluster.process/pod-ip`` and ``.../netns``
when it starts, ``minicluster.process/exit-code`` (+ ``.../message``) when it ends.

Per pod: a network namespace with one veth on a bridge that lives in a namespace of its own (pods
reach each other and the host services of ``hostservice.py``, nothing else), and
``/etc/netns/<ns>/hosts`` generated from the EndpointSlices of the pod's namespace (kept current
while it runs). Deleting a pod sends SIGTERM to its containers' processes, SIGKILL to every process
left in its network namespace after the grace period, then removes the namespace and force-deletes
the pod, as a kubelet confirms a deletion. A node relabelled ``type=lost`` (``MiniCluster.lose_node``)
is a machine gone: its pods' processes are killed at once and nothing more is written for them.

Run by :class:`minicluster.MiniCluster`; ``SIGTERM`` stops every pod and removes every namespace.
"""
from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import podspec  # noqa: E402

sys.path.insert(0, str(HERE.parent / "images"))
import imagebuild as images_build  # noqa: E402  (tools/images: resolve_user)

__all__ = ["ANN_POD_IP", "ANN_EXIT_CODE", "ANN_MESSAGE", "ANN_NETNS", "ANN_PID", "PROCESS_NODE_LABEL",
           "NODE_TYPE", "PROCESS_NODE", "LOST_NODE", "Agent", "netns_pids", "patch_pod", "main"]

LOG = logging.getLogger("nodeagent")
ANN_POD_IP = "minicluster.process/pod-ip"
ANN_EXIT_CODE = "minicluster.process/exit-code"
ANN_MESSAGE = "minicluster.process/message"
ANN_NETNS = "minicluster.process/netns"
ANN_PID = "minicluster.process/pid"
#: The node label (``type``) of the process nodes, and its value on one that is lost
#: (``MiniCluster.lose_node``): its kubelet is gone, so this agent stops being one for it: its pods'
#: processes die at once, and nothing more is written for them.
NODE_TYPE, PROCESS_NODE, LOST_NODE = "type", "process", "lost"
PROCESS_NODE_LABEL = f"{NODE_TYPE}={PROCESS_NODE}"
#: Argo's label on its workflow pods, and its per-container kill command annotation (prefix).
ARGO_WORKFLOW_LABEL = "workflows.argoproj.io/workflow"
ARGO_KILL_CMD = "workflows.argoproj.io/kill-cmd-"
SUBNET = "10.88"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {proc.stderr.strip()}")
    return proc


def netns_pids(name: str) -> List[int]:
    """PIDs of every process in network namespace ``name`` (``ip netns pids``)."""
    proc = _ip("netns", "pids", name, check=False)
    return [int(p) for p in proc.stdout.split()] if proc.returncode == 0 else []


def patch_pod(core, namespace: str, name: str, uid: str, body: Dict[str, Any], status: bool = False) -> bool:
    """Patch one pod (its ``status`` subresource if ``status``) only if it is still the pod ``uid``;
    False when that pod is gone. A Job's restart recreates its pods under the same names, so a write
    by name alone from the old pod's supervisor lands on its successor: an exit-code annotation
    there made the agent take the new pod for one that had already run, and never start it (a
    restarted gang then waited Pending until its schedule timeout). The uid in the patch is the
    precondition a kubelet uses for the same reason; another pod's uid is refused as a change of an
    immutable field (422 on ``metadata.uid``) or as a conflict (409)."""
    from kubernetes import client

    meta = dict(body.get("metadata") or {}, uid=uid)
    patch = dict(body, metadata=meta)
    call = core.patch_namespaced_pod_status if status else core.patch_namespaced_pod
    try:
        call(name, namespace, patch)
        return True
    except client.ApiException as exc:
        if exc.status not in (404, 409) and not (exc.status == 422 and _uid_refused(exc)):
            raise
        LOG.info("pod %s/%s (uid %s): not written, the pod is gone (%s)", namespace, name, uid, exc.status)
        return False


def _uid_refused(exc) -> bool:
    """Whether a 422 names ``metadata.uid`` (the patch's uid is not the pod's)."""
    try:
        causes = (json.loads(exc.body or "{}").get("details") or {}).get("causes") or []
    except ValueError:
        return False
    return any(c.get("field") == "metadata.uid" for c in causes)


def _cri_stamp() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _k8s_time() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class ContainerRun:
    """One container of a pod: its plan, its process and the state reported in the pod's status."""

    plan: podspec.LaunchPlan
    init: bool
    log_file: Path
    proc: Optional[subprocess.Popen] = None
    state: str = "waiting"            # waiting | running | terminated
    reason: str = "PodInitializing"
    exit_code: Optional[int] = None
    started_at: str = ""
    finished_at: str = ""
    pumps: List[threading.Thread] = field(default_factory=list)
    log_lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def name(self) -> str:
        return self.plan.container

    def status(self) -> Dict[str, Any]:
        """This container's entry of ``containerStatuses``/``initContainerStatuses``."""
        if self.state == "running":
            state: Dict[str, Any] = {"running": {"startedAt": self.started_at}}
        elif self.state == "terminated":
            state = {"terminated": {"exitCode": self.exit_code,
                                    "reason": "Completed" if self.exit_code == 0 else "Error",
                                    "startedAt": self.started_at or self.finished_at,
                                    "finishedAt": self.finished_at}}
        else:
            state = {"waiting": {"reason": self.reason}}
        out = {"name": self.name, "image": self.plan.image, "imageID": "", "restartCount": 0,
               "ready": self.state == "running" and not self.init, "started": self.state == "running",
               "state": state}
        if self.proc is not None:
            out["containerID"] = f"process://{self.proc.pid}"
        return out


@dataclass
class PodRun:
    """One pod this agent runs."""

    uid: str
    namespace: str
    name: str
    netns: str
    ip: str
    dir: Path
    node_ip: str = "127.0.0.1"
    node: str = ""
    hostname: str = ""
    subdomain: str = ""
    containers: List[ContainerRun] = field(default_factory=list)
    phase: str = "Pending"
    start_time: str = ""
    terminating: bool = False
    finished: bool = False
    hosts_text: str = ""
    grace_s: int = 30

    @property
    def init(self) -> List[ContainerRun]:
        return [c for c in self.containers if c.init]

    @property
    def regular(self) -> List[ContainerRun]:
        return [c for c in self.containers if not c.init]

    @property
    def exit_code(self) -> Optional[int]:
        """Once the pod ended: the exit code of the first container that failed, else 0."""
        if not self.finished:
            return None
        return next((c.exit_code for c in self.containers if c.exit_code not in (None, 0)), 0)


@dataclass(frozen=True)
class PreparedImage:
    """An image as a process node runs it: container defaults, and what the pod must see of it."""

    defaults: podspec.ImageDefaults
    binds: Tuple[Dict[str, Any], ...] = ()      # host mode: read-only binds (the binaries' directory)
    rootfs: str = ""                            # the image's unpacked root filesystem (image mode)


def image_defaults(image_dir: Path) -> podspec.ImageDefaults:
    """A built image's container defaults: its configuration's ``Env``, ``Entrypoint``, ``Cmd``,
    ``WorkingDir`` and ``User`` (resolved to numbers with the image's own passwd and group files).

    Raises:
        podspec.PodSpecError: a ``USER`` the image's files do not resolve.
    """
    config = json.loads((image_dir / "config.json").read_text())
    env = dict(item.partition("=")[::2] for item in config.get("Env") or [])
    try:
        user = images_build.resolve_user(image_dir / "rootfs", config.get("User") or "")
    except images_build.ImageBuildError as exc:
        raise podspec.PodSpecError(f"image {image_dir}: {exc}") from None
    return podspec.ImageDefaults(env=env, cmd=tuple(config.get("Cmd") or ()),
                                 entrypoint=tuple(config.get("Entrypoint") or ()),
                                 workdir=config.get("WorkingDir") or "/", user=user)


class Agent:
    """Polls the API for pods on the process nodes and runs them (see the module docstring)."""

    def __init__(self, kubeconfig: str, workdir: Path, prefix: str, images: Dict[str, Path],
                 poll_s: float = 0.25, binary_images: Optional[Dict[str, Path]] = None,
                 service_env: Optional[Dict[str, str]] = None) -> None:
        from kubernetes import client, config

        self.api = config.new_client_from_config(config_file=kubeconfig)
        # Every call bounded: with none, a request caught by a kube-apiserver restart can wait on
        # its connection forever, and the agent, which polls from one thread, stops reporting pods
        # (seen once in the apiserver-restart scenario: no sync after the outage, the Job never
        # completed). The agent only polls; 30 s is far above any answer here.
        import urllib3

        self.api.rest_client.pool_manager.connection_pool_kw["timeout"] = urllib3.Timeout(connect=5.0, read=30.0)
        self.core = client.CoreV1Api(self.api)
        self.co = client.CustomObjectsApi(self.api)
        self.disc = client.DiscoveryV1Api(self.api)
        self.workdir = workdir
        self.prefix = prefix
        self.images = images
        self.binary_images = dict(binary_images or {})
        self.service_env = dict(service_env or {})
        self.poll_s = poll_s
        self.bridge_ns = f"{prefix}-br"
        self.pods: Dict[str, PodRun] = {}
        self.prepared: Dict[str, PreparedImage] = {}
        self.counter = 0
        self.stop_event = threading.Event()
        self.lock = threading.Lock()
        self.image_lock = threading.Lock()
        self.created_file = workdir / "created-mountpoints"
        self.waiting: Dict[str, str] = {}

    # ----------------------------------------------------------------- network
    def setup_bridge(self) -> None:
        _ip("netns", "add", self.bridge_ns)
        _ip("-n", self.bridge_ns, "link", "set", "lo", "up")
        _ip("-n", self.bridge_ns, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.bridge_ns, "link", "set", "br0", "up")

    def _allocate(self) -> Tuple[str, str, str]:
        """A fresh network namespace name, veth name and pod address (not created yet)."""
        with self.lock:
            self.counter += 1
            n = self.counter
        return f"{self.prefix}-p{n}", f"v{n}", f"{SUBNET}.{n // 250}.{n % 250 + 2}"

    def _create_netns(self, name: str, veth: str, ip: str) -> None:
        _ip("netns", "add", name)
        _ip("-n", name, "link", "set", "lo", "up")
        _ip("link", "add", veth, "netns", self.bridge_ns, "type", "veth", "peer", "name", "eth0",
            "netns", name)
        _ip("-n", self.bridge_ns, "link", "set", veth, "master", "br0", "up")
        _ip("-n", name, "addr", "add", f"{ip}/16", "dev", "eth0")
        _ip("-n", name, "link", "set", "eth0", "up")

    def _kill_netns(self, name: str, grace_s: float = 0.0,
                    mains: Optional[List[subprocess.Popen]] = None) -> None:
        """SIGTERM to ``mains`` (the containers' processes), up to ``grace_s`` for them to exit, then
        SIGKILL to every process left in the network namespace."""
        live = [p for p in mains or [] if p.poll() is None]
        if live and grace_s > 0:
            for p in live:
                try:
                    p.send_signal(signal.SIGTERM)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + grace_s
            for p in live:
                try:
                    p.wait(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
        for _ in range(50):
            pids = netns_pids(name)
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)
        for p in mains or []:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:  # pragma: no cover
                LOG.error("pod process %s did not exit after SIGKILL", p.pid)

    def _remove_netns(self, name: str) -> None:
        _ip("netns", "del", name, check=False)
        shutil.rmtree(f"/etc/netns/{name}", ignore_errors=True)

    # ----------------------------------------------------------------- lookups
    def _lookups(self) -> podspec.Lookups:
        from kubernetes import client

        def read(fn, ns, name):
            try:
                obj = fn(name, ns)
            except client.ApiException as exc:
                if exc.status == 404:
                    return None
                raise
            return obj.data or {}

        def claim_path(ns: str, claim: str) -> str:
            try:
                pvc = self.core.read_namespaced_persistent_volume_claim(claim, ns)
            except client.ApiException as exc:
                if exc.status == 404:
                    raise podspec.NotReady(f"persistentvolumeclaim {ns}/{claim} not found") from None
                raise
            if pvc.status.phase != "Bound" or not pvc.spec.volume_name:
                raise podspec.NotReady(f"persistentvolumeclaim {ns}/{claim} is {pvc.status.phase}, "
                                       "waiting for the persistent-volume binder")
            pv = self.core.read_persistent_volume(pvc.spec.volume_name)
            src = pv.spec.host_path or pv.spec.local
            if src is None:
                raise podspec.PodSpecError(f"persistentvolume {pv.metadata.name} is neither hostPath nor "
                                           "local: a process node can only mount host directories")
            return src.path

        def sa_token(ns: str, sa: str, audience: Optional[str], seconds: int) -> str:
            body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                    "spec": {"expirationSeconds": max(seconds, 600),
                             "audiences": [audience] if audience else None}}
            try:
                return self.core.create_namespaced_service_account_token(sa, ns, body).status.token
            except client.ApiException as exc:
                raise podspec.NotReady(f"token for serviceaccount {ns}/{sa}: {exc.reason}") from None

        return podspec.Lookups(secret=lambda ns, n: read(self.core.read_namespaced_secret, ns, n),
                               config_map=lambda ns, n: read(self.core.read_namespaced_config_map, ns, n),
                               claim_path=claim_path, sa_token=sa_token)

    def _image(self, image: str) -> PreparedImage:
        """The image ``image`` names: a built one by its exact reference, else a host-binary one by
        its repository name; a pod naming neither fails, as an image pull would."""
        repo = image.split("@", 1)[0].rsplit("/", 1)[-1].split(":", 1)[0]
        with self.image_lock:
            if image in self.prepared:
                return self.prepared[image]
            if image in self.images:
                image_dir = self.images[image]
                prepared = PreparedImage(image_defaults(image_dir), rootfs=str(image_dir / "rootfs"))
            elif repo in self.binary_images:
                # a Go program's image: its binaries, built on the host, first on PATH
                # (bound read-only: it may live under the host's /root, which the pod sees as its own)
                bin_dir = self.binary_images[repo]
                prepared = PreparedImage(podspec.ImageDefaults(env={
                    "PATH": f"{bin_dir}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}),
                    binds=({"source": str(bin_dir), "target": str(bin_dir), "read_only": True},))
            else:
                raise podspec.PodSpecError(
                    f"image {image!r} is not built on this node (ErrImagePull): the process nodes run "
                    f"{', '.join(sorted(self.images)) or 'no built image'} and the host binaries of "
                    f"{', '.join(sorted(self.binary_images)) or 'no image'}")
            self.prepared[image] = prepared
            return prepared

    # ----------------------------------------------------------------- pod lifecycle
    def _annotate(self, run: PodRun, annotations: Dict[str, str]) -> None:
        patch_pod(self.core, run.namespace, run.name, run.uid, {"metadata": {"annotations": annotations}})

    def _pump(self, c: ContainerRun, stream, tag: str) -> None:
        for raw in iter(stream.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip("\n")
            with c.log_lock, open(c.log_file, "a", encoding="utf-8") as fh:
                fh.write(f"{_cri_stamp()} {tag} F {line}\n")
        stream.close()

    def _volume_dir(self, run: PodRun, m: podspec.Mount) -> str:
        """The per-pod directory of volume ``m.volume`` (made and filled once, shared by every
        container mounting it), or ``m.source`` for a host directory; with ``m.sub_path`` inside."""
        source = m.source
        if m.files or not source:
            vol_dir = run.dir / "volumes" / (m.volume or "anonymous")
            if not vol_dir.exists():
                vol_dir.mkdir(parents=True)
                for rel, data in m.files:
                    path = vol_dir / rel
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_bytes(data)
                    path.chmod(m.mode)
                vol_dir.chmod(0o777 if not m.files else 0o755)
            source = str(vol_dir)
            if m.sub_path:
                source = str(vol_dir / m.sub_path)
                if not m.files and not os.path.exists(source):  # an emptyDir's subPath is created
                    os.makedirs(source, mode=0o777, exist_ok=True)
                    os.chmod(source, 0o777)
        if not os.path.exists(source):
            raise podspec.NotReady(f"volume source {source} (mount {m.target}) does not exist")
        return source

    def _plan_file(self, run: PodRun, plan: podspec.LaunchPlan, img: PreparedImage) -> Path:
        """What ``podinit.py`` needs to start one container (its mounts, identity and command)."""
        binds: List[Dict[str, Any]] = [dict(b) for b in img.binds]
        for m in plan.mounts:
            if m.tmpfs:
                binds.append({"source": "/", "target": m.target, "tmpfs": True})
                continue
            binds.append({"source": self._volume_dir(run, m), "target": m.target, "read_only": m.read_only})
        doc: Dict[str, Any] = {"argv": list(plan.argv), "env": dict(plan.env), "workdir": plan.workdir,
                               "uid": plan.uid, "gid": plan.gid, "hostname": plan.hostname, "binds": binds}
        if img.rootfs:
            hostname = run.dir / "hostname"
            hostname.write_text(plan.hostname + "\n")
            etc = Path("/etc/netns") / run.netns
            doc.update(rootfs=img.rootfs, container_dir=str(run.dir / "containers" / plan.container),
                       etc={"/etc/hosts": str(etc / "hosts"), "/etc/resolv.conf": str(etc / "resolv.conf"),
                            "/etc/hostname": str(hostname)})
        else:
            if not any(b["target"].rstrip("/") == "/tmp" for b in binds):
                # a /tmp of its own, as an image's root filesystem would give it
                tmp = run.dir / "tmp" / plan.container
                tmp.mkdir(parents=True, exist_ok=True)
                tmp.chmod(0o1777)
                binds.append({"source": str(tmp), "target": "/tmp"})
            doc.update(tmpfs=[{"target": "/root"}], created_file=str(self.created_file))
        path = run.dir / f"plan-{plan.container}.json"
        path.write_text(json.dumps(doc, indent=1))
        path.chmod(0o600)
        return path

    def _start(self, pod: Dict[str, Any], node: str, node_ip: str) -> None:
        meta, spec = pod["metadata"], pod["spec"]
        uid = meta["uid"]
        # the namespace's names before the first container starts (read first: a failed read leaves
        # nothing half made): a short pod, a KFP launcher, can end before this sync's closing refresh
        # (a CI run's find-champion resolved neither metadata-grpc-service nor minio-service)
        peers = self._peers(meta["namespace"])
        netns, veth, ip = self._allocate()
        plan = podspec.render_pod(pod, images=lambda ref: self._image(ref).defaults, lookups=self._lookups(),
                                  pod_ip=ip, node_ip=node_ip, service_env=self.service_env)
        run = PodRun(uid=uid, namespace=meta["namespace"], name=meta["name"], netns=netns, ip=ip,
                     dir=self.workdir / "pods" / uid, node_ip=node_ip, node=node, hostname=podspec.pod_hostname(pod),
                     subdomain=spec.get("subdomain") or "", start_time=_k8s_time(),
                     grace_s=int(spec.get("terminationGracePeriodSeconds", 30)))
        run.dir.mkdir(parents=True, exist_ok=True)
        files: Dict[str, Path] = {}
        for i, p in enumerate(plan.all):
            c = ContainerRun(plan=p, init=i < len(plan.init), log_file=run.dir / f"{p.container}.log")
            if not c.init and plan.init:
                c.reason = "PodInitializing"
            elif not c.init:
                c.reason = "ContainerCreating"
            c.log_file.touch()
            run.containers.append(c)
            files[c.name] = self._plan_file(run, p, self._image(p.image))
        self._create_netns(netns, veth, ip)
        with self.lock:
            self.pods[uid] = run
        etc = Path("/etc/netns") / netns
        etc.mkdir(parents=True, exist_ok=True)
        self._write_hosts(run, peers)
        (etc / "resolv.conf").write_text(
            f"search {run.namespace}.svc.cluster.local svc.cluster.local cluster.local\n"
            "nameserver 127.0.0.1\noptions ndots:5 attempts:1 timeout:1\n")
        self._create_logs_object(pod, run)
        annotations = {ANN_POD_IP: ip, ANN_NETNS: netns}
        if ARGO_WORKFLOW_LABEL in (meta.get("labels") or {}):
            annotations.update(self._argo_kill_commands(pod, run))
        self._annotate(run, annotations)
        threading.Thread(target=self._supervise, args=(run, files), daemon=True,
                         name=f"pod-{run.name}").start()

    def _launch(self, run: PodRun, c: ContainerRun, plan_file: Path) -> None:
        c.proc = subprocess.Popen(
            ["ip", "netns", "exec", run.netns, "unshare", "--uts", "--", sys.executable,
             str(HERE / "podinit.py"), str(plan_file)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
            start_new_session=True, env={"PATH": os.environ.get("PATH", os.defpath)})
        c.state, c.started_at = "running", _k8s_time()
        for stream, tag in ((c.proc.stdout, "stdout"), (c.proc.stderr, "stderr")):
            t = threading.Thread(target=self._pump, args=(c, stream, tag), daemon=True)
            t.start()
            c.pumps.append(t)
        (run.dir / f"{c.name}.pid").write_text(str(c.proc.pid))
        LOG.info("pod %s/%s: %scontainer %s started pid %s in %s at %s: %s", run.namespace, run.name,
                 "init " if c.init else "", c.name, c.proc.pid, run.netns, run.ip, " ".join(c.plan.argv))

    def _ended(self, run: PodRun, c: ContainerRun) -> None:
        assert c.proc is not None
        code = c.proc.returncode
        c.exit_code = 128 - code if code < 0 else code
        c.state, c.finished_at = "terminated", _k8s_time()
        for t in c.pumps:
            t.join(5)
        LOG.info("pod %s/%s: container %s exited with %s", run.namespace, run.name, c.name, c.exit_code)

    def _supervise(self, run: PodRun, plan_files: Dict[str, Path]) -> None:
        """Run the init containers one by one, then the containers together; report every change."""
        try:
            self._report(run)
            for c in run.init:
                if run.terminating:
                    return
                self._launch(run, c, plan_files[c.name])
                self._report(run)
                while c.proc.poll() is None:
                    if run.terminating:
                        return
                    time.sleep(0.05)
                self._ended(run, c)
                if c.exit_code != 0:
                    for other in run.regular:
                        other.reason = "PodInitializing"
                    self._finish(run, "Failed")
                    return
            if run.terminating:
                return
            for c in run.regular:
                self._launch(run, c, plan_files[c.name])
            run.phase = "Running"
            self._report(run)
            pending = list(run.regular)
            while pending:
                if run.terminating:
                    return
                ended = [c for c in pending if c.proc.poll() is not None]
                for c in ended:
                    self._ended(run, c)
                    pending.remove(c)
                if ended:
                    self._report(run)
                else:
                    time.sleep(0.05)
            self._finish(run, "Succeeded" if all(c.exit_code == 0 for c in run.regular) else "Failed")
        except Exception:  # reported, never silently dropped
            LOG.exception("pod %s/%s: supervisor failed", run.namespace, run.name)

    def _finish(self, run: PodRun, phase: str) -> None:
        """Every container ended: stop what is left in the pod, report the final phase."""
        self._kill_netns(run.netns)
        run.phase, run.finished = phase, True
        if run.terminating:
            return
        self._report(run)
        self._annotate(run, {ANN_EXIT_CODE: str(run.exit_code)})
        LOG.info("pod %s/%s: %s (exit code %s)", run.namespace, run.name, phase, run.exit_code)

    def _report(self, run: PodRun, message: str = "") -> None:
        """Write the pod's status (what a kubelet reports), unless it is being deleted."""
        if run.terminating:
            return
        now = _k8s_time()
        initialized = all(c.state == "terminated" and c.exit_code == 0 for c in run.init)
        ready = run.phase == "Running" and all(c.state == "running" for c in run.regular)
        done_reason = "PodCompleted" if run.phase == "Succeeded" else "PodFailed"

        def cond(kind: str, ok: bool, reason: str = "") -> Dict[str, Any]:
            out = {"type": kind, "status": "True" if ok else "False", "lastTransitionTime": now}
            if not ok and reason:
                out["reason"] = reason
            return out

        not_ready = done_reason if run.finished else "ContainersNotReady"
        status: Dict[str, Any] = {
            "phase": run.phase, "hostIP": run.node_ip, "hostIPs": [{"ip": run.node_ip}],
            "podIP": run.ip, "podIPs": [{"ip": run.ip}], "startTime": run.start_time,
            "conditions": [cond("PodScheduled", True),
                           cond("Initialized", initialized, "ContainersNotInitialized"),
                           cond("ContainersReady", ready, not_ready), cond("Ready", ready, not_ready)],
            "containerStatuses": [c.status() for c in run.regular],
        }
        if run.init:
            status["initContainerStatuses"] = [c.status() for c in run.init]
        if message:
            status["message"] = message
        self._patch_status(run, status)

    def _patch_status(self, run: PodRun, status: Dict[str, Any], patience_s: float = 300.0) -> None:
        """Write a pod's status, retried while the API server is unreachable or failing (a kubelet
        keeps syncing too): a pod that finished during a kube-apiserver restart was never reported
        finished, so its Job never completed (the apiserver-restart scenario, twice)."""
        import urllib3
        from kubernetes import client

        deadline, delay = time.monotonic() + patience_s, 0.5
        while True:
            try:
                patch_pod(self.core, run.namespace, run.name, run.uid, {"status": status}, status=True)
                return
            except client.ApiException as exc:
                if exc.status == 422:
                    LOG.info("pod %s/%s: status not written (%s)", run.namespace, run.name, exc.status)
                    return
                if exc.status < 500 or time.monotonic() + delay > deadline:
                    raise
            except (urllib3.exceptions.HTTPError, OSError):   # the server is down or restarting
                if time.monotonic() + delay > deadline:
                    raise
            if run.terminating or self.stop_event.is_set():
                return
            LOG.info("pod %s/%s: status not written yet (API server unreachable); retry in %.1fs",
                     run.namespace, run.name, delay)
            time.sleep(delay)
            delay = min(delay * 2, 8.0)

    def _argo_kill_commands(self, pod: Dict[str, Any], run: PodRun) -> Dict[str, str]:
        """For an Argo pod: Argo's per-container kill command (``podsignal.py``, run by kwok's exec on
        the host) and the kwok ``Exec`` object that lets kwok serve ``pods/exec`` for this pod only.

        Argo signals a stopped or terminated workflow's containers through ``pods/exec``; without
        this the signal never reaches a process node's pod."""
        meta = pod["metadata"]
        names = [c.name for c in run.regular]
        body = {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Exec",
                "metadata": {"name": meta["name"], "namespace": meta["namespace"],
                             "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                                                  "uid": meta["uid"]}]},
                "spec": {"execs": [{"containers": names, "local": {}}]}}
        self.co.create_namespaced_custom_object("kwok.x-k8s.io", "v1alpha1", meta["namespace"], "execs", body)
        return {f"{ARGO_KILL_CMD}{name}": json.dumps(
            [sys.executable, str(HERE / "podsignal.py"), str(run.dir / f"{name}.pid"), run.netns, "%d"])
            for name in names}

    def _create_logs_object(self, pod: Dict[str, Any], run: PodRun) -> None:
        from kubernetes import client

        meta = pod["metadata"]
        body = {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Logs",
                "metadata": {"name": meta["name"], "namespace": meta["namespace"],
                             "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                                                  "uid": meta["uid"]}]},
                "spec": {"logs": [{"containers": [c.name], "logsFile": str(c.log_file), "follow": True}
                                  for c in run.containers]}}
        for _ in range(2):
            try:
                self.co.create_namespaced_custom_object("kwok.x-k8s.io", "v1alpha1", meta["namespace"],
                                                        "logs", body)
                break
            except client.ApiException as exc:
                if exc.status != 409:
                    raise
                # the Logs of a deleted pod of the same name, not yet garbage-collected
                self.co.delete_namespaced_custom_object("kwok.x-k8s.io", "v1alpha1", meta["namespace"],
                                                        "logs", meta["name"])
        # kwok learns of the Logs object through its watch; until then pods/log fails. Start the
        # processes only once the log is readable, so a pod that dies at once still has its log read.
        deadline = time.monotonic() + 10
        first = run.containers[0].name
        while True:
            try:
                self.core.read_namespaced_pod_log(meta["name"], meta["namespace"], container=first,
                                                  tail_lines=1)
                return
            except client.ApiException as exc:
                if time.monotonic() > deadline:
                    LOG.warning("pod %s/%s: log not readable through the API yet (%s)", meta["namespace"],
                                meta["name"], exc.status)
                    return
                time.sleep(0.1)

    def _fail_unstartable(self, pod: Dict[str, Any], message: str) -> None:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        LOG.error("pod %s/%s cannot run: %s", meta["namespace"], meta["name"], message)
        now = _k8s_time()

        def failed(c: Dict[str, Any]) -> Dict[str, Any]:
            return {"name": c["name"], "image": c.get("image", ""), "imageID": "", "restartCount": 0,
                    "ready": False, "started": False,
                    "state": {"terminated": {"exitCode": 128, "reason": "StartError",
                                             "message": message[:1000], "finishedAt": now}}}

        status = {"phase": "Failed", "message": message[:1000], "reason": "StartError",
                  "containerStatuses": [failed(c) for c in spec.get("containers") or []]}
        if patch_pod(self.core, meta["namespace"], meta["name"], meta["uid"], {"status": status}, status=True):
            patch_pod(self.core, meta["namespace"], meta["name"], meta["uid"], {"metadata": {"annotations": {
                ANN_EXIT_CODE: "128", ANN_MESSAGE: message[:1000]}}})

    def _terminate(self, run: PodRun, grace_s: float) -> None:
        try:
            run.terminating = True
            mains = [c.proc for c in run.containers if c.proc is not None]
            self._kill_netns(run.netns, grace_s=grace_s, mains=mains)
            for c in run.containers:
                for t in c.pumps:
                    t.join(5)
            self._remove_netns(run.netns)
            # the containers' writable layers go with the pod, as a runtime removes its containers, and
            # so do its emptyDir and content volumes (run.dir/volumes: claims and host paths are
            # elsewhere), as the kubelet removes them with the pod
            shutil.rmtree(run.dir / "containers", ignore_errors=True)
            shutil.rmtree(run.dir / "volumes", ignore_errors=True)
            LOG.info("pod %s/%s: terminated (grace %.0fs)", run.namespace, run.name, grace_s)
            self._force_delete(run.namespace, run.name, run.uid)
        finally:
            with self.lock:
                self.pods.pop(run.uid, None)

    def _force_delete(self, namespace: str, name: str, uid: str) -> None:
        from kubernetes import client

        try:
            self.core.delete_namespaced_pod(name, namespace, grace_period_seconds=0,
                                            body={"preconditions": {"uid": uid}, "gracePeriodSeconds": 0})
        except client.ApiException as exc:
            if exc.status not in (404, 409):
                raise

    # ----------------------------------------------------------------- hosts
    def _write_hosts(self, run: PodRun, peers: List[Tuple[str, str, str]]) -> None:
        text = podspec.hosts_file(run.ip, run.hostname, run.subdomain, run.namespace, peers)
        if text == run.hosts_text:
            return
        path = Path("/etc/netns") / run.netns / "hosts"
        # rewritten in place: the running pod sees this inode bound over /etc/hosts
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
        run.hosts_text = text

    def _peers(self, namespace: str) -> List[Tuple[str, str, str]]:
        # raw JSON: the client's model refuses a slice without endpoints (podspec.hosts_peers)
        raw = self.disc.list_namespaced_endpoint_slice(namespace, _preload_content=False)
        return podspec.hosts_peers(json.loads(raw.data).get("items") or [])

    def _refresh_hosts(self) -> None:
        namespaces = {r.namespace for r in self.pods.values() if not r.terminating}
        for ns in namespaces:
            peers = self._peers(ns)
            for run in list(self.pods.values()):
                if run.namespace == ns and not run.terminating and not run.finished:
                    self._write_hosts(run, peers)

    # ----------------------------------------------------------------- main loop
    def _nodes(self) -> Tuple[Dict[str, str], List[str]]:
        """The process nodes this agent serves (name -> InternalIP) and those that are lost."""
        nodes, lost = {}, []
        for n in self.core.list_node(label_selector=f"{NODE_TYPE} in ({PROCESS_NODE},{LOST_NODE})").items:
            if n.metadata.labels.get(NODE_TYPE) == LOST_NODE:
                lost.append(n.metadata.name)
                continue
            ip = next((a.address for a in (n.status.addresses or []) if a.type == "InternalIP"), "127.0.0.1")
            nodes[n.metadata.name] = ip
        return nodes, lost

    def _lose(self, run: PodRun) -> None:
        """The pod's node is lost: its processes die as a machine's do (SIGKILL, no grace), and no
        status, annotation or deletion is written for it: nobody is left to write one."""
        try:
            self._kill_netns(run.netns, mains=[c.proc for c in run.containers if c.proc is not None])
            self._remove_netns(run.netns)
            LOG.info("pod %s/%s: its node %s is lost; processes killed, nothing reported", run.namespace,
                     run.name, run.node)
        finally:
            with self.lock:
                self.pods.pop(run.uid, None)

    def _sync(self) -> None:
        nodes, lost = self._nodes()
        for run in list(self.pods.values()):
            if run.node in lost and not run.terminating:
                run.terminating = True      # its supervisor stops and reports nothing
                threading.Thread(target=self._lose, args=(run,), daemon=True).start()
        seen = set()
        for node, node_ip in nodes.items():
            pods = self.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
            for obj in pods:
                pod = self.api.sanitize_for_serialization(obj)
                meta = pod["metadata"]
                uid = meta["uid"]
                seen.add(uid)
                run = self.pods.get(uid)
                ann = meta.get("annotations") or {}
                if meta.get("deletionTimestamp"):
                    if run is None:
                        self._force_delete(meta["namespace"], meta["name"], uid)
                    elif not run.terminating:
                        run.terminating = True
                        grace = float(meta.get("deletionGracePeriodSeconds") or 0)
                        threading.Thread(target=self._terminate, args=(run, grace), daemon=True).start()
                    continue
                if run is None:
                    if ANN_EXIT_CODE in ann or ANN_POD_IP in ann or (pod.get("status") or {}).get(
                            "phase") != "Pending":
                        continue   # ran under an earlier agent, or already finished
                    try:
                        self._start(pod, node, node_ip)
                        self.waiting.pop(uid, None)
                    except podspec.NotReady as exc:
                        if self.waiting.get(uid) != str(exc):
                            LOG.info("pod %s/%s waits: %s", meta["namespace"], meta["name"], exc)
                        self.waiting[uid] = str(exc)
                    except podspec.PodSpecError as exc:
                        self._fail_unstartable(pod, str(exc))
                    continue
        for uid, run in list(self.pods.items()):
            if uid not in seen and not run.terminating:  # deleted behind our back (e.g. force delete)
                run.terminating = True
                threading.Thread(target=self._terminate, args=(run, 0.0), daemon=True).start()
        self._refresh_hosts()

    def run(self) -> None:
        self.setup_bridge()
        LOG.info("agent ready: bridge namespace %s, images %s, binary images %s", self.bridge_ns,
                 {k: str(v) for k, v in self.images.items()},
                 {k: str(v) for k, v in self.binary_images.items()})
        while not self.stop_event.is_set():
            try:
                self._sync()
            except Exception:
                LOG.exception("sync failed; retrying")
            self.stop_event.wait(self.poll_s)

    def shutdown(self) -> None:
        """Kill every pod process, remove every namespace and the mount points it created."""
        for run in list(self.pods.values()):
            run.terminating = True
            self._kill_netns(run.netns, mains=[c.proc for c in run.containers if c.proc is not None])
            self._remove_netns(run.netns)
        for line in _ip("netns", "list", check=False).stdout.splitlines():
            name = line.split()[0] if line.strip() else ""
            if name and name.startswith(self.prefix + "-"):
                self._kill_netns(name)
                self._remove_netns(name)
        if self.created_file.exists():
            for path in sorted(set(self.created_file.read_text().split()), key=len, reverse=True):
                try:
                    if os.path.isdir(path):
                        os.rmdir(path)
                    elif os.path.isfile(path) and os.path.getsize(path) == 0:
                        os.remove(path)
                except OSError:
                    pass
        LOG.info("agent stopped: every pod process and namespace removed")


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description="Run the pods of the process-backed nodes.")
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--workdir", required=True, type=Path)
    parser.add_argument("--prefix", required=True, help="name prefix of the network namespaces")
    parser.add_argument("--image", action="append", default=[], metavar="REF=DIR",
                        help="run containers whose image is exactly REF from the built image in DIR "
                             "(rootfs/ and config.json, as tools/images/imagebuild.py unpacks it)")
    parser.add_argument("--binary-image", action="append", default=[], metavar="REPO=DIR",
                        help="map images whose last path segment is REPO to the host binaries in DIR "
                             "(first on the container's PATH; for Go programs built on the host)")
    parser.add_argument("--service-env", action="append", default=[], metavar="NAME=VALUE",
                        help="a variable every container gets, as a kubelet's service variables "
                             "(KUBERNETES_SERVICE_HOST, ...)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    images = {}
    for item in args.image:
        ref, _, image_dir = item.partition("=")
        images[ref] = Path(image_dir)
    binaries = {}
    for item in args.binary_image:
        repo, _, bin_dir = item.partition("=")
        binaries[repo] = Path(bin_dir)
    service_env = dict(item.partition("=")[::2] for item in args.service_env)
    args.workdir.mkdir(parents=True, exist_ok=True)
    agent = Agent(args.kubeconfig, args.workdir, args.prefix, images,
                  binary_images=binaries, service_env=service_env)
    # A parent that blocks these while it waits (``ctr-volcano minicluster up``) passes its mask on.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
    signal.signal(signal.SIGTERM, lambda *_: agent.stop_event.set())
    signal.signal(signal.SIGINT, lambda *_: agent.stop_event.set())
    for ref, image_dir in images.items():
        if not (image_dir / "rootfs").is_dir() or not (image_dir / "config.json").is_file():
            parser.error(f"--image {ref}={image_dir}: no unpacked image there (tools/images/imagebuild.py makes one)")
    try:
        agent.run()
    finally:
        agent.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
