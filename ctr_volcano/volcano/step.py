"""One training step, either backend: what the ``train_ctr`` component and ``train --backend`` call.

Why a separate function: the KFP component must stay a thin adapter (testable code lives in an
importable module), and the CLI and the component must behave identically. :class:`StepParams` is the
component's parameters as one frozen, validated object; KFP's ``""``/``-1`` sentinels stop in
:meth:`StepParams.from_component`.
"""
from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass, replace
from typing import Any, Callable, Dict, Mapping, Optional

from ctr_volcano.errors import BadInput
from ctr_volcano.training import DEFAULT_STALL_TIMEOUT_S

__all__ = ["StepParams", "BACKENDS", "run_training_step", "build_spec", "train_config_of",
           "run_owner_references"]

BACKENDS = ("local", "volcano")


def _none_if_empty(value: Any) -> Any:
    return None if value in ("", None) else value


@dataclass(frozen=True)
class StepParams:
    """The training step's parameters (component and CLI share them).

    Attributes:
        backend: ``local`` (processes on this machine) or ``volcano`` (a Volcano Job).
        pservers: parameter servers.
        trainers: trainers.
        epochs: passes over the training data.
        batch_size: rows per trainer batch.
        learning_rate: optimizer learning rate.
        max_retry: gang restarts after a failure.
        namespace: Volcano: the Job's namespace; ``None`` = this pod's namespace (or ``default``).
        image: Volcano: trainer image; ``None`` = :func:`ctr_volcano.images.trainer_image`.
        queue: Volcano: queue name.
        priority_class: Volcano: PriorityClass; ``None`` = cluster default.
        pvc_name: Volcano: the shared RWX claim (required for ``volcano``).
        pvc_mount_path: Volcano: where the claim is mounted here and in the gang's pods.
        schedule_timeout_s: Volcano: seconds the gang may stay Pending.
        stall_timeout_s: both backends: a trainer whose log gains no line for this long is hung;
            the local backend restarts the gang, the Volcano launcher fails the step and deletes the Job.
        run_id: Volcano: KFP run id (names the Job; a retried step re-attaches).
        task_name: Volcano: KFP task name.
        job_name: Volcano: explicit Job name (overrides the name derived from run_id/task_name).
        service_account: Volcano: the gang pods' service account.
        cpu: Volcano: CPU request per pod.
        memory: Volcano: memory request/limit per pod.
        gpus: Volcano: GPUs per trainer pod.
        ttl_seconds_after_finished: Volcano: TTL of the finished Job; ``None`` keeps it.
        kubeconfig: Volcano: kubeconfig path; ``None`` = in-cluster config or ``$KUBECONFIG``.
        context: Volcano: kubeconfig context.
        poll_s: Volcano: seconds between status polls.
        explain_every_s: Volcano: seconds between "why Pending" reports.
        config: other ``ctr_model`` TrainConfig fields (a mapping; stored as sorted pairs);
            ``epochs``, ``batch_size`` and ``learning_rate`` above win.
    """

    backend: str = "local"
    pservers: int = 2
    trainers: int = 2
    epochs: int = 2
    batch_size: int = 512
    learning_rate: float = 0.001
    max_retry: int = 2
    namespace: Optional[str] = None
    image: Optional[str] = None
    queue: str = "default"
    priority_class: Optional[str] = None
    pvc_name: Optional[str] = None
    pvc_mount_path: str = "/mnt/ctr"
    schedule_timeout_s: int = 600
    stall_timeout_s: float = DEFAULT_STALL_TIMEOUT_S
    run_id: Optional[str] = None
    task_name: Optional[str] = None
    job_name: Optional[str] = None
    service_account: Optional[str] = None
    cpu: str = "1"
    memory: str = "2Gi"
    gpus: int = 0
    ttl_seconds_after_finished: Optional[int] = 3600
    kubeconfig: Optional[str] = None
    context: Optional[str] = None
    poll_s: float = 5.0
    explain_every_s: float = 30.0
    config: Any = ()

    def __post_init__(self) -> None:
        if isinstance(self.config, Mapping):
            object.__setattr__(self, "config", tuple(sorted(self.config.items())))
        if self.backend not in BACKENDS:
            raise BadInput("backend", self.backend, f"use one of {', '.join(BACKENDS)}")
        for name in ("pservers", "trainers", "epochs", "batch_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise BadInput(name, value, "use a whole number >= 1")
        if not isinstance(self.learning_rate, (int, float)) or not self.learning_rate > 0:
            raise BadInput("learning_rate", self.learning_rate, "use a positive number such as 0.001")
        if not isinstance(self.max_retry, int) or self.max_retry < 0:
            raise BadInput("max_retry", self.max_retry, "use a whole number >= 0")
        if not isinstance(self.gpus, int) or self.gpus < 0:
            raise BadInput("gpus", self.gpus, "use a whole number >= 0")
        if isinstance(self.stall_timeout_s, bool) or not isinstance(self.stall_timeout_s, (int, float)) \
                or not self.stall_timeout_s > 0:
            raise BadInput("stall_timeout_s", self.stall_timeout_s,
                           "use a positive number of seconds (trainers log progress every 10 s)")
        if self.poll_s <= 0 or self.explain_every_s <= 0:
            raise BadInput("poll_s", self.poll_s, "use positive intervals")
        if self.backend == "volcano" and not self.pvc_name:
            raise BadInput("pvc_name", self.pvc_name,
                           "the volcano backend hands data and model over through a shared ReadWriteMany "
                           "PVC: create one (deploy/pvc-example.yaml), mount it in this step and pass its name")

    @classmethod
    def from_component(cls, **kwargs: Any) -> "StepParams":
        """Build from KFP parameters: ``""`` means unset; a negative TTL means keep the Job."""
        clean = {k: _none_if_empty(v) for k, v in kwargs.items()}
        ttl = clean.get("ttl_seconds_after_finished")
        if ttl is not None and int(ttl) < 0:
            clean["ttl_seconds_after_finished"] = None
        for key in ("queue", "pvc_mount_path", "cpu", "memory"):
            if clean.get(key) is None:
                clean.pop(key, None)
        return cls(**clean)


def train_config_of(params: StepParams) -> Dict[str, Any]:
    """The training config handed to ``ctr_model`` (JSON in ``CTR_TRAIN_CONFIG``)."""
    cfg = dict(params.config)
    cfg.update(epochs=params.epochs, batch_size=params.batch_size, learning_rate=float(params.learning_rate))
    return cfg


def _job_name(params: StepParams) -> str:
    from ctr_volcano.volcano.names import job_name_for

    if params.job_name:
        return params.job_name
    run_id = params.run_id or os.environ.get("KFP_RUN_ID") or f"adhoc-{time.strftime('%Y%m%d%H%M%S')}-{uuid.uuid4().hex[:6]}"
    return job_name_for(run_id, params.task_name or "train-ctr")


def build_spec(params: StepParams, data_dir: str, output_dir: str, name: Optional[str] = None) -> Any:
    """The :class:`~ctr_volcano.volcano.spec.TrainJobSpec` for ``params`` (pod-side paths)."""
    from ctr_volcano.images import trainer_image
    from ctr_volcano.volcano.client import in_cluster_namespace
    from ctr_volcano.volcano.spec import PvcVolume, Resources, TrainJobSpec

    pods = Resources(cpu=params.cpu, memory=params.memory)
    return TrainJobSpec(
        name=name or _job_name(params),
        namespace=params.namespace or in_cluster_namespace(),
        image=params.image or trainer_image(),
        data_dir=data_dir, output_dir=output_dir,
        pservers=params.pservers, trainers=params.trainers,
        train_config=train_config_of(params),
        pserver_resources=pods,
        trainer_resources=replace(pods, gpu=params.gpus),
        queue=params.queue, priority_class=params.priority_class, max_retry=params.max_retry,
        ttl_seconds_after_finished=params.ttl_seconds_after_finished,
        schedule_timeout_s=params.schedule_timeout_s, stall_timeout_s=params.stall_timeout_s,
        service_account=params.service_account,
        volumes=(PvcVolume(params.pvc_name, params.pvc_mount_path),) if params.pvc_name else (),
        run_id=params.run_id, task_name=params.task_name)


def _check_before_submit(data_path: str, params: StepParams) -> None:
    """The local backend's boundary checks, done before a gang is scheduled (fail in seconds, not minutes)."""
    from ctr_model.config import ConfigError, TrainConfig
    from ctr_model.data import DataError, resolve_split
    from ctr_model.features import SchemaMismatch

    try:
        TrainConfig.from_dict(train_config_of(params))
    except ConfigError as exc:
        raise BadInput(f"config.{exc.field}", exc.value, exc.fix) from None
    try:
        split = resolve_split(data_path, "train")
    except (DataError, SchemaMismatch) as exc:
        raise BadInput("train_data", data_path, str(exc)) from None
    if split is not None and len(split.files) < params.trainers:
        raise BadInput("trainers", params.trainers, f"{split.path} has only {len(split.files)} shard(s); use "
                                                    "at most that many trainers or re-run prep with more shards")


def run_owner_references(client: Any, namespace: str, *, pod_name: Optional[str] = None,
                         log: Callable[[str], None] = print) -> tuple:
    """The KFP run's Argo Workflow, as an ownerReference for the Job, if this step runs in a pod.

    Argo makes every step pod a dependent of its Workflow; making the Volcano Job one too means that
    deleting the KFP run garbage-collects the gang even if this process never saw a SIGTERM. Every
    attempt of the step shares the Workflow, so a retried step does not orphan or kill the Job.
    Best effort: outside a pod, in another namespace, or without the rights, returns ``()``.

    Args:
        client: a :class:`~ctr_volcano.volcano.client.KubeClient`.
        namespace: the Job's namespace (owner and dependent must share it).
        pod_name: this step's pod; default ``$KFP_POD_NAME``, else ``$HOSTNAME`` inside a pod.
        log: progress sink.
    """
    from ctr_volcano.errors import CtrVolcanoError

    if pod_name is None:
        pod_name = os.environ.get("KFP_POD_NAME") or (
            os.environ.get("HOSTNAME") if os.environ.get("KUBERNETES_SERVICE_HOST") else None)
    if not pod_name:
        return ()
    try:
        pod = client.get_pod(namespace, pod_name)
    except CtrVolcanoError as exc:
        log(f"[volcano] cannot read this step's pod {namespace}/{pod_name} ({exc}); the Job gets no owner")
        return ()
    if pod is None:
        return ()
    expected_uid = os.environ.get("KFP_POD_UID")
    if expected_uid and (pod.get("metadata") or {}).get("uid") != expected_uid:
        return ()
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("kind") == "Workflow" and str(ref.get("apiVersion", "")).startswith("argoproj.io/"):
            return ({k: ref[k] for k in ("apiVersion", "kind", "name", "uid")},)
    return ()


def run_training_step(data_path: str, model_dir: str, params: StepParams, *,
                      on_identity: Optional[Callable[[Dict[str, Any]], None]] = None,
                      log: Callable[[str], None] = print, client: Any = None) -> Any:
    """Train with ``params.backend`` and leave the exported model in ``model_dir``.

    Args:
        data_path: the prep output directory as this process sees it.
        model_dir: where the exported model must end up (the KFP Model output path).
        params: the step's parameters.
        on_identity: called once with the gang's identity (written to the ``job_info`` output).
        log: progress sink.
        client: Volcano only: a ready :class:`~ctr_volcano.volcano.client.KubeClient` (tests, the
            cluster harness); default: built from ``params.kubeconfig``/in-cluster config.

    Returns:
        A ``ctr_volcano.training.TrainResult`` (``model_dir``, ``metrics``, ``output_dir``, ``attempts``).
    """
    if params.backend == "local":
        from ctr_volcano.training import train_local

        if on_identity:
            on_identity({"backend": "local", "pservers": params.pservers, "trainers": params.trainers})
        return train_local(data_path, model_dir, train_config_of(params), pservers=params.pservers,
                           trainers=params.trainers, max_retry=params.max_retry,
                           stall_timeout_s=params.stall_timeout_s, log=log)

    from ctr_volcano.volcano.client import KubeClient
    from ctr_volcano.volcano.handoff import copy_model_out, prepare_run_dir
    from ctr_volcano.volcano.launcher import VolcanoLauncher

    _check_before_submit(data_path, params)
    name = _job_name(params)
    dirs = prepare_run_dir(params.pvc_mount_path, name, data_path)
    log(f"[volcano] run directory {dirs.root} (data {'copied' if dirs.copied else 'reused'})")
    own_client = client is None
    if own_client:
        client = KubeClient.auto(params.kubeconfig, params.context)
    try:
        spec = build_spec(params, dirs.data_dir, dirs.output_dir, name=name)
        owners = run_owner_references(client, spec.namespace, log=log)
        if owners:
            spec = replace(spec, owner_references=owners)
            log(f"[volcano] the Job is owned by {owners[0]['kind']} {owners[0]['name']}: deleting the "
                "KFP run deletes the gang")
        launcher = VolcanoLauncher(client, spec, log=log, poll_s=params.poll_s,
                                   explain_every_s=params.explain_every_s, on_identity=on_identity)
        result = launcher.run()
    finally:
        if own_client:
            client.close()
    copy_model_out(dirs.output_dir, model_dir)
    return replace(result, model_dir=model_dir)
