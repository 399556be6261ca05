"""The CTR training pipeline: prep -> distributed train -> evaluate -> AUC gate -> publish.

Why it looks like this:

* Raw data enters through ``dsl.importer`` on the ``data_uri`` parameter. It is the one way that works
  both on a cluster (any URI the KFP launcher can download: ``minio://``, ``s3://``, ``gs://``) and
  under ``kfp.local`` (a local path), and the data shows up as a tracked Dataset artifact in the UI.
* The gate is a separate single-output task and the condition reads its ``.output``: ``kfp.local``
  2.17.3 silently treats a condition on a named output of a multi-output task as false.
* Every parameter has a default, so a run from the KFP UI needs no typing; the defaults target a
  cluster (``backend="volcano"``). ``ctr-volcano run`` overrides ``backend="local"`` and ``data_uri``.
* The training task is configured the KFP way (KFP backend >= 2.15; 2.17 measured): ``cpu`` and
  ``memory`` become the task's own requests (``set_cpu_request``...), which reach the gang through the
  component's TaskConfig passthroughs, and data and model travel through the **run workspace**, a
  ReadWriteMany claim KFP creates for each run (:data:`WORKSPACE`): no claim to create or name.
* :data:`ctr_training_pipeline_legacy` is the same pipeline for older backends (no TaskConfig, no
  workspace): the explicit ``cpu``/``memory`` parameters and a named RWX claim, ``pvc_name``, mounted
  with ``kubernetes.mount_pvc``. ``ctr-volcano compile --legacy-kfp`` writes its YAML.

Compiled to ``ctr_training_pipeline.yaml`` next to this file by ``ctr-volcano compile``; a test fails
when the two drift apart.
"""

import functools
import inspect
import re
from typing import NamedTuple

from kfp import dsl, kubernetes
from kfp.dsl import HTML, Dataset, Metrics, Model

from components.data_prep import prepare_ctr_data
from components.evaluate import check_auc_gate, evaluate_ctr, publish_model
from components.train import train_ctr
from ctr_model.defaults import DEFAULT_HASH_BUCKETS
from ctr_volcano.training.params import DEFAULT_PVC_NAME, PVC_MOUNT_PATH
from ctr_volcano.training.store_access import KFP_ACCESS_KEY_KEY, KFP_ARTIFACT_SECRET, KFP_SECRET_KEY_KEY
from ctr_volcano.training.task_config import MIN_KFP_BACKEND
from pipelines.legacy_kfp import without_task_config

__all__ = ["ctr_training_pipeline", "ctr_training_pipeline_legacy", "PIPELINE_NAME", "DEFAULT_DATA_URI",
           "DEFAULT_PVC_NAME", "WORKSPACE", "MIN_KFP_BACKEND"]

PIPELINE_NAME = "ctr-training-pipeline"
#: Where the UI's one-click run reads raw data: upload ``data/sample`` there once (see docs/cluster.md, "From the KFP UI, with one click").
DEFAULT_DATA_URI = "minio://mlpipeline/ctr-volcano/data/sample"
#: Legacy YAML only: the ReadWriteMany PVC shared by the training step and its gang (deploy/pvc-example.yaml).
#: The oldest KFP backend that runs the default YAML (TaskConfig parameters and passthroughs; 2.14.3
#: rejects them at upload).
#: The run workspace: one claim per run, written by the training step and every gang pod, which
#: spread over nodes, hence ReadWriteMany (KFP 2.17 also refuses a patch without accessModes). The
#: storage class is the cluster's default or the one the KFP admin set for workspaces.
WORKSPACE = dsl.WorkspaceConfig(
    size="20Gi", kubernetes=dsl.KubernetesWorkspaceConfig(pvcSpecPatch={"accessModes": ["ReadWriteMany"]}))
#: ``train_ctr`` without the TaskConfig interface, for the legacy YAML.
_train_ctr_legacy = without_task_config(train_ctr)


def ctr_training_pipeline(
    data_uri: str = DEFAULT_DATA_URI,
    hash_buckets: int = DEFAULT_HASH_BUCKETS,
    test_fraction: float = 0.1,
    shards: int = 8,
    max_bad_fraction: float = 0.001,
    seed: int = 42,
    feature_spec: str = "",
    prep_fanout: int = 0,
    backend: str = "volcano",
    pservers: int = 2,
    trainers: int = 2,
    epochs: int = 2,
    batch_size: int = 512,
    learning_rate: float = 0.001,
    model_family: str = "dnn",
    model_config: str = "",
    max_retry: int = 2,
    namespace: str = "",
    image: str = "",
    queue: str = "default",
    priority_class: str = "",
    artifact_store: str = "pvc",
    pvc_name: str = DEFAULT_PVC_NAME,
    cpu: str = "1",
    memory: str = "2Gi",
    schedule_timeout_s: int = 600,
    threshold: float = 0.5,
    min_auc: float = 0.7,
) -> NamedTuple("Outputs", [("auc", float), ("passed", bool), ("model", Model), ("metrics", Metrics),
                            ("report", HTML)]):
    """Train a click-through-rate model on Criteo-format data and publish it if its test AUC is good enough.

    Args:
        data_uri: raw Criteo TSV data (a file or a directory of files), as a URI the pipeline can read: minio://, s3:// or gs:// on a cluster, a local path under kfp.local.
        hash_buckets: size of the categorical feature hash space (embedding rows).
        test_fraction: share of rows held out for evaluation.
        shards: number of training-data shards; trainers take whole shards, so use a multiple of trainers.
        max_bad_fraction: the prep step fails if more than this share of raw lines is malformed.
        seed: seed of the train/test split.
        feature_spec: the raw data's layout as a JSON feature spec (CSV/TSV/Parquet, named columns, multi-valued features; docs/features.md); empty means Criteo TSV.
        prep_fanout: 0 preps in one step; N > 0 fans prep out to N workers (Criteo TSV): N processes in the prep step, or in the legacy variant a Volcano Job of N prep pods on pvc_name. The output is the same for every value.
        backend: where training runs: "volcano" (a Volcano Job of pservers and trainers) or "local" (the same gang as processes in the step's pod).
        pservers: parameter servers in the training gang.
        trainers: trainers in the training gang.
        epochs: passes over the training data.
        batch_size: examples per trainer step.
        learning_rate: Adam learning rate.
        model_family: the network to train: "dnn" (embedding-concat DNN), "wide_deep" (Wide & Deep), "deepfm" (DeepFM) or "dcn_v2" (DCN-v2, stacked cross layers).
        model_config: the family's own hyper-parameters as a JSON object, e.g. {"cross_layers": 3, "low_rank": 0} for dcn_v2 (the other families have none); empty means the family's defaults.
        max_retry: times the whole gang is restarted after a pod failure before the step fails.
        namespace: Kubernetes namespace of the Volcano Job; empty means the pipeline run's namespace.
        image: trainer container image; empty means the release's default trainer image.
        queue: Volcano queue to submit the job to.
        priority_class: Kubernetes PriorityClass of the gang's pods; empty for none.
        artifact_store: how data and model travel between the steps and the gang: "pvc" (a shared volume: the run workspace, or pvc_name in the legacy variant) or "s3" (KFP's own object store with its own credentials, no shared volume for the gang).
        pvc_name: ReadWriteMany PVC mounted by the training step and its gang, through which data and model travel; it must exist in the run's namespace.
        cpu: CPU request of every pod of the gang (the training task's own CPU request, passed through to the gang).
        memory: memory request and limit of every pod of the gang (the training task's own memory request and limit, passed through to the gang).
        schedule_timeout_s: seconds the gang may wait for the Volcano scheduler before the step fails with the PodGroup's reason.
        threshold: probability at or above which an impression counts as a predicted click (confusion matrix).
        min_auc: quality gate: the model is published only if its test AUC is at least this.

    Returns:
        auc: the test AUC; passed: whether the gate let the model through; model, metrics and report
        from the training and evaluation steps.
    """
    raw = dsl.importer(artifact_uri=data_uri, artifact_class=Dataset, reimport=False)
    if pvc_name is None:
        # Not in the legacy variant: a KFP 2.14.3 importer records its display name as its task
        # name in ML Metadata, and the next task's driver then finds no task "importer"
        # ("cannot find producer task"): every run failed before prep on a real 2.14.3 backend.
        raw.set_display_name("raw data")
    on_claim = {} if pvc_name is None else dict(pvc_name=pvc_name, pvc_mount_path=PVC_MOUNT_PATH,
                                                   namespace=namespace, queue=queue)
    prep = prepare_ctr_data(
        raw_data=raw.output, hash_buckets=hash_buckets, test_fraction=test_fraction, shards=shards,
        max_bad_fraction=max_bad_fraction, seed=seed, feature_spec=feature_spec, fanout=prep_fanout, **on_claim)
    prep.set_display_name("prepare data")
    if pvc_name is not None:    # the legacy variant's claim: the prep pods' when prep_fanout > 0
        kubernetes.mount_pvc(prep, pvc_name=pvc_name, mount_path=PVC_MOUNT_PATH)
    common = dict(
        train_data=prep.outputs["train_data"], backend=backend, pservers=pservers, trainers=trainers,
        epochs=epochs, batch_size=batch_size, learning_rate=learning_rate, model_family=model_family,
        model_config=model_config, max_retry=max_retry,
        namespace=namespace, image=image, queue=queue, priority_class=priority_class,
        artifact_store=artifact_store, schedule_timeout_s=schedule_timeout_s,
        run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER, task_name=dsl.PIPELINE_TASK_NAME_PLACEHOLDER)
    if pvc_name is None:  # the KFP way: resources set on the task, hand-off through the run workspace
        train = train_ctr(**common, workspace_path=dsl.WORKSPACE_PATH_PLACEHOLDER)
        train.set_cpu_request(cpu).set_memory_request(memory).set_memory_limit(memory)
    else:  # legacy backends: explicit parameters and a named claim
        train = _train_ctr_legacy(**common, pvc_name=pvc_name, pvc_mount_path=PVC_MOUNT_PATH, cpu=cpu,
                                  memory=memory)
        kubernetes.mount_pvc(train, pvc_name=pvc_name, mount_path=PVC_MOUNT_PATH)  # ignored by kfp.local
    # With artifact_store="s3" this step reads the prep output from KFP's store itself, with KFP's
    # own keys: the Secret KFP's launcher needs in the run's namespace anyway. Not `optional`: a
    # 2.14 API server refuses that field ("unknown field optional") at run creation.
    kubernetes.use_secret_as_env(train, secret_name=KFP_ARTIFACT_SECRET, secret_key_to_env={
        KFP_ACCESS_KEY_KEY: "AWS_ACCESS_KEY_ID", KFP_SECRET_KEY_KEY: "AWS_SECRET_ACCESS_KEY"})
    train.set_display_name("train (parameter server)")
    evaluation = evaluate_ctr(model=train.outputs["model"], test_data=prep.outputs["test_data"],
                              threshold=threshold)
    evaluation.set_display_name("evaluate")
    gate = check_auc_gate(auc=evaluation.outputs["Output"], min_auc=min_auc)
    gate.set_display_name("AUC gate")
    with dsl.If(gate.output == True, name="auc-gate-passed"):  # noqa: E712 (a KFP condition, not Python)
        publish = publish_model(model=train.outputs["model"], auc=evaluation.outputs["Output"],
                                min_auc=min_auc)
        publish.set_display_name("publish model")
    outputs = NamedTuple("Outputs", [("auc", float), ("passed", bool), ("model", Model),
                                     ("metrics", Metrics), ("report", HTML)])
    return outputs(auc=evaluation.outputs["Output"], passed=gate.output, model=train.outputs["model"],
                   metrics=evaluation.outputs["metrics"], report=evaluation.outputs["report"])


_BODY = ctr_training_pipeline  # the undecorated body; the name is rebound to the KFP pipeline below


def _define(legacy: bool):
    """The pipeline as KFP builds it: both variants share the body and the parameters above; the
    default one has no ``pvc_name`` (its body then sees ``None`` and uses the run workspace)."""
    func = _BODY
    if not legacy:
        full = inspect.signature(_BODY)
        sig = full.replace(parameters=[p for n, p in full.parameters.items() if n != "pvc_name"])

        def func(*args, **kwargs):  # type: ignore[no-redef]
            return _BODY(pvc_name=None, **sig.bind(*args, **kwargs).arguments)

        functools.update_wrapper(func, _BODY)
        func.__signature__ = sig  # type: ignore[attr-defined]
        func.__doc__ = re.sub(r"\n        pvc_name: [^\n]*", "", _BODY.__doc__ or "")
    return dsl.pipeline(func, name=PIPELINE_NAME,
                        display_name="CTR training: PaddlePaddle parameter server on Volcano",
                        pipeline_config=None if legacy else dsl.PipelineConfig(workspace=WORKSPACE))


ctr_training_pipeline_legacy = _define(legacy=True)
ctr_training_pipeline = _define(legacy=False)
