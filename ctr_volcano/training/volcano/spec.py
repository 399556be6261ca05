"""The typed description of one training gang on Volcano, validated once.

:class:`TrainJobSpec` is what a caller (the KFP component, the CLI, a test) fills in; everything
derivable (gang size, per-task env, ports, policies, DNS names) is derived from it by
:func:`ctr_volcano.training.volcano.manifest.build_job`. Validation happens here, in ``__post_init__``, so a
bad value fails with :class:`~ctr_volcano.errors.BadInput` naming the field and the fix before any
API call is made.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional, Tuple

from ctr_model.checks import is_int, is_positive
from ctr_model.defaults import DEFAULT_GLOO_PORT, DEFAULT_PS_PORT
from ctr_volcano.errors import BadInput
from ctr_volcano.training.params import (
    DEFAULT_SCHEDULE_TIMEOUT_S,
    DEFAULT_STALL_TIMEOUT_S,
    DEFAULT_TTL_S,
    check_network_topology,
)
from ctr_volcano.training.store_access import SCRATCH_MOUNT, ObjectStore, SecretEnv
from ctr_volcano.training.task_config import RESERVED_ENV_PREFIXES, TaskPodConfig
from ctr_volcano.util.k8s_syntax import (
    ENV_NAME,
    LABEL_KEY,
    LABEL_VALUE,
    check_quantity,
    is_dns1035_label,
    is_dns1123_label,
    is_dns1123_subdomain,
    quantity_number,
)
from ctr_volcano.version import __version__

__all__ = ["Resources", "PvcVolume", "TrainJobSpec", "role_resources", "DEFAULT_PS_PORT", "DEFAULT_GLOO_PORT",
           "DEFAULT_UID", "PREEMPTION_RESTARTS"]

_RESERVED = ", ".join(f"{p}*" for p in RESERVED_ENV_PREFIXES)

#: Non-root user the pods run as (the trainer image creates it; see dockerfiles/Dockerfile.trainer).
DEFAULT_UID = 1000
#: Restarts after the scheduler evicted the gang to make room for another (gangpreempt,
#: gangreclaim) that the Job's ``maxRetry`` allows beyond ``max_retry``: Volcano counts every
#: restart, the launcher only the others (:mod:`~ctr_volcano.training.volcano.preemption`). A gang
#: evicted more often than this in one run fails, as Volcano's ``maxRetry`` says.
PREEMPTION_RESTARTS = 10

@dataclass(frozen=True)
class Resources:
    """Requests/limits of one role's pods.

    Attributes:
        cpu: CPU request (Kubernetes quantity). A gang is scheduled only if every pod's request fits.
        memory: memory request; also the memory limit unless ``memory_limit`` is set, so an
            over-allocating pod is OOM-killed visibly instead of starving its node.
        cpu_limit: CPU limit; ``None`` leaves CPU unlimited (Paddle's brpc threads burst).
        memory_limit: memory limit; ``None`` means equal to ``memory``.
        gpu: number of GPUs (requests = limits, as Kubernetes requires for extended resources).
        gpu_resource: the extended resource name of the GPU device plugin.
    """

    cpu: str = "1"
    memory: str = "2Gi"
    cpu_limit: Optional[str] = None
    memory_limit: Optional[str] = None
    gpu: int = 0
    gpu_resource: str = "nvidia.com/gpu"

    def __post_init__(self) -> None:
        check_quantity("cpu", self.cpu)
        check_quantity("memory", self.memory)
        check_quantity("cpu_limit", self.cpu_limit)
        check_quantity("memory_limit", self.memory_limit)
        for name in ("cpu", "memory", "cpu_limit", "memory_limit"):
            value = getattr(self, name)
            if quantity_number(value) == 0:
                raise BadInput(name, value, "use a positive quantity: a zero limit makes every pod "
                                            "unschedulable or OOM-killed at once")
        if not is_int(self.gpu, 0):
            raise BadInput("gpu", self.gpu, "use a whole number of GPUs >= 0")
        if "/" not in self.gpu_resource:
            raise BadInput("gpu_resource", self.gpu_resource,
                           "use an extended resource name like 'nvidia.com/gpu'")

    def to_k8s(self) -> Dict[str, Dict[str, str]]:
        """The container ``resources`` object."""
        requests = {"cpu": str(self.cpu), "memory": str(self.memory)}
        limits = {"memory": str(self.memory_limit or self.memory)}
        if self.cpu_limit:
            limits["cpu"] = str(self.cpu_limit)
        if self.gpu:
            requests[self.gpu_resource] = str(self.gpu)
            limits[self.gpu_resource] = str(self.gpu)
        return {"requests": requests, "limits": limits}


@dataclass(frozen=True)
class PvcVolume:
    """A PersistentVolumeClaim mounted into every pod of the job.

    Attributes:
        claim_name: the PVC's name (must exist in the job's namespace; ReadWriteMany for shared data).
        mount_path: where it appears in the containers.
        sub_path: optional sub-directory of the volume to mount.
        read_only: mount read-only.
    """

    claim_name: str
    mount_path: str
    sub_path: Optional[str] = None
    read_only: bool = False

    def __post_init__(self) -> None:
        if not is_dns1123_subdomain(self.claim_name):
            raise BadInput("volumes.claim_name", self.claim_name,
                           "use the name of an existing PersistentVolumeClaim (lower case, DNS-1123)")
        if not self.mount_path.startswith("/") or ":" in self.mount_path:
            raise BadInput("volumes.mount_path", self.mount_path,
                           "use an absolute path without ':' such as /mnt/ctr")


def _freeze_mapping(value: Optional[Mapping[str, Any]]) -> Tuple[Tuple[str, Any], ...]:
    return tuple(sorted((value or {}).items()))


@dataclass(frozen=True)
class TrainJobSpec:
    """Everything needed to render and run one pserver/trainer gang as a Volcano Job.

    Mapping-valued fields may be given as dicts; they are stored as sorted tuples of pairs so the
    spec stays hashable and immutable (read them back with ``dict(spec.labels)``).

    Attributes:
        name: the Job name (DNS-1035 label; see :func:`~ctr_volcano.training.volcano.names.job_name_for`).
        namespace: the namespace of the Job, its pods, PVCs and Secrets.
        image: the training runtime image (``ctr_volcano.images.trainer_image()``).
        data_dir: the prep output as the pods see it: a directory on a shared volume, or an
            ``s3://`` URI with ``object_store``.
        output_dir: where the pods write ``model/``, ``metrics.json`` and ``checkpoints/`` (a
            directory on a shared volume, or an ``s3://`` prefix with ``object_store``).
        pservers: parameter-server replicas (the ``pserver`` task).
        trainers: trainer replicas (the ``trainer`` task).
        train_config: the training config (JSON-able); ``ctr_model`` validates it in the pod.
        pserver_resources: requests/limits of each pserver pod.
        trainer_resources: requests/limits of each trainer pod.
        queue: the Volcano queue (must exist and be Open).
        priority_class: a PriorityClass name; ``None`` for the cluster default.
        network_topology: ``"hard"`` or ``"soft"``: the Job's ``networkTopology.mode`` (the whole
            gang within one HyperNode); ``None`` for no constraint.
        highest_tier_allowed: the highest HyperNode tier a ``hard`` gang may span.
        max_retry: how many times the whole gang is restarted after a pod fails or is evicted
            (a lost node, a drain); restarts after the scheduler evicted the gang to make room for
            another (preemption, reclaim) are not counted (:mod:`~ctr_volcano.training.volcano.preemption`).
        ttl_seconds_after_finished: Volcano deletes the finished Job after this long; ``None`` keeps it.
        schedule_timeout_s: how long the launcher lets the gang stay Pending before giving up.
        stall_timeout_s: the launcher fails the step and deletes the Job when a Running trainer's
            log gains no line for this long (see :mod:`ctr_volcano.training.volcano.stall`); trainers log
            progress every 10 s, so the default leaves room for start-up and checkpoints.
        node_selector: node labels every pod requires.
        tolerations: Kubernetes toleration objects (dicts).
        affinity: a Kubernetes affinity object (dict) for every pod.
        service_account: the pods' service account; ``None`` for the namespace default.
        image_pull_secrets: names of docker-registry Secrets.
        image_pull_policy: ``Always``, ``IfNotPresent`` or ``Never``; ``None`` for Kubernetes' default.
        volumes: PVCs mounted into every pod.
        env_from_secrets: environment variables read from Secrets.
        env: extra plain environment variables (not the contract's ``CTR_*`` ones).
        env_vars: extra ``EnvVar`` objects as Kubernetes JSON (``value`` or ``valueFrom``), e.g. from
            the KFP task's TaskConfig.
        extra_volumes: further ``Volume`` objects as Kubernetes JSON (the KFP task's PVCs, run
            workspace, secrets, config maps), mounted by ``extra_volume_mounts``.
        extra_volume_mounts: ``VolumeMount`` objects for ``extra_volumes``, in every container.
        labels: extra labels on the Job and its pods.
        annotations: extra annotations on the Job.
        ps_port: the port every pserver listens on.
        gloo_port: Paddle's Gloo HTTP rendezvous port, served by pserver 0.
        run_id: the KFP run id (label only; the name already encodes it).
        task_name: the KFP task name (label only).
        run_as_user: the non-root UID (and GID/fsGroup) of every container.
        disable_network_policy: pass ``--disable-network-policy`` to Volcano's svc plugin, for
            clusters where something outside the job must reach the pods.
        scheduler_name: the Volcano scheduler's name.
        shm_size: size of an in-memory ``/dev/shm`` (Paddle's data loader uses shared memory);
            ``None`` keeps the container runtime's 64 MiB default.
        owner_references: ownerReferences of the Job (e.g. the KFP run's Argo Workflow, so deleting
            the run garbage-collects the gang); same namespace only.
        init_model: an exported model on a volume every pod mounts, loaded by the pservers before
            the first epoch (warm start); ``None`` trains from scratch.
        object_store: hand data and results over S3 instead of a shared volume (``None``: volume).
    """

    name: str
    namespace: str
    image: str
    data_dir: str
    output_dir: str
    pservers: int = 2
    trainers: int = 2
    train_config: Any = ()
    pserver_resources: Resources = field(default_factory=Resources)
    trainer_resources: Resources = field(default_factory=Resources)
    queue: str = "default"
    priority_class: Optional[str] = None
    network_topology: Optional[str] = None
    highest_tier_allowed: Optional[int] = None
    max_retry: int = 2
    ttl_seconds_after_finished: Optional[int] = DEFAULT_TTL_S
    schedule_timeout_s: int = DEFAULT_SCHEDULE_TIMEOUT_S
    stall_timeout_s: float = DEFAULT_STALL_TIMEOUT_S
    node_selector: Any = ()
    tolerations: Tuple[Mapping[str, Any], ...] = ()
    affinity: Optional[Mapping[str, Any]] = None
    service_account: Optional[str] = None
    image_pull_secrets: Tuple[str, ...] = ()
    image_pull_policy: Optional[str] = None
    volumes: Tuple[PvcVolume, ...] = ()
    env_from_secrets: Tuple[SecretEnv, ...] = ()
    env: Any = ()
    env_vars: Tuple[Mapping[str, Any], ...] = ()
    extra_volumes: Tuple[Mapping[str, Any], ...] = ()
    extra_volume_mounts: Tuple[Mapping[str, Any], ...] = ()
    labels: Any = ()
    annotations: Any = ()
    ps_port: int = DEFAULT_PS_PORT
    gloo_port: int = DEFAULT_GLOO_PORT
    run_id: Optional[str] = None
    task_name: Optional[str] = None
    run_as_user: int = DEFAULT_UID
    disable_network_policy: bool = False
    scheduler_name: str = "volcano"
    shm_size: Optional[str] = None
    owner_references: Tuple[Mapping[str, Any], ...] = ()
    init_model: Optional[str] = None
    object_store: Optional[ObjectStore] = None

    def __post_init__(self) -> None:
        for name in ("train_config", "node_selector", "env", "labels", "annotations"):
            value = getattr(self, name)
            if isinstance(value, Mapping):
                object.__setattr__(self, name, _freeze_mapping(value))
            elif not isinstance(value, tuple):
                raise BadInput(name, value, "pass a mapping (dict)")
        for name in ("tolerations", "image_pull_secrets", "volumes", "env_from_secrets", "owner_references",
                     "env_vars", "extra_volumes", "extra_volume_mounts"):
            value = getattr(self, name)
            if isinstance(value, list):
                object.__setattr__(self, name, tuple(value))
            elif not isinstance(getattr(self, name), tuple):
                raise BadInput(name, value, "pass a list")
        self._validate()

    # ------------------------------------------------------------------ validation
    def _validate(self) -> None:
        self._check_identity()
        self._check_storage()
        self._check_scheduling()
        self._check_volumes()
        self._check_env_and_metadata()
        self._check_pod_settings()

    def _check_identity(self) -> None:
        """Name (and the pod names derived from it), namespace, image."""
        if not is_dns1035_label(self.name):
            raise BadInput("name", self.name,
                           "use a DNS-1035 label (lower-case letters, digits and '-', starting with a "
                           "letter, at most 63 characters); Volcano's svc plugin names a Service after it")
        longest_pod = max(len(f"{self.name}-pserver-{self.pservers - 1}"),
                          len(f"{self.name}-trainer-{self.trainers - 1}"))
        if longest_pod > 63:
            raise BadInput("name", self.name,
                           f"shorten the job name: pod name '{self.name}-trainer-{self.trainers - 1}' "
                           f"would have {longest_pod} > 63 characters")
        if not is_dns1123_label(self.namespace):
            raise BadInput("namespace", self.namespace, "use an existing namespace's name (DNS-1123 label)")
        if not self.image or any(c.isspace() for c in self.image):
            raise BadInput("image", self.image, f"give the trainer image reference, e.g. "
                                                f"registry/ctr-trainer:{__version__}")

    def _check_storage(self) -> None:
        """Init model, data and output: absolute paths on a shared volume, or s3:// URIs."""
        if self.init_model is not None and not self.init_model.startswith("/"):
            raise BadInput("init_model", self.init_model, "use an absolute path on a volume every pod mounts")
        for name in ("data_dir", "output_dir"):
            value = getattr(self, name)
            if self.object_store is not None:
                if not value or not value.startswith("s3://") or len(value.rstrip("/")) <= 5:
                    raise BadInput(name, value, "in object-store mode use an s3://BUCKET/PREFIX URI")
            elif not value or not value.startswith("/"):
                raise BadInput(name, value, "use an absolute path on a volume every pod mounts")
        if self.object_store is not None and not isinstance(self.object_store, ObjectStore):
            raise BadInput("object_store", self.object_store, "pass an ObjectStore or None")

    def _check_scheduling(self) -> None:
        """Gang size, queue, priority, retries, TTL, timeouts, ports, service account, image pulls."""
        for name in ("pservers", "trainers"):
            value = getattr(self, name)
            if not is_int(value, 1, 1000):
                raise BadInput(name, value, "use a whole number between 1 and 1000")
        if not is_dns1123_subdomain(self.queue):
            raise BadInput("queue", self.queue, "name an existing Open Volcano queue, e.g. 'default'")
        if self.queue == "root":
            raise BadInput("queue", self.queue, "'root' is not a leaf queue; use 'default' or a child queue")
        if self.priority_class is not None and not is_dns1123_subdomain(self.priority_class):
            raise BadInput("priority_class", self.priority_class, "name an existing PriorityClass or leave it empty")
        check_network_topology(self.network_topology, self.highest_tier_allowed)
        if not is_int(self.max_retry, 0, 100):
            raise BadInput("max_retry", self.max_retry, "use a whole number of restarts between 0 and 100")
        if self.ttl_seconds_after_finished is not None and not is_int(self.ttl_seconds_after_finished, 0):
            raise BadInput("ttl_seconds_after_finished", self.ttl_seconds_after_finished,
                           "use seconds >= 0; to keep finished Jobs pass -1 (command line, pipeline) or None (Python)")
        if self.pserver_resources.gpu:
            raise BadInput("pserver_resources.gpu", self.pserver_resources.gpu,
                           "pservers only serve tables and never use a GPU: set GPUs on the trainers")
        if not is_int(self.schedule_timeout_s, 1):
            raise BadInput("schedule_timeout_s", self.schedule_timeout_s, "use seconds >= 1")
        if not is_positive(self.stall_timeout_s):
            raise BadInput("stall_timeout_s", self.stall_timeout_s,
                           "use a positive number of seconds (trainers log progress every 10 s)")
        for name in ("ps_port", "gloo_port"):
            value = getattr(self, name)
            if not is_int(value, 1024, 65535):
                raise BadInput(name, value, "use an unprivileged TCP port in 1024..65535 (pods run as non-root)")
        if self.ps_port == self.gloo_port:
            raise BadInput("gloo_port", self.gloo_port, "use a port different from ps_port")
        if self.service_account is not None and not is_dns1123_subdomain(self.service_account):
            raise BadInput("service_account", self.service_account, "name an existing ServiceAccount")
        for secret in self.image_pull_secrets:
            if not is_dns1123_subdomain(secret):
                raise BadInput("image_pull_secrets", secret, "name an existing docker-registry Secret")
        if self.image_pull_policy not in (None, "Always", "IfNotPresent", "Never"):
            raise BadInput("image_pull_policy", self.image_pull_policy, "use Always, IfNotPresent or Never")

    def _check_volumes(self) -> None:
        """Claims and passed-through volumes: distinct names and mount paths, none over the builder's."""
        for item in self.volumes:
            if not isinstance(item, PvcVolume):
                raise BadInput("volumes", item, "pass PvcVolume objects")
        mounts = [v.mount_path for v in self.volumes]
        extra_names = [str(v.get("name", "")) for v in self.extra_volumes]
        if len(set(extra_names)) != len(extra_names) or any(
                not n or n == "dshm" or re.match(r"^data-[0-9]+$", n) for n in extra_names):
            raise BadInput("extra_volumes", extra_names,
                           "give every volume a distinct name other than 'dshm' and 'data-<i>' (the builder's)")
        for i, mount in enumerate(self.extra_volume_mounts):
            if mount.get("name") not in extra_names:
                raise BadInput(f"extra_volume_mounts[{i}].name", mount.get("name"),
                               f"mount one of extra_volumes: {extra_names}")
            mounts.append(str(mount.get("mountPath", "")))
        if len(set(mounts)) != len(mounts):
            raise BadInput("volumes", mounts, "give every volume its own mount_path")
        if self.object_store is not None and SCRATCH_MOUNT in mounts:
            raise BadInput("volumes", mounts, f"{SCRATCH_MOUNT} is the object-store scratch; mount "
                                              f"volumes elsewhere")
        if any(m == "/etc/volcano" or m.startswith("/etc/volcano/") for m in mounts):
            raise BadInput("volumes", mounts, "do not mount over /etc/volcano (Volcano's svc plugin uses it)")

    def _check_env_and_metadata(self) -> None:
        """Environment variables (none in the launcher's namespaces), labels and annotations."""
        for secret_env in self.env_from_secrets:
            if not isinstance(secret_env, SecretEnv):
                raise BadInput("env_from_secrets", secret_env, "pass SecretEnv objects")
        for key, _ in self.env:
            if not ENV_NAME.match(str(key)):
                raise BadInput("env", key, "use valid environment variable names")
            if str(key).startswith(RESERVED_ENV_PREFIXES):
                raise BadInput("env", key, f"{_RESERVED} are set by the launcher, Volcano and the pod "
                                          "entrypoint; use the spec's fields instead")
        for i, var in enumerate(self.env_vars):
            name = str(var.get("name", "")) if isinstance(var, Mapping) else ""
            if not ENV_NAME.match(name) or name.startswith(RESERVED_ENV_PREFIXES):
                raise BadInput(f"env_vars[{i}].name", name, f"use a valid variable name outside {_RESERVED}")
        env_names = [str(k) for k, _ in self.env] + [str(v["name"]) for v in self.env_vars]
        if len(set(env_names)) != len(env_names):
            raise BadInput("env_vars", env_names, "set each environment variable once")
        for key, value in self.labels:
            if not LABEL_KEY.match(str(key)) or not LABEL_VALUE.match(str(value)):
                raise BadInput("labels", f"{key}={value}", "use Kubernetes label syntax (value <= 63 "
                                                          "characters of [A-Za-z0-9-_.])")
            if str(key).startswith(("volcano.sh/", "ctr-volcano/")):
                raise BadInput("labels", key, "volcano.sh/ and ctr-volcano/ labels are set by Volcano "
                                              "and the launcher")
        for key, _ in self.annotations:
            if not LABEL_KEY.match(str(key)):
                raise BadInput("annotations", key, "use Kubernetes annotation key syntax")

    def _check_pod_settings(self) -> None:
        """Tolerations, owners, affinity, user, scheduler, shared memory and the training config."""
        for i, tol in enumerate(self.tolerations):
            if not isinstance(tol, Mapping):
                raise BadInput(f"tolerations[{i}]", tol, "pass Kubernetes toleration objects (dicts)")
        for i, ref in enumerate(self.owner_references):
            if not isinstance(ref, Mapping) or not all(ref.get(k) for k in ("apiVersion", "kind", "name", "uid")):
                raise BadInput(f"owner_references[{i}]", ref, "give apiVersion, kind, name and uid of the owner")
        if self.affinity is not None and not isinstance(self.affinity, Mapping):
            raise BadInput("affinity", self.affinity, "pass a Kubernetes affinity object (dict)")
        if not isinstance(self.run_as_user, int) or self.run_as_user < 1:
            raise BadInput("run_as_user", self.run_as_user, "use a non-root UID >= 1")
        if not self.scheduler_name or len(self.scheduler_name) > 63:
            raise BadInput("scheduler_name", self.scheduler_name, "use the Volcano scheduler's name, 'volcano'")
        check_quantity("shm_size", self.shm_size)
        try:
            import json
            json.dumps(dict(self.train_config))
        except (TypeError, ValueError) as exc:
            raise BadInput("train_config", dict(self.train_config), f"use JSON-able values only ({exc})") from None

    # ------------------------------------------------------------------ derived
    @property
    def gang_size(self) -> int:
        """Pods that must be schedulable together (all of them: a PS job cannot run partially)."""
        return self.pservers + self.trainers

    @property
    def volcano_max_retry(self) -> int:
        """Volcano's ``maxRetry``: the number of attempts, i.e. restarts + 1, plus room for
        :data:`PREEMPTION_RESTARTS` restarts after the scheduler evicted the gang for another one
        (Volcano counts those too; the launcher enforces ``max_retry`` on the others)."""
        return self.max_retry + 1 + PREEMPTION_RESTARTS


def role_resources(task: TaskPodConfig, *, cpu: str, memory: str, gpus: int) -> Tuple[Any, Any]:
    """The pserver and trainer :class:`~ctr_volcano.training.volcano.spec.Resources`: the task's settings
    first, the explicit ``cpu``/``memory``/``gpus`` parameters where the task sets nothing.

    Accelerators go to trainers only (pservers hold sparse tables in host memory and never use a GPU).
    A task that sets only a limit gets the same request (what Kubernetes itself would default).
    """
    def pick(name: str, fallback: str) -> Tuple[str, Optional[str]]:
        request, limit = task.amount("requests", name), task.amount("limits", name)
        if request is None and limit is None:
            return fallback, None
        return request or limit or fallback, limit

    cpu_request, cpu_limit = pick("cpu", cpu)
    mem_request, mem_limit = pick("memory", memory)
    pserver = Resources(cpu=cpu_request, memory=mem_request, cpu_limit=cpu_limit, memory_limit=mem_limit)
    acc_name, acc_count = task.accelerator
    if acc_name is not None:
        trainer = Resources(cpu=cpu_request, memory=mem_request, cpu_limit=cpu_limit, memory_limit=mem_limit,
                            gpu=int(acc_count), gpu_resource=acc_name)
    else:
        trainer = Resources(cpu=cpu_request, memory=mem_request, cpu_limit=cpu_limit, memory_limit=mem_limit,
                            gpu=gpus)
    return pserver, trainer
