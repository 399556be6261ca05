"""Pytest plugin: a real S3 server (SeaweedFS ``weed``, built from its Go module) for the tests.

Loaded from ``tests/conftest.py``. ``weed`` is built (or found in the cache) once, in the background
while the tests that need no build run (:mod:`tests.prebuild`), and only when a selected test uses
:func:`s3_server` (directly or through :func:`s3_bucket`), so a cold build (minutes) is neither
counted against the per-test timeout nor paid by runs that do not need it. The server runs on 127.0.0.1 for the session; each test gets its own bucket.

Skipped only when the ``go`` tool is missing altogether; a failed build fails the tests.
"""
from __future__ import annotations

import itertools
import sys
import time
from pathlib import Path

import pytest

from tests.prebuild import Prebuild

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools" / "s3server"))

import s3server  # noqa: E402  (tools/s3server is not a package)

__all__ = ["s3_server", "s3_bucket", "store_env", "store_client"]

_buckets = itertools.count()


def _needs_s3(item) -> bool:
    return bool({"s3_server", "s3_bucket", "store_env", "store_client"} & set(getattr(item, "fixturenames", ())))


_BUILD = Prebuild("s3server", "SeaweedFS", "the S3 tests need the 'go' tool (Go >= 1.26.6) to build SeaweedFS",
                  rank=1, needs=_needs_s3)


def pytest_collection_finish(session):
    if any(_needs_s3(i) for i in session.items):
        _BUILD.build(session, "preparing SeaweedFS's weed (tools/s3server/build.sh)", "weed ready",
                     lambda stream: s3server.build_weed(stream=stream), (s3server.S3ServerError,))


@pytest.fixture(scope="session")
def s3_server():
    """A running :class:`s3server.S3Server` (endpoint, access_key, secret_key, filesystem())."""
    weed = _BUILD.result(s3server.build_weed)
    server = s3server.S3Server.start(Path(str(weed)))
    try:
        yield server
    finally:
        proc = server.proc
        server.stop()
        assert proc is None or proc.poll() is not None, "weed survived stop()"


@pytest.fixture
def own_s3(s3_server):
    """A weed of the test's own, to restart or stop (``s3_server`` makes sure the binary is built)."""
    server = s3server.S3Server.start(Path(str(s3server.build_weed())))
    try:
        yield server
    finally:
        server.stop()


def restart_when_written(server, prefix: str, down_s: float, seen: dict, timeout_s: float = 60.0,
                         poll_s: float = 0.01) -> None:
    """Restart ``server`` (down ``down_s``) as soon as a first object under ``prefix`` exists, for
    a thread of a store-fault test; records ``written_at_kill`` and ``unreachable_s`` in ``seen``
    and gives up after ``timeout_s`` or once ``seen["stop"]`` is set."""
    import pyarrow.fs as pafs

    fs = server.filesystem()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not seen.get("stop"):
        try:
            found = [i for i in fs.get_file_info(pafs.FileSelector(prefix, recursive=True, allow_not_found=True))
                     if i.type == pafs.FileType.File]
        except OSError:
            found = []
        if found:
            seen["written_at_kill"] = len(found)
            seen["unreachable_s"] = server.restart(down_s=down_s)
            return
        time.sleep(poll_s)


@pytest.fixture
def s3_bucket(s3_server) -> str:
    """A fresh, empty bucket for one test: ``s3://test-N-<time>``."""
    name = f"test-{next(_buckets)}-{int(time.time() * 1000) % 10**8}"
    return s3_server.create_bucket(name)


@pytest.fixture
def store_env(s3_server, monkeypatch):
    """The store's variables (``ctr_model.store``'s names), set in this process for one test."""
    env = {"CTR_S3_ENDPOINT": s3_server.endpoint, "CTR_S3_REGION": s3_server.region,
           "AWS_ACCESS_KEY_ID": s3_server.access_key, "AWS_SECRET_ACCESS_KEY": s3_server.secret_key}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env


@pytest.fixture
def store_client(store_env):
    """A :class:`ctr_model.store.Store` on the test server (an independent reader of what was written)."""
    from ctr_model import store as s3

    return s3.Store(s3.StoreConfig.from_env(store_env))

