"""Run a throw-away Kubernetes + Volcano control plane on loopback, with kwok standing in for nodes.

Why this exists: gang scheduling, queues and Volcano's job lifecycle only mean something when the
real Volcano scheduler and controller decide, and no container engine is available to run kind or
k3s. Every component here is a real binary built from its Go module by ``build.sh`` (etcd,
kube-apiserver, kube-controller-manager for garbage collection, vc-scheduler,
vc-controller-manager, kwok); this module only wires them together:

* certificates and tokens are minted at start (``cryptography``), everything listens on 127.0.0.1
  on free ports, and each process runs in its own session so :meth:`MiniCluster.stop` leaves
  nothing behind;
* the Volcano CRDs are applied before the scheduler starts (it panics without the Queue CRD);
* Volcano's admission webhook (``vc-webhook-manager``) serves with a certificate minted here and is
  registered with the API server (the production install's list of webhooks), so every Job passes
  the real validation and defaulting; kube-scheduler (for native Kubernetes workloads) starts on
  request;
* kwok runs the label-gated stages of ``kwok-stages.yaml`` on the kwok nodes (label ``type=kwok``): a
  bound pod becomes Running, and ends only when a test labels it ``kwok-test/outcome=succeed|fail``
  (optionally after the delay in the ``kwok-test/after`` annotation), so a test decides which pod of
  a gang finishes and how;
* with ``process_nodes=True``, nodes labelled ``type=process`` (:meth:`MiniCluster.add_process_nodes`)
  run their pods as real processes: ``nodeagent.py`` starts them (network and mount namespaces, the
  project's images built from ``dockerfiles/*`` and unpacked by ``tools/images/imagebuild.py`` as the
  containers' root filesystems, or host-built Go binaries for images mapped with ``binary_images``),
  writes their status, and a second kwok instance keeps those nodes Ready and serves their logs;
  the pods reach the API server at ``KUBERNETES_SERVICE_HOST`` (:data:`API_SERVICE_ADDRESS`, a host
  service the serving certificate covers) with their projected service-account token
  (``docs/minicluster.md``).

Stdlib + ``kubernetes`` + ``cryptography`` + PyYAML only, so the pytest fixture, the benchmark and
the ``ctr-volcano minicluster`` verb can all import it from the checkout.
"""
from __future__ import annotations

import atexit
import datetime
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tools/: procgroup.py, shared
import procgroup

__all__ = [
    "HERE", "BUILD_SCRIPT", "OUTCOME_LABEL", "AFTER_ANNOTATION", "MESSAGE_ANNOTATION",
    "EXIT_CODE_ANNOTATION", "ClusterError", "build_binaries", "binaries_dir", "MiniCluster",
    "NodeShape", "DEFAULT_KCM_CONTROLLERS", "VOLCANO_WEBHOOKS", "webhook_configurations",
    "DEFAULT_IMAGES", "image_dirs", "API_SERVICE_ADDRESS", "API_SERVICE_PORT", "SCHEDULER_CONF",
]

HERE = Path(__file__).resolve().parent
BUILD_SCRIPT = HERE / "build.sh"
REPO = HERE.parents[1]
OUTCOME_LABEL = "kwok-test/outcome"
AFTER_ANNOTATION = "kwok-test/after"
MESSAGE_ANNOTATION = "kwok-test/message"
EXIT_CODE_ANNOTATION = "kwok-test/exit-code"
#: vc-scheduler's configuration: the one the product recommends to its users (``deploy/``), so the
#: tier tests what users install (``$CTR_VOLCANO_SCHEDULER_CONF`` names another for an experiment).
SCHEDULER_CONF = REPO / "deploy" / "volcano-scheduler.conf"
ADMIN_TOKEN_USER = "minicluster-admin"
#: Where the process nodes' pods reach the API server (``KUBERNETES_SERVICE_HOST``, port 443): host
#: service 0 on the pod bridge (``hostservice.py``), which the API server's certificate names.
API_SERVICE_ADDRESS = "10.88.0.1"
API_SERVICE_PORT = 443
#: The project's images the process nodes run by default (``dockerfiles/Dockerfile.<name>``): the
#: trainer's, what the Volcano gang needs.
DEFAULT_IMAGES = ("trainer",)
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "vc-scheduler",
            "vc-controller-manager", "kwok", "kube-scheduler", "vc-webhook-manager")
#: kube-controller-manager's controllers: garbage collection (Volcano relies on ownerReferences),
#: namespaces and service accounts; for the process nodes the persistent-volume binder (claims on
#: host-directory volumes), EndpointSlices (their hosts files) and the root-CA publisher (the
#: kube-root-ca.crt ConfigMap every service-account volume projects); for native workloads
#: ReplicaSets and batch Jobs; the pod garbage collector (the pods left bound to a deleted node,
#: :meth:`MiniCluster.lose_node`).
DEFAULT_KCM_CONTROLLERS = ("garbagecollector", "namespace", "serviceaccount", "persistentvolume-binder",
                           "endpointslice", "root-ca-cert-publisher", "replicaset", "job", "podgc")
#: Volcano's admission webhooks as its Helm chart enables them by default
#: (installer/helm/chart/volcano/values.yaml ``custom.enabled_admissions``, v1.15.1), with the rules
#: of its ``templates/webhooks.yaml``: path -> (configuration kind, webhook name, apiGroup, version,
#: resources, operations).
VOLCANO_WEBHOOKS = {
    "/jobs/mutate": ("Mutating", "mutatejob.volcano.sh", "batch.volcano.sh", "v1alpha1", "jobs",
                     ("CREATE",)),
    "/jobs/validate": ("Validating", "validatejob.volcano.sh", "batch.volcano.sh", "v1alpha1", "jobs",
                       ("CREATE", "UPDATE")),
    "/podgroups/validate": ("Validating", "validatepodgroup.volcano.sh", "scheduling.volcano.sh",
                            "v1beta1", "podgroups", ("CREATE",)),
    "/queues/mutate": ("Mutating", "mutatequeue.volcano.sh", "scheduling.volcano.sh", "v1beta1",
                       "queues", ("CREATE",)),
    "/queues/validate": ("Validating", "validatequeue.volcano.sh", "scheduling.volcano.sh", "v1beta1",
                         "queues", ("CREATE", "UPDATE", "DELETE")),
    "/hypernodes/validate": ("Validating", "validatehypernodes.volcano.sh", "topology.volcano.sh",
                             "v1alpha1", "hypernodes", ("CREATE", "UPDATE")),
    "/cronjobs/validate": ("Validating", "validatecronjob.volcano.sh", "batch.volcano.sh", "v1alpha1",
                           "cronjobs", ("CREATE", "UPDATE")),
}


class ClusterError(RuntimeError):
    """A component failed to build or start; the message names it and points at its log."""


def _log(msg: str) -> None:
    print(f"minicluster: {msg}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------------------- build
def binaries_dir() -> Path:
    """The cache directory the pinned binaries are (or will be) built into."""
    return procgroup.build_dir(BUILD_SCRIPT)


def image_dirs(names: Sequence[str], stream: Any = None) -> Dict[str, Path]:
    """The project's images ``names`` (``trainer``, ``component``, ``serving``), built from
    ``dockerfiles/*`` and unpacked if they are not cached (``tools/images/imagebuild.py``): reference ->
    image directory, what :class:`MiniCluster`'s ``images`` takes.

    Raises:
        ClusterError: the images cannot be built here (no root, no buildah or mmdebstrap) or a build
            failed; the message says which and why.
    """
    sys.path.insert(0, str(REPO / "tools" / "images"))
    import imagebuild as images_build

    try:
        built = images_build.build(tuple(names), stream=stream)
    except images_build.ImageBuildError as exc:
        raise ClusterError(f"the process nodes run the project's images, which cannot be built: {exc}") from None
    return {img.ref: img.dir for img in built.values()}


def build_binaries(stream: Any = None) -> Path:
    """Build (or find) the binaries and return their directory.

    Progress and timings go to ``stream`` (default: stderr), line by line, so a long cold build is
    visible in pytest's output with ``-s`` and in CI logs.

    Raises:
        ClusterError: ``go`` is missing or a build step failed (the tail of its output is included).
    """
    if shutil.which("go") is None:
        raise ClusterError("the 'go' tool is not installed; the cluster tier needs Go >= 1.25 "
                           "(install Go, then re-run: tools/minicluster/build.sh)")
    bin_dir = procgroup.run_build_script(BUILD_SCRIPT, ClusterError, stream, grace=5)
    missing = [b for b in BINARIES if not (bin_dir / b).is_file()]
    if missing:
        raise ClusterError(f"build finished but {missing} are missing in {bin_dir}")
    return bin_dir


# --------------------------------------------------------------------------------------- helpers
def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _default_crd_dirs() -> List[Path]:
    """The real Volcano CRD schemas: ``$CTR_VOLCANO_CRD_DIR``, else ``shared/volcano/crd`` beside
    the checkout (and its ``runtime/``), else the ``config/crd`` of the Volcano module the binaries
    were built from (in the Go module cache)."""
    env = os.environ.get("CTR_VOLCANO_CRD_DIR")
    if env:
        return [Path(env), Path(env) / "runtime"]
    shared = REPO.parent / "shared" / "volcano" / "crd"
    if shared.is_dir():
        return [shared, shared / "runtime"]
    try:
        out = subprocess.run(["go", "list", "-m", "-f", "{{.Dir}}", "volcano.sh/volcano"],
                             cwd=HERE / "cluster", capture_output=True, text=True, check=True,
                             env=dict(os.environ, GOTOOLCHAIN="local", GOFLAGS="-mod=mod"))
        module_dir = Path(out.stdout.strip())
    except (OSError, subprocess.CalledProcessError):
        return [shared, shared / "runtime"]
    return [module_dir / "config" / "crd" / "volcano" / "bases"]


def _kwok_crd_file(plural: str) -> Path:
    """A CRD of kwok (``kwok.x-k8s.io_<plural>.yaml``) from the kwok module the binary was built
    from (the Go module cache holds it after ``build.sh``)."""
    try:
        cache = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True,
                               check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as exc:
        raise ClusterError(f"cannot locate the Go module cache for kwok's CRDs: {exc}") from None
    version = re.search(r'KWOK_VERSION="([^"]+)"', BUILD_SCRIPT.read_text()).group(1)
    path = Path(cache) / "sigs.k8s.io" / f"kwok@{version}" / "kustomize" / "crd" / "bases" / \
        f"kwok.x-k8s.io_{plural}.yaml"
    if not path.is_file():
        raise ClusterError(f"{path} is missing; run tools/minicluster/build.sh (it downloads kwok)")
    return path


def _write_certs(pki: Path) -> Dict[str, Path]:
    """Mint a CA, a serving certificate for 127.0.0.1 and a service-account key pair."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    pki.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    not_before, not_after = now - datetime.timedelta(hours=1), now + datetime.timedelta(days=2)

    def pem_key(key) -> bytes:
        return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "minicluster-ca")])
    ca_cert = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
               .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(not_before).not_valid_after(not_after)
               .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                            content_commitment=False, key_encipherment=False,
                                            data_encipherment=False, key_agreement=False,
                                            encipher_only=False, decipher_only=False), critical=True)
               .sign(ca_key, hashes.SHA256()))
    srv_key = ec.generate_private_key(ec.SECP256R1())
    srv_cert = (x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
                .issuer_name(ca_name).public_key(srv_key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(not_before).not_valid_after(not_after)
                .add_extension(x509.SubjectAlternativeName([
                    x509.DNSName("localhost"), x509.DNSName("kubernetes"),
                    x509.DNSName("kubernetes.default"), x509.DNSName("kubernetes.default.svc"),
                    x509.DNSName("kubernetes.default.svc.cluster.local"),
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    x509.IPAddress(ipaddress.ip_address("10.0.0.1")),
                    # what the process nodes' pods dial (KUBERNETES_SERVICE_HOST)
                    x509.IPAddress(ipaddress.ip_address(API_SERVICE_ADDRESS))]), critical=False)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
                .sign(ca_key, hashes.SHA256()))
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    paths = {"ca": pki / "ca.crt", "ca_key": pki / "ca.key", "server": pki / "apiserver.crt",
             "server_key": pki / "apiserver.key", "sa_key": pki / "sa.key", "sa_pub": pki / "sa.pub"}
    paths["ca"].write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    paths["ca_key"].write_bytes(pem_key(ca_key))
    paths["server"].write_bytes(srv_cert.public_bytes(serialization.Encoding.PEM))
    paths["server_key"].write_bytes(pem_key(srv_key))
    paths["sa_key"].write_bytes(pem_key(sa_key))
    paths["sa_pub"].write_bytes(sa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    for key in ("ca_key", "server_key", "sa_key"):
        paths[key].chmod(0o600)
    return paths


def _write_serving_cert(pki: Path, name: str) -> Tuple[Path, Path]:
    """A serving certificate for 127.0.0.1 signed by the cluster CA (``pki/ca.*``)."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    ca_cert = x509.load_pem_x509_certificate((pki / "ca.crt").read_bytes())
    ca_key = serialization.load_pem_private_key((pki / "ca.key").read_bytes(), password=None)
    now = datetime.datetime.now(datetime.timezone.utc)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(ca_cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    crt, key_path = pki / f"{name}.crt", pki / f"{name}.key"
    crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    key_path.chmod(0o600)
    return crt, key_path


def webhook_configurations(base_url: str, ca_pem: bytes,
                           paths: Iterable[str] = tuple(VOLCANO_WEBHOOKS)) -> List[Dict[str, Any]]:
    """Volcano's Mutating/ValidatingWebhookConfigurations, pointing at ``base_url`` (not a Service).

    Named as vc-webhook-manager expects (``volcano-admission-service-<path with - for />``): it
    waits for each enabled path's configuration and fills in its CA bundle.
    """
    import base64

    out = []
    for path in paths:
        kind, hook, group, version, resource, ops = VOLCANO_WEBHOOKS[path]
        webhook: Dict[str, Any] = {
            "name": hook, "admissionReviewVersions": ["v1"], "sideEffects": "NoneOnDryRun",
            "failurePolicy": "Fail", "matchPolicy": "Equivalent", "timeoutSeconds": 10,
            "clientConfig": {"url": base_url + path, "caBundle": base64.b64encode(ca_pem).decode()},
            "namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name",
                                                        "operator": "NotIn", "values": ["kube-system"]}]},
            "rules": [{"apiGroups": [group], "apiVersions": [version], "operations": list(ops),
                       "resources": [resource], "scope": "*"}],
        }
        if kind == "Mutating":
            webhook["reinvocationPolicy"] = "Never"
        out.append({"apiVersion": "admissionregistration.k8s.io/v1", "kind": f"{kind}WebhookConfiguration",
                    "metadata": {"name": "volcano-admission-service" + path.replace("/", "-")},
                    "webhooks": [webhook]})
    return out


def write_kubeconfig(path: Path, server: str, ca_file: Path, token: str, user: str = "user",
                     namespace: Optional[str] = None) -> Path:
    """Write a token kubeconfig (JSON is valid YAML, so no YAML text is templated)."""
    context: Dict[str, Any] = {"cluster": "minicluster", "user": user}
    if namespace:
        context["namespace"] = namespace
    doc = {
        "apiVersion": "v1", "kind": "Config", "preferences": {},
        "clusters": [{"name": "minicluster",
                      "cluster": {"server": server, "certificate-authority": str(ca_file)}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "minicluster", "context": context}],
        "current-context": "minicluster",
    }
    path.write_text(json.dumps(doc, indent=2))
    path.chmod(0o600)
    return path


@dataclass(frozen=True)
class NodeShape:
    """Allocatable resources of one kwok node."""

    cpu: str = "4"
    memory: str = "16Gi"
    pods: int = 110
    labels: Dict[str, str] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------- cluster
class MiniCluster:
    """etcd + kube-apiserver + kube-controller-manager + Volcano + kwok, all on 127.0.0.1.

    Typical use::

        cluster = MiniCluster(build_binaries())
        try:
            cluster.start()
            cluster.add_nodes(4, NodeShape(cpu="2"))
            ...  # cluster.kubeconfig is an admin kubeconfig
        finally:
            cluster.stop()

    Args:
        bin_dir: directory holding the binaries from ``build.sh``.
        workdir: where certificates, data and logs go (a fresh temp dir by default; removed by
            :meth:`stop` unless ``keep_workdir``).
        schedule_period: vc-scheduler's ``--schedule-period``.
        kube_controller_manager: run KCM's garbage-collector, namespace and service-account
            controllers (Volcano relies on ownerReference garbage collection for a deleted Job's
            pods and PodGroup).
        kcm_controllers: the controllers KCM runs (default :data:`DEFAULT_KCM_CONTROLLERS`).
        admission_webhook: run Volcano's admission webhook and register it (as a production
            install does), so Jobs get the real validation and defaulting.
        kube_scheduler: also run the default kube-scheduler (for native ReplicaSets and Jobs;
            :meth:`start_kube_scheduler` starts it later).
        process_nodes: also run the node agent and the second kwok instance, so nodes added with
            :meth:`add_process_nodes` run real processes.
        images: for process nodes: image reference -> its unpacked image directory
            (:func:`image_dirs`; default: :data:`DEFAULT_IMAGES`, built at :meth:`start` if needed).
        binary_images: for process nodes: image repository name -> a directory of host binaries
            the container runs (Go programs' images: Argo's executor, KFP's driver and launcher).
    """

    def __init__(self, bin_dir: Path, workdir: Optional[Path] = None, *,
                 schedule_period: str = "1s", kube_controller_manager: bool = True,
                 crd_dirs: Optional[Sequence[Path]] = None, keep_workdir: bool = False,
                 kcm_controllers: Sequence[str] = DEFAULT_KCM_CONTROLLERS,
                 admission_webhook: bool = True, kube_scheduler: bool = False,
                 process_nodes: bool = False, images: Optional[Dict[str, Path]] = None,
                 binary_images: Optional[Dict[str, Path]] = None) -> None:
        self.bin_dir = Path(bin_dir)
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="minicluster-"))
        self.keep_workdir = keep_workdir
        self.schedule_period = schedule_period
        self.kube_controller_manager = kube_controller_manager
        self.kcm_controllers = tuple(kcm_controllers)
        self.admission_webhook = admission_webhook
        self.kube_scheduler = kube_scheduler
        self.webhook_url = ""
        self.crd_dirs = list(crd_dirs) if crd_dirs else _default_crd_dirs()
        self.procs: Dict[str, subprocess.Popen] = {}
        self.logs: Dict[str, Path] = {}
        self.admin_token = os.urandom(16).hex()
        self.api_port = 0
        self.server = ""
        self.kubeconfig = self.workdir / "admin.kubeconfig"
        self.pki: Dict[str, Path] = {}
        self._api_client = None
        self._stopped = False
        self.timings: Dict[str, float] = {}
        self.process_nodes = process_nodes
        self.images = dict(images) if images is not None else None
        self.binary_images = dict(binary_images or {})
        #: prefix of this cluster's network namespaces (unique per cluster on the machine)
        self.netns_prefix = f"mc{os.getpid() % 0xffff:x}{os.urandom(2).hex()}"
        #: host services given to the pods (:meth:`host_service`), stopped before the node agent
        self.host_services: List[Any] = []

    # ------------------------------------------------------------------ lifecycle
    def start(self, timeout: float = 180.0) -> "MiniCluster":
        """Start every component and wait until Volcano's default queue is Open."""
        atexit.register(self.stop)
        t0 = time.monotonic()
        skip = {"kube-controller-manager": not self.kube_controller_manager,
                "vc-webhook-manager": not self.admission_webhook, "kube-scheduler": not self.kube_scheduler}
        for b in BINARIES:
            if skip.get(b):
                continue
            if not (self.bin_dir / b).is_file():
                raise ClusterError(f"{b} is missing in {self.bin_dir}; run tools/minicluster/build.sh")
        (self.workdir / "logs").mkdir(parents=True, exist_ok=True)
        if self.process_nodes and self.images is None:
            self.images = image_dirs(DEFAULT_IMAGES, stream=sys.stderr)   # minutes when not cached
        self.pki = _write_certs(self.workdir / "pki")
        deadline = time.monotonic() + timeout
        self._start_etcd(deadline)
        self._start_apiserver(deadline)
        self.timings["apiserver_ready_s"] = time.monotonic() - t0
        self._apply_crds(deadline)
        if self.kube_controller_manager:
            self._start_kcm()
        if self.admission_webhook:
            self._start_webhook(deadline)
        if self.kube_scheduler:
            self.start_kube_scheduler()
        self._start_volcano()
        self._start_kwok()
        if self.process_nodes:
            self._start_process_nodes(deadline)
        self._wait_default_queue(deadline)
        self.timings["start_s"] = time.monotonic() - t0
        _log(f"cluster up in {self.timings['start_s']:.1f}s at {self.server} "
             f"(KUBECONFIG={self.kubeconfig})")
        return self

    def stop(self) -> None:
        """Stop every process (reverse start order) and remove the work dir unless kept."""
        if self._stopped:
            return
        self._stopped = True
        for svc in list(self.host_services):
            svc.stop()
        self.host_services.clear()
        for name in reversed(list(self.procs)):
            # the agent kills every pod process and removes the namespaces on SIGTERM
            procgroup.kill_group(self.procs[name], grace=60 if name == "nodeagent" else 10)
        left_ns = self.process_namespaces()
        if left_ns:  # pragma: no cover - reported, then removed
            _log(f"network namespaces left by the node agent (removing): {left_ns}")
            for ns in left_ns:
                for pid in subprocess.run(["ip", "netns", "pids", ns], capture_output=True,
                                          text=True).stdout.split():
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                subprocess.run(["ip", "netns", "del", ns], capture_output=True)
                shutil.rmtree(f"/etc/netns/{ns}", ignore_errors=True)
        left = [n for n, p in self.procs.items() if p.poll() is None]
        if left:  # pragma: no cover - reported, never silently ignored
            _log(f"processes still alive after stop: {left}")
        if self._api_client is not None:
            try:
                self._api_client.close()
            except Exception:  # closing a pool of a dead server
                pass
        if self._own_workdir and not self.keep_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
        try:
            atexit.unregister(self.stop)
        except Exception:
            pass

    def alive(self) -> Dict[str, bool]:
        """Which component processes are still running."""
        return {name: proc.poll() is None for name, proc in self.procs.items()}

    def pids(self) -> List[int]:
        return [p.pid for p in self.procs.values()]

    def log_tail(self, name: str, lines: int = 30) -> str:
        path = self.logs.get(name)
        if not path or not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    # ------------------------------------------------------------------ processes
    def process_namespaces(self) -> List[str]:
        """This cluster's network namespaces that still exist (pods' and the bridge's)."""
        if not self.process_nodes:
            return []
        out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        return [line.split()[0] for line in out.splitlines()
                if line.strip() and line.split()[0].startswith(self.netns_prefix + "-")]

    def _spawn(self, name: str, args: List[str], env: Optional[Dict[str, str]] = None,
               executable: Optional[str] = None, append: bool = False) -> None:
        log = self.workdir / "logs" / f"{name}.log"
        self.logs[name] = log
        full_env = dict(os.environ)
        for var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "KUBECONFIG"):
            full_env.pop(var, None)
        full_env["NO_PROXY"] = "127.0.0.1,localhost"
        full_env.update(env or {})
        with open(log, "ab" if append else "wb") as fh:
            self.procs[name] = subprocess.Popen(
                [executable or str(self.bin_dir / args[0])] + args[1:], stdout=fh, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, cwd=self.workdir, env=full_env, start_new_session=True)

    def _check_alive(self, name: str) -> None:
        proc = self.procs[name]
        if proc.poll() is not None:
            raise ClusterError(f"{name} exited with {proc.returncode}; log {self.logs[name]}:\n"
                               + self.log_tail(name))

    def _wait(self, what: str, probe: Callable[[], bool], deadline: float, owner: str,
              interval: float = 0.2) -> None:
        while True:
            self._check_alive(owner)
            try:
                if probe():
                    return
            except Exception:  # not ready yet
                pass
            if time.monotonic() > deadline:
                raise ClusterError(f"timed out waiting for {what}; log {self.logs[owner]}:\n"
                                   + self.log_tail(owner))
            time.sleep(interval)

    def _start_etcd(self, deadline: float) -> None:
        client, peer = _free_port(), _free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        data = self.workdir / "etcd"
        self._spawn("etcd", [
            "etcd", "--name=minicluster", f"--data-dir={data}",
            f"--listen-client-urls={self.etcd_url}", f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-cluster=minicluster=http://127.0.0.1:{peer}",
            "--unsafe-no-fsync=true", "--log-level=warn", "--quota-backend-bytes=2147483648",
        ])

        def healthy() -> bool:
            with urllib.request.urlopen(self.etcd_url + "/health", timeout=2) as resp:
                return json.loads(resp.read()).get("health") == "true"

        self._wait("etcd /health", healthy, deadline, "etcd")

    def _start_apiserver(self, deadline: float) -> None:
        self.api_port = _free_port()
        self.server = f"https://127.0.0.1:{self.api_port}"
        tokens = self.workdir / "pki" / "tokens.csv"
        tokens.write_text(f'{self.admin_token},{ADMIN_TOKEN_USER},{ADMIN_TOKEN_USER},"system:masters"\n')
        tokens.chmod(0o600)
        # TaintNodesByCondition taints every new Node not-ready; the node-lifecycle controller that
        # would lift it is not run (kwok nodes have no heartbeat to watch), so the plugin is off.
        admission_off = ["TaintNodesByCondition"]
        if not self.kube_controller_manager:
            admission_off.append("ServiceAccount")
        self._apiserver_args = [
            "kube-apiserver",
            f"--etcd-servers={self.etcd_url}", "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1", f"--secure-port={self.api_port}",
            f"--tls-cert-file={self.pki['server']}", f"--tls-private-key-file={self.pki['server_key']}",
            f"--client-ca-file={self.pki['ca']}", f"--token-auth-file={tokens}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={self.pki['sa_pub']}",
            f"--service-account-signing-key-file={self.pki['sa_key']}",
            "--service-cluster-ip-range=10.0.0.0/24", "--authorization-mode=RBAC",
            "--allow-privileged=true", "--endpoint-reconciler-type=none",
            "--enable-priority-and-fairness=false", "--profiling=false",
            # Reach "kubelets" (kwok) only at their InternalIP (127.0.0.1): never resolve node names.
            "--kubelet-preferred-address-types=InternalIP",
            f"--cert-dir={self.workdir / 'pki'}",
            "--disable-admission-plugins=" + ",".join(admission_off),
        ]
        self._spawn("kube-apiserver", self._apiserver_args)
        write_kubeconfig(self.kubeconfig, self.server, self.pki["ca"], self.admin_token,
                         user=ADMIN_TOKEN_USER)
        self._wait("kube-apiserver /readyz", self._apiserver_ready, deadline, "kube-apiserver", interval=0.3)

    def _apiserver_ready(self) -> bool:
        ctx = ssl.create_default_context(cafile=str(self.pki["ca"]))
        req = urllib.request.Request(self.server + "/readyz",
                                     headers={"Authorization": f"Bearer {self.admin_token}"})
        with urllib.request.urlopen(req, timeout=3, context=ctx) as resp:
            return resp.status == 200

    def restart_apiserver(self, down_s: float = 0.0, timeout: float = 120.0) -> float:
        """Kill kube-apiserver (SIGTERM, SIGKILL after 10 s), keep it down ``down_s``, start it
        again on the same port, etcd and certificates, and wait for ``/readyz``; returns the seconds
        from the kill to ready. Every other component and client reconnects on its own."""
        t0 = time.monotonic()
        procgroup.kill_group(self.procs["kube-apiserver"], grace=10)
        time.sleep(down_s)
        self._spawn("kube-apiserver", self._apiserver_args, append=True)
        self._wait("kube-apiserver /readyz after a restart", self._apiserver_ready,
                   time.monotonic() + timeout, "kube-apiserver", interval=0.3)
        took = time.monotonic() - t0
        _log(f"kube-apiserver restarted on {self.server} in {took:.1f}s")
        return took

    def _start_kcm(self) -> None:
        self._spawn("kube-controller-manager", [
            "kube-controller-manager", f"--kubeconfig={self.kubeconfig}",
            "--controllers=" + ",".join(self.kcm_controllers), f"--root-ca-file={self.pki['ca']}",
            "--leader-elect=false", "--secure-port=0", "--bind-address=127.0.0.1",
            "--use-service-account-credentials=false", "--concurrent-gc-syncs=5",
        ])

    def start_kube_scheduler(self) -> None:
        """Start the default kube-scheduler (``default-scheduler``), which places pods one by one."""
        if "kube-scheduler" in self.procs:
            return
        self._spawn("kube-scheduler", [
            "kube-scheduler", f"--kubeconfig={self.kubeconfig}",
            f"--authentication-kubeconfig={self.kubeconfig}", f"--authorization-kubeconfig={self.kubeconfig}",
            "--leader-elect=false", "--bind-address=127.0.0.1", f"--secure-port={_free_port()}",
            "--kube-api-qps=200", "--kube-api-burst=400",
        ])

    def _start_webhook(self, deadline: float) -> None:
        """Serve Volcano's admission webhook on loopback and register it before anything submits.

        The configurations exist before vc-webhook-manager starts (it waits for them and only fills
        in their CA bundle), and it answers before vc-scheduler starts (the scheduler creates the
        default queue, which the queue webhooks admit; with ``failurePolicy: Fail`` nothing passes
        without them).
        """
        from kubernetes import client
        port = _free_port()
        self.webhook_url = f"https://127.0.0.1:{port}"
        crt, key = _write_serving_cert(self.workdir / "pki", "vc-webhook")
        api = client.AdmissionregistrationV1Api(self.api_client())
        for conf in webhook_configurations(self.webhook_url, self.pki["ca"].read_bytes()):
            if conf["kind"] == "MutatingWebhookConfiguration":
                api.create_mutating_webhook_configuration(conf)
            else:
                api.create_validating_webhook_configuration(conf)
        self._spawn("vc-webhook-manager", [
            "vc-webhook-manager", f"--kubeconfig={self.kubeconfig}", f"--tls-cert-file={crt}",
            f"--tls-private-key-file={key}", f"--ca-cert-file={self.pki['ca']}",
            f"--webhook-url={self.webhook_url}", "--listen-address=127.0.0.1", f"--port={port}",
            "--enabled-admission=" + ",".join(VOLCANO_WEBHOOKS), "--scheduler-name=volcano",
            f"--healthz-address=127.0.0.1:{_free_port()}", "--kube-api-qps=200", "--kube-api-burst=400",
            "-v=2",
        ])
        ctx = ssl.create_default_context(cafile=str(self.pki["ca"]))

        def serving() -> bool:
            try:
                urllib.request.urlopen(self.webhook_url + "/jobs/validate", timeout=2, context=ctx)
            except urllib.error.HTTPError:
                return True  # TLS handshake done, the server answered (a GET without a review)
            return True

        self._wait("vc-webhook-manager serving TLS", serving, deadline, "vc-webhook-manager", interval=0.3)

    def _start_volcano(self) -> None:
        conf = Path(os.environ.get("CTR_VOLCANO_SCHEDULER_CONF") or SCHEDULER_CONF)
        self._spawn("vc-scheduler", [
            "vc-scheduler", f"--kubeconfig={self.kubeconfig}", "--scheduler-name=volcano",
            # a conf it cannot read or parse stops it, instead of Volcano's silent fallback to its default
            f"--scheduler-conf={conf}", "--disable-default-scheduler-config", "--leader-elect=false",
            f"--schedule-period={self.schedule_period}",
            f"--listen-address=127.0.0.1:{_free_port()}", f"--healthz-address=127.0.0.1:{_free_port()}",
            "--kube-api-qps=200", "--kube-api-burst=400", "-v=2",
        ])
        self._spawn("vc-controller-manager", [
            "vc-controller-manager", f"--kubeconfig={self.kubeconfig}", "--scheduler-name=volcano",
            "--leader-elect=false",
            "--controllers=job-controller,pg-controller,queue-controller,gc-controller",
            f"--listen-address=127.0.0.1:{_free_port()}", f"--healthz-address=127.0.0.1:{_free_port()}",
            "--kube-api-qps=200", "--kube-api-burst=400", "-v=2",
        ])

    def _start_kwok(self) -> None:
        """kwok manages every Node and serves the kubelet API (logs) on a loopback port.

        Nodes advertise 127.0.0.1 and kwok's port, and kube-apiserver only dials InternalIP, so
        ``pods/log`` requests stay on loopback; every container's log is one fixed line.
        """
        home = self.workdir / "kwok-home"
        home.mkdir(exist_ok=True)
        port = _free_port()
        self.kwok_url = f"http://127.0.0.1:{port}"
        log_file = self.workdir / "kwok-container.log"
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        log_file.write_text(f"{stamp} stdout F kwok: simulated container, no process runs here\n")
        logs_conf = self.workdir / "kwok-logs.json"
        logs_conf.write_text(json.dumps({
            "apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "ClusterLogs",
            "metadata": {"name": "all-containers"},
            "spec": {"selector": {}, "logs": [{"logsFile": str(log_file)}]}}))
        self._spawn("kwok", [
            "kwok", f"--kubeconfig={self.kubeconfig}", f"--config={HERE / 'kwok-node-stage.yaml'}",
            f"--config={HERE / 'kwok-stages.yaml'}", f"--config={logs_conf}",
            "--manage-nodes-with-label-selector=type=kwok", "--node-ip=127.0.0.1",
            f"--node-port={port}", f"--server-address=127.0.0.1:{port}", "--cidr=10.240.0.0/16",
            "--node-lease-duration-seconds=0",
        ], env={"HOME": str(home)})

    def _start_process_nodes(self, deadline: float) -> None:
        """The second kwok (nodes labelled ``type=process``, their pods' status and logs) and the
        node agent that runs those pods."""
        import yaml
        from kubernetes import client

        ext = client.ApiextensionsV1Api(self.api_client())
        for plural in ("logs", "execs"):
            crd = yaml.safe_load(_kwok_crd_file(plural).read_text())
            ext.create_custom_resource_definition(crd)
            self._wait(f"kwok's {plural} CRD Established", lambda name=crd["metadata"]["name"]: any(
                c.type == "Established" and c.status == "True"
                for c in (ext.read_custom_resource_definition(name).status.conditions or [])),
                deadline, "kube-apiserver")
        home = self.workdir / "kwok-process-home"
        home.mkdir(exist_ok=True)
        port = _free_port()
        # Node stages only: the pods' status is the node agent's (no pod stage, so kwok leaves
        # them alone).
        self._spawn("kwok-process", [
            "kwok", f"--kubeconfig={self.kubeconfig}", f"--config={HERE / 'kwok-node-stage.yaml'}",
            # Exec: only for the pods the agent publishes an Exec object for (Argo's, whose
            # containers' kill commands it names); see nodeagent.py
            "--enable-crds=Logs,Exec",
            "--manage-nodes-with-label-selector=type=process", "--node-ip=127.0.0.1",
            f"--node-port={port}", f"--server-address=127.0.0.1:{port}", "--cidr=10.241.0.0/16",
            "--node-lease-duration-seconds=0",
        ], env={"HOME": str(home)})
        agent_dir = self.workdir / "nodeagent"
        args = ["nodeagent", str(HERE / "nodeagent.py"), f"--kubeconfig={self.kubeconfig}",
                f"--workdir={agent_dir}", f"--prefix={self.netns_prefix}"]
        args += [f"--image={ref}={path}" for ref, path in sorted((self.images or {}).items())]
        args += [f"--binary-image={repo}={path}" for repo, path in sorted(self.binary_images.items())]
        port = str(API_SERVICE_PORT)
        args += [f"--service-env={k}={v}" for k, v in (
            ("KUBERNETES_SERVICE_HOST", API_SERVICE_ADDRESS), ("KUBERNETES_SERVICE_PORT", port),
            ("KUBERNETES_SERVICE_PORT_HTTPS", port), ("KUBERNETES_PORT", f"tcp://{API_SERVICE_ADDRESS}:{port}"))]
        self._spawn("nodeagent", args, executable=sys.executable)
        self._wait("the node agent (its bridge namespace)",
                   lambda: "agent ready" in self.logs["nodeagent"].read_text(errors="replace"),
                   deadline, "nodeagent", interval=0.5)
        # The pods' route to the API server: host service 0, without a Service object (the
        # ``kubernetes`` Service exists; pods dial the address, as a kubelet's variables say).
        if str(HERE) not in sys.path:
            sys.path.insert(0, str(HERE))
        import hostservice

        api_svc = hostservice.HostService(bridge_ns=f"{self.netns_prefix}-br", netns=f"{self.netns_prefix}-s0",
                                          index=0, target_port=self.api_port, port=API_SERVICE_PORT)
        if api_svc.address != API_SERVICE_ADDRESS:  # pragma: no cover - the two constants agree
            raise ClusterError(f"host service 0 is at {api_svc.address}, not {API_SERVICE_ADDRESS}")
        api_svc.start()
        self.host_services.append(api_svc)

    # ------------------------------------------------------------------ API objects
    def api_client(self):
        """A ``kubernetes.client.ApiClient`` for the admin kubeconfig (cached)."""
        if self._api_client is None:
            from kubernetes import config as kconfig
            self._api_client = kconfig.new_client_from_config(config_file=str(self.kubeconfig))
        return self._api_client

    def _apply_crds(self, deadline: float) -> None:
        import yaml
        from kubernetes import client
        ext = client.ApiextensionsV1Api(self.api_client())
        names = []
        for d in self.crd_dirs:
            if not d.is_dir():
                if d.name == "runtime":
                    continue
                raise ClusterError(f"Volcano CRD directory {d} is missing; set CTR_VOLCANO_CRD_DIR "
                                   "to the directory holding batch.volcano.sh_jobs.yaml")
            for path in sorted(d.glob("*.yaml")):
                for doc in yaml.safe_load_all(path.read_text()):
                    if not doc or doc.get("kind") != "CustomResourceDefinition":
                        continue
                    ext.create_custom_resource_definition(doc)
                    names.append(doc["metadata"]["name"])
        if not any(n.startswith("queues.") for n in names):
            raise ClusterError(f"no Queue CRD found in {self.crd_dirs}")

        def established() -> bool:
            for n in names:
                crd = ext.read_custom_resource_definition(n)
                conds = {c.type: c.status for c in (crd.status.conditions or [])}
                if conds.get("Established") != "True":
                    return False
            return True

        self._wait("Volcano CRDs Established", established, deadline, "kube-apiserver")
        self.crd_names = names

    def _wait_default_queue(self, deadline: float) -> None:
        from kubernetes import client
        co = client.CustomObjectsApi(self.api_client())

        def open_queue() -> bool:
            q = co.get_cluster_custom_object("scheduling.volcano.sh", "v1beta1", "queues", "default")
            return (q.get("status") or {}).get("state") == "Open"

        for name in ("vc-controller-manager", "kwok"):
            self._check_alive(name)
        self._wait("queue 'default' Open (vc-scheduler creates it, the queue controller opens it)",
                   open_queue, deadline, "vc-scheduler", interval=0.5)
        self._check_alive("vc-controller-manager")

    def add_nodes(self, count: int, shape: NodeShape = NodeShape(), prefix: str = "kwok-node",
                  start: int = 0, wait: bool = True, timeout: float = 60.0,
                  node_type: str = "kwok") -> List[str]:
        """Create ``count`` kwok nodes and (by default) wait until they are Ready.

        Returns:
            The node names, ``<prefix>-<i>``.
        """
        from kubernetes import client
        core = client.CoreV1Api(self.api_client())
        names = []
        for i in range(start, start + count):
            name = f"{prefix}-{i}"
            alloc = {"cpu": shape.cpu, "memory": shape.memory, "pods": str(shape.pods)}
            labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                      **shape.labels, "type": node_type}
            body = {"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": name, "labels": labels,
                                 "annotations": {"kwok.x-k8s.io/node": "fake"}},
                    "status": {"allocatable": alloc, "capacity": alloc}}
            core.create_node(body)
            names.append(name)
        if wait:
            deadline = time.monotonic() + timeout

            def all_ready() -> bool:
                ready = 0
                for n in core.list_node().items:
                    if n.metadata.name in names and any(
                            c.type == "Ready" and c.status == "True" for c in (n.status.conditions or [])):
                        ready += 1
                return ready == len(names)

            self._wait(f"{count} {node_type} nodes Ready", all_ready, deadline,
                       "kwok" if node_type == "kwok" else "kwok-process", interval=0.3)
        return names

    def add_process_nodes(self, count: int, shape: NodeShape = NodeShape(), prefix: str = "proc-node",
                          start: int = 0, timeout: float = 60.0) -> List[str]:
        """Create ``count`` process-backed nodes (label ``type=process``) and wait until Ready.

        Their pods run as real processes (needs ``process_nodes=True``).
        """
        if not self.process_nodes:
            raise ClusterError("this cluster was started without process_nodes=True")
        return self.add_nodes(count, shape, prefix=prefix, start=start, timeout=timeout,
                              node_type="process")

    def lose_node(self, name: str, not_ready_s: float = 5.0) -> None:
        """Lose a process node as a machine is lost.

        Its kubelet goes (relabelled ``type=lost``: the process nodes' kwok stops keeping it Ready,
        the node agent kills its pods' processes and writes nothing more for them). What the node
        lifecycle controller then does is done here, as it would be done (this tier runs no node
        heartbeats for it to watch): the Ready condition becomes Unknown and the node is tainted
        unreachable, so nothing new is placed on it; ``not_ready_s`` later the Node is deleted, as a
        cloud's node controller deletes a machine that is gone. kube-controller-manager's own pod
        garbage collector then deletes the pods still bound to it (after its 40 s quarantine), which
        is the event Volcano acts on (``PodEvicted``)."""
        from kubernetes import client

        core = client.CoreV1Api(self.api_client())
        core.patch_node(name, {"metadata": {"labels": {"type": "lost"}}})
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        core.patch_node_status(name, {"status": {"conditions": [{
            "type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
            "message": "Kubelet stopped posting node status.", "lastTransitionTime": now}]}})
        core.patch_node(name, {"spec": {"taints": [
            {"key": "node.kubernetes.io/unreachable", "effect": effect, "timeAdded": now}
            for effect in ("NoSchedule", "NoExecute")]}})
        _log(f"node {name} lost: NotReady (Unknown), tainted unreachable; deleted in {not_ready_s:.0f}s")
        time.sleep(not_ready_s)
        self.delete_nodes([name])

    def host_service(self, name: str, namespace: str, target_port: int,
                     port: Optional[int] = None) -> Any:
        """Serve ``127.0.0.1:target_port`` of the host to the process nodes' pods.

        The pods reach it at ``<name>.<namespace>.svc.cluster.local:<port>`` (a selector-less
        Service and its EndpointSlice; the node agent writes the name into their ``/etc/hosts``),
        or at the returned service's ``address``; see ``hostservice.py``. Stopped by
        :meth:`HostService.stop <hostservice.HostService.stop>` or at the latest by :meth:`stop`.

        Returns:
            The running :class:`hostservice.HostService` (``host``, ``address``, ``port``, ``url``).
        """
        from kubernetes import client

        if str(HERE) not in sys.path:
            sys.path.insert(0, str(HERE))
        import hostservice

        if not self.process_nodes:
            raise ClusterError("this cluster was started without process_nodes=True")
        used = {s.index for s in self.host_services}
        index = next(i for i in range(256) if i not in used)
        svc = hostservice.HostService(bridge_ns=f"{self.netns_prefix}-br", netns=f"{self.netns_prefix}-s{index}",
                                      index=index, target_port=target_port, port=port or target_port,
                                      host=hostservice.service_host(name, namespace))
        svc.start()
        self.host_services.append(svc)
        svc.on_stop = lambda: self.host_services.remove(svc) if svc in self.host_services else None
        api = self.api_client()
        service, slice_ = hostservice.service_objects(name, namespace, svc.address, svc.port)
        try:
            client.CoreV1Api(api).create_namespaced_service(namespace, service)
            client.DiscoveryV1Api(api).create_namespaced_endpoint_slice(namespace, slice_)
        except BaseException:
            svc.stop()
            raise
        return svc

    def create_host_volume(self, name: str, path: Path, claim_namespace: str, claim_name: str,
                           size: str = "20Gi") -> Dict[str, Any]:
        """A ReadWriteMany ``hostPath`` PersistentVolume on ``path``, reserved for one claim.

        The claim (e.g. the product's ``build_pvc``) is bound to it by kube-controller-manager's
        persistent-volume binder; ``claimRef`` only keeps parallel tests from taking each other's
        volume. The directory is made world-writable, as an NFS export for the pods' UID would be.
        """
        from kubernetes import client

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(0o777)
        body = {"apiVersion": "v1", "kind": "PersistentVolume",
                "metadata": {"name": name, "labels": {"minicluster/host-volume": "true"}},
                "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteMany"],
                         "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
                         "hostPath": {"path": str(path), "type": "Directory"},
                         "claimRef": {"namespace": claim_namespace, "name": claim_name}}}
        return client.CoreV1Api(self.api_client()).create_persistent_volume(body).to_dict()

    def delete_nodes(self, names: Iterable[str]) -> None:
        from kubernetes import client
        core = client.CoreV1Api(self.api_client())
        for n in names:
            try:
                core.delete_node(n)
            except client.ApiException as exc:
                if exc.status != 404:
                    raise

    def create_namespace(self, name: str, timeout: float = 30.0) -> str:
        """Create a namespace and wait for its ``default`` ServiceAccount (made by KCM), without
        which the ServiceAccount admission plugin rejects pods."""
        from kubernetes import client
        core = client.CoreV1Api(self.api_client())
        core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        if self.kube_controller_manager:
            self._wait(f"ServiceAccount {name}/default", lambda: bool(
                core.read_namespaced_service_account("default", name)),
                time.monotonic() + timeout, "kube-controller-manager")
        return name

    def service_account_kubeconfig(self, namespace: str, service_account: str,
                                   path: Optional[Path] = None, expiration_s: int = 7200) -> Path:
        """A kubeconfig authenticating as ``namespace/service_account`` (a TokenRequest token).

        The ServiceAccount must exist; nothing else is granted, so what the token may do is exactly
        what the namespace's RoleBindings give it.
        """
        from kubernetes import client
        core = client.CoreV1Api(self.api_client())
        req = core.create_namespaced_service_account_token(
            service_account, namespace,
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
             "spec": {"expirationSeconds": expiration_s}})
        path = path or self.workdir / f"{namespace}-{service_account}.kubeconfig"
        return write_kubeconfig(path, self.server, self.pki["ca"], req.status.token,
                                user=f"system:serviceaccount:{namespace}:{service_account}",
                                namespace=namespace)
