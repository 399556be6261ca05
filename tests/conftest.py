"""Shared fixtures. Tiers: the default tier needs no cluster and no network; tests marked ``cluster``
start the Go-built mini cluster (see ``tests/cluster/``)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests import prebuild

# The real S3 server (SeaweedFS) fixtures: s3_server, s3_bucket; the real KFP API server: kfp_server.
pytest_plugins = ["tests.s3store", "tests.cluster.kfp_fixtures"]

REPO = Path(__file__).resolve().parents[1]

# Run as if the interpreter's environment were activated: subprocesses that call ``ctr-volcano`` or
# ``python3`` (the KFP executor's command does) get this venv's, not whatever PATH finds first -- on a
# fresh machine the system Python has none of the dependencies (`.venv/bin/python -m pytest`).
_BIN = str(Path(sys.executable).parent)
if os.environ.get("PATH", "").split(os.pathsep)[0] != _BIN:
    os.environ["PATH"] = os.pathsep.join([_BIN, os.environ.get("PATH", "")])
SAMPLE_DIR = REPO / "data" / "sample"


# The Go-built servers build in the background while the tests that need none run (tests/prebuild.py).
def pytest_collection_modifyitems(config, items):
    prebuild.BUILDS.order(items)


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session):
    if not session.config.option.collectonly:
        prebuild.BUILDS.start()


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    prebuild.BUILDS.wait_for(item)         # before the test's timeout starts counting
    yield


def pytest_sessionfinish(session, exitstatus):
    prebuild.BUILDS.stop()


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def sample_dir() -> Path:
    """The committed Criteo-format sample (``data/sample``)."""
    return SAMPLE_DIR


@pytest.fixture(autouse=True)
def _no_proxy_env(monkeypatch):
    # Loopback servers in tests must never be reached through a proxy.
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    yield


@pytest.fixture(scope="session")
def volcano_job_crd() -> str:
    """Volcano's real Job CRD, from the Volcano Go module (downloaded once into Go's module cache)."""
    from tests.crds import CrdUnavailable, job_crd_path

    try:
        return job_crd_path()
    except CrdUnavailable as exc:
        if "Go is not installed" in str(exc):
            pytest.skip(f"no Volcano CRD schema to validate against: {exc}")
        raise


@pytest.fixture
def fake(volcano_job_crd):
    """An HTTP-level fake API server validating Volcano Jobs against the real CRD; every request a
    test made is checked against the launcher's Role (:mod:`ctr_volcano.training.volcano.rbac`)."""
    from ctr_volcano.training.volcano.rbac import allows
    from tests.fake_k8s import FakeKube

    server = FakeKube(crd_path=volcano_job_crd).start()
    try:
        yield server
    finally:
        server.stop()
    refused = [v for v in server.verbs() if not allows(v[1], v[2], v[0])]
    assert not refused, f"requests outside the launcher's Role: {refused}"


@pytest.fixture
def client(fake):
    """The product's Kubernetes client talking to :func:`fake`."""
    from ctr_volcano.training.volcano.client import KubeClient

    c = KubeClient(fake.api_client(), request_timeout_s=5)
    yield c
    c.close()
