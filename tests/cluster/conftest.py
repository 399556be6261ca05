"""Fixtures of the cluster tier: one real control plane per session, one namespace per test.

The pinned binaries (``tools/minicluster/build.sh``; a cold build takes tens of minutes) and the
project's three images from ``dockerfiles/*`` (``tools/images/imagebuild.py``; minutes cold) are
built in the background while the tests that need no build run (:mod:`tests.prebuild`); the
session fixture starts etcd, kube-apiserver, kube-controller-manager, vc-scheduler,
vc-controller-manager and kwok on 127.0.0.1, and stops them all at the end (the teardown asserts no process is left). Each test gets a fresh namespace and its
own kwok nodes, labelled with the namespace, so tests that size the cluster (gang, stuck gang) do
not see each other's nodes when they pin their pods with a node selector.

The tier is skipped only when the ``go`` tool is missing altogether; the tests of the process nodes,
whose pods run from the built images, are skipped (saying why) where the images cannot be built: no
root, no ``buildah`` or ``mmdebstrap`` (``.ci/run`` installs them where it can).
"""
from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List

import pytest

from tests.prebuild import Prebuild

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "minicluster"))

import minicluster as mc  # noqa: E402  (tools/minicluster is not a package)

sys.path.insert(0, str(REPO / "tools" / "images"))
import imagebuild  # noqa: E402  (tools/images is not a package)

from tests.cluster.helpers import SHIPPED_RBAC  # noqa: E402

NODE_LABEL = "minicluster.test/pool"
_counter = itertools.count()


def pytest_collection_modifyitems(config, items):
    for item in items:
        if _in_tier(item):
            item.add_marker(pytest.mark.cluster)


def _in_tier(item) -> bool:
    return Path(str(item.fspath)).is_relative_to(Path(__file__).parent)


_BUILD = Prebuild("minicluster", "the mini cluster",
                  "the cluster tier needs the 'go' tool (Go >= 1.25) to build its binaries", rank=2, needs=_in_tier)
_IMAGES = Prebuild("images", "the project's images (dockerfiles/*)", _BUILD.no_go, rank=3, needs=_in_tier)


def pytest_collection_finish(session):
    """Queue the binaries' and the images' builds when cluster tests are selected (they run in the
    background while the tests that need no build run: :mod:`tests.prebuild`).

    Not in a fixture, so a cold build (tens of minutes) is not counted against the per-test
    timeout; the images' build is skipped, saying why, where they cannot be built (the cluster
    still runs).
    """
    if any(_in_tier(i) for i in session.items):
        _BUILD.build(session, "preparing the cluster tier's binaries (tools/minicluster/build.sh)",
                     "binaries ready", lambda stream: mc.build_binaries(stream), (mc.ClusterError,))
        reason = imagebuild.missing_tools()
        _IMAGES.build(session, "building the project's images (tools/images/imagebuild.py)", "images ready",
                      lambda stream: imagebuild.build(stream=stream), (imagebuild.ImageBuildError,),
                      reason=None if reason is None else
                      f"the process nodes run pods from the project's images, which cannot be built here: {reason}")


@pytest.fixture(scope="session")
def minicluster_bin() -> Path:
    """Directory of the pinned binaries (built in the background: :mod:`tests.prebuild`)."""
    return Path(str(_BUILD.result(_build_now)))


def _build_now() -> Path:
    """The binaries when the hook did not run (e.g. collected through another path)."""
    if shutil.which("go") is None:
        pytest.skip(_BUILD.no_go)
    return mc.build_binaries()


def built_images() -> Dict[str, "imagebuild.BuiltImage"]:
    """The three built images by name (``trainer``, ``component``, ``serving``); skips the calling test
    where they cannot be built, fails it where their build failed."""
    return _IMAGES.result(lambda: imagebuild.build(stream=sys.stderr))


def image_dirs(*names: str) -> Dict[str, Path]:
    """What ``MiniCluster(images=...)`` takes for the images ``names`` (default: all three)."""
    return {img.ref: img.dir for name, img in built_images().items() if name in (names or imagebuild.NAMES)}


@pytest.fixture(scope="session")
def cluster(minicluster_bin, tmp_path_factory):
    """The running mini cluster (a :class:`minicluster.MiniCluster`)."""
    workdir = tmp_path_factory.mktemp("minicluster")
    # the process nodes run the three built images (none where they cannot be built: then every
    # test that adds a process node is skipped or failed by ``Sandbox.add_process_nodes``)
    images = {img.ref: img.dir for img in (_IMAGES.value or {}).values()}
    c = mc.MiniCluster(minicluster_bin, workdir, schedule_period="500ms", process_nodes=True, images=images)
    try:
        c.start()
        yield c
    finally:
        pids = c.pids()
        namespaces_before = c.process_namespaces()
        pod_pids = [int(p) for ns in namespaces_before for p in subprocess.run(
            ["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()]
        c.stop()
        left = [p for p in pids + pod_pids if _pid_alive(p)]
        assert not left, f"minicluster processes left running: {left}"
        assert not c.process_namespaces(), f"network namespaces left: {c.process_namespaces()}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover
        return True
    # A zombie is gone for our purposes; /proc tells.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


@dataclass
class Sandbox:
    """One test's namespace and nodes in the shared cluster."""

    cluster: "mc.MiniCluster"
    namespace: str
    pool: str
    nodes: List[str] = field(default_factory=list)
    #: kubeconfig of the ServiceAccount bound by the shipped deploy/rbac.yaml (not admin).
    launcher_kubeconfig: str = ""
    #: called at teardown, after the pods and nodes are gone (cluster-scoped objects of the test)
    cleanup: List[Callable[[], object]] = field(default_factory=list)

    @property
    def node_selector(self) -> Dict[str, str]:
        """Pin pods to this test's nodes."""
        return {NODE_LABEL: self.pool}

    def add_nodes(self, count: int, cpu: str = "4", memory: str = "16Gi", pods: int = 110) -> List[str]:
        names = self.cluster.add_nodes(count, mc.NodeShape(cpu=cpu, memory=memory, pods=pods,
                                                           labels={NODE_LABEL: self.pool}),
                                       prefix=f"{self.pool}-n", start=len(self.nodes))
        self.nodes.extend(names)
        return names

    def add_process_nodes(self, count: int, cpu: str = "4", memory: str = "16Gi") -> List[str]:
        """Process-backed nodes (their pods run as real processes, from the built images) in this
        test's pool; the test is skipped or failed here when the images are not there."""
        built_images()
        names = self.cluster.add_process_nodes(count, mc.NodeShape(cpu=cpu, memory=memory,
                                                                   labels={NODE_LABEL: self.pool}),
                                               prefix=f"{self.pool}-p", start=len(self.nodes))
        self.nodes.extend(names)
        return names

    def api(self):
        return self.cluster.api_client()


def apply_launcher_rbac(cluster, namespace: str) -> Path:
    """Apply the shipped ``deploy/rbac.yaml`` in ``namespace`` (as ``kubectl apply -n`` would: the
    objects' and the binding subjects' namespace become ``namespace``), create the ServiceAccount it
    binds, and return a kubeconfig holding that ServiceAccount's token."""
    import yaml
    from kubernetes import client

    api = cluster.api_client()
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    accounts = []
    for doc in yaml.safe_load_all(SHIPPED_RBAC.read_text()):
        if not doc:
            continue
        doc["metadata"]["namespace"] = namespace
        kind = doc["kind"]
        if kind == "ServiceAccount":
            core.create_namespaced_service_account(namespace, doc)
            accounts.append(doc["metadata"]["name"])
        elif kind == "Role":
            rbac.create_namespaced_role(namespace, doc)
        elif kind == "RoleBinding":
            for subject in doc["subjects"]:
                subject["namespace"] = namespace
                if subject["kind"] == "ServiceAccount" and subject["name"] not in accounts:
                    core.create_namespaced_service_account(namespace, {
                        "apiVersion": "v1", "kind": "ServiceAccount",
                        "metadata": {"name": subject["name"]}})
                    accounts.append(subject["name"])
            rbac.create_namespaced_role_binding(namespace, doc)
        else:
            raise AssertionError(f"{SHIPPED_RBAC} holds a {kind}; the launcher's RBAC must stay namespaced")
    assert len(accounts) == 1, f"{SHIPPED_RBAC} should bind exactly one ServiceAccount: {accounts}"
    return cluster.service_account_kubeconfig(namespace, accounts[0])


@pytest.fixture
def sandbox(cluster, request) -> Sandbox:
    """A fresh namespace plus a private node pool; jobs, pods and nodes are removed afterwards."""
    from kubernetes import client

    pool = f"t{os.getpid() % 1000}-{next(_counter)}"
    ns = cluster.create_namespace(f"ns-{pool}")
    box = Sandbox(cluster, ns, pool)
    box.launcher_kubeconfig = str(apply_launcher_rbac(cluster, ns))
    yield box
    co = client.CustomObjectsApi(cluster.api_client())
    core = client.CoreV1Api(cluster.api_client())
    for job in co.list_namespaced_custom_object("batch.volcano.sh", "v1alpha1", ns, "jobs")["items"]:
        try:
            co.delete_namespaced_custom_object("batch.volcano.sh", "v1alpha1", ns, "jobs",
                                               job["metadata"]["name"],
                                               body={"propagationPolicy": "Background"})
        except client.ApiException as exc:
            if exc.status != 404:
                raise
    core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
    cluster.delete_nodes(box.nodes)
    for fn in box.cleanup:
        fn()
    core.delete_namespace(ns)


@pytest.fixture(scope="session")
def planted(tmp_path_factory) -> Dict[str, object]:
    """200k planted rows (``ctr-volcano gen-data``, with its oracle), prepped into 2 train shards."""
    import json

    from tests.cluster.helpers import ctr_volcano_cli

    root = tmp_path_factory.mktemp("planted")
    ctr_volcano_cli("gen-data", "--rows", "200000", "--out", str(root / "raw"), "--seed", "3",
                    "--oracle-rows", "100000")
    ctr_volcano_cli("prep", "--input", str(root / "raw"), "--out", str(root / "prep"), "--shards", "2",
                    "--hash-buckets", "100003")
    oracle = json.loads((root / "raw" / "oracle.json").read_text())
    return {"prep": str(root / "prep"), "oracle_auc": float(oracle["auc"])}
