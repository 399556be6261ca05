"""Volcano Queues for training gangs: a typed spec, a pure builder, the webhook's checks client-side.

Why a builder: with the recommended scheduler configuration (``deploy/volcano-scheduler.conf``, the
``capacity`` plugin) a queue's share is its ``deserved`` resources, not its ``weight``, and a share
only works for gangs when it is a whole number of gangs (docs/scheduling.md). The queue is written
once here, validated the way Volcano's admission webhook validates it (``deserved`` within
``capability``, ``guarantee`` within ``deserved``) and against the real Queue CRD schema in the tests,
and printed by ``ctr-volcano render-queue`` for ``kubectl apply``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

from ctr_volcano.errors import BadInput
from ctr_volcano.util.k8s_syntax import check_quantity, is_dns1123_subdomain

__all__ = ["QUEUES", "QueueSpec", "build_queue", "quantity_value", "validate_queue_against_crd"]

#: Volcano's Queue (cluster-scoped): group, version, plural.
QUEUES = ("scheduling.volcano.sh", "v1beta1", "queues")

_SUFFIX = {"": 1.0, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
           "Ki": 2.0 ** 10, "Mi": 2.0 ** 20, "Gi": 2.0 ** 30, "Ti": 2.0 ** 40, "Pi": 2.0 ** 50, "Ei": 2.0 ** 60}
_AMOUNT = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(e[0-9]+|[A-Za-z]*)$")
#: Queues Volcano keeps for itself: ``root`` is the hierarchy's top and takes no Jobs.
_RESERVED = ("root",)


def quantity_value(value: str) -> float:
    """The number a Kubernetes quantity stands for (``500m`` -> 0.5, ``4Gi`` -> 4294967296.0)."""
    match = _AMOUNT.match(str(value))
    if not match:
        raise BadInput("quantity", value, "use a Kubernetes quantity such as '500m', '2', '4Gi'")
    number, suffix = float(match.group(1)), match.group(2)
    if suffix.startswith("e"):
        return number * 10.0 ** int(suffix[1:])
    if suffix not in _SUFFIX:
        raise BadInput("quantity", value, "use a Kubernetes quantity such as '500m', '2', '4Gi'")
    return number * _SUFFIX[suffix]


@dataclass(frozen=True)
class QueueSpec:
    """One Volcano Queue, as a team's share of the cluster.

    Attributes:
        name: the queue's name (a DNS-1123 subdomain; Jobs name it in ``spec.queue``).
        weight: the queue's weight, used by Volcano's ``proportion`` plugin (a scheduler configured
            with it splits the cluster by weight); the recommended ``capacity`` configuration reads
            ``deserved`` instead. 1..65535.
        deserved: resources the queue is entitled to (``capacity`` plugin): while it holds less and
            has a gang waiting, ``gangreclaim`` evicts whole gangs of reclaimable queues holding more
            than theirs. Make it a whole number of gangs, or the last gang never fits.
        capability: hard cap on what the queue's running gangs may hold; a gang that would exceed it
            waits with ``queue resource quota insufficient`` on its PodGroup.
        guarantee: resources never reclaimed from this queue (reserved for it, whatever others do).
        reclaimable: whether other queues may take back what this queue holds above ``deserved``.
        priority: queue priority: a higher one is served before any lower one, whatever the shares.
    """

    name: str
    weight: int = 1
    deserved: Mapping[str, str] = field(default_factory=dict)
    capability: Mapping[str, str] = field(default_factory=dict)
    guarantee: Mapping[str, str] = field(default_factory=dict)
    reclaimable: bool = True
    priority: int = 0

    def __post_init__(self) -> None:
        if not is_dns1123_subdomain(self.name) or self.name in _RESERVED:
            raise BadInput("name", self.name, "use a lowercase DNS-1123 name other than 'root', e.g. 'team-a'")
        if isinstance(self.weight, bool) or not isinstance(self.weight, int) or not 1 <= self.weight <= 65535:
            raise BadInput("weight", self.weight, "use a whole number from 1 to 65535")
        if isinstance(self.priority, bool) or not isinstance(self.priority, int) or self.priority < 0:
            raise BadInput("priority", self.priority, "use a whole number >= 0")
        for attr in ("deserved", "capability", "guarantee"):
            for resource, amount in getattr(self, attr).items():
                try:
                    check_quantity(attr, amount)
                except BadInput:
                    raise BadInput(attr, f"{resource}={amount}",
                                   "use a Kubernetes quantity such as '500m', '2', '4Gi'") from None
        problems = _limit_problems(self)
        if problems:
            raise problems[0]


def _limit_problems(spec: QueueSpec) -> List[BadInput]:
    """Volcano's webhook rules (``validateResourceQuantityOfQueue``): guarantee <= deserved <= capability."""
    problems = []
    for resource, amount in spec.guarantee.items():
        deserved = spec.deserved.get(resource)
        if deserved is None or quantity_value(deserved) < quantity_value(amount):
            problems.append(BadInput("deserved", f"{resource}={deserved or '(none)'}",
                                     f"give at least the guarantee {resource}={amount}"))
    for resource, amount in spec.deserved.items():
        cap = spec.capability.get(resource)
        if cap is not None and quantity_value(amount) > quantity_value(cap):
            problems.append(BadInput("deserved", f"{resource}={amount}", f"keep it within the capability {resource}={cap}"))
    return problems


def build_queue(spec: QueueSpec) -> Dict[str, Any]:
    """The ``scheduling.volcano.sh/v1beta1`` Queue for ``spec``; empty resource maps are left out."""
    body: Dict[str, Any] = {"weight": spec.weight, "reclaimable": spec.reclaimable}
    for attr in ("deserved", "capability"):
        if getattr(spec, attr):
            body[attr] = dict(getattr(spec, attr))
    if spec.guarantee:
        body["guarantee"] = {"resource": dict(spec.guarantee)}
    if spec.priority:
        body["priority"] = spec.priority
    group, version, _ = QUEUES
    return {"apiVersion": f"{group}/{version}", "kind": "Queue", "metadata": {"name": spec.name}, "spec": body}


def validate_queue_against_crd(queue: Mapping[str, Any], crd_path: str,
                               version: Optional[str] = None) -> List[str]:
    """Problems of ``queue`` against the Queue CRD's schema: JSON-schema errors plus pruned fields."""
    import json

    import jsonschema

    from ctr_volcano.training.volcano.manifest import load_crd_schema, unknown_fields

    schema = load_crd_schema(crd_path, version or QUEUES[1])
    problems = [f"{'.'.join(str(p) for p in e.absolute_path)}: {e.message}"
                for e in jsonschema.Draft7Validator(schema).iter_errors(json.loads(json.dumps(queue)))]
    problems.extend(f"{p}: not in the CRD schema (the API server would drop it)"
                    for p in unknown_fields(queue, schema))
    return problems
