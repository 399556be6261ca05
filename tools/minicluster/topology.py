"""HyperNodes over the mini cluster's nodes: the network topology Volcano's scheduler places by.

A HyperNode (``topology.volcano.sh/v1alpha1``, Volcano >= 1.12, cluster-scoped) is a group of nodes
(tier 1, a leaf: one switch or rack) or of HyperNodes (tier 2 and up: a spine). The tier's process
nodes share one host, so their "network" is a label; what the scheduler does with a Job's
``networkTopology`` is real: vc-scheduler's ``network-topology-aware`` plugin (in
``deploy/volcano-scheduler.conf``) places a ``hard`` gang only inside one HyperNode of a tier up to
its ``highestTierAllowed``. The tier applies the HyperNode CRD with Volcano's other runtime CRDs
(``shared/volcano/crd/runtime``).

On a real cluster the same objects come from vc-controller-manager's label discovery
(``docs/scheduling.md``, Topology); here they are written explicitly so a test controls the groups.

:func:`hypernodes` is pure (a test checks it against the real CRD); :func:`apply_hypernodes` and
:func:`delete_hypernodes` do the API calls.
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Sequence

__all__ = ["GROUP", "VERSION", "PLURAL", "hypernodes", "apply_hypernodes", "delete_hypernodes"]

GROUP, VERSION, PLURAL = "topology.volcano.sh", "v1alpha1", "hypernodes"


def _hypernode(name: str, tier: int, kind: str, members: Sequence[str]) -> Dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "HyperNode", "metadata": {"name": name},
            "spec": {"tier": tier, "members": [{"type": kind, "selector": {"exactMatch": {"name": m}}}
                                               for m in members]}}


def hypernodes(leaves: Mapping[str, Sequence[str]], spine: str) -> List[Dict[str, Any]]:
    """One tier-1 HyperNode per leaf (its nodes, by name) and one tier-2 spine over the leaves.

    Args:
        leaves: leaf HyperNode name -> the names of its nodes (a node in one leaf only).
        spine: the spine HyperNode's name.

    Raises:
        ValueError: an empty leaf, or a node in two leaves (Volcano would place by either).
    """
    seen: Dict[str, str] = {}
    for leaf, nodes in leaves.items():
        if not nodes:
            raise ValueError(f"leaf {leaf} has no nodes")
        for node in nodes:
            if node in seen:
                raise ValueError(f"node {node} is in leaves {seen[node]} and {leaf}")
            seen[node] = leaf
    objects = [_hypernode(leaf, 1, "Node", nodes) for leaf, nodes in leaves.items()]
    objects.append(_hypernode(spine, 2, "HyperNode", list(leaves)))
    return objects


def apply_hypernodes(api: Any, objects: Sequence[Mapping[str, Any]]) -> List[str]:
    """Create ``objects`` (leaves before the spine, as :func:`hypernodes` orders them); their names."""
    from kubernetes import client

    co = client.CustomObjectsApi(api)
    for obj in objects:
        co.create_cluster_custom_object(GROUP, VERSION, PLURAL, dict(obj))
    return [str(obj["metadata"]["name"]) for obj in objects]


def delete_hypernodes(api: Any, names: Sequence[str]) -> None:
    """Delete the named HyperNodes (spine first), ignoring those already gone."""
    from kubernetes import client

    co = client.CustomObjectsApi(api)
    for name in reversed(list(names)):
        try:
            co.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)
        except client.ApiException as exc:
            if exc.status != 404:
                raise
