"""Network-topology-aware gangs (issue 40, scenario c), with real Paddle gangs on process nodes.

Four process nodes of 2 CPUs in two leaf HyperNodes of two nodes each (tier 1, 4 CPUs a leaf) under
one spine (tier 2), made by ``tools/minicluster/topology.py``; vc-scheduler runs the shipped
``deploy/volcano-scheduler.conf`` with its ``network-topology-aware`` plugin. In turn, on the empty
cluster:

1. a 2x2 gang of 1-CPU pods with ``network_topology="hard"``, ``highest_tier_allowed=1``: every pod
   of every attempt lands in one leaf, the gang trains and completes. (Without the constraint,
   ``nodeorder`` spreads four pods over the four nodes, so both leaves.)
2. a 2x2 gang of 1.5-CPU pods (6 CPUs: more than a leaf, less than the cluster) with the same hard
   constraint: never bound, the PodGroup carries the Job's ``networkTopology``, and the step fails
   after ``schedule_timeout_s`` with the PodGroup's reason (``Unschedulable``) in its error.
3. the same 6-CPU gang with ``network_topology="soft"``: placed across both leaves anyway, completes.

Not run in this branch's session (the lead's CI held the machine's only mini cluster).
"""
from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Dict, Set

import pytest

from tests.cluster.helpers import GangMonitor, _core, get_podgroups, job_phase, wait_for
from tests.cluster.test_process_nodes import StepThread, _claim, _params

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "minicluster"))

import topology  # noqa: E402  (tools/minicluster is not a package)

pytestmark = pytest.mark.cluster

GANG = 4


class Placements:
    """Every node each pod of ``job`` was bound to while the test ran (pods come and go: pservers
    are deleted when the trainers complete)."""

    def __init__(self, api, namespace: str, job: str, interval: float = 0.3) -> None:
        self.api, self.namespace, self.job, self.interval = api, namespace, job, interval
        self.nodes: Dict[str, Set[str]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"placements-{job}", daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            for pod in _core(self.api).list_namespaced_pod(
                    self.namespace, label_selector=f"volcano.sh/job-name={self.job}").items:
                if pod.spec.node_name:
                    self.nodes.setdefault(pod.metadata.name, set()).add(pod.spec.node_name)
            self._stop.wait(self.interval)

    def __enter__(self) -> "Placements":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(10)

    def all_nodes(self) -> Set[str]:
        return set().union(*self.nodes.values()) if self.nodes else set()


def _topology(sandbox) -> Dict[str, list]:
    nodes = sandbox.add_process_nodes(4, cpu="2")
    leaves = {f"{sandbox.pool}-leaf-a": nodes[:2], f"{sandbox.pool}-leaf-b": nodes[2:]}
    api = sandbox.api()
    names = topology.apply_hypernodes(api, topology.hypernodes(leaves, f"{sandbox.pool}-spine"))
    sandbox.cleanup.append(lambda: topology.delete_hypernodes(api, names))
    return leaves


def _leaves_of(placed: Set[str], leaves: Dict[str, list]) -> Set[str]:
    return {leaf for leaf, nodes in leaves.items() if placed & set(nodes)}


def test_hard_topology_keeps_a_gang_in_one_leaf_and_soft_places_it_anyway(sandbox, tmp_path, planted):
    api, ns = sandbox.api(), sandbox.namespace
    leaves = _topology(sandbox)
    claim = _claim(sandbox, tmp_path)
    hard = dict(network_topology="hard", highest_tier_allowed=1)

    with Placements(api, ns, "ctr-hard") as fit:
        step = StepThread(planted["prep"], str(tmp_path / "ctr-hard"), _params(
            sandbox, claim, "ctr-hard", epochs=1, schedule_timeout_s=300, **hard)).start()
        step.join(900)
    step.succeeded()
    assert job_phase(api, ns, "ctr-hard") == "Completed"
    assert len(fit.nodes) >= GANG, fit.nodes
    assert len(_leaves_of(fit.all_nodes(), leaves)) == 1, (fit.nodes, leaves)

    t0 = time.monotonic()
    with Placements(api, ns, "ctr-wide-hard") as wide:
        monitor = GangMonitor(api, ns, ["ctr-wide-hard"], GANG, interval=0.5).start()
        waiting = StepThread(planted["prep"], str(tmp_path / "ctr-wide-hard"), _params(
            sandbox, claim, "ctr-wide-hard", epochs=1, cpu="1500m", schedule_timeout_s=60, **hard)).start()
        pg = wait_for("the wide gang's PodGroup", lambda: next(
            (p for p in get_podgroups(api, ns) if "ctr-wide-hard" in p["metadata"]["name"]), None), timeout=60)
        waiting.join(300)
        monitor.stop()
    waited = time.monotonic() - t0
    assert pg["spec"].get("networkTopology") == {"mode": "hard", "highestTierAllowed": 1}, pg["spec"]
    assert waiting.error is not None, waiting.log
    reason = str(waiting.error)
    print(f"\nhard gang of 4 x 1 CPU: pods on {sorted(fit.all_nodes())} (leaf "
          f"{_leaves_of(fit.all_nodes(), leaves)}); 6-CPU hard gang waited {waited:.0f}s: {reason}")
    assert "Unschedulable" in reason and "schedule_timeout_s" in waiting.log, (reason, waiting.log)
    assert wide.nodes == {} and max(s["ctr-wide-hard"] for s in monitor.samples) == 0, wide.nodes

    with Placements(api, ns, "ctr-wide-soft") as soft:
        placed = StepThread(planted["prep"], str(tmp_path / "ctr-wide-soft"), _params(
            sandbox, claim, "ctr-wide-soft", epochs=1, cpu="1500m", schedule_timeout_s=300,
            network_topology="soft")).start()
        placed.join(900)
    placed.succeeded()
    print(f"soft 6-CPU gang: pods on {sorted(soft.all_nodes())}")
    assert job_phase(api, ns, "ctr-wide-soft") == "Completed"
    assert len(_leaves_of(soft.all_nodes(), leaves)) == 2, soft.nodes
