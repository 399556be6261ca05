"""``ctr-volcano minicluster build|up``: the local Kubernetes + Volcano cluster of the test tier.

Why a verb: trying the Volcano launcher by hand needs a cluster with a real Volcano scheduler; the
one the cluster tests use (built from Go modules by ``tools/minicluster/build.sh``, run by
``tools/minicluster/minicluster.py``) is one command away, with no container engine. It is a
development tool: it needs a source checkout (``tools/`` is not installed with the package) and Go.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Optional

from ctr_model.reach import first_blocker
from ctr_volcano.app.catalogue import SOURCE_ROOT
from ctr_volcano.errors import BadInput
from ctr_volcano.training.params import DEFAULT_PVC_NAME
from ctr_volcano.training.volcano.spec import DEFAULT_UID

__all__ = ["register", "load_minicluster", "MINICLUSTER_PY"]

MINICLUSTER_PY = SOURCE_ROOT / "tools" / "minicluster" / "minicluster.py"


def load_minicluster() -> Any:
    """Import ``tools/minicluster/minicluster.py`` from the source checkout."""
    if not MINICLUSTER_PY.is_file():
        raise BadInput("minicluster", str(MINICLUSTER_PY),
                       "run from a source checkout of ctr-volcano (pip install -e .); tools/ is not "
                       "part of the installed package")
    spec = importlib.util.spec_from_file_location("minicluster", MINICLUSTER_PY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("minicluster", module)
    spec.loader.exec_module(module)
    return module


def _build(args: argparse.Namespace) -> int:
    mc = load_minicluster()
    if args.print_dir:
        print(mc.binaries_dir())
        return 0
    try:
        print(mc.build_binaries())
    except mc.ClusterError as exc:
        raise BadInput("go build", "tools/minicluster/build.sh", str(exc)) from None
    return 0


#: The claim ``minicluster up --process-nodes`` creates for the PVC hand-off.
CLAIM_NAME = DEFAULT_PVC_NAME
CLAIM_NAMESPACE = "default"


def _create_claim(mc: Any, cluster: Any, host_dir: Path) -> None:
    """The ReadWriteMany claim ``default/ctr-data`` on a hostPath volume over ``host_dir``, bound by
    kube-controller-manager's persistent-volume binder."""
    import time

    from kubernetes import client

    from ctr_volcano.training.volcano.handoff import build_pvc

    cluster.create_host_volume("ctr-data-host", host_dir, CLAIM_NAMESPACE, CLAIM_NAME)
    core = client.CoreV1Api(cluster.api_client())
    core.create_namespaced_persistent_volume_claim(CLAIM_NAMESPACE, build_pvc(CLAIM_NAME, CLAIM_NAMESPACE))
    deadline = time.monotonic() + 60
    while core.read_namespaced_persistent_volume_claim(CLAIM_NAME, CLAIM_NAMESPACE).status.phase != "Bound":
        if time.monotonic() > deadline:
            raise mc.ClusterError(f"claim {CLAIM_NAMESPACE}/{CLAIM_NAME} not Bound after 60s; see "
                                  f"{cluster.logs.get('kube-controller-manager')}")
        time.sleep(0.3)


def check_workdir_reachable(workdir: Optional[Path], uid: int = DEFAULT_UID,
                            stat: Callable[[str], os.stat_result] = os.stat) -> None:
    """Refuse a workdir the gang's pods cannot reach, before anything is built or started.

    The claim's host directory is ``<workdir>/ctr-data`` and the pods (non-root ``uid``) see it at
    that very path, so every directory above the workdir must let ``uid`` through; the workdir
    itself is made traversable by ``up``. ``None``: the default, a new directory in the temp dir.
    """
    parent = (workdir.parent if workdir is not None else Path(tempfile.gettempdir())).resolve()
    blocker = first_blocker(str(parent), uid, (uid,), write=False, stat=stat)
    if blocker is not None:
        raise BadInput("--workdir", str(workdir if workdir is not None else parent),
                       f"the gang's pods cannot reach the claim there: {blocker.describe(uid)}; "
                       f"choose a workdir under a directory every user can traverse (e.g. /var/tmp)")


def _up(args: argparse.Namespace) -> int:
    if args.nodes is None:
        args.nodes = 0 if args.process_nodes else 3
    if args.nodes < 0:
        raise BadInput("--nodes", args.nodes, "use 0 or more nodes")
    if args.process_nodes < 0:
        raise BadInput("--process-nodes", args.process_nodes, "use 0 or more nodes")
    workdir = Path(args.workdir).resolve() if args.workdir else None
    if args.process_nodes:
        check_workdir_reachable(workdir)
    mc = load_minicluster()
    try:
        bin_dir = mc.build_binaries()
    except mc.ClusterError as exc:
        raise BadInput("go build", "tools/minicluster/build.sh", str(exc)) from None
    if workdir is not None:
        workdir.mkdir(parents=True, exist_ok=True)
    cluster = mc.MiniCluster(bin_dir, workdir, keep_workdir=True,
                             schedule_period=args.schedule_period,
                             process_nodes=args.process_nodes > 0)
    # Block the signals first so a Ctrl-C during start-up still reaches the cleanup below.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        cluster.start()
        if args.nodes:
            cluster.add_nodes(args.nodes, mc.NodeShape(cpu=args.cpu, memory=args.memory, pods=args.pods))
        shape = mc.NodeShape(cpu=args.cpu, memory=args.memory, pods=args.pods)
        if args.process_nodes:
            cluster.add_process_nodes(args.process_nodes, shape)
            claim_dir = cluster.workdir / CLAIM_NAME
            # the pods run as UID 1000 and reach the claim at this very path
            cluster.workdir.chmod(0o711)
            _create_claim(mc, cluster, claim_dir)
        print(f"export KUBECONFIG={cluster.kubeconfig}", flush=True)
        if args.process_nodes:
            print(f"# claim {CLAIM_NAMESPACE}/{CLAIM_NAME} (ReadWriteMany) is the host directory "
                  f"{claim_dir}", flush=True)
            print(f"CLAIM_DIR={claim_dir}", flush=True)
        print(f"# {args.nodes} kwok node(s) and {args.process_nodes} process node(s) of cpu={args.cpu} "
              f"memory={args.memory}; logs in {cluster.workdir / 'logs'}; Ctrl-C stops everything",
              flush=True)
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
    except mc.ClusterError as exc:
        raise BadInput("minicluster", str(cluster.workdir), str(exc)) from None
    finally:
        cluster.stop()
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    return 0


def register(subparsers: Any) -> None:
    """Add ``minicluster build`` and ``minicluster up``."""
    p = subparsers.add_parser(
        "minicluster", help="build or run the local Kubernetes + Volcano + kwok cluster (dev/test)",
        description="A throw-away cluster on 127.0.0.1 built from Go modules: etcd, kube-apiserver, "
                    "kube-controller-manager, vc-scheduler, vc-controller-manager and kwok nodes.")
    sub = p.add_subparsers(dest="minicluster_command", metavar="ACTION")
    sub.required = True
    b = sub.add_parser("build", help="build the pinned binaries into ~/.cache/ctr-volcano (once)")
    b.add_argument("--print-dir", action="store_true", help="only print where the binaries go")
    b.set_defaults(func=_build)
    u = sub.add_parser("up", help="start the cluster and wait for Ctrl-C")
    u.add_argument("--nodes", type=int, default=None,
                   help="kwok (simulated) nodes to create (default: 3, or 0 with --process-nodes)")
    u.add_argument("--process-nodes", type=int, default=0,
                   help="nodes whose pods run as real processes (default: 0); also creates the "
                        "ReadWriteMany claim default/ctr-data on a host directory for the hand-off")
    u.add_argument("--cpu", default="4", help="allocatable cpu per node (default: %(default)s)")
    u.add_argument("--memory", default="16Gi", help="allocatable memory per node (default: %(default)s)")
    u.add_argument("--pods", type=int, default=110, help="pods per node (default: %(default)s)")
    u.add_argument("--schedule-period", default="1s", help="vc-scheduler period (default: %(default)s)")
    u.add_argument("--workdir", default=None, help="keep certificates, data and logs here "
                                                   "(default: a new temp dir, kept)")
    u.set_defaults(func=_up)
