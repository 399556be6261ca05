"""Run a throw-away S3 server on loopback: SeaweedFS's ``weed server`` (KFP's bundled object store).

Why this exists: the object-store hand-off must be tested against a real S3 implementation (request
signing, missing buckets, wrong keys, multipart uploads), and SeaweedFS is the store current KFP
installs ship. ``build.sh`` builds ``weed`` from its Go module into a cache; this module starts it:

* every listener (master, volume, filer, S3 and their gRPC ports) binds 127.0.0.1 on a free port;
  the listeners ``weed server`` would open by default beside S3 (Iceberg and Lance catalogs) are
  turned off, and so is its anonymous usage report (``-master.telemetry``, on by default);
* S3 requires a signature: one admin identity with a generated access key and secret, written to
  the ``-s3.config`` file; nothing is readable anonymously;
* the process runs in its own session, so :meth:`S3Server.stop` leaves nothing behind.

Stdlib only (bucket helpers import ``pyarrow`` lazily), so the pytest fixture of this project, the
benchmark and another test suite (the KFP API server's object store) can all import it from the
checkout::

    sys.path.insert(0, "tools/s3server"); import s3server
    with s3server.S3Server.start(s3server.build_weed()) as s3:
        s3.create_bucket("mlpipeline"); print(s3.endpoint, s3.access_key, s3.secret_key)
"""
from __future__ import annotations

import json
import os
import secrets
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

__all__ = ["HERE", "BUILD_SCRIPT", "S3ServerError", "build_weed", "weed_dir", "S3Server"]

HERE = Path(__file__).resolve().parent
BUILD_SCRIPT = HERE / "build.sh"
REGION = "us-east-1"   # SeaweedFS accepts any region in the signature; clients need one


class S3ServerError(RuntimeError):
    """weed failed to build or start; the message says which and points at its log."""


def _log(msg: str) -> None:
    print(f"s3server: {msg}", file=sys.stderr, flush=True)


def weed_dir() -> Path:
    """The cache directory the pinned ``weed`` binary is (or will be) built into."""
    out = subprocess.run(["bash", str(BUILD_SCRIPT), "--print-dir"], check=True,
                         capture_output=True, text=True)
    return Path(out.stdout.strip().splitlines()[-1])


def build_weed(stream: Any = None) -> Path:
    """Build (or find) ``weed`` and return the binary's path.

    Progress goes to ``stream`` (default: stderr) line by line, so a cold build (minutes) is visible.

    Raises:
        S3ServerError: ``go`` is missing or the build failed (the tail of its output is included).
    """
    if shutil.which("go") is None:
        raise S3ServerError("the 'go' tool is not installed; the S3 tests need Go >= 1.26.6 to build "
                            "SeaweedFS (install Go, then re-run: tools/s3server/build.sh)")
    stream = stream or sys.stderr
    started = time.monotonic()
    proc = subprocess.Popen(["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    tail: List[str] = []
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            tail = (tail + [line.rstrip()])[-40:]
            print(line.rstrip(), file=stream, flush=True)
        rc = proc.wait()
    except BaseException:
        _kill_group(proc)
        raise
    if rc != 0:
        raise S3ServerError("tools/s3server/build.sh failed (exit %d) after %.0fs:\n%s"
                            % (rc, time.monotonic() - started, "\n".join(tail)))
    weed = Path(tail[-1].strip()) / "weed"
    if not weed.is_file():
        raise S3ServerError(f"build finished but {weed} is missing")
    return weed


def _free_ports(n: int) -> List[int]:
    """``n`` distinct free loopback ports (held open together so they differ)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _kill_group(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """SIGTERM the process group of ``proc``, then SIGKILL it after ``grace`` seconds."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:  # pragma: no cover - a zombie we cannot reap
        pass


@dataclass
class S3Server:
    """A running ``weed server -filer -s3`` on 127.0.0.1.

    Attributes:
        endpoint: ``http://127.0.0.1:PORT`` of the S3 API (path-style addressing, no TLS).
        access_key: the admin identity's access key id.
        secret_key: its secret key.
        region: the region clients sign with.
        data_dir: weed's data directory (removed by :meth:`stop` when this object created it).
        log_path: weed's combined stdout/stderr.
    """

    endpoint: str
    access_key: str
    secret_key: str
    data_dir: Path
    log_path: Path
    region: str = REGION
    proc: Optional[subprocess.Popen] = field(default=None, repr=False)
    _own_dir: bool = field(default=False, repr=False)

    @classmethod
    def start(cls, weed: Path, data_dir: Optional[Path] = None, timeout_s: float = 90.0,
              access_key: Optional[str] = None, secret_key: Optional[str] = None) -> "S3Server":
        """Start weed and wait until its S3 API answers a signed request.

        Args:
            weed: the binary (from :func:`build_weed`).
            data_dir: where weed keeps its data; a fresh temporary directory by default (short, as
                weed puts unix sockets there).
            timeout_s: how long to wait for the S3 API.
            access_key: admin access key id (generated by default).
            secret_key: admin secret (generated by default).

        Raises:
            S3ServerError: weed exited or its S3 API did not answer in time (log tail included).
        """
        own = data_dir is None
        root = Path(tempfile.mkdtemp(prefix="ctr-s3-")) if own else Path(data_dir)
        root.mkdir(parents=True, exist_ok=True)
        access_key = access_key or "ctr" + secrets.token_hex(8)
        secret_key = secret_key or secrets.token_hex(20)
        config = {"identities": [{"name": "admin",
                                  "credentials": [{"accessKey": access_key, "secretKey": secret_key}],
                                  "actions": ["Admin", "Read", "List", "Tagging", "Write"]}]}
        config_path = root / "s3.json"
        config_path.write_text(json.dumps(config), encoding="utf-8")
        config_path.chmod(0o600)
        # weed reads master.toml from its working directory: grow one volume per new bucket (a
        # bucket is a collection; the default, 7, exhausts -volume.max after a few test buckets and
        # then every upload to a new bucket fails with InternalError)
        (root / "master.toml").write_text("[master.volume_growth]\ncopy_1 = 1\n", encoding="utf-8")
        (master, master_grpc, volume, volume_grpc, filer, filer_grpc, s3, s3_grpc) = _free_ports(8)
        (root / "data").mkdir(exist_ok=True)
        args = [
            str(weed), "server", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-dir={root / 'data'}",
            "-master.telemetry=false", "-master.volumeSizeLimitMB=64", "-volume.max=256",
            f"-master.port={master}", f"-master.port.grpc={master_grpc}",
            f"-volume.port={volume}", f"-volume.port.grpc={volume_grpc}",
            "-volume.preStopSeconds=0",   # default 10: every stop() would wait that long
            "-filer", f"-filer.port={filer}", f"-filer.port.grpc={filer_grpc}",
            f"-filer.localSocket={root / 'filer.sock'}",
            "-s3", f"-s3.port={s3}", f"-s3.port.grpc={s3_grpc}", f"-s3.config={config_path}",
            "-s3.port.iceberg=0", "-s3.port.lance=0", f"-s3.localSocket={root / 's3.sock'}",
        ]
        log_path = root / "weed.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=root, env=env,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        server = cls(endpoint=f"http://127.0.0.1:{s3}", access_key=access_key,
                     secret_key=secret_key, data_dir=root, log_path=log_path, proc=proc,
                     _own_dir=own)
        try:
            server._wait_ready(timeout_s)
        except BaseException:
            server.stop()
            raise
        _log(f"weed S3 API ready at {server.endpoint} (log {log_path})")
        return server

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        last = ""
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise S3ServerError(f"weed exited with {self.proc.returncode} during start-up; "
                                    f"log {self.log_path}:\n{self.log_tail()}")
            try:
                # Anonymous requests are refused once the gateway runs: any HTTP answer means up.
                urllib.request.urlopen(self.endpoint + "/", timeout=2).close()
                return
            except urllib.error.HTTPError as exc:
                if exc.code in (403, 401):
                    self._wait_signed(deadline)
                    return
                last = f"HTTP {exc.code}"
            except OSError as exc:
                last = str(exc)
            time.sleep(0.3)
        raise S3ServerError(f"weed's S3 API at {self.endpoint} did not answer within {timeout_s:.0f}s "
                            f"({last}); log {self.log_path}:\n{self.log_tail()}")

    def _wait_signed(self, deadline: float) -> None:
        """The gateway may answer before the filer behind it is ready: wait for a signed listing."""
        fs = self.filesystem()
        from pyarrow import fs as pafs

        while True:
            try:
                fs.get_file_info(pafs.FileSelector("", recursive=False))
                return
            except OSError as exc:
                if time.monotonic() >= deadline:
                    raise S3ServerError(f"weed's S3 API at {self.endpoint} refuses signed requests: "
                                        f"{exc}; log {self.log_path}") from None
                time.sleep(0.3)

    # ------------------------------------------------------------------------------ client side
    def env(self) -> Dict[str, str]:
        """The variables an S3 client of this server needs (AWS names + the endpoint)."""
        return {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key,
                "AWS_REGION": self.region, "AWS_ENDPOINT_URL": self.endpoint}

    def filesystem(self):
        """A ``pyarrow.fs.S3FileSystem`` signed as the admin identity (may create/delete buckets)."""
        from pyarrow import fs as pafs

        scheme, _, host = self.endpoint.partition("://")
        return pafs.S3FileSystem(access_key=self.access_key, secret_key=self.secret_key,
                                 region=self.region, endpoint_override=host, scheme=scheme,
                                 connect_timeout=3, request_timeout=30,
                                 retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=2),
                                 allow_bucket_creation=True, allow_bucket_deletion=True)

    def create_bucket(self, name: str) -> str:
        """Create bucket ``name`` (idempotent) and return ``s3://name``."""
        self.filesystem().create_dir(name)
        return f"s3://{name}"

    # ------------------------------------------------------------------------------------ life
    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """Stop weed (its whole session) and remove the data directory if this object made it."""
        if self.proc is not None:
            # weed's graceful shutdown waits ~10 s; the data of a throw-away server need not survive
            _kill_group(self.proc, grace=2.0)
            self.proc = None
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> "S3Server":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
