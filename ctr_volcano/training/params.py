"""The training step's parameters as one frozen, validated object, and the defaults both backends share.

Why a separate object: the KFP component must stay a thin adapter and the CLI must behave exactly like
it; both build a :class:`StepParams` and hand it to :func:`~ctr_volcano.training.step.run_training_step`.
KFP's ``""``/``-1`` sentinels stop in :meth:`StepParams.from_component`; every field is checked in
``__post_init__``, before any data moves.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Tuple

from ctr_model.checks import is_int, is_positive
from ctr_volcano.errors import BadInput
from ctr_volcano.training.store_access import ObjectStore
from ctr_volcano.training.task_config import EMPTY, MIN_KFP_BACKEND, TaskPodConfig

__all__ = ["StepParams", "BACKENDS", "ARTIFACT_STORES", "DEFAULT_STALL_TIMEOUT_S", "DEFAULT_POLL_S",
           "DEFAULT_EXPLAIN_EVERY_S", "PVC_MOUNT_PATH", "DEFAULT_PVC_NAME", "train_config_of", "checked_train_config", "local_store_env"]

#: A trainer printing nothing for this long is considered hung (a dead pserver hangs trainers).
DEFAULT_STALL_TIMEOUT_S = 300.0
#: Seconds between the Volcano launcher's status polls (the component, the CLI and the step agree).
DEFAULT_POLL_S = 5.0
#: Seconds between the Volcano launcher's "why is the gang Pending" reports.
DEFAULT_EXPLAIN_EVERY_S = 30.0
#: Where the shared claim is mounted, in the training step's pod and in every gang pod, by default.
PVC_MOUNT_PATH = "/mnt/ctr"
#: The shared claim's name where the user names none (the pipelines' default ``pvc_name``, the claim
#: ``ctr-volcano minicluster up`` creates).
DEFAULT_PVC_NAME = "ctr-data"

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
        model_family: the model family (``dnn``, ``wide_deep``, ``deepfm``, ``dcn_v2``); ``None`` =
            ``config``'s (else ``dnn``).
        model_config: the family's hyper-parameters as a JSON object (a mapping or its text);
            ``None`` = ``config``'s (else the family's defaults).
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
            host:port``; ``None`` = KFP's store (:data:`~ctr_volcano.training.store_access.KFP_ARTIFACT_ENDPOINT`).
        s3_step_endpoint: Volcano, ``s3``: the S3 API as this step reaches it, when that differs from
            the pods' (a CLI outside the cluster through a port-forward); used only by the step's own
            client (upload, checks, model copy, cleanup), never put in the manifest; ``None`` =
            ``s3_endpoint``.
        s3_secret: Volcano, ``s3``: the Secret with the store's credentials (keys ``accesskey``/
            ``secretkey``, KFP's layout); ``None`` = KFP's own artifact-store Secret.
        s3_region: the object store's signing region; ``None`` = ``us-east-1`` on Volcano, and
            ``$CTR_S3_REGION`` (else ``us-east-1``) locally.
        s3_addressing: ``path`` or ``virtual`` bucket addressing; ``None`` = ``path`` on Volcano and
            ``$CTR_S3_ADDRESSING`` (else ``path``) locally.
        s3_root: Volcano, ``s3``: ``s3://BUCKET/PREFIX`` for the run directories; ``None`` = the
            data's bucket, ``ctr-runs/``.
        config: other ``ctr_model`` TrainConfig fields (a mapping; stored as sorted pairs);
            ``epochs``, ``batch_size``, ``learning_rate``, ``model_family`` and ``model_config``
            above win.
        workdir: local: logs and the gang's output (checkpoints) go there, so a later run with the
            same workdir resumes; ``None`` = a temporary directory.
        output_uri: local: an ``s3://`` prefix for checkpoints, model and metrics instead of
            ``workdir/output`` (a later run with the same prefix resumes from the store); ``s3://``
            data or output read the store's keys from this process's environment.
        workspace_path: Volcano: the KFP run workspace as this step sees it
            (``dsl.WORKSPACE_PATH_PLACEHOLDER``); when set, it is the hand-off instead of
            ``pvc_mount_path`` and the task's TaskConfig must mount it (KUBERNETES_VOLUMES).
        task_config: Volcano: the training task's KFP TaskConfig, parsed
            (:class:`~ctr_volcano.training.task_config.TaskPodConfig`); its settings win over
            ``cpu``, ``memory`` and ``gpus``.
    """

    backend: str = "local"
    pservers: int = 2
    trainers: int = 2
    epochs: int = 2
    batch_size: int = 512
    learning_rate: float = 0.001
    model_family: Optional[str] = None
    model_config: Any = None
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
    poll_s: float = DEFAULT_POLL_S
    explain_every_s: float = DEFAULT_EXPLAIN_EVERY_S
    s3_endpoint: Optional[str] = None
    s3_step_endpoint: Optional[str] = None
    s3_secret: Optional[str] = None
    s3_region: Optional[str] = None
    s3_addressing: Optional[str] = None
    s3_root: Optional[str] = None
    config: Any = ()
    workdir: Optional[str] = None
    output_uri: Optional[str] = None
    workspace_path: Optional[str] = None
    task_config: TaskPodConfig = EMPTY

    def __post_init__(self) -> None:
        if isinstance(self.config, Mapping):
            object.__setattr__(self, "config", tuple(sorted(self.config.items())))
        if isinstance(self.model_config, str):
            object.__setattr__(self, "model_config", _model_config_json(self.model_config))
        elif isinstance(self.model_config, Mapping):
            object.__setattr__(self, "model_config", tuple(sorted(self.model_config.items())))
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
                               f"with dsl.PipelineConfig(workspace=...) for a KFP backend >= {MIN_KFP_BACKEND} (the "
                               "KUBERNETES_VOLUMES passthrough hands it to the gang), or use the explicit "
                               "pvc_name mode (`ctr-volcano compile --legacy-kfp`)")
            raise BadInput("pvc_name", self.pvc_name,
                           "the volcano backend hands data and model over through a shared ReadWriteMany "
                           "volume: run the pipeline with a KFP run workspace, or create a PVC "
                           "(deploy/pvc-example.yaml), mount it in this step and pass its name, or use "
                           "artifact_store='s3' (the object store, no volume)")

    def object_store(self) -> Any:
        """The :class:`~ctr_volcano.training.store_access.ObjectStore` of the ``s3`` mode."""
        kwargs: Dict[str, Any] = {"region": self.s3_region or "us-east-1",
                                  "addressing": self.s3_addressing or "path"}
        if self.s3_endpoint:
            kwargs["endpoint"] = self.s3_endpoint
        if self.s3_secret:
            kwargs["secret"] = self.s3_secret
        return ObjectStore(**kwargs)

    def step_store_config(self, env: Optional[Mapping[str, str]] = None) -> Any:
        """The :class:`ctr_model.store.StoreConfig` of this step's own client: the pods' endpoint,
        region and addressing, except that :attr:`s3_step_endpoint` (if set) replaces the endpoint;
        keys from ``env`` (default: this process's environment)."""
        from ctr_model.store import StoreConfig, check_endpoint

        obj = self.object_store()
        endpoint = self.s3_step_endpoint or obj.endpoint
        check_endpoint(endpoint, "s3_step_endpoint" if self.s3_step_endpoint else "s3_endpoint")
        return StoreConfig.from_env({**(os.environ if env is None else env), "CTR_S3_ENDPOINT": endpoint,
                                     "CTR_S3_REGION": obj.region, "CTR_S3_ADDRESSING": obj.addressing})

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
        for key in ("queue", "pvc_mount_path", "cpu", "memory", "artifact_store"):
            if clean.get(key) is None:
                clean.pop(key, None)
        return cls(**clean)


def _model_config_json(text: str) -> Any:
    """A ``model_config`` given as JSON text (the component's parameter), parsed; ``""`` = unset."""
    if not text.strip():
        return None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise BadInput("model_config", text[:80], f"not valid JSON ({exc}); pass a JSON object such as "
                                                  '{"cross_layers": 2}, or "" for the defaults') from None
    if not isinstance(data, dict):
        raise BadInput("model_config", text[:80], 'pass a JSON object such as {"cross_layers": 2}')
    return tuple(sorted(data.items()))


def train_config_of(params: StepParams) -> Dict[str, Any]:
    """The training config handed to ``ctr_model`` (JSON in ``CTR_TRAIN_CONFIG``)."""
    cfg = dict(params.config)
    cfg.update(epochs=params.epochs, batch_size=params.batch_size, learning_rate=float(params.learning_rate))
    if params.model_family is not None:
        cfg["model"] = params.model_family
    if params.model_config is not None:
        cfg["model_config"] = dict(params.model_config)
    return cfg


def checked_train_config(config: Mapping[str, Any]) -> Dict[str, Any]:
    """``config`` as a dict once ``ctr_model``'s TrainConfig accepts it.

    Raises:
        ConfigError: a :class:`BadInput` naming ``config.<key>`` (which the CLI turns into its flag).
    """
    from ctr_model.config import TrainConfig

    TrainConfig.from_dict(config)
    return dict(config)


def local_store_env(params: StepParams, env: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """The object store's variables for the local gang: ``env`` (default: this process's) with the
    step's ``s3_endpoint``/``s3_region``/``s3_addressing`` applied where set (``ctr_model.store``'s
    names; keys always come from the environment, never from the parameters)."""
    out = dict(os.environ if env is None else env)
    for value, var in ((params.s3_endpoint, "CTR_S3_ENDPOINT"), (params.s3_region, "CTR_S3_REGION"),
                       (params.s3_addressing, "CTR_S3_ADDRESSING")):
        if value:
            out[var] = value
    return out
