"""Pytest plugin: the real KFP API server (2.14.3, built from its Go module) on the mini cluster.

Loaded from ``tests/conftest.py``. The server is built (or found in the cache) once, in the
background while the tests that need no build run (:mod:`tests.prebuild`), and only when a selected
test uses :func:`kfp_server`, so its cold build (minutes) is neither counted against the per-test
timeout nor paid by runs that do not need it. For the session
it runs beside MariaDB (Debian's ``mariadbd``) and the SeaweedFS S3 server of ``tests/s3store.py``,
against the session's mini cluster; everything listens on 127.0.0.1 (the server's gRPC port on
every interface, see ``tools/kfpserver/kfpserver.py``) and is stopped by PID at the end.

Skipped, with the reason, when ``go`` or MariaDB is missing; a failed build or start fails the tests.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import IO

import pytest

from tests.prebuild import Prebuild

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "kfpserver"))

import kfpserver  # noqa: E402  (tools/kfpserver is not a package)

__all__ = ["kfp_server"]


def _needs_kfp(item) -> bool:
    return bool({"kfp_server", "kfp_stack"} & set(getattr(item, "fixturenames", ())))


_BUILD = Prebuild("kfpserver", "the KFP API server",
                  "the KFP API server tests need the 'go' tool (Go >= 1.25) to build it", rank=4, needs=_needs_kfp)


def pytest_collection_finish(session):
    if any(_needs_kfp(i) for i in session.items):
        runs = any("kfp_stack" in getattr(i, "fixturenames", ()) for i in session.items)
        _BUILD.build(session, "preparing the KFP backend (tools/kfpserver/build.sh)", "KFP backend ready",
                     lambda stream: _build(runs, stream), (kfpserver.KfpServerError, RuntimeError))


def _build(runs: bool, stream: IO[str]) -> Path:
    """The Go binaries; for the run tests also the MLMD venv (a pip install, minutes on a cold cache),
    here for the same reason as the Go build. The component image the steps run is the cluster
    tier's (``tests/cluster/conftest.py`` builds it)."""
    root = kfpserver.build_server(stream=stream)
    if runs:
        import kfpbackend

        t0 = time.monotonic()
        venv = kfpbackend.build_mlmd_env(stream=stream)
        print(f"kfpbackend: ml-metadata environment {venv} ({time.monotonic() - t0:.0f}s)", file=stream)
    return root


@pytest.fixture(scope="session")
def kfp_server(cluster, s3_server, tmp_path_factory):
    """A running :class:`kfpserver.KfpApiServer` (``.host`` for ``kfp.Client``/``--host``)."""
    root = Path(str(_BUILD.result(kfpserver.build_server)))
    missing = kfpserver.mariadb_missing()
    if missing:
        pytest.skip(f"the KFP API server tests need MySQL: {missing}")
    work = tmp_path_factory.mktemp("kfp")
    t0 = time.monotonic()
    db = kfpserver.MariaDB.start(work / "db")
    server = None
    try:
        kfpserver.prepare_cluster(cluster.api_client(), root / "crd")
        server = kfpserver.KfpApiServer.start(
            root, work, kubeconfig=cluster.kubeconfig, db_port=db.port, s3_endpoint=s3_server.endpoint,
            s3_access_key=s3_server.access_key, s3_secret_key=s3_server.secret_key,
            s3_region=s3_server.region)
        print(f"\nkfpserver: MariaDB + KFP API server {kfpserver.KFP_VERSION} up in "
              f"{time.monotonic() - t0:.1f}s (server alone {server.timings['ready_s']:.1f}s)",
              file=sys.stderr, flush=True)
        yield server
    finally:
        procs = [p for p in (server.proc if server else None, db.proc) if p is not None]
        if server is not None:
            server.stop()
        db.stop()
        left = [p.pid for p in procs if p.poll() is None]
        assert not left, f"KFP API server / MariaDB processes left running: {left}"
