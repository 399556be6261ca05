"""Run the real KFP API server (Kubeflow Pipelines 2.14.3) on loopback, against the mini cluster.

Why this exists: ``ctr-volcano submit`` and the KFP UI's upload path go through a KFP API server, and
a fake of its REST API cannot show what the real one does (its filter syntax, upload validation,
how parameters land in the Argo Workflow it creates, how a recurring run becomes a
ScheduledWorkflow). ``build.sh`` builds the server from its Go module; this module wires it up:

* MariaDB from the distribution's packages (``mariadbd``; KFP 2.14.3 has no Postgres driver
  compiled in), initialised in a private data directory and listening on 127.0.0.1 only;
* an S3 endpoint, which the server needs at start-up (it creates its bucket or exits): pass the
  SeaweedFS server of ``tools/s3server``;
* ``prepare_cluster`` creates the ``kubeflow`` namespace and the two CRDs the server writes
  (Argo's ``Workflow``, KFP's ``ScheduledWorkflow``); nothing executes them -- runs and recurring
  runs are checked as the objects the server creates;
* the server reads ``--config DIR/config.json`` (database, object store, namespace) and the
  cluster from ``KUBECONFIG``; its gRPC port is given as ``:PORT`` because its HTTP gateway dials
  ``localhost`` + that flag (``127.0.0.1:PORT`` there breaks every call but upload), and its HTTP
  port as ``127.0.0.1:PORT``.

Each process runs in its own session, so ``stop()`` leaves nothing behind. Stdlib + ``kubernetes``
+ PyYAML only, so pytest fixtures and scripts can import it from the checkout.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tools/: procgroup.py, shared
import procgroup

__all__ = [
    "HERE", "BUILD_SCRIPT", "KFP_VERSION", "NAMESPACE", "KfpServerError", "build_server",
    "mariadb_missing", "MariaDB", "prepare_cluster", "KfpApiServer",
]

HERE = Path(__file__).resolve().parent
BUILD_SCRIPT = HERE / "build.sh"
KFP_VERSION = "2.14.3"
NAMESPACE = "kubeflow"
MARIADB_BINARIES = ("mariadbd", "mariadb-install-db", "my_print_defaults")
#: Debian's packages holding :data:`MARIADB_BINARIES`.
MARIADB_PACKAGES = "mariadb-server-core mariadb-client-core"


class KfpServerError(RuntimeError):
    """A component failed to build or start; the message names it and ends with its log tail."""


def _log(msg: str) -> None:
    print(f"kfpserver: {msg}", file=sys.stderr, flush=True)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


# ----------------------------------------------------------------------------------------- build
def build_server(stream: Any = None) -> Path:
    """Build (or find) the API server and its CRDs; returns the directory holding ``bin/`` and ``crd/``.

    Progress and timings go to ``stream`` (default: stderr) line by line.

    Raises:
        KfpServerError: ``go`` is missing or a build step failed (the tail of its output is included).
    """
    if shutil.which("go") is None:
        raise KfpServerError("the 'go' tool is not installed; the KFP API server is built from its Go "
                             "module (install Go >= 1.25, then run tools/kfpserver/build.sh)")
    env = dict(os.environ, PYTHON=os.environ.get("PYTHON", sys.executable))
    root = procgroup.run_build_script(BUILD_SCRIPT, KfpServerError, stream, env=env, grace=0)
    if not (root / "bin" / "apiserver").is_file():
        raise KfpServerError(f"build finished but {root}/bin/apiserver is missing")
    return root


# --------------------------------------------------------------------------------------- MariaDB
def mariadb_missing() -> Optional[str]:
    """Why MariaDB cannot be started here (a sentence naming the missing programs), or None."""
    missing = [b for b in MARIADB_BINARIES if _which(b) is None]
    if not missing:
        return None
    return (f"MariaDB is not installed ({', '.join(missing)} not found); "
            f"`apt-get install {MARIADB_PACKAGES}` provides it")


def _which(name: str) -> Optional[str]:
    # mariadbd lives in /usr/sbin, which is not on every PATH.
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin")


@dataclass
class MariaDB:
    """A private ``mariadbd`` on 127.0.0.1: user ``root``, no password, data in ``workdir/data``."""

    port: int
    workdir: Path
    log_path: Path
    proc: Optional[subprocess.Popen] = field(default=None, repr=False)

    @classmethod
    def start(cls, workdir: Path, timeout_s: float = 60.0) -> "MariaDB":
        """Initialise a data directory and start the server; waits until it accepts connections.

        Raises:
            KfpServerError: MariaDB is not installed, or did not start (log tail included).
        """
        reason = mariadb_missing()
        if reason:
            raise KfpServerError(reason)
        workdir.mkdir(parents=True, exist_ok=True)
        data = workdir / "data"
        log_path = workdir / "mariadb.log"
        with open(log_path, "ab") as log:
            rc = subprocess.run(
                [str(_which("mariadb-install-db")), "--no-defaults", f"--datadir={data}", "--user=root",
                 "--auth-root-authentication-method=normal", "--skip-test-db"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, check=False).returncode
        if rc != 0:
            raise KfpServerError(f"mariadb-install-db exited {rc}; log {log_path}:\n{_tail(log_path)}")
        port = _free_port()
        args = [str(_which("mariadbd")), "--no-defaults", f"--datadir={data}", "--user=root",
                f"--port={port}", "--bind-address=127.0.0.1", f"--socket={workdir / 'mysqld.sock'}",
                f"--pid-file={workdir / 'mysqld.pid'}", "--skip-log-bin"]
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    cwd=workdir, start_new_session=True)
        db = cls(port=port, workdir=workdir, log_path=log_path, proc=proc)
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise KfpServerError(f"mariadbd exited with {proc.returncode}; log {log_path}:\n"
                                     + _tail(log_path))
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                    if s.recv(1):  # the server greets first once it accepts clients
                        return db
            except OSError:
                pass
            if time.monotonic() > deadline:
                db.stop()
                raise KfpServerError(f"mariadbd did not accept connections within {timeout_s:.0f}s; "
                                     f"log {log_path}:\n{_tail(log_path)}")
            time.sleep(0.2)

    def stop(self) -> None:
        """Stop the server (SIGTERM: a clean shutdown, then SIGKILL after 20 s)."""
        if self.proc is None:
            return
        procgroup.kill_group(self.proc, grace=20)
        self.proc = None


# --------------------------------------------------------------------------------------- cluster
def prepare_cluster(api_client: Any, crd_dir: Path, namespace: str = NAMESPACE,
                    timeout_s: float = 60.0) -> List[str]:
    """Create ``namespace`` and the CRDs in ``crd_dir`` (idempotent); wait until they are Established.

    Returns:
        The CRD names.
    """
    import yaml
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    ext = client.ApiextensionsV1Api(api_client)
    try:
        core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    except client.ApiException as exc:
        if exc.status != 409:
            raise
    names = []
    for path in sorted(Path(crd_dir).glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or doc.get("kind") != "CustomResourceDefinition":
                continue
            try:
                ext.create_custom_resource_definition(doc)
            except client.ApiException as exc:
                if exc.status != 409:
                    raise
            names.append(doc["metadata"]["name"])
    deadline = time.monotonic() + timeout_s
    while True:
        pending = []
        for n in names:
            conds = {c.type: c.status for c in (ext.read_custom_resource_definition(n).status.conditions or [])}
            if conds.get("Established") != "True":
                pending.append(n)
        if not pending:
            return names
        if time.monotonic() > deadline:
            raise KfpServerError(f"CRDs not Established after {timeout_s:.0f}s: {pending}")
        time.sleep(0.2)


# ----------------------------------------------------------------------------------- API server
@dataclass
class KfpApiServer:
    """The KFP API server process; ``host`` is what ``kfp.Client(host=...)`` and the UI proxy use.

    Attributes:
        host: ``http://127.0.0.1:PORT`` (the REST gateway: ``/apis/v2beta1/...``).
        rpc_port: the gRPC port (bound on every interface: see the module docstring).
        workdir: holds ``config/config.json`` and ``apiserver.log``.
        bucket: the object-store bucket the server keeps pipeline packages in.
        timings: ``ready_s``, seconds from exec to a healthy ``/apis/v2beta1/healthz``.
    """

    host: str
    rpc_port: int
    workdir: Path
    log_path: Path
    bucket: str
    proc: Optional[subprocess.Popen] = field(default=None, repr=False)
    timings: Dict[str, float] = field(default_factory=dict)

    @classmethod
    def start(cls, root: Path, workdir: Path, *, kubeconfig: Path, db_port: int, s3_endpoint: str,
              s3_access_key: str, s3_secret_key: str, s3_region: str = "us-east-1",
              bucket: str = "mlpipeline", namespace: str = NAMESPACE,
              timeout_s: float = 120.0, cache_enabled: bool = True,
              env: Optional[Dict[str, str]] = None) -> "KfpApiServer":
        """Write the config and start ``bin/apiserver`` from ``root`` (see :func:`build_server`).

        The cluster must already have the namespace and CRDs (:func:`prepare_cluster`).
        ``cache_enabled`` is the server's ``CacheEnabled`` (off: the drivers it compiles skip KFP's
        step cache); ``env`` adds variables the server reads from its environment (the driver and
        launcher images it writes into each Workflow: ``V2_DRIVER_IMAGE``, ``V2_LAUNCHER_IMAGE``).

        Raises:
            KfpServerError: the server exited or did not become healthy (log tail included).
        """
        extra_env = dict(env or {})
        s3_scheme, _, s3_hostport = s3_endpoint.partition("://")
        s3_host, _, s3_port = s3_hostport.rstrip("/").rpartition(":")
        config_dir = workdir / "config"
        config_dir.mkdir(parents=True, exist_ok=True)
        config = {
            "DBDriverName": "mysql",
            "DBConfig": {
                "MySQLConfig": {"Host": "127.0.0.1", "Port": str(db_port), "User": "root", "Password": "",
                                "DBName": "mlpipeline", "GroupConcatMaxLen": "4194304"},
                "ConMaxLifeTime": "120s",
            },
            "ObjectStoreConfig": {
                "Host": s3_host, "Port": s3_port, "Secure": s3_scheme == "https", "Region": s3_region,
                "AccessKey": s3_access_key, "SecretAccessKey": s3_secret_key,
                "BucketName": bucket, "PipelinePath": "pipelines",
            },
            "POD_NAMESPACE": namespace,
            "InitConnectionTimeout": "30s",
            "DEFAULTPIPELINERUNNERSERVICEACCOUNT": "pipeline-runner",
            "CacheEnabled": "true" if cache_enabled else "false",
            "CRON_SCHEDULE_TIMEZONE": "UTC",
            # Read at start-up (it exits without them); only the UI's visualizations call it.
            "ML_PIPELINE_VISUALIZATIONSERVER_SERVICE_HOST": "127.0.0.1",
            "ML_PIPELINE_VISUALIZATIONSERVER_SERVICE_PORT": str(_free_port()),
        }
        (config_dir / "config.json").write_text(json.dumps(config, indent=2))
        rpc_port, http_port = _free_port(), _free_port()
        log_path = workdir / "apiserver.log"
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("AWS_", "MINIO_", "HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"))}
        env.update(KUBECONFIG=str(kubeconfig), NO_PROXY="127.0.0.1,localhost")
        env.update(extra_env)
        args = [str(Path(root) / "bin" / "apiserver"), f"--config={config_dir}", "--sampleconfig=",
                f"--rpcPortFlag=:{rpc_port}", f"--httpPortFlag=127.0.0.1:{http_port}",
                "--logtostderr=true"]
        t0 = time.monotonic()
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    cwd=workdir, env=env, start_new_session=True)
        server = cls(host=f"http://127.0.0.1:{http_port}", rpc_port=rpc_port, workdir=workdir,
                     log_path=log_path, bucket=bucket, proc=proc)
        try:
            server._wait_healthy(t0 + timeout_s)
        except BaseException:
            server.stop()
            raise
        server.timings["ready_s"] = time.monotonic() - t0
        _log(f"KFP API server {KFP_VERSION} ready at {server.host} in {server.timings['ready_s']:.1f}s "
             f"(log {log_path})")
        return server

    def _wait_healthy(self, deadline: float) -> None:
        last = ""
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise KfpServerError(f"the KFP API server exited with {self.proc.returncode} during "
                                     f"start-up; log {self.log_path}:\n{_tail(self.log_path)}")
            try:
                with urllib.request.urlopen(self.host + "/apis/v2beta1/healthz", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except urllib.error.HTTPError as exc:
                last = f"HTTP {exc.code}"
            except OSError as exc:
                last = str(exc)
            if time.monotonic() > deadline:
                raise KfpServerError(f"the KFP API server at {self.host} was not healthy in time ({last}); "
                                     f"log {self.log_path}:\n{_tail(self.log_path)}")
            time.sleep(0.3)

    def log_tail(self, lines: int = 30) -> str:
        return _tail(self.log_path, lines)

    def stop(self) -> None:
        """Stop the server: SIGTERM, a second SIGTERM (the first leaves its HTTP proxy serving), SIGKILL."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=3)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            procgroup.kill_group(self.proc, grace=10)
        self.proc = None


def _main(argv: List[str]) -> int:  # pragma: no cover - manual use
    """``python tools/kfpserver/kfpserver.py KUBECONFIG S3_ENDPOINT ACCESS SECRET``: run until Ctrl-C."""
    kubeconfig, endpoint, access, secret = argv
    root = build_server()
    work = Path(tempfile.mkdtemp(prefix="kfpserver-"))
    db = MariaDB.start(work / "db")
    try:
        from kubernetes import config as kconfig
        prepare_cluster(kconfig.new_client_from_config(config_file=kubeconfig), root / "crd")
        server = KfpApiServer.start(root, work, kubeconfig=Path(kubeconfig), db_port=db.port,
                                    s3_endpoint=endpoint, s3_access_key=access, s3_secret_key=secret)
        print(f"KFP API at {server.host}; Ctrl-C stops it", flush=True)
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass
        server.stop()
    finally:
        db.stop()
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(_main(sys.argv[1:]))
