"""The KFP 2.14.3 backend beside the API server: what executes a run on the mini cluster.

Why this exists: the API server only turns a run into an Argo ``Workflow`` (and a recurring run into
a ``ScheduledWorkflow``); executing it takes the rest of a KFP install. Everything here is the real
program, built from its Go module by ``build.sh``, except two pieces of ours (see
``docs/kfpserver.md``):

* Argo's ``workflow-controller`` v3.6.7 (host process, namespaced to ``kubeflow``, the
  ``workflow-controller-configmap`` of KFP's manifests), whose pods run on the mini cluster's
  process nodes: ``argoexec`` (init, wait, emissary), KFP's ``driver`` and ``launcher-v2`` are the
  host binaries those nodes map the images to (``binary_images``);
* KFP's persistence agent (host process; it reads its service-account token from a fixed path, so it
  runs in a private mount namespace where that path holds a token of its ServiceAccount) and
  scheduled-workflow controller (host process), both talking to the API server on loopback;
* ML Metadata: ``mlmd_front.py`` (ours: a gRPC front passing bytes) over the real MLMD store library
  of the ``ml-metadata`` wheel, in a venv of its own (:func:`build_mlmd_env`), on SQLite or MariaDB;
* the objects KFP's manifests create, from the KFP module itself where they are files there
  (``pipeline-runner`` ServiceAccount/Role/RoleBinding, ``metadata-grpc-configmap``, ``kfp-launcher``,
  the workflow controller's ConfigMap), plus the ``mlpipeline-minio-artifact`` Secret;
* the in-cluster names the pods dial, as host services of the process nodes (ours, in
  ``tools/minicluster/hostservice.py``): ``metadata-grpc-service.kubeflow:8080`` (the MLMD front) and
  ``minio-service.kubeflow:9000`` (SeaweedFS), and the API server at ``KUBERNETES_SERVICE_HOST``.

Every process runs in its own session and :meth:`KfpBackend.stop` leaves nothing behind. Stdlib +
``kubernetes`` + PyYAML.
"""
from __future__ import annotations

import base64
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tools/: procgroup.py
import procgroup  # noqa: E402
from kfpserver import NAMESPACE, KfpServerError, _free_port, _log, _tail  # noqa: E402

__all__ = ["MLMD_REQUIREMENTS", "IMAGES", "ARGO_VERSION", "build_mlmd_env", "binary_images",
           "MlmdFront", "KfpBackend", "kfp_module_dir", "apply_manifests"]

#: The ml-metadata wheel and what it pulls, pinned (the wheel pins protobuf < 5: its own venv).
MLMD_REQUIREMENTS = ("ml-metadata==1.17.1", "protobuf==4.25.9", "grpcio==1.85.3", "absl-py==1.4.0",
                     "attrs==23.2.0", "six==1.17.0")
ARGO_VERSION = "v3.6.7"
KFP_VERSION = "2.14.3"
#: The images of KFP 2.14.3's manifests (named here without their registry); the process nodes map
#: each, by its last path segment, to the host binaries of ``build.sh``.
IMAGES = {
    "argoexec": f"argoproj/argoexec:{ARGO_VERSION}",
    "kfp-driver": f"kubeflow/kfp-driver:{KFP_VERSION}",
    "kfp-launcher": f"kubeflow/kfp-launcher:{KFP_VERSION}",
}
#: Where KFP 2.14.3's persistence agent reads its token (``client/token_refresher.go``).
PERSISTENCE_TOKEN = "/var/run/secrets/kubeflow/tokens/persistenceagent-sa-token"
PIPELINE_ROOT = "minio://mlpipeline/v2/artifacts"
MLMD_PORT = 8080
MINIO_PORT = 9000


def binary_images(root: Path) -> Dict[str, Path]:
    """Image repository name -> the directory of host binaries it maps to on process nodes."""
    return {repo: Path(root) / "bin" for repo in IMAGES}


def kfp_module_dir() -> Path:
    """KFP's module in the Go module cache (``build.sh`` downloaded it)."""
    out = subprocess.run(["go", "list", "-m", "-f", "{{.Dir}}", "github.com/kubeflow/pipelines"],
                         cwd=HERE / "server", capture_output=True, text=True,
                         env=dict(os.environ, GOTOOLCHAIN="local", GOFLAGS="-mod=mod",
                                  GONOSUMDB="github.com/kubeflow/pipelines", GOWORK="off"))
    if out.returncode != 0 or not out.stdout.strip():
        raise KfpServerError(f"cannot locate KFP's Go module (run tools/kfpserver/build.sh): {out.stderr.strip()}")
    return Path(out.stdout.strip())


# ------------------------------------------------------------------------------------------ MLMD
def _cache_root() -> Path:
    return Path(os.environ.get("CTR_VOLCANO_CACHE") or Path.home() / ".cache" / "ctr-volcano")


def build_mlmd_env(stream: Any = None) -> Path:
    """The venv holding the ``ml-metadata`` wheel (built once per pin set, under a lock).

    Raises:
        KfpServerError: pip failed (its output tail included).
    """
    key = hashlib.sha256("\n".join((sys.version, *MLMD_REQUIREMENTS)).encode()).hexdigest()[:16]
    root = _cache_root() / "mlmd" / key
    venv = root / "venv"
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (venv / ".complete").is_file():
            return venv
        t0 = time.monotonic()
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        proc = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
                               "--disable-pip-version-check", "--only-binary=:all:", *MLMD_REQUIREMENTS],
                              capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            raise KfpServerError(f"pip install {' '.join(MLMD_REQUIREMENTS)} failed:\n"
                                 + proc.stdout[-2000:] + proc.stderr[-2000:])
        (venv / ".complete").write_text("\n".join(MLMD_REQUIREMENTS) + "\n")
        print(f"kfpbackend: ml-metadata venv built in {time.monotonic() - t0:.0f}s -> {venv}",
              file=stream or sys.stderr, flush=True)
        return venv


@dataclass
class MlmdFront:
    """``mlmd_front.py`` over the MLMD library, on ``127.0.0.1:port``."""

    port: int
    log_path: Path
    proc: Optional[subprocess.Popen] = field(default=None, repr=False)

    @classmethod
    def start(cls, venv: Path, workdir: Path, mysql: Optional[str] = None,
              timeout_s: float = 60.0) -> "MlmdFront":
        """Serve a SQLite store in ``workdir`` (or ``mysql`` ``HOST:PORT/DB``); wait until it serves."""
        workdir.mkdir(parents=True, exist_ok=True)
        port = _free_port()
        log_path = workdir / "mlmd.log"
        store = [f"--mysql={mysql}"] if mysql else [f"--sqlite={workdir / 'mlmd.sqlite'}"]
        with open(log_path, "ab") as log:
            proc = subprocess.Popen([str(venv / "bin" / "python"), str(HERE / "mlmd_front.py"),
                                     f"--port={port}", *store], stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True,
                                    env={"PATH": os.environ.get("PATH", os.defpath)})
        front = cls(port=port, log_path=log_path, proc=proc)
        deadline = time.monotonic() + timeout_s
        while "mlmd front serving" not in log_path.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                front.stop()
                raise KfpServerError(f"the MLMD front did not start; log {log_path}:\n{_tail(log_path)}")
            time.sleep(0.2)
        return front

    def stop(self) -> None:
        if self.proc is not None:
            procgroup.kill_group(self.proc, grace=10)
            self.proc = None


# ------------------------------------------------------------------------------------- manifests
def _yaml_docs(path: Path, subst: Optional[Dict[str, str]] = None) -> List[Dict[str, Any]]:
    import yaml

    text = path.read_text()
    for key, value in (subst or {}).items():
        text = text.replace(f"$({key})", value)
    return [d for d in yaml.safe_load_all(text) if d]


def apply_manifests(api_client: Any, docs: List[Dict[str, Any]], namespace: str) -> List[str]:
    """Create namespaced ServiceAccounts, Roles, RoleBindings, ConfigMaps and Secrets (as
    ``kubectl apply -n namespace`` would for these kinds; an existing object is replaced)."""
    from kubernetes import client

    core, rbac = client.CoreV1Api(api_client), client.RbacAuthorizationV1Api(api_client)
    kinds = {
        "ServiceAccount": (core.create_namespaced_service_account, core.replace_namespaced_service_account),
        "ConfigMap": (core.create_namespaced_config_map, core.replace_namespaced_config_map),
        "Secret": (core.create_namespaced_secret, core.replace_namespaced_secret),
        "Role": (rbac.create_namespaced_role, rbac.replace_namespaced_role),
        "RoleBinding": (rbac.create_namespaced_role_binding, rbac.replace_namespaced_role_binding),
    }
    done = []
    for doc in docs:
        kind = doc["kind"]
        if kind not in kinds:
            raise KfpServerError(f"apply_manifests: kind {kind!r} is not handled (only {sorted(kinds)})")
        doc = dict(doc, metadata=dict(doc["metadata"], namespace=namespace))
        for subject in doc.get("subjects") or []:
            subject.setdefault("namespace", namespace)
        create, replace = kinds[kind]
        try:
            create(namespace, doc)
        except client.ApiException as exc:
            if exc.status != 409:
                raise
            replace(doc["metadata"]["name"], namespace, doc)
        done.append(f"{kind}/{doc['metadata']['name']}")
    return done


def backend_manifests(kfp_dir: Path, namespace: str, bucket: str, access_key: str,
                      secret_key: str) -> List[Dict[str, Any]]:
    """The objects of KFP 2.14.3's install that the run path reads, from the module's manifests."""
    base = kfp_dir / "manifests" / "kustomize"
    pipeline = base / "base" / "pipeline"
    subst = {"kfp-namespace": namespace, "kfp-artifact-bucket-name": bucket,
             "kfp-default-pipeline-root": PIPELINE_ROOT}
    docs: List[Dict[str, Any]] = []
    for name in ("pipeline-runner-sa.yaml", "pipeline-runner-role.yaml", "pipeline-runner-rolebinding.yaml",
                 "ml-pipeline-persistenceagent-sa.yaml", "ml-pipeline-scheduledworkflow-sa.yaml",
                 "kfp-launcher-configmap.yaml"):
        docs += _yaml_docs(pipeline / name, subst)
    docs += _yaml_docs(base / "base" / "metadata" / "base" / "metadata-grpc-configmap.yaml", subst)
    # The controller's ConfigMap: KFP's patch (artifact repository = the same store, log archive)
    # with metrics and telemetry off (their servers would listen on every interface).
    wcm = _yaml_docs(base / "third-party" / "argo" / "base" / "workflow-controller-configmap-patch.yaml", subst)[0]
    wcm["data"]["metricsConfig"] = "enabled: false\n"
    wcm["data"]["telemetryConfig"] = "enabled: false\n"
    # Pods of a finished workflow are deleted (after a minute, for their logs): the process nodes
    # serve no pods/exec, through which Argo signals the containers of a stopped or terminated
    # workflow, so a terminated run's pods get their SIGTERM from the deletion instead.
    wcm["data"]["workflowDefaults"] = ("spec:\n  podGC:\n    strategy: OnWorkflowCompletion\n"
                                       "    deleteDelayDuration: 60s\n")
    docs.append(wcm)
    b64 = lambda v: base64.b64encode(v.encode()).decode()  # noqa: E731
    docs.append({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "mlpipeline-minio-artifact"},
                 "type": "Opaque", "data": {"accesskey": b64(access_key), "secretkey": b64(secret_key)}})
    return docs


# --------------------------------------------------------------------------------------- backend
@dataclass
class KfpBackend:
    """The running backend processes and host services (see the module docstring)."""

    workdir: Path
    mlmd: Optional[MlmdFront] = None
    procs: Dict[str, subprocess.Popen] = field(default_factory=dict)
    logs: Dict[str, Path] = field(default_factory=dict)
    services: List[Any] = field(default_factory=list)
    timings: Dict[str, float] = field(default_factory=dict)

    @classmethod
    def start(cls, root: Path, workdir: Path, *, cluster: Any, api_server: Any, s3_port: int,
              s3_access_key: str, s3_secret_key: str, mlmd_venv: Path, namespace: str = NAMESPACE,
              bucket: str = "mlpipeline", mlmd_mysql: Optional[str] = None) -> "KfpBackend":
        """Start everything beside a running API server on ``cluster`` (a process-node MiniCluster
        whose ``binary_images`` are :func:`binary_images` of ``root``).

        Raises:
            KfpServerError: a component did not start (its log tail included).
        """
        from kfpserver import prepare_cluster

        t0 = time.monotonic()
        workdir.mkdir(parents=True, exist_ok=True)
        backend = cls(workdir=workdir)
        try:
            api = cluster.api_client()
            prepare_cluster(api, Path(root) / "argo-crd", namespace)
            applied = apply_manifests(api, backend_manifests(kfp_module_dir(), namespace, bucket,
                                                             s3_access_key, s3_secret_key), namespace)
            _log(f"backend objects in {namespace}: {', '.join(applied)}")
            backend.mlmd = MlmdFront.start(mlmd_venv, workdir / "mlmd", mysql=mlmd_mysql)
            backend.services.append(cluster.host_service("metadata-grpc-service", namespace,
                                                         backend.mlmd.port, port=MLMD_PORT))
            backend.services.append(cluster.host_service("minio-service", namespace, s3_port,
                                                         port=MINIO_PORT))
            kubeconfig = str(cluster.kubeconfig)
            bin_dir = Path(root) / "bin"
            backend._spawn("workflow-controller", [
                str(bin_dir / "workflow-controller"), f"--kubeconfig={kubeconfig}", f"--namespace={namespace}",
                "--namespaced", "--configmap=workflow-controller-configmap",
                f"--executor-image={IMAGES['argoexec']}", "--loglevel=info", "--workflow-workers=4",
                "--pod-cleanup-workers=2"], env={"LEADER_ELECTION_DISABLE": "true", "KUBECONFIG": kubeconfig})
            rpc, http = str(api_server.rpc_port), api_server.host.rsplit(":", 1)[1]
            backend._spawn("scheduledworkflow", [
                str(bin_dir / "scheduledworkflow"), f"--kubeconfig={kubeconfig}", f"--namespace={namespace}",
                "--mlPipelineAPIServerName=127.0.0.1", f"--mlPipelineServiceGRPCPort={rpc}",
                "--logLevel=info"], env={"CRON_SCHEDULE_TIMEZONE": "UTC", "KUBECONFIG": kubeconfig})
            backend._spawn_persistence_agent(cluster, namespace, kubeconfig, bin_dir, rpc, http)
            backend._wait_log("workflow-controller", "Starting Workflow Controller", 60)
            backend._wait_log("persistence-agent", "Started workers", 180)
        except BaseException:
            backend.stop()
            raise
        backend.timings["start_s"] = time.monotonic() - t0
        _log(f"KFP backend up in {backend.timings['start_s']:.1f}s (workflow-controller {ARGO_VERSION}, "
             f"persistence agent, scheduledworkflow, MLMD front on :{backend.mlmd.port}; logs in {workdir})")
        return backend

    def _spawn(self, name: str, args: List[str], env: Optional[Dict[str, str]] = None) -> None:
        log = self.workdir / f"{name}.log"
        self.logs[name] = log
        full = {k: v for k, v in os.environ.items()
                if not k.startswith(("AWS_", "HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "KUBECONFIG"))}
        full.update(NO_PROXY="127.0.0.1,localhost", **(env or {}))
        with open(log, "ab") as fh:
            self.procs[name] = subprocess.Popen(args, stdout=fh, stderr=subprocess.STDOUT,
                                                stdin=subprocess.DEVNULL, cwd=self.workdir, env=full,
                                                start_new_session=True)

    def _spawn_persistence_agent(self, cluster: Any, namespace: str, kubeconfig: str, bin_dir: Path,
                                 rpc: str, http: str) -> None:
        """The agent reads its token only from :data:`PERSISTENCE_TOKEN`: run it in a private mount
        namespace whose ``/run`` is a fresh tmpfs holding that file (the host's is untouched)."""
        from kubernetes import client

        core = client.CoreV1Api(cluster.api_client())
        req = core.create_namespaced_service_account_token(
            "ml-pipeline-persistenceagent", namespace,
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
             "spec": {"audiences": ["pipelines.kubeflow.org"], "expirationSeconds": 86400}})
        token_file = self.workdir / "persistenceagent-sa-token"
        token_file.write_text(req.status.token)
        token_file.chmod(0o600)
        target = PERSISTENCE_TOKEN.replace("/var/run/", "/run/", 1)
        script = ('set -e; mount -t tmpfs -o mode=755 tmpfs /run; mkdir -p "$(dirname "$2")"; '
                  'cp "$1" "$2"; shift 2; exec "$@"')
        self._spawn("persistence-agent", [
            "unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script, "sh",
            str(token_file), target, str(bin_dir / "persistence"), f"--kubeconfig={kubeconfig}",
            f"--namespace={namespace}", "--mlPipelineAPIServerName=127.0.0.1",
            f"--mlPipelineServiceHttpPort={http}", f"--mlPipelineServiceGRPCPort={rpc}",
            "--ttlSecondsAfterWorkflowFinish=86400", "--numWorker=2", "--logLevel=info"],
            # its informers ignore --kubeconfig: KFP's GetKubernetesConfig reads KUBECONFIG
            env={"KUBECONFIG": kubeconfig})

    def _wait_log(self, name: str, text: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while text not in self.logs[name].read_text(errors="replace"):
            proc = self.procs[name]
            if proc.poll() is not None or time.monotonic() > deadline:
                raise KfpServerError(f"{name} did not start ({'exited ' + str(proc.returncode) if proc.poll() is not None else 'timed out'}); "
                                     f"log {self.logs[name]}:\n{_tail(self.logs[name])}")
            time.sleep(0.2)

    def alive(self) -> Dict[str, bool]:
        out = {n: p.poll() is None for n, p in self.procs.items()}
        if self.mlmd is not None:
            out["mlmd"] = self.mlmd.proc is not None and self.mlmd.proc.poll() is None
        return out

    def log_tail(self, name: str, lines: int = 40) -> str:
        path = self.mlmd.log_path if name == "mlmd" and self.mlmd else self.logs.get(name)
        return _tail(path, lines) if path else ""

    def pids(self) -> List[int]:
        out = [p.pid for p in self.procs.values()]
        if self.mlmd is not None and self.mlmd.proc is not None:
            out.append(self.mlmd.proc.pid)
        return out

    def stop(self) -> None:
        """Stop the controllers, the agent, the MLMD front and the host services."""
        for name in reversed(list(self.procs)):
            procgroup.kill_group(self.procs[name], grace=10)
        self.procs.clear()
        if self.mlmd is not None:
            self.mlmd.stop()
        for svc in self.services:
            svc.stop()
        self.services.clear()
