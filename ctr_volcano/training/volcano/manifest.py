"""Pure builder: :class:`~ctr_volcano.training.volcano.spec.TrainJobSpec` -> Volcano Job manifest (a dict).

Why every field is explicit: without Volcano's admission webhook nothing is defaulted, and a Job
without ``schedulerName`` is not scheduled by Volcano at all, one without ``minAvailable`` is not
gang-scheduled. So the builder writes ``schedulerName``, the job and per-task ``minAvailable``,
``maxRetry``, ``queue`` and the task names itself, and :func:`validate_job` repeats the webhook's
checks client-side.

Why these policies: pservers never exit, so the Job only completes because the trainer task has
``TaskCompleted -> CompleteJob``; ``PodFailed``/``PodEvicted -> RestartJob`` restart the whole gang
(a parameter-server job cannot continue with a missing member), bounded by ``maxRetry``; but a role
that exits with ``EXIT_BAD_INPUT`` (2: its configuration, data or mounts are wrong) terminates the
Job at once, since restarting it cannot help. Pods use
``restartPolicy: Never`` so a crash makes the pod Failed and the policy fires (with ``OnFailure`` the
kubelet restarts the container in place and ``PodFailed`` never happens).

Why ``--publish-not-ready-addresses``: a pserver must resolve its own DNS name
(``<job>-pserver-<i>.<job>``) when it starts, before it is Ready; the headless Service only
publishes not-ready pods with this flag.

No I/O and no Kubernetes client here: the output is a plain dict, rendered to YAML by
:func:`to_yaml` and validated against the real CRD schema by :func:`validate_against_crd`.
"""
from __future__ import annotations

import functools
import json
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ctr_model.contract import EXIT_BAD_INPUT, PSERVER, TRAINER, GangContract, role_env
from ctr_volcano.errors import BadInput
from ctr_volcano.training.store_access import SCRATCH_MOUNT
from ctr_volcano.training.volcano.api_types import JOBS
from ctr_volcano.training.volcano.names import pod_name
from ctr_volcano.training.volcano.spec import Resources, TrainJobSpec
from ctr_volcano.util.k8s_syntax import is_dns1035_label, is_dns1123_label

__all__ = [
    "API_VERSION", "KIND", "ENTRYPOINT", "LABEL_JOB", "LABEL_RUN",
    "LABEL_TASK", "ANNOTATION_RUN", "ANNOTATION_TASK", "KNOWN_PLUGINS",
    "contract_for", "pod_template", "build_job", "validate_job", "check_job", "to_yaml",
    "load_crd_schema", "validate_against_crd", "unknown_fields",
]

API_VERSION = JOBS.api_version
KIND = "Job"

#: The pods' command: the typed ``ctr_model`` entrypoint (an argv list, never a shell string).
ENTRYPOINT = ("python", "-m", "ctr_model.train")

LABEL_JOB = "ctr-volcano/job"
LABEL_RUN = "ctr-volcano/run-id"
LABEL_TASK = "ctr-volcano/task"
ANNOTATION_RUN = "ctr-volcano/kfp-run-id"
ANNOTATION_TASK = "ctr-volcano/kfp-task-name"

#: Plugin names Volcano's job controller registers (the validating webhook rejects others).
KNOWN_PLUGINS = ("ssh", "env", "svc", "tensorflow", "mpi", "pytorch", "hcclrank", "ray")

_USER_EVENTS = ("*", "PodPending", "PodFailed", "PodEvicted", "Unknown", "TaskCompleted",
                "TaskFailed", "JobUpdated")
_ACTIONS = ("AbortJob", "RestartJob", "RestartTask", "RestartPod", "RestartPartition",
            "TerminateJob", "CompleteJob", "ResumeJob")


def _label_safe(value: Optional[str]) -> Optional[str]:
    """``value`` if it is a valid label value, else None (it then goes to an annotation only)."""
    if value and len(value) <= 63 and is_dns1123_label(value.lower()) and value == value.lower():
        return value
    return None


def contract_for(spec: TrainJobSpec) -> GangContract:
    """The env contract of the gang described by ``spec`` (one IP per pod, so stride 0)."""
    return GangContract(
        job_id=spec.name, pservers=spec.pservers, trainers=spec.trainers,
        data_dir=spec.data_dir, output_dir=spec.output_dir, ps_port=spec.ps_port,
        ps_port_stride=0, gloo_port=spec.gloo_port, train_config=dict(spec.train_config),
        init_model=spec.init_model)


def _labels(spec: TrainJobSpec) -> Dict[str, str]:
    labels = {"app.kubernetes.io/name": "ctr-volcano", "app.kubernetes.io/component": "training",
              LABEL_JOB: spec.name}
    run = _label_safe(spec.run_id)
    if run:
        labels[LABEL_RUN] = run
    task = _label_safe(spec.task_name)
    if task:
        labels[LABEL_TASK] = task
    labels.update({str(k): str(v) for k, v in spec.labels})
    return labels


def _env(spec: TrainJobSpec, role: str) -> List[Dict[str, Any]]:
    env: List[Dict[str, Any]] = [{"name": k, "value": v}
                                 for k, v in sorted(role_env(contract_for(spec), role).items())]
    env.append({"name": "PYTHONUNBUFFERED", "value": "1"})
    env.extend({"name": str(k), "value": str(v)} for k, v in spec.env)
    secrets = tuple(spec.env_from_secrets)
    if spec.object_store is not None:
        env.extend({"name": k, "value": v} for k, v in spec.object_store.env())
        secrets += spec.object_store.secret_env()
    env.extend({"name": s.name, "valueFrom": {"secretKeyRef": {"name": s.secret, "key": s.key}}}
               for s in secrets)
    env.extend(json.loads(json.dumps(dict(v))) for v in spec.env_vars)
    return env


def _volumes(spec: TrainJobSpec) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    """The pod's volumes and the container's mounts: the claims, the task's own, the object-store
    scratch and an in-memory ``/dev/shm``."""
    mounts: List[Dict[str, Any]] = []
    volumes: List[Dict[str, Any]] = []
    for i, vol in enumerate(spec.volumes):
        vname = f"data-{i}"
        volumes.append({"name": vname, "persistentVolumeClaim": {"claimName": vol.claim_name,
                                                                 "readOnly": vol.read_only}})
        mount: Dict[str, Any] = {"name": vname, "mountPath": vol.mount_path, "readOnly": vol.read_only}
        if vol.sub_path:
            mount["subPath"] = vol.sub_path
        mounts.append(mount)
    volumes.extend(json.loads(json.dumps(dict(v))) for v in spec.extra_volumes)
    mounts.extend(json.loads(json.dumps(dict(m))) for m in spec.extra_volume_mounts)
    if spec.object_store is not None:
        # the pod's own scratch: its shards, its tables before upload, the model being assembled
        empty: Dict[str, Any] = {}
        if spec.object_store.scratch_size:
            empty["sizeLimit"] = spec.object_store.scratch_size
        volumes.append({"name": "scratch", "emptyDir": empty})
        mounts.append({"name": "scratch", "mountPath": SCRATCH_MOUNT})
    if spec.shm_size:
        volumes.append({"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": spec.shm_size}})
        mounts.append({"name": "dshm", "mountPath": "/dev/shm"})
    return volumes, mounts


def _container(spec: TrainJobSpec, role: str, resources: Resources, mounts: List[Dict[str, Any]]
               ) -> Dict[str, Any]:
    container: Dict[str, Any] = {
        "name": role,
        "image": spec.image,
        "command": list(ENTRYPOINT),
        "env": _env(spec, role),
        "resources": resources.to_k8s(),
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    if role == PSERVER:
        container["ports"] = [{"name": "ps", "containerPort": spec.ps_port, "protocol": "TCP"},
                              {"name": "gloo", "containerPort": spec.gloo_port, "protocol": "TCP"}]
    if spec.image_pull_policy:
        container["imagePullPolicy"] = spec.image_pull_policy
    if mounts:
        container["volumeMounts"] = mounts
    return container


def pod_template(spec: TrainJobSpec, role: str, resources: Resources) -> Dict[str, Any]:
    """The pod template of ``role``: image, entrypoint, ``role_env`` contract, volumes, security.

    Shared with :mod:`bench.native`, so both deployments run the same pods.
    """
    volumes, mounts = _volumes(spec)
    pod_spec: Dict[str, Any] = {
        "schedulerName": spec.scheduler_name,
        "restartPolicy": "Never",
        "containers": [_container(spec, role, resources, mounts)],
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": spec.run_as_user,
            "runAsGroup": spec.run_as_user,
            "fsGroup": spec.run_as_user,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    if volumes:
        pod_spec["volumes"] = volumes
    if spec.priority_class:
        pod_spec["priorityClassName"] = spec.priority_class
    if spec.node_selector:
        pod_spec["nodeSelector"] = {str(k): str(v) for k, v in spec.node_selector}
    if spec.tolerations:
        pod_spec["tolerations"] = [dict(t) for t in spec.tolerations]
    if spec.affinity:
        pod_spec["affinity"] = json.loads(json.dumps(dict(spec.affinity)))
    if spec.service_account:
        pod_spec["serviceAccountName"] = spec.service_account
    if spec.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": s} for s in spec.image_pull_secrets]
    labels = _labels(spec)
    labels["ctr-volcano/role"] = role
    return {"metadata": {"labels": labels}, "spec": pod_spec}


def build_job(spec: TrainJobSpec) -> Dict[str, Any]:
    """Render ``spec`` as a ``batch.volcano.sh/v1alpha1`` Job.

    Args:
        spec: the validated spec.

    Returns:
        The Job as a JSON-able dict, with every field the admission webhook would default set
        explicitly. Passes :func:`validate_job`.
    """
    retries = spec.volcano_max_retry
    annotations = {str(k): str(v) for k, v in spec.annotations}
    if spec.run_id:
        annotations[ANNOTATION_RUN] = spec.run_id
    if spec.task_name:
        annotations[ANNOTATION_TASK] = spec.task_name
    svc_args = ["--publish-not-ready-addresses"]
    if spec.disable_network_policy:
        svc_args.append("--disable-network-policy")
    job_spec: Dict[str, Any] = {
        "schedulerName": spec.scheduler_name,
        "minAvailable": spec.gang_size,
        "queue": spec.queue,
        "maxRetry": retries,
        "plugins": {"svc": svc_args, "env": []},
        "policies": [
            # first: Volcano takes the first matching policy, and bad input never heals on a restart
            {"exitCode": EXIT_BAD_INPUT, "action": "TerminateJob"},
            {"event": "PodEvicted", "action": "RestartJob"},
            {"event": "PodFailed", "action": "RestartJob"},
        ],
        "tasks": [
            {
                "name": PSERVER,
                "replicas": spec.pservers,
                "minAvailable": spec.pservers,
                "maxRetry": retries,
                "template": pod_template(spec, PSERVER, spec.pserver_resources),
            },
            {
                "name": TRAINER,
                "replicas": spec.trainers,
                "minAvailable": spec.trainers,
                "maxRetry": retries,
                "policies": [{"event": "TaskCompleted", "action": "CompleteJob"}],
                "template": pod_template(spec, TRAINER, spec.trainer_resources),
            },
        ],
    }
    if spec.priority_class:
        job_spec["priorityClassName"] = spec.priority_class
    if spec.network_topology:
        # the whole gang: pservers with their trainers (per-task partitionPolicy would split a task)
        job_spec["networkTopology"] = {"mode": spec.network_topology}
        if spec.highest_tier_allowed is not None:
            job_spec["networkTopology"]["highestTierAllowed"] = spec.highest_tier_allowed
    if spec.ttl_seconds_after_finished is not None:
        job_spec["ttlSecondsAfterFinished"] = spec.ttl_seconds_after_finished
    metadata: Dict[str, Any] = {"name": spec.name, "namespace": spec.namespace, "labels": _labels(spec)}
    if annotations:
        metadata["annotations"] = annotations
    if spec.owner_references:
        # blockOwnerDeletion stays false: setting it true needs rights on the owner's finalizers
        metadata["ownerReferences"] = [
            {"apiVersion": r["apiVersion"], "kind": r["kind"], "name": r["name"], "uid": r["uid"],
             "controller": False, "blockOwnerDeletion": False} for r in spec.owner_references]
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": job_spec}


# ---------------------------------------------------------------------------------- validation
def _policy_problems(where: str, policies: Sequence[Mapping[str, Any]]) -> List[str]:
    problems = []
    seen: set = set()
    for i, pol in enumerate(policies or ()):
        here = f"{where}.policies[{i}]"
        events = list(pol.get("events") or ()) + ([pol["event"]] if pol.get("event") else [])
        has_code = pol.get("exitCode") is not None
        if events and has_code:
            problems.append(f"{here}: event(s) and exitCode are mutually exclusive")
        if not events and not has_code:
            problems.append(f"{here}: needs an event or an exitCode")
        if has_code and pol["exitCode"] == 0:
            problems.append(f"{here}: exitCode 0 is not allowed")
        if "*" in events and len(events) > 1:
            problems.append(f"{here}: '*' cannot be combined with other events")
        for ev in events:
            if ev not in _USER_EVENTS:
                problems.append(f"{here}: event {ev!r} cannot be used in a policy")
            if ev in seen:
                problems.append(f"{here}: event {ev!r} appears in two policies")
            seen.add(ev)
        if pol.get("action") not in _ACTIONS:
            problems.append(f"{here}: unknown action {pol.get('action')!r}")
    return problems


def validate_job(job: Mapping[str, Any]) -> List[str]:
    """The checks Volcano's admission webhook (and the svc plugin) would make, done client-side.

    Args:
        job: a Job manifest (as built by :func:`build_job` or loaded from YAML).

    Returns:
        A list of problems; empty when the Job is valid. Use :func:`build_job`'s output with
        ``assert not validate_job(job)``; the CLI and launcher raise :class:`BadInput` on problems.
    """
    problems: List[str] = []
    meta = job.get("metadata") or {}
    spec = job.get("spec") or {}
    name = str(meta.get("name", ""))
    if job.get("apiVersion") != API_VERSION or job.get("kind") != KIND:
        problems.append(f"apiVersion/kind must be {API_VERSION}/{KIND}")
    if not is_dns1035_label(name):
        problems.append(f"metadata.name {name!r} must be a DNS-1035 label (it names the svc plugin's Service)")
    if not spec.get("schedulerName"):
        problems.append("spec.schedulerName is empty: pods would go to the default scheduler (no gang)")
    tasks = list(spec.get("tasks") or [])
    if not tasks:
        problems.append("spec.tasks: at least one task is required")
    names = [t.get("name") for t in tasks]
    if len(set(names)) != len(names):
        problems.append(f"spec.tasks: duplicate task names {names}")
    for i, task in enumerate(tasks):
        problems.extend(_task_problems(name, f"spec.tasks[{i}]", task))
    total = sum(int(task.get("replicas", 0) or 0) for task in tasks)
    problems.extend(_gang_problems(spec, total))
    return problems


def _task_problems(job_name: str, where: str, task: Mapping[str, Any]) -> List[str]:
    """One task's problems: name, replicas, minAvailable, pod names, pod template, policies."""
    problems: List[str] = []
    tname = task.get("name") or ""
    if not is_dns1123_label(tname):
        problems.append(f"{where}.name {tname!r} must be a DNS-1123 label")
    replicas = int(task.get("replicas", 0) or 0)
    if replicas < 1:
        problems.append(f"{where}.replicas must be >= 1")
    min_av = task.get("minAvailable")
    if min_av is None:
        problems.append(f"{where}.minAvailable is unset (only the webhook would default it)")
    elif int(min_av) > replicas:
        problems.append(f"{where}.minAvailable {min_av} > replicas {replicas}")
    if replicas:
        longest = pod_name(job_name, tname, replicas - 1)
        if len(longest) > 63:
            problems.append(f"{where}: pod name {longest!r} has {len(longest)} > 63 characters")
    pod = (task.get("template") or {}).get("spec") or {}
    if not pod.get("containers"):
        problems.append(f"{where}.template.spec.containers is empty")
    if pod.get("restartPolicy") not in ("Never", "OnFailure"):
        problems.append(f"{where}.template.spec.restartPolicy must be Never or OnFailure")
    problems.extend(_policy_problems(where, task.get("policies") or ()))
    return problems


def _gang_problems(spec: Mapping[str, Any], total: int) -> List[str]:
    """The Job-level problems: gang minimum, queue, retries, policies, plugins, volumes."""
    problems: List[str] = []
    min_job = spec.get("minAvailable")
    if not min_job:
        problems.append("spec.minAvailable is 0/unset: the job would not be gang-scheduled")
    elif int(min_job) > total:
        problems.append(f"spec.minAvailable {min_job} > total replicas {total}")
    if not spec.get("queue"):
        problems.append("spec.queue is empty")
    elif spec.get("queue") == "root":
        problems.append("spec.queue 'root' is not a leaf queue")
    if int(spec.get("maxRetry", 0) or 0) < 1:
        problems.append("spec.maxRetry must be >= 1 (the webhook would turn 0 into 3)")
    problems.extend(_policy_problems("spec", spec.get("policies") or ()))
    for plugin in (spec.get("plugins") or {}):
        if plugin not in KNOWN_PLUGINS:
            problems.append(f"spec.plugins: unknown plugin {plugin!r}")
    mounts = [v.get("mountPath", "") for v in spec.get("volumes") or ()]
    for m in mounts:
        if not m or ":" in m:
            problems.append(f"spec.volumes: bad mountPath {m!r}")
    if len(set(mounts)) != len(mounts):
        problems.append("spec.volumes: duplicate mountPath")
    return problems


def check_job(job: Mapping[str, Any]) -> None:
    """Raise :class:`BadInput` if :func:`validate_job` finds problems."""
    problems = validate_job(job)
    if problems:
        raise BadInput("job", (job.get("metadata") or {}).get("name"), "; ".join(problems))


# ---------------------------------------------------------------------------------- rendering
def to_yaml(objects: Any) -> str:
    """Render one object or a list of objects as (multi-document) YAML, keys in a stable order."""
    import yaml

    docs = objects if isinstance(objects, list) else [objects]
    return "---\n".join(yaml.safe_dump(d, sort_keys=False, default_flow_style=False) for d in docs)


def load_crd_schema(crd_path: str, version: str = JOBS.version) -> Dict[str, Any]:
    """The ``openAPIV3Schema`` of ``version`` from a CustomResourceDefinition file (cached per file)."""
    import copy

    stat = os.stat(crd_path)
    return copy.deepcopy(_load_crd_schema(os.path.realpath(crd_path), stat.st_mtime_ns, version))


@functools.lru_cache(maxsize=8)
def _load_crd_schema(crd_path: str, _mtime: int, version: str) -> Dict[str, Any]:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the Job CRD is ~230 kB of YAML
    with open(crd_path, encoding="utf-8") as fh:
        crd = yaml.load(fh, Loader=loader)
    for ver in crd["spec"]["versions"]:
        if ver["name"] == version:
            return ver["schema"]["openAPIV3Schema"]
    raise BadInput("version", version, f"use one of the versions in {crd_path}")


def unknown_fields(obj: Any, schema: Mapping[str, Any], path: str = "") -> List[str]:
    """Paths in ``obj`` that ``schema`` does not declare.

    The API server silently prunes such fields (structural schemas), so a typo would vanish without
    an error; this finds them.
    """
    found: List[str] = []
    if isinstance(obj, Mapping) and schema.get("type") == "object":
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        if schema.get("x-kubernetes-preserve-unknown-fields") or props is None:
            if isinstance(extra, Mapping):
                for k, v in obj.items():
                    found.extend(unknown_fields(v, extra, f"{path}.{k}"))
            return found
        for k, v in obj.items():
            if k in props:
                found.extend(unknown_fields(v, props[k], f"{path}.{k}"))
            else:
                found.append(f"{path}.{k}")
    elif isinstance(obj, list) and isinstance(schema.get("items"), Mapping):
        for i, v in enumerate(obj):
            found.extend(unknown_fields(v, schema["items"], f"{path}[{i}]"))
    return found


def validate_against_crd(job: Mapping[str, Any], crd_path: str) -> List[str]:
    """Problems of ``job`` against the CRD's schema: JSON-schema errors plus unknown (pruned) fields."""
    import jsonschema

    schema = _load_crd_schema(os.path.realpath(crd_path), os.stat(crd_path).st_mtime_ns, JOBS.version)
    validator = jsonschema.Draft7Validator(schema)
    problems = [f"{'.'.join(str(p) for p in e.absolute_path)}: {e.message}"
                for e in validator.iter_errors(json.loads(json.dumps(job)))]
    problems.extend(f"{p}: not in the CRD schema (the API server would drop it)"
                    for p in unknown_fields(job, schema))
    return problems
