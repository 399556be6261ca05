"""The training step's parameters, declared once, and the defaults both backends share.

Why one object: the KFP component must stay a thin adapter and the CLI must behave exactly like
it; both build a :class:`StepParams` and hand it to :func:`~ctr_volcano.training.step.run_training_step`.
Every field is declared here once, with its default and its one-line meaning (``metadata``), and
everything else is derived from that declaration: the ``train_ctr`` component's signature and
docstring (``components/train.py``), both pipelines' training parameters, and the ``ctr-volcano
train`` and ``render-job`` flags (``ctr_volcano/app/cli/step_flags.py``). The trainer's own settings
(``epochs``, ``batch_size``, ``learning_rate``, ``model_family``) take their defaults from
:mod:`ctr_model.defaults`, as ``ctr_model.config.TrainConfig`` does. ``tests/test_step_defaults.py`` compares
every entry point's defaults with these.

KFP's ``""``/``-1`` sentinels stop in :meth:`StepParams.from_component`; every field is checked in
``__post_init__``, before any data moves.
"""
from __future__ import annotations

import json
import os
from dataclasses import Field, dataclass, field, fields
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Tuple, Union, get_type_hints

from ctr_model.checks import is_int, is_positive
from ctr_model.defaults import DEFAULT_BATCH_SIZE, DEFAULT_EPOCHS, DEFAULT_LEARNING_RATE, DEFAULT_MODEL
from ctr_volcano.errors import BadInput
from ctr_volcano.training.store_access import KFP_ARTIFACT_ENDPOINT, KFP_ARTIFACT_SECRET, ObjectStore
from ctr_volcano.training.task_config import EMPTY, MIN_KFP_BACKEND, TaskPodConfig

__all__ = ["StepParams", "BACKENDS", "ARTIFACT_STORES", "DEFAULT_STALL_TIMEOUT_S", "DEFAULT_POLL_S",
           "DEFAULT_EXPLAIN_EVERY_S", "TOPOLOGY_MODES", "check_network_topology", "DEFAULT_SCHEDULE_TIMEOUT_S", "DEFAULT_TTL_S", "DEFAULT_TASK_NAME",
           "PVC_MOUNT_PATH", "DEFAULT_PVC_NAME", "KfpParameter", "step_fields", "value_type", "nullable_fields",
           "kfp_parameters", "kfp_doc",
           "train_config_of", "checked_train_config", "local_store_env"]

#: A trainer printing nothing for this long is considered hung (a dead pserver hangs trainers).
DEFAULT_STALL_TIMEOUT_S = 300.0
#: Seconds between the Volcano launcher's status polls.
DEFAULT_POLL_S = 5.0
#: Seconds between the Volcano launcher's "why is the gang Pending" reports.
DEFAULT_EXPLAIN_EVERY_S = 30.0
#: Seconds a gang may stay Pending (the Job's, the prep fan-out's): long enough for a cluster
#: autoscaler to add a node, short enough that a gang which can never fit fails the same day.
DEFAULT_SCHEDULE_TIMEOUT_S = 600
#: Seconds Volcano keeps a finished Job (and its pods' logs) before deleting it: time to look.
DEFAULT_TTL_S = 3600
#: The training task's name where no KFP task names it (the component's own name).
DEFAULT_TASK_NAME = "train-ctr"
#: Where the shared claim is mounted, in the training step's pod and in every gang pod, by default.
PVC_MOUNT_PATH = "/mnt/ctr"
#: The shared claim's name where the user names none (the pipelines' default ``pvc_name``, the claim
#: ``ctr-volcano minicluster up`` creates).
DEFAULT_PVC_NAME = "ctr-data"

BACKENDS = ("local", "volcano")
#: Volcano's ``networkTopology.mode`` values (batch.volcano.sh/v1alpha1 Job, Volcano >= 1.12).
TOPOLOGY_MODES = ("hard", "soft")
#: How the Volcano gang gets its data and hands its model back: a shared ReadWriteMany claim, or the
#: object store (S3 API, credentials from a Secret by reference).
ARTIFACT_STORES = ("pvc", "s3")


def _none_if_empty(value: Any) -> Any:
    return None if value in ("", None) else value


def _param(default: Any, doc: str, **where: Any) -> Any:
    """A :class:`StepParams` field: its default and its meaning, plus where it appears.

    Args:
        default: the default value (``None``: unset, see ``unset``).
        doc: what the parameter is, one line (KFP UI text, CLI help, this class's reference).
        where: ``unset`` (what an unset value means), ``scope`` (``"local"``/``"volcano"``: the
            only backend that reads it), ``group`` (``"store"``: the object-store flags),
            ``component`` (``False``: not a ``train_ctr`` parameter; a string: its name there),
            ``pipeline`` (a parameter of both pipelines), ``pipeline_default`` (theirs, where a
            cluster wants another), ``flag`` (the CLI's spelling, ``None``: no flag), ``metavar``,
            ``choices``, ``trainer`` (the ``TrainConfig`` key a ``--config`` file may also set),
            ``job`` (``False``: never reaches the Volcano Job, so ``render-job`` has no flag for it;
            ``scope="local"`` fields neither).
    """
    return field(default=default, metadata={"doc": doc, **where})


def _trainer(default: Any, key: str, doc: str, **where: Any) -> Any:
    """A field the trainer reads as ``TrainConfig`` field ``key`` (with the same named default)."""
    return _param(default, doc, trainer=key, pipeline=True, **where)


@dataclass(frozen=True)
class StepParams:
    """The training step's parameters (component, pipelines and CLI share them).

    Each field's meaning is its ``metadata["doc"]`` (see :func:`_param`); ``None`` means unset,
    with the meaning ``metadata["unset"]`` gives. ``config`` holds other ``ctr_model`` TrainConfig
    fields (a mapping; stored as sorted pairs); ``epochs``, ``batch_size``, ``learning_rate``,
    ``model_family`` and ``model_config`` win over it. ``task_config`` is the training task's KFP
    TaskConfig, parsed (:class:`~ctr_volcano.training.task_config.TaskPodConfig`); its settings win
    over ``cpu``, ``memory`` and ``gpus``.
    """

    backend: str = _param(
        "local", 'where the training gang runs: "local" (processes on this machine, or in the step\'s pod) '
        'or "volcano" (a gang-scheduled Volcano Job)', choices=BACKENDS, pipeline=True, pipeline_default="volcano", job=False)
    pservers: int = _param(2, "parameter servers in the training gang", pipeline=True)
    trainers: int = _param(2, "trainers in the training gang; each takes whole data shards", pipeline=True)
    epochs: int = _trainer(DEFAULT_EPOCHS, "epochs", "passes over the training data")
    batch_size: int = _trainer(DEFAULT_BATCH_SIZE, "batch_size", "examples per trainer batch")
    learning_rate: float = _trainer(DEFAULT_LEARNING_RATE, "learning_rate", "the Adam learning rate", flag="--lr")
    model_family: Optional[str] = _trainer(
        DEFAULT_MODEL, "model", 'the network: "dnn" (embedding-concat DNN), "wide_deep" (Wide & Deep), "deepfm" '
        '(DeepFM), "dcn_v2" (DCN-v2, stacked cross layers), or for a spec with several labels "esmm" or "mmoe"',
        flag="--model")
    model_config: Any = _param(
        None, 'the family\'s own hyper-parameters as a JSON object, e.g. {"cross_layers": 3, "low_rank": 0} '
        "for dcn_v2 (dnn, wide_deep and deepfm have none)", unset="the family's defaults",
        trainer="model_config", pipeline=True, metavar="JSON")
    max_retry: int = _param(2, "times the whole gang is restarted after a failure before the step fails",
                            pipeline=True)
    namespace: Optional[str] = _param(None, "the Job's namespace", scope="volcano", pipeline=True,
                                      unset="this pod's namespace, else default")
    image: Optional[str] = _param(None, "the trainer image", scope="volcano", pipeline=True,
                                  unset="the release's trainer image (ctr_volcano.images.trainer_image)")
    queue: str = _param("default", "the Volcano queue the gang is submitted to", scope="volcano", pipeline=True)
    priority_class: Optional[str] = _param(None, "a Kubernetes PriorityClass for the gang's pods", scope="volcano",
                                           pipeline=True, unset="the cluster's default")
    network_topology: Optional[str] = _param(
        None, 'Volcano\'s network-topology-aware placement of the whole gang (pservers with their trainers; '
        'the Job\'s networkTopology.mode, HyperNodes needed): "hard" (only within one HyperNode of tier '
        'highest_tier_allowed or lower; the gang waits otherwise) or "soft" (as close as fits, placed anyway)',
        scope="volcano", pipeline=True, choices=TOPOLOGY_MODES, unset="no constraint")
    highest_tier_allowed: Optional[int] = _param(
        None, 'with network_topology "hard": the highest HyperNode tier the gang may span (1: one leaf '
        'group, e.g. one rack or switch)', scope="volcano", pipeline=True, metavar="TIER", unset="none")
    artifact_store: str = _param(
        "pvc", 'how data and model travel between the training step and its gang: "pvc" (a shared ReadWriteMany '
        'volume: the run workspace or pvc_name) or "s3" (the object store, no shared volume)',
        scope="volcano", choices=ARTIFACT_STORES, pipeline=True)
    pvc_name: Optional[str] = _param(
        None, "a ReadWriteMany PVC mounted by the training step and its gang's pods, through which data and model "
        "travel; it must exist in the Job's namespace", scope="volcano", pipeline=True,
        pipeline_default=DEFAULT_PVC_NAME, unset="none: the run workspace or the object store")
    pvc_mount_path: str = _param(PVC_MOUNT_PATH, "where the training step and its gang's pods mount pvc_name",
                                 scope="volcano")
    schedule_timeout_s: int = _param(
        DEFAULT_SCHEDULE_TIMEOUT_S, "seconds the gang may stay Pending before the step fails with the "
        "PodGroup's reason (and deletes the Job)", scope="volcano", pipeline=True, flag="--schedule-timeout",
        metavar="SECONDS")
    stall_timeout_s: float = _param(
        DEFAULT_STALL_TIMEOUT_S, "seconds a trainer may print nothing before it counts as hung (local: the "
        "gang restarts; Volcano: the step fails and the Job is deleted)", flag="--stall-timeout",
        metavar="SECONDS")
    run_id: Optional[str] = _param(
        None, "the KFP run id (pass dsl.PIPELINE_JOB_ID_PLACEHOLDER): with task_name it names the Job, so a "
        "retried step re-attaches to its Job instead of starting a second gang", scope="volcano",
        unset="$KFP_RUN_ID, else an ad-hoc id")
    task_name: str = _param(DEFAULT_TASK_NAME, "the KFP task name (pass dsl.PIPELINE_TASK_NAME_PLACEHOLDER); "
                            "with run_id it names the Job", scope="volcano")
    job_name: Optional[str] = _param(None, "an explicit Job name, instead of the one run_id and task_name give",
                                     scope="volcano", component=False)
    service_account: Optional[str] = _param(None, "the gang pods' service account", scope="volcano",
                                            unset="the namespace's default")
    cpu: str = _param("1", "CPU request of every gang pod, unless the task sets CPU (set_cpu_request)",
                      scope="volcano", pipeline=True)
    memory: str = _param("2Gi", "memory request and limit of every gang pod, unless the task sets memory "
                         "(set_memory_request/limit)", scope="volcano", pipeline=True)
    gpus: int = _param(0, "GPUs per trainer pod, unless the task sets an accelerator", scope="volcano")
    ttl_seconds_after_finished: Optional[int] = _param(
        DEFAULT_TTL_S, "seconds Volcano keeps the finished Job before deleting it; -1 keeps it",
        scope="volcano", flag="--ttl", metavar="SECONDS")
    kubeconfig: Optional[str] = _param(None, "the kubeconfig file", scope="volcano", component=False, job=False,
                                       unset="$KUBECONFIG, ~/.kube/config or the in-cluster config")
    context: Optional[str] = _param(None, "the kubeconfig context", scope="volcano", component=False, job=False)
    poll_s: float = _param(DEFAULT_POLL_S, "seconds between status polls (and log reads) of the Job",
                           scope="volcano", component="poll_interval_s", flag="--poll", metavar="SECONDS",
                           job=False)
    explain_every_s: float = _param(DEFAULT_EXPLAIN_EVERY_S, "seconds between reports of why a Pending gang "
                                    "waits", scope="volcano", component=False, flag="--explain-every",
                                    metavar="SECONDS", job=False)
    s3_endpoint: Optional[str] = _param(
        None, "the S3 API, http(s)://HOST:PORT (the scheme turns TLS off or on): on Volcano as the gang's "
        "pods reach it (artifact_store s3), locally for s3:// data or output", group="store", metavar="URL",
        unset=f"KFP's store ({KFP_ARTIFACT_ENDPOINT}) on Volcano, $CTR_S3_ENDPOINT locally")
    s3_step_endpoint: Optional[str] = _param(
        None, "the S3 API as this step reaches it, when the pods' s3_endpoint is not reachable from here "
        "(a port-forward to an in-cluster store)", scope="volcano", group="store", component=False,
        metavar="URL", unset="s3_endpoint", job=False)
    s3_secret: Optional[str] = _param(
        None, "the Secret (keys accesskey, secretkey) the gang's pods read the store's credentials from",
        scope="volcano", group="store", metavar="SECRET", unset=f"KFP's own, {KFP_ARTIFACT_SECRET}")
    s3_region: Optional[str] = _param(None, "the object store's signing region", group="store",
                                      component=False, unset="us-east-1 (locally $CTR_S3_REGION)")
    s3_addressing: Optional[str] = _param(None, "bucket addressing: path or virtual", group="store",
                                          component=False, choices=("path", "virtual"),
                                          unset="path, what in-cluster stores serve ($CTR_S3_ADDRESSING locally)")
    s3_root: Optional[str] = _param(None, "s3://BUCKET/PREFIX for the run directories (deleted after "
                                    "success)", scope="volcano", group="store", metavar="S3_URI",
                                    unset="the data's bucket, ctr-runs/")
    config: Any = _param((), "other TrainConfig fields", component=False, flag=None)
    workdir: Optional[str] = _param(None, "logs and checkpoints go there, so a later run with the same "
                                    "workdir resumes", scope="local", component=False,
                                    unset="a temporary directory, removed after a success")
    output_uri: Optional[str] = _param(
        None, "an s3://BUCKET/PREFIX for checkpoints, model and metrics instead of the workdir (a later run "
        "with the same prefix resumes from the store)", scope="local", group="store", component=False,
        flag="--output", metavar="S3_URI")
    workspace_path: Optional[str] = _param(
        None, "the KFP run workspace (pass dsl.WORKSPACE_PATH_PLACEHOLDER); data and model travel through "
        "it instead of pvc_name", scope="volcano", flag=None)
    task_config: TaskPodConfig = _param(EMPTY, "the training task's TaskConfig", component=False, flag=None)

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
        check_network_topology(self.network_topology, self.highest_tier_allowed)
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
        """Build from KFP parameters (a field's name or its component name, ``poll_interval_s``):
        ``""`` means unset, and so does ``-1`` for an optional whole number (a TTL of -1 keeps the
        Job); a ``dsl.TaskConfig`` is parsed with :meth:`TaskPodConfig.from_kfp`."""
        renamed = {f.metadata["component"]: f.name for f in fields(cls) if isinstance(f.metadata.get("component"), str)}
        nullable = nullable_fields()
        clean: Dict[str, Any] = {}
        for key, value in kwargs.items():
            name = renamed.get(key, key)
            value = None if name == "task_config" else _none_if_empty(value)
            if value is not None and name in nullable and value_type(name) is int and int(value) == -1:
                value = None   # KFP's "unset" for a whole number; other negatives are refused
            if value is not None or name in nullable:
                clean[name] = value      # a non-nullable field left unset takes its default
        clean["task_config"] = TaskPodConfig.from_kfp(kwargs.get("task_config"))
        return cls(**clean)


class KfpParameter(NamedTuple):
    """One step parameter as a KFP component or pipeline declares it.

    Attributes:
        name: the KFP parameter's name.
        field: the :class:`StepParams` field it fills.
        type: ``str``, ``int``, ``float`` or ``bool``.
        default: the default in KFP's terms (``""`` or ``-1`` for unset).
        doc: its ``Args:`` text (the KFP UI shows it).
    """

    name: str
    field: str
    type: type
    default: Any
    doc: str


def step_fields() -> Tuple[Field, ...]:
    """The :class:`StepParams` fields, in declaration order (the order every entry point shows)."""
    return fields(StepParams)


def _hints() -> Dict[str, Any]:
    return get_type_hints(StepParams)


def nullable_fields() -> frozenset:
    """Fields whose type admits ``None`` (unset)."""
    hints = _hints()
    return frozenset(n for n, h in hints.items() if h is Any or type(None) in getattr(h, "__args__", ()))


def value_type(name: str) -> type:
    """``str``, ``int``, ``float`` or ``bool``: field ``name``'s type without ``Optional``, as KFP and
    the CLI take it (JSON text for ``Any``)."""
    hint = _hints()[name]
    if getattr(hint, "__origin__", None) is Union:
        hint = next(a for a in hint.__args__ if a is not type(None))
    return hint if hint in (str, int, float, bool) else str


def kfp_parameters(surface: str = "component", exclude: Tuple[str, ...] = (),
                   notes: Optional[Mapping[str, str]] = None) -> List[KfpParameter]:
    """The step's parameters as ``train_ctr`` (``surface="component"``) or the pipelines
    (``"pipeline"``) declare them, in declaration order, with KFP's defaults and ``Args:`` text.

    Args:
        surface: ``component`` (every field a component takes) or ``pipeline`` (the ones both pipelines
            expose, with ``pipeline_default`` where a cluster wants another default).
        exclude: field names to leave out.
        notes: a sentence to add to a field's text, by field name (a pipeline's own remark).
    """
    out = []
    for f in step_fields():
        meta = f.metadata
        if f.name in exclude or meta.get("component") is False or (surface == "pipeline" and not meta.get("pipeline")):
            continue
        kind = value_type(f.name)
        default = meta.get("pipeline_default", f.default) if surface == "pipeline" else f.default
        if default is None:
            default = -1 if kind is int else ""
        out.append(KfpParameter(name=meta["component"] if isinstance(meta.get("component"), str) else f.name,
                                field=f.name, type=kind, default=default,
                                doc=kfp_doc(f, (notes or {}).get(f.name), unset=default in ("", -1))))
    return out


def kfp_doc(f: Field, note: Optional[str] = None, unset: bool = True) -> str:
    """A field's ``Args:`` text for KFP: its scope, its meaning, what empty means (when ``unset``:
    its KFP default is empty), a note."""
    meta = f.metadata
    scope = {"volcano": "Volcano only: ", "local": "local backend only: "}.get(str(meta.get("scope")), "")
    text = scope + str(meta["doc"])
    if unset and meta.get("unset"):
        text += f"; empty means {meta['unset']}"
    return text + (f"; {note}" if note else "") + "."


def check_network_topology(mode: Optional[str], tier: Optional[int]) -> None:
    """Refuse a topology Volcano 1.15 would ignore or reject (:class:`BadInput`, one line).

    Volcano treats ``hard`` without ``highestTierAllowed`` as no constraint (``JobInfo.
    IsHardTopologyMode``) and replaces a ``soft`` job's tier with the cluster's top tier
    (``convertSoftToHardTopology``), so both would be silently ignored.
    """
    if mode is not None and mode not in TOPOLOGY_MODES:
        raise BadInput("network_topology", mode, f"use one of {', '.join(TOPOLOGY_MODES)}, or leave it empty")
    if tier is not None and not is_int(tier, 1):
        raise BadInput("highest_tier_allowed", tier, "use a HyperNode tier >= 1 (1: one leaf group)")
    if mode == "hard" and tier is None:
        raise BadInput("highest_tier_allowed", tier, 'set the tier the gang may span (1: one leaf group): '
                                                     'Volcano ignores network_topology "hard" without it')
    if mode != "hard" and tier is not None:
        raise BadInput("highest_tier_allowed", tier, 'use it with network_topology "hard" (Volcano ignores '
                                                     'a tier on "soft"), or leave it empty')


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
