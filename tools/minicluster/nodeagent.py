"""Node agent of the process-backed nodes: runs the pods bound to them as real Linux processes.

kwok keeps the kubelet's bookkeeping for these nodes (a second kwok instance manages only nodes
labelled ``type=process``: node status, and the kubelet API that serves ``pods/log`` from the files
named by ``Logs`` objects). This agent does what kwok cannot, run the container, and reports
through annotations that the stages in ``kwok-process-stages.yaml`` turn into pod status:

* ``minicluster.process/pod-ip``: set when the process has started; the stage makes the pod Running
  with that ``podIP``;
* ``minicluster.process/exit-code`` (+ ``.../message``): set when the process has ended; the stage
  makes the pod Succeeded (0) or Failed with that exit code, which Volcano's policies act on.

Per pod: a network namespace with one veth on a bridge that lives in a namespace of its own (pods
reach each other and nothing else), ``/etc/netns/<ns>/hosts`` generated from the EndpointSlices of
the pod's namespace (kept current while it runs), a private mount namespace set up by
``podinit.py``, the image's Python environment (``image_env.py``), and the pod's stdout/stderr
written in CRI log format to a file a ``Logs`` object points kwok at. Deleting a pod sends SIGTERM
to its process, SIGKILL to every process left in its network namespace after the grace period,
then removes the namespace and force-deletes the pod, as a kubelet confirms a deletion.

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

import image_env  # noqa: E402
import podspec  # noqa: E402

__all__ = ["ANN_POD_IP", "ANN_EXIT_CODE", "ANN_MESSAGE", "ANN_NETNS", "ANN_PID", "PROCESS_NODE_LABEL",
           "Agent", "netns_pids", "main"]

LOG = logging.getLogger("nodeagent")
ANN_POD_IP = "minicluster.process/pod-ip"
ANN_EXIT_CODE = "minicluster.process/exit-code"
ANN_MESSAGE = "minicluster.process/message"
ANN_NETNS = "minicluster.process/netns"
ANN_PID = "minicluster.process/pid"
PROCESS_NODE_LABEL = "type=process"
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


def _cri_stamp() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class PodRun:
    """One pod this agent runs."""

    uid: str
    namespace: str
    name: str
    netns: str
    ip: str
    dir: Path
    log_file: Path
    hostname: str = ""
    subdomain: str = ""
    proc: Optional[subprocess.Popen] = None
    exit_code: Optional[int] = None
    reported: bool = False
    terminating: bool = False
    hosts_text: str = ""
    pumps: List[threading.Thread] = field(default_factory=list)
    log_lock: threading.Lock = field(default_factory=threading.Lock)


class Agent:
    """Polls the API for pods on the process nodes and runs them (see the module docstring)."""

    def __init__(self, kubeconfig: str, workdir: Path, prefix: str, images: Dict[str, Path],
                 context_dir: Path, poll_s: float = 0.25) -> None:
        from kubernetes import client, config

        self.api = config.new_client_from_config(config_file=kubeconfig)
        self.core = client.CoreV1Api(self.api)
        self.co = client.CustomObjectsApi(self.api)
        self.disc = client.DiscoveryV1Api(self.api)
        self.workdir = workdir
        self.prefix = prefix
        self.images = images
        self.context_dir = context_dir
        self.poll_s = poll_s
        self.bridge_ns = f"{prefix}-br"
        self.pods: Dict[str, PodRun] = {}
        self.prepared: Dict[str, image_env.ImageEnv] = {}
        self.counter = 0
        self.stop_event = threading.Event()
        self.lock = threading.Lock()
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

    def _kill_netns(self, name: str, grace_s: float = 0.0, main: Optional[subprocess.Popen] = None) -> None:
        if main is not None and main.poll() is None and grace_s > 0:
            try:
                main.send_signal(signal.SIGTERM)
                main.wait(timeout=grace_s)
            except (ProcessLookupError, subprocess.TimeoutExpired):
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
        if main is not None:
            try:
                main.wait(timeout=5)
            except subprocess.TimeoutExpired:  # pragma: no cover
                LOG.error("pod process %s did not exit after SIGKILL", main.pid)

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

    def _image(self, image: str) -> image_env.ImageEnv:
        repo = image_env.image_repository(image)
        if repo not in self.images:
            raise podspec.PodSpecError(
                f"image {image!r}: no Dockerfile is mapped to {repo!r} on process nodes "
                f"(known: {', '.join(sorted(self.images))})")
        if image not in self.prepared:
            self.prepared[image] = image_env.prepare_image(image, self.images[repo], self.context_dir,
                                                           self.workdir / "rootfs")
        return self.prepared[image]

    # ----------------------------------------------------------------- pod lifecycle
    def _annotate(self, run: PodRun, annotations: Dict[str, str]) -> None:
        from kubernetes import client

        try:
            self.core.patch_namespaced_pod(run.name, run.namespace,
                                           {"metadata": {"annotations": annotations}})
        except client.ApiException as exc:
            if exc.status != 404:
                raise

    def _pump(self, run: PodRun, stream, tag: str) -> None:
        for raw in iter(stream.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip("\n")
            with run.log_lock, open(run.log_file, "a", encoding="utf-8") as fh:
                fh.write(f"{_cri_stamp()} {tag} F {line}\n")
        stream.close()

    def _plan_file(self, run: PodRun, plan: podspec.LaunchPlan, img: image_env.ImageEnv) -> Path:
        binds: List[Dict[str, Any]] = [
            {"source": str(img.base_prefix), "target": str(img.base_prefix), "read_only": True},
            {"source": str(img.venv), "target": str(img.venv), "read_only": True}]
        tmpfs = [{"target": "/root"}]
        for entry in sorted(os.listdir(img.rootfs)):
            tmpfs.append({"target": f"/{entry}", "copy_from": str(img.rootfs / entry)})
        for i, m in enumerate(plan.mounts):
            if m.tmpfs:
                binds.append({"source": "/", "target": m.target, "tmpfs": True})
                continue
            source = m.source
            if m.files or not source:
                vol_dir = run.dir / "volumes" / f"{i}"
                vol_dir.mkdir(parents=True, exist_ok=True)
                for rel, data in m.files:
                    path = vol_dir / rel
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_bytes(data)
                    path.chmod(m.mode)
                vol_dir.chmod(0o777 if not m.files else 0o755)
                source = str(vol_dir)
            if not os.path.exists(source):
                raise podspec.NotReady(f"volume source {source} (mount {m.target}) does not exist")
            binds.append({"source": source, "target": m.target, "read_only": m.read_only})
        doc = {"argv": list(plan.argv), "env": dict(plan.env), "workdir": plan.workdir,
               "uid": plan.uid, "gid": plan.gid, "hostname": plan.hostname, "binds": binds,
               "tmpfs": tmpfs, "created_file": str(self.created_file)}
        path = run.dir / "plan.json"
        path.write_text(json.dumps(doc, indent=1))
        path.chmod(0o600)
        return path

    def _start(self, pod: Dict[str, Any], node_ip: str) -> None:
        meta, spec = pod["metadata"], pod["spec"]
        uid = meta["uid"]
        img = self._image(spec["containers"][0]["image"])
        netns, veth, ip = self._allocate()
        plan = podspec.render_pod(pod, image_env=img.env, image_cmd=img.cmd,
                                  image_workdir=img.workdir, image_user=img.user,
                                  lookups=self._lookups(), pod_ip=ip, node_ip=node_ip)
        run = PodRun(uid=uid, namespace=meta["namespace"], name=meta["name"], netns=netns, ip=ip,
                     dir=self.workdir / "pods" / uid, log_file=self.workdir / "pods" / uid / "container.log",
                     hostname=podspec.pod_hostname(pod), subdomain=spec.get("subdomain") or "")
        run.dir.mkdir(parents=True, exist_ok=True)
        run.log_file.touch()
        plan_file = self._plan_file(run, plan, img)
        self._create_netns(netns, veth, ip)
        self.pods[uid] = run
        etc = Path("/etc/netns") / netns
        etc.mkdir(parents=True, exist_ok=True)
        self._write_hosts(run, [])
        (etc / "resolv.conf").write_text(
            f"search {run.namespace}.svc.cluster.local svc.cluster.local cluster.local\n"
            "nameserver 127.0.0.1\noptions ndots:5 attempts:1 timeout:1\n")
        self._create_logs_object(pod, plan.container, run.log_file)
        run.proc = subprocess.Popen(
            ["ip", "netns", "exec", netns, "unshare", "--uts", "--", sys.executable,
             str(HERE / "podinit.py"), str(plan_file)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
            start_new_session=True, env={"PATH": os.environ.get("PATH", os.defpath)})
        for stream, tag in ((run.proc.stdout, "stdout"), (run.proc.stderr, "stderr")):
            t = threading.Thread(target=self._pump, args=(run, stream, tag), daemon=True)
            t.start()
            run.pumps.append(t)
        LOG.info("pod %s/%s: started pid %s in %s at %s: %s", run.namespace, run.name, run.proc.pid,
                 netns, ip, " ".join(plan.argv))
        self._annotate(run, {ANN_POD_IP: ip, ANN_NETNS: netns, ANN_PID: str(run.proc.pid)})

    def _create_logs_object(self, pod: Dict[str, Any], container: str, log_file: Path) -> None:
        from kubernetes import client

        meta = pod["metadata"]
        body = {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Logs",
                "metadata": {"name": meta["name"], "namespace": meta["namespace"],
                             "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                                                  "uid": meta["uid"]}]},
                "spec": {"logs": [{"containers": [container], "logsFile": str(log_file), "follow": True}]}}
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
        # process only once the log is readable, so a pod that dies at once still has its log read.
        deadline = time.monotonic() + 10
        while True:
            try:
                self.core.read_namespaced_pod_log(meta["name"], meta["namespace"], container=container,
                                                  tail_lines=1)
                return
            except client.ApiException as exc:
                if time.monotonic() > deadline:
                    LOG.warning("pod %s/%s: log not readable through the API yet (%s)", meta["namespace"],
                                meta["name"], exc.status)
                    return
                time.sleep(0.1)

    def _fail_unstartable(self, pod: Dict[str, Any], message: str) -> None:
        meta = pod["metadata"]
        LOG.error("pod %s/%s cannot run: %s", meta["namespace"], meta["name"], message)
        self.core.patch_namespaced_pod(meta["name"], meta["namespace"], {"metadata": {"annotations": {
            ANN_EXIT_CODE: "128", ANN_MESSAGE: message[:1000]}}})

    def _finish(self, run: PodRun) -> None:
        """The main process exited: stop what is left in the pod, report the exit code."""
        code = run.proc.returncode
        run.exit_code = 128 - code if code < 0 else code
        self._kill_netns(run.netns)
        for t in run.pumps:
            t.join(5)
        LOG.info("pod %s/%s: exited with %s", run.namespace, run.name, run.exit_code)
        self._annotate(run, {ANN_EXIT_CODE: str(run.exit_code)})
        run.reported = True

    def _terminate(self, run: PodRun, grace_s: float) -> None:
        try:
            self._kill_netns(run.netns, grace_s=grace_s, main=run.proc)
            for t in run.pumps:
                t.join(5)
            self._remove_netns(run.netns)
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

    def _refresh_hosts(self) -> None:
        namespaces = {r.namespace for r in self.pods.values() if not r.terminating}
        for ns in namespaces:
            peers: List[Tuple[str, str, str]] = []
            for es in self.disc.list_namespaced_endpoint_slice(ns).items:
                svc = (es.metadata.labels or {}).get("kubernetes.io/service-name")
                for ep in es.endpoints or []:
                    if svc and ep.addresses and (ep.hostname or not ep.target_ref):
                        # a pod's own name; or a Service's name for an endpoint that is no pod's
                        peers.append((ep.addresses[0], ep.hostname or "", svc))
            for run in list(self.pods.values()):
                if run.namespace == ns and not run.terminating and run.exit_code is None:
                    self._write_hosts(run, peers)

    # ----------------------------------------------------------------- main loop
    def _nodes(self) -> Dict[str, str]:
        nodes = {}
        for n in self.core.list_node(label_selector=PROCESS_NODE_LABEL).items:
            ip = next((a.address for a in (n.status.addresses or []) if a.type == "InternalIP"), "127.0.0.1")
            nodes[n.metadata.name] = ip
        return nodes

    def _sync(self) -> None:
        nodes = self._nodes()
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
                        self._start(pod, node_ip)
                        self.waiting.pop(uid, None)
                    except podspec.NotReady as exc:
                        if self.waiting.get(uid) != str(exc):
                            LOG.info("pod %s/%s waits: %s", meta["namespace"], meta["name"], exc)
                        self.waiting[uid] = str(exc)
                    except (podspec.PodSpecError, image_env.ImageError) as exc:
                        self._fail_unstartable(pod, str(exc))
                    continue
                if run.proc is not None and run.proc.poll() is not None and not run.reported:
                    self._finish(run)
        for uid, run in list(self.pods.items()):
            if uid not in seen and not run.terminating:  # deleted behind our back (e.g. force delete)
                run.terminating = True
                threading.Thread(target=self._terminate, args=(run, 0.0), daemon=True).start()
        self._refresh_hosts()

    def run(self) -> None:
        self.setup_bridge()
        LOG.info("agent ready: bridge namespace %s, images %s", self.bridge_ns,
                 {k: str(v) for k, v in self.images.items()})
        while not self.stop_event.is_set():
            try:
                self._sync()
            except Exception:
                LOG.exception("sync failed; retrying")
            self.stop_event.wait(self.poll_s)

    def shutdown(self) -> None:
        """Kill every pod process, remove every namespace and the mount points it created."""
        for run in list(self.pods.values()):
            self._kill_netns(run.netns, main=run.proc)
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
    parser.add_argument("--image", action="append", default=[], metavar="REPO=DOCKERFILE",
                        help="map images whose last path segment is REPO to DOCKERFILE")
    parser.add_argument("--context", type=Path, default=HERE.parents[1],
                        help="build context of the Dockerfiles' COPY sources")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    images = {}
    for item in args.image:
        repo, _, dockerfile = item.partition("=")
        images[repo] = Path(dockerfile)
    args.workdir.mkdir(parents=True, exist_ok=True)
    agent = Agent(args.kubeconfig, args.workdir, args.prefix, images, args.context)
    # A parent that blocks these while it waits (``ctr-volcano minicluster up``) passes its mask on.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
    signal.signal(signal.SIGTERM, lambda *_: agent.stop_event.set())
    signal.signal(signal.SIGINT, lambda *_: agent.stop_event.set())
    # Build the images' environments before the first pod arrives (minutes on a cold cache).
    for repo, dockerfile in images.items():
        image_env.build_venv(image_env.parse_dockerfile(dockerfile))
    try:
        agent.run()
    finally:
        agent.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
