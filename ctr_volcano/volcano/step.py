"""One training step, either backend: what the ``train_ctr`` component and ``train --backend`` call.

Why a separate function: the KFP component must stay a thin adapter (testable code lives in an
importable module), and the CLI and the component must behave identically. :class:`StepParams` is the
component's parameters as one frozen, validated object; KFP's ``""``/``-1`` sentinels stop in
:meth:`StepParams.from_component`.
"""
from __future__ import annotations

import logging
import os
import time
import uuid
from dataclasses import dataclass, replace
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

from ctr_model.checks import is_int, is_positive
from ctr_volcano.backends import DEFAULT_STALL_TIMEOUT_S, TrainingBackend, TrainResult
from ctr_volcano.errors import BadInput
from ctr_volcano.volcano.handoff import PVC_MOUNT_PATH
from ctr_volcano.volcano.task_config import EMPTY, TaskPodConfig

logger = logging.getLogger(__name__)

__all__ = ["StepParams", "BACKENDS", "run_training_step", "VolcanoBackend", "build_spec", "check_claims",
           "train_config_of", "run_owner_references"]

BACKENDS = ("local", "volcano")
#: How the Volcano gang gets its data and hands its model back: a shared ReadWriteMany claim, or the
#: object store (S3 API, credentials from a Secret by reference).
ARTIFACT_STORES = ("pvc", "s3")


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
        artifact_store: Volcano: ``pvc`` (a shared RWX claim) or ``s3`` (the object store).
        pvc_name: Volcano, ``pvc``: the shared RWX claim.
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
        s3_endpoint: Volcano, ``s3``: the S3 API as the pods (and this step) reach it, ``http(s)://
            host:port``; ``None`` = KFP's store (:data:`~ctr_volcano.volcano.spec.KFP_ARTIFACT_ENDPOINT`).
        s3_step_endpoint: Volcano, ``s3``: the S3 API as this step reaches it, when that differs from
            the pods' (a CLI outside the cluster through a port-forward); used only by the step's own
            client (upload, checks, model copy, cleanup), never put in the manifest; ``None`` =
            ``s3_endpoint``.
        s3_secret: Volcano, ``s3``: the Secret with the store's credentials (keys ``accesskey``/
            ``secretkey``, KFP's layout); ``None`` = KFP's own artifact-store Secret.
        s3_region: Volcano, ``s3``: signing region.
        s3_root: Volcano, ``s3``: ``s3://BUCKET/PREFIX`` for the run directories; ``None`` = the
            data's bucket, ``ctr-runs/``.
        config: other ``ctr_model`` TrainConfig fields (a mapping; stored as sorted pairs);
            ``epochs``, ``batch_size`` and ``learning_rate`` above win.
        workspace_path: Volcano: the KFP run workspace as this step sees it
            (``dsl.WORKSPACE_PATH_PLACEHOLDER``); when set, it is the hand-off instead of
            ``pvc_mount_path`` and the task's TaskConfig must mount it (KUBERNETES_VOLUMES).
        task_config: Volcano: the training task's KFP TaskConfig, parsed
            (:class:`~ctr_volcano.volcano.task_config.TaskPodConfig`); its settings win over
            ``cpu``, ``memory`` and ``gpus``.
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
    artifact_store: str = "pvc"
    pvc_name: Optional[str] = None
    pvc_mount_path: str = PVC_MOUNT_PATH
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
    s3_endpoint: Optional[str] = None
    s3_step_endpoint: Optional[str] = None
    s3_secret: Optional[str] = None
    s3_region: str = "us-east-1"
    s3_root: Optional[str] = None
    config: Any = ()
    workspace_path: Optional[str] = None
    task_config: TaskPodConfig = EMPTY

    def __post_init__(self) -> None:
        if isinstance(self.config, Mapping):
            object.__setattr__(self, "config", tuple(sorted(self.config.items())))
        if self.backend not in BACKENDS:
            raise BadInput("backend", self.backend, f"use one of {', '.join(BACKENDS)}")
        for name in ("pservers", "trainers", "epochs", "batch_size"):
            value = getattr(self, name)
            if not is_int(value, 1):
                raise BadInput(name, value, "use a whole number >= 1")
        if not is_positive(self.learning_rate):
            raise BadInput("learning_rate", self.learning_rate, "use a positive number such as 0.001")
        if not is_int(self.max_retry, 0):
            raise BadInput("max_retry", self.max_retry, "use a whole number >= 0")
        if not is_int(self.gpus, 0):
            raise BadInput("gpus", self.gpus, "use a whole number >= 0")
        if not is_positive(self.stall_timeout_s):
            raise BadInput("stall_timeout_s", self.stall_timeout_s,
                           "use a positive number of seconds (trainers log progress every 10 s)")
        if self.poll_s <= 0 or self.explain_every_s <= 0:
            raise BadInput("poll_s", self.poll_s, "use positive intervals")
        if not isinstance(self.task_config, TaskPodConfig):
            raise BadInput("task_config", self.task_config, "pass TaskPodConfig.from_kfp(task_config)")
        if self.workspace_path is not None and not str(self.workspace_path).startswith("/"):
            raise BadInput("workspace_path", self.workspace_path,
                           "pass dsl.WORKSPACE_PATH_PLACEHOLDER (an absolute path) or leave it empty")
        if self.artifact_store not in ARTIFACT_STORES:
            raise BadInput("artifact_store", self.artifact_store, f"use one of {', '.join(ARTIFACT_STORES)}")
        if self.backend == "volcano" and self.artifact_store == "s3":
            self.object_store()   # validates endpoint, secret, region now
            self.step_store_config({})   # the step's endpoint too (keys are read at run time)
        elif self.backend == "volcano" and self.handoff_volume is None:
            if self.workspace_path:
                raise BadInput("workspace_path", self.workspace_path,
                               "the run workspace is not among the task's volumes: compile the pipeline "
                               "with dsl.PipelineConfig(workspace=...) for a KFP backend >= 2.15 (the "
                               "KUBERNETES_VOLUMES passthrough hands it to the gang), or use the explicit "
                               "pvc_name mode (`ctr-volcano compile --legacy-kfp`)")
            raise BadInput("pvc_name", self.pvc_name,
                           "the volcano backend hands data and model over through a shared ReadWriteMany "
                           "volume: run the pipeline with a KFP run workspace, or create a PVC "
                           "(deploy/pvc-example.yaml), mount it in this step and pass its name, or use "
                           "artifact_store='s3' (the object store, no volume)")

    def object_store(self) -> Any:
        """The :class:`~ctr_volcano.volcano.spec.ObjectStore` of the ``s3`` mode."""
        from ctr_volcano.volcano.spec import ObjectStore

        kwargs: Dict[str, Any] = {"region": self.s3_region}
        if self.s3_endpoint:
            kwargs["endpoint"] = self.s3_endpoint
        if self.s3_secret:
            kwargs["secret"] = self.s3_secret
        return ObjectStore(**kwargs)

    def step_store_config(self, env: Optional[Mapping[str, str]] = None) -> Any:
        """The :class:`ctr_model.store.StoreConfig` of this step's own client: the pods' endpoint,
        region and addressing, except that :attr:`s3_step_endpoint` (if set) replaces the endpoint;
        keys from ``env`` (default: this process's environment)."""
        from ctr_model.store import StoreConfig, StoreError

        obj = self.object_store()
        endpoint = self.s3_step_endpoint or obj.endpoint
        field = "s3_step_endpoint" if self.s3_step_endpoint else "s3_endpoint"
        try:
            return StoreConfig.from_env({**(os.environ if env is None else env), "CTR_S3_ENDPOINT": endpoint,
                                         "CTR_S3_REGION": obj.region, "CTR_S3_ADDRESSING": obj.addressing})
        except StoreError as exc:
            raise BadInput(field, endpoint, str(exc)) from None

    @property
    def handoff_dir(self) -> str:
        """Where this step and the gang exchange data and model: the run workspace, else the PVC mount."""
        return self.workspace_path or self.pvc_mount_path

    @property
    def handoff_volume(self) -> Optional[Tuple[str, Optional[str]]]:
        """``(source, claim)`` of the volume the gang mounts over :attr:`handoff_dir`, or ``None``.

        ``source`` is ``"task_config"`` (a volume KFP passed through: the run workspace or a
        ``mount_pvc``) or ``"pvc_name"`` (the explicit parameter); ``claim`` is the PVC's name
        (``None`` for a volume that is not a claim).
        """
        mount = self.task_config.mount_covering(self.handoff_dir)
        if mount is not None:
            return "task_config", self.task_config.claim_of(str(mount["name"]))
        root = self.pvc_mount_path.rstrip("/")
        if self.pvc_name and (self.handoff_dir == root or self.handoff_dir.startswith(root + "/")):
            return "pvc_name", self.pvc_name
        return None

    @classmethod
    def from_component(cls, **kwargs: Any) -> "StepParams":
        """Build from KFP parameters: ``""`` means unset; a TTL of -1 means keep the Job; a
        ``dsl.TaskConfig`` is parsed with :meth:`TaskPodConfig.from_kfp`."""
        clean = {k: _none_if_empty(v) for k, v in kwargs.items() if k != "task_config"}
        clean["task_config"] = TaskPodConfig.from_kfp(kwargs.get("task_config"))
        ttl = clean.get("ttl_seconds_after_finished")
        if ttl is not None and int(ttl) == -1:   # KFP's "unset"; other negatives are refused
            clean["ttl_seconds_after_finished"] = None
        for key in ("queue", "pvc_mount_path", "cpu", "memory", "artifact_store", "s3_region"):
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


def build_spec(params: StepParams, data_dir: str, output_dir: str, name: Optional[str] = None,
               init_model: Optional[str] = None) -> Any:
    """The :class:`~ctr_volcano.volcano.spec.TrainJobSpec` for ``params`` (pod-side paths)."""
    from ctr_volcano.images import trainer_image
    from ctr_volcano.volcano.client import in_cluster_namespace
    from ctr_volcano.volcano.spec import PvcVolume, TrainJobSpec
    from ctr_volcano.volcano.task_config import role_resources

    task = params.task_config
    pserver_resources, trainer_resources = role_resources(task, cpu=params.cpu, memory=params.memory,
                                                          gpus=params.gpus)
    same_mount = any(task.claim_of(str(m["name"])) == params.pvc_name and m["mountPath"] == params.pvc_mount_path
                     for m in task.volume_mounts)
    explicit = (PvcVolume(params.pvc_name, params.pvc_mount_path),) if params.pvc_name and not same_mount else ()
    return TrainJobSpec(
        name=name or _job_name(params),
        namespace=params.namespace or in_cluster_namespace(),
        image=params.image or trainer_image(),
        data_dir=data_dir, output_dir=output_dir,
        pservers=params.pservers, trainers=params.trainers,
        train_config=train_config_of(params),
        pserver_resources=pserver_resources,
        trainer_resources=trainer_resources,
        queue=params.queue, priority_class=params.priority_class, max_retry=params.max_retry,
        ttl_seconds_after_finished=params.ttl_seconds_after_finished,
        schedule_timeout_s=params.schedule_timeout_s, stall_timeout_s=params.stall_timeout_s,
        service_account=params.service_account,
        volumes=explicit if params.artifact_store == "pvc" else (),
        node_selector=dict(task.node_selector), tolerations=task.tolerations, affinity=task.affinity,
        env_vars=task.env, extra_volumes=task.volumes, extra_volume_mounts=task.volume_mounts,
        object_store=params.object_store() if params.artifact_store == "s3" else None,
        run_id=params.run_id, task_name=params.task_name, init_model=init_model)


def check_claims(client: Any, params: StepParams) -> None:
    """Refuse, before any copy or submit, claims the gang cannot share across nodes (see
    :func:`~ctr_volcano.volcano.task_config.check_claim_access`): every claim the gang would mount
    must exist, and the hand-off claim must be ReadWriteMany."""
    from ctr_volcano.volcano.client import in_cluster_namespace
    from ctr_volcano.volcano.task_config import check_claim_access

    namespace = params.namespace or in_cluster_namespace()
    _, handoff_claim = params.handoff_volume or (None, None)
    claims = ([params.pvc_name] if params.pvc_name else []) + list(params.task_config.claims())
    for claim in dict.fromkeys(claims):
        found = client.get_pvc(namespace, claim)
        if found is None:
            raise BadInput("volumes", claim, f"no PersistentVolumeClaim {claim!r} in namespace "
                                             f"{namespace!r}; create it or fix the name")
        check_claim_access(found, writes=claim == handoff_claim)


def _check_before_submit(data_path: str, params: StepParams, init_model: Optional[str] = None,
                         client: Any = None) -> None:
    """The local backend's boundary checks, done before a gang is scheduled (fail in seconds, not minutes).

    ``client`` (a :class:`ctr_model.store.Store`) when ``data_path`` is an ``s3://`` URI.
    """
    from ctr_model.config import ConfigError, TrainConfig
    from ctr_volcano.backends import check_train_data

    try:
        TrainConfig.from_dict(train_config_of(params))
    except ConfigError as exc:
        raise BadInput(f"config.{exc.field}", exc.value, exc.fix) from None
    data = check_train_data(data_path, params.trainers, field="train_data", client=client)
    if init_model:
        from ctr_volcano.backends.local import check_init_model

        check_init_model(init_model, train_config_of(params), params.pservers, data.hash_buckets or None)


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
        log: progress sink (default: this module's logger).
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
                      log: Optional[Callable[[str], None]] = None, client: Any = None,
                      init_model: Optional[str] = None) -> TrainResult:
    """Train with the backend ``params.backend`` names and leave the exported model in ``model_dir``.

    Args:
        data_path: the prep output directory as this process sees it.
        model_dir: where the exported model must end up (the KFP Model output path).
        params: the step's parameters.
        on_identity: called once with the gang's identity (written to the ``job_info`` output).
        log: progress sink (default: this module's logger).
        client: Volcano only: a ready :class:`~ctr_volcano.volcano.client.KubeClient` (tests, the
            cluster harness); default: built from ``params.kubeconfig``/in-cluster config.
        init_model: an exported model to warm-start from (both backends); on Volcano it is copied
            onto the shared claim next to the data, because the pservers load it.

    Returns:
        A :class:`~ctr_volcano.backends.TrainResult`.
    """
    backend: TrainingBackend
    if params.backend == "volcano":
        backend = VolcanoBackend(client)
    else:
        from ctr_volcano.backends.local import LocalBackend

        backend = LocalBackend()
    return backend.train(data_path, model_dir, params, on_identity=on_identity, log=log or logger.info,
                         init_model=init_model)


class VolcanoBackend:
    """The :class:`~ctr_volcano.backends.TrainingBackend` that runs the gang as a Volcano Job.

    Args:
        client: a ready :class:`~ctr_volcano.volcano.client.KubeClient`; default: one built from
            ``params.kubeconfig``/in-cluster config for each run (and closed after it).
    """

    def __init__(self, client: Any = None) -> None:
        self.client = client

    def train(self, data_path: str, model_dir: str, params: StepParams, *,
              on_identity: Optional[Callable[[Dict[str, Any]], None]] = None,
              log: Callable[[str], None] = logger.info, init_model: Optional[str] = None) -> TrainResult:
        """Check the inputs, hand the data over, run the Job and copy the model out (see
        ``TrainingBackend.train``)."""
        return _train_volcano(data_path, model_dir, params, on_identity=on_identity, log=log,
                              client=self.client, init_model=init_model)


def _train_volcano(data_path: str, model_dir: str, params: StepParams, *,
                   on_identity: Optional[Callable[[Dict[str, Any]], None]], log: Callable[[str], None],
                   client: Any, init_model: Optional[str]) -> TrainResult:
    from ctr_volcano.volcano.client import KubeClient
    from ctr_volcano.volcano.handoff import copy_model_out, prepare_run_dir
    from ctr_volcano.volcano.launcher import VolcanoLauncher

    name = _job_name(params)
    store_run = store = None
    if params.artifact_store == "s3":
        if init_model:
            raise BadInput("init_model", init_model, "warm start reads the init model from a volume every "
                                                     "pserver mounts: use the PVC or run-workspace hand-off")
        from ctr_model.store import Store, StoreError
        from ctr_volcano.volcano.objectstore import prepare_store_run

        obj = params.object_store()
        # this step signs with its own environment's keys (KFP: the same Secret as env), and reaches
        # the store at s3_step_endpoint when that differs from the pods' endpoint
        config = params.step_store_config()
        try:
            store = Store(config)
        except StoreError as exc:
            raise BadInput("s3_step_endpoint" if params.s3_step_endpoint else "s3_endpoint", config.endpoint,
                           str(exc)) from None
        if params.s3_step_endpoint:
            log(f"[volcano] object store: this step uses {params.s3_step_endpoint}, the pods {obj.endpoint}")
        store_run = prepare_store_run(store, data_path, name, params.s3_root, log=log)
        _check_before_submit(store_run.data_uri, params, client=store)
        data_dir, output_dir = store_run.data_uri, store_run.output_uri
        log(f"[volcano] object store: data {data_dir}, output {output_dir} (credentials from Secret "
            f"{obj.secret})")
    else:
        _check_before_submit(data_path, params, init_model)
    own_client = client is None
    if own_client:
        client = KubeClient.auto(params.kubeconfig, params.context)
    try:
        check_claims(client, params)
        init_dir = None
        if store_run is None:
            dirs = prepare_run_dir(params.handoff_dir, name, data_path, init_model=init_model)
            log(f"[volcano] run directory {dirs.root} (data {'copied' if dirs.copied else 'reused'}"
                + (f"; warm start from {dirs.init_model}" if dirs.init_model else "") + ")")
            data_dir, output_dir, init_dir = dirs.data_dir, dirs.output_dir, dirs.init_model
        spec = build_spec(params, data_dir, output_dir, name=name, init_model=init_dir)
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
    if store_run is not None:
        from ctr_volcano.volcano.objectstore import cleanup_run, collect_model

        metrics = collect_model(store, store_run, model_dir)
        cleanup_run(store, store_run)
        log(f"[volcano] model copied from {store_run.output_uri}/model; deleted {store_run.root}")
        return replace(result, model_dir=model_dir, metrics=metrics or result.metrics)
    copy_model_out(output_dir, model_dir)
    return replace(result, model_dir=model_dir)
