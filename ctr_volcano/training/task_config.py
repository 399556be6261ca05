"""KFP's ``dsl.TaskConfig`` -> the gang's pod settings: parse once, validate, merge with the explicit
parameters.

Why: KFP (>= 2.15) lets a component that launches its own workload receive what the user set on the
task with KFP's own API (``set_cpu_request``, ``set_env_variable``, ``kubernetes.add_toleration``,
``add_node_selector``, ``add_node_affinity``, ``mount_pvc``, ``use_secret_as_env``, the run
workspace, ...). The driver writes it into the executor input as Kubernetes JSON (the Go ``TaskConfig``
struct of ``backend/src/v2/driver/driver.go``: every key present, unset ones ``null``); the SDK hands
it to the component as ``dsl.TaskConfig``. :meth:`TaskPodConfig.from_kfp` turns that into one frozen,
validated object; :func:`~ctr_volcano.training.volcano.spec.role_resources` merges it with the component's explicit parameters.

Where each field lands (see docs/kfp-task-config.md):

=================  ===================  ===================  ===========================
TaskConfig field   trainers             pservers             the step's own pod
=================  ===================  ===================  ===========================
resources          cpu, memory, GPUs    cpu, memory (no GPU)  no (``apply_to_task=False``)
env                yes                  yes                  yes (``apply_to_task=True``)
node_selector      yes                  yes                  no
tolerations        yes                  yes                  no
affinity           yes                  yes                  no
volumes/mounts     yes                  yes                  yes (the step writes the hand-off)
=================  ===================  ===================  ===========================

Precedence, one rule: **a setting made on the task the KFP way wins; a component parameter applies
only where the task sets nothing**. Per resource: if the task sets a request or a limit for ``cpu``
(``memory``), the task decides that resource wholly and the ``cpu`` (``memory``) parameter is unused;
an accelerator set on the task replaces ``gpus``. Volumes add up (a claim the task already mounts at
the same path is not mounted twice). Node selector, tolerations and affinity have no parameter.

Refused with :class:`~ctr_volcano.errors.BadInput`: resources other than cpu, memory and one
accelerator; more than one accelerator type; a fractional accelerator count; env names the gang's
contract owns (``CTR_*``, ``VC_*``, ``VK_*``, ``PADDLE_*``); a volume mount naming no volume; two
mounts at one path. ReadWriteOnce claims are refused at run time, when the claim can be read
(:func:`check_claim_access`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ctr_volcano.errors import BadInput

__all__ = ["TaskPodConfig", "EMPTY", "check_claim_access", "RESERVED_ENV_PREFIXES", "MIN_KFP_BACKEND",
           "SHAREABLE_ACCESS_MODES"]

#: The oldest KFP backend that takes a ``dsl.TaskConfig`` parameter and the run workspace (2.14 refuses
#: the package at upload); older backends get the ``--legacy-kfp`` YAML.
MIN_KFP_BACKEND = "2.15"

#: Environment variables the gang's contract and Volcano set; the task may not override them.
RESERVED_ENV_PREFIXES = ("CTR_", "VC_", "VK_", "PADDLE_")
#: Access modes that let pods on several nodes mount one claim at once.
SHAREABLE_ACCESS_MODES = ("ReadWriteMany", "ReadOnlyMany")
_CORE_RESOURCES = ("cpu", "memory")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")


def _plain(value: Any) -> Any:
    """A deep copy made of dicts, lists and scalars (the executor hands JSON-decoded values)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _list_of_dicts(field: str, value: Any) -> Tuple[Dict[str, Any], ...]:
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)):
        raise BadInput(f"task_config.{field}", value, "pass a list of Kubernetes objects")
    for i, item in enumerate(value):
        if not isinstance(item, Mapping):
            raise BadInput(f"task_config.{field}[{i}]", item, "pass a Kubernetes object (a dict)")
    return tuple(_plain(item) for item in value)


@dataclass(frozen=True)
class TaskPodConfig:
    """What the training task's ``dsl.TaskConfig`` asks of the gang's pods, validated.

    Every field is Kubernetes JSON, as the KFP driver wrote it. Empty when there is no TaskConfig
    (``kfp.local``, the CLI, a legacy KFP backend).

    Attributes:
        resources: ``{"requests": {...}, "limits": {...}}`` of one pod (cpu, memory, one accelerator).
        env: ``EnvVar`` objects (``value`` or ``valueFrom``: secrets, config maps, field refs).
        node_selector: node labels every gang pod requires, as sorted ``(key, value)`` pairs.
        tolerations: ``Toleration`` objects.
        affinity: an ``Affinity`` object, or ``None``.
        volumes: ``Volume`` objects (PVCs, the run workspace, secrets, config maps).
        volume_mounts: ``VolumeMount`` objects for the gang's container.
    """

    resources: Tuple[Tuple[str, Tuple[Tuple[str, str], ...]], ...] = ()
    env: Tuple[Dict[str, Any], ...] = ()
    node_selector: Tuple[Tuple[str, str], ...] = ()
    tolerations: Tuple[Dict[str, Any], ...] = ()
    affinity: Optional[Dict[str, Any]] = None
    volumes: Tuple[Dict[str, Any], ...] = ()
    volume_mounts: Tuple[Dict[str, Any], ...] = ()

    def __post_init__(self) -> None:
        for kind, amounts in self.resources:
            if kind not in ("requests", "limits"):
                raise BadInput("task_config.resources", kind, "use only 'requests' and 'limits'")
            for name, qty in amounts:
                if name not in _CORE_RESOURCES and "/" not in name:
                    raise BadInput(f"task_config.resources.{kind}", name,
                                   "set only cpu, memory and an accelerator (set_cpu_request, "
                                   "set_memory_limit, set_accelerator_type/limit)")
        accelerators = {n for _, amounts in self.resources for n, _ in amounts if n not in _CORE_RESOURCES}
        if len(accelerators) > 1:
            raise BadInput("task_config.resources", sorted(accelerators),
                           "set one accelerator type on the training task")
        count = self.accelerator[1]
        if accelerators and (not count.isdigit() or int(count) < 1):
            raise BadInput("task_config.resources.limits", f"{next(iter(accelerators))}={count}",
                           "set a whole accelerator count >= 1 (set_accelerator_limit)")
        for i, var in enumerate(self.env):
            name = str(var.get("name", ""))
            if not _ENV_NAME.match(name):
                raise BadInput(f"task_config.env[{i}].name", name, "use a valid environment variable name")
            if name.startswith(RESERVED_ENV_PREFIXES) or name == "PYTHONUNBUFFERED":
                raise BadInput(f"task_config.env[{i}].name", name,
                               f"{', '.join(p + '*' for p in RESERVED_ENV_PREFIXES)} are set by the gang's "
                               "contract and Volcano; rename the variable")
        for key, value in self.node_selector:
            if not isinstance(value, str):
                raise BadInput(f"task_config.node_selector.{key}", value, "use string label values")
        if self.affinity is not None and not isinstance(self.affinity, Mapping):
            raise BadInput("task_config.affinity", self.affinity, "pass a Kubernetes Affinity object")
        names = [str(v.get("name", "")) for v in self.volumes]
        if len(set(names)) != len(names) or "" in names:
            raise BadInput("task_config.volumes", names, "give every volume a distinct name")
        paths: List[str] = []
        for i, mount in enumerate(self.volume_mounts):
            if mount.get("name") not in names:
                raise BadInput(f"task_config.volume_mounts[{i}].name", mount.get("name"),
                               f"mount one of the task's volumes: {names}")
            path = str(mount.get("mountPath", ""))
            if not path.startswith("/"):
                raise BadInput(f"task_config.volume_mounts[{i}].mountPath", path, "use an absolute path")
            paths.append(path)
        if len(set(paths)) != len(paths):
            raise BadInput("task_config.volume_mounts", paths, "mount one volume per path")

    @classmethod
    def from_kfp(cls, value: Any) -> "TaskPodConfig":
        """Parse the component's ``dsl.TaskConfig`` (or its fields as a mapping).

        Args:
            value: a ``kfp.dsl.TaskConfig`` (attributes ``resources``, ``env``, ``node_selector``,
                ``tolerations``, ``affinity``, ``volumes``, ``volume_mounts``), a mapping with those
                keys, or ``None``. Unset fields are ``None`` (the driver writes JSON ``null``).

        Raises:
            BadInput: a field of the wrong shape or a setting the gang cannot take (see the module doc).
        """
        if value is None:
            return EMPTY
        fields = ("resources", "env", "node_selector", "tolerations", "affinity", "volumes", "volume_mounts")
        get = value.get if isinstance(value, Mapping) else (lambda k: getattr(value, k, None))
        raw = {k: get(k) for k in fields}
        resources = raw["resources"] or {}
        if not isinstance(resources, Mapping):
            raise BadInput("task_config.resources", resources, "pass a ResourceRequirements object")
        frozen_resources = []
        for kind in sorted(resources):
            amounts = resources[kind] or {}
            if not isinstance(amounts, Mapping):
                raise BadInput(f"task_config.resources.{kind}", amounts, "map resource names to quantities")
            if amounts:
                frozen_resources.append((str(kind), tuple(sorted((str(n), str(q)) for n, q in amounts.items()))))
        selector = raw["node_selector"] or {}
        if not isinstance(selector, Mapping):
            raise BadInput("task_config.node_selector", selector, "pass a mapping of node labels")
        affinity = raw["affinity"]
        return cls(
            resources=tuple(frozen_resources),
            env=_list_of_dicts("env", raw["env"]),
            node_selector=tuple(sorted((str(k), v) for k, v in selector.items())),
            tolerations=_list_of_dicts("tolerations", raw["tolerations"]),
            affinity=_plain(affinity) if isinstance(affinity, Mapping) and affinity else affinity or None,
            volumes=_list_of_dicts("volumes", raw["volumes"]),
            volume_mounts=_list_of_dicts("volume_mounts", raw["volume_mounts"]))

    # ------------------------------------------------------------------ views
    def amount(self, kind: str, name: str) -> Optional[str]:
        """The quantity of resource ``name`` under ``requests`` or ``limits``, or ``None``."""
        for k, amounts in self.resources:
            if k == kind:
                return dict(amounts).get(name)
        return None

    @property
    def accelerator(self) -> Tuple[Optional[str], str]:
        """``(resource name, count)`` of the task's accelerator; ``(None, "0")`` when it sets none."""
        for _, amounts in self.resources:
            for name, qty in amounts:
                if name not in _CORE_RESOURCES:
                    return name, str(qty)
        return None, "0"

    def mount_covering(self, path: str) -> Optional[Dict[str, Any]]:
        """The task's volume mount whose ``mountPath`` is ``path`` or a parent of it (longest wins)."""
        best = None
        for mount in self.volume_mounts:
            root = str(mount["mountPath"]).rstrip("/") or "/"
            if path == root or path.startswith(root.rstrip("/") + "/"):
                if best is None or len(root) > len(str(best["mountPath"])):
                    best = mount
        return best

    def claim_of(self, volume_name: str) -> Optional[str]:
        """The PVC behind the task's volume ``volume_name`` (``None`` for secrets, config maps, ...)."""
        for vol in self.volumes:
            if vol.get("name") == volume_name:
                return ((vol.get("persistentVolumeClaim") or {}).get("claimName")) or None
        return None

    def claims(self) -> Tuple[str, ...]:
        """Every PVC the task's volumes reference."""
        return tuple(c for c in (self.claim_of(str(v["name"])) for v in self.volumes) if c)


EMPTY = TaskPodConfig()


def check_claim_access(claim: Mapping[str, Any], *, writes: bool) -> None:
    """Refuse a PVC that a gang spread over nodes cannot share.

    Args:
        claim: the PersistentVolumeClaim as read from the API.
        writes: whether the gang writes to it (the hand-off claim): then only ReadWriteMany will do.

    Raises:
        BadInput: the claim's access modes do not allow it (the gang's pods would hang in
            ContainerCreating on every node but one, or fail to write).
    """
    name = (claim.get("metadata") or {}).get("name")
    modes: Sequence[str] = ((claim.get("status") or {}).get("accessModes")
                            or (claim.get("spec") or {}).get("accessModes") or ())
    wanted = ("ReadWriteMany",) if writes else SHAREABLE_ACCESS_MODES
    if not any(m in wanted for m in modes):
        purpose = "the hand-off claim, written by the step and every gang pod," if writes else "a claim every gang pod mounts"
        raise BadInput(f"volumes.{name}.accessModes", list(modes),
                       f"{purpose} must be {' or '.join(wanted)}: the gang spreads over nodes. Use an "
                       "RWX-capable storage class (NFS, CephFS, EFS, Filestore, Azure Files); for the run "
                       "workspace set accessModes: [ReadWriteMany] in its pvcSpecPatch")
