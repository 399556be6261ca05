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

from typing import NamedTuple

from kfp import dsl, kubernetes
from kfp.dsl import HTML, Dataset, Metrics, Model

from components.data_prep import prepare_ctr_data
from components.evaluate import check_auc_gate, evaluate_ctr, publish_model
from components.signature import with_parameters
from components.train import train_ctr
from components.validate import validate_ctr_data
from ctr_model.defaults import DEFAULT_HASH_BUCKETS
from ctr_volcano.training.params import DEFAULT_PVC_NAME, PVC_MOUNT_PATH, kfp_parameters
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
    threshold: float = 0.5,
    min_auc: float = 0.7,
    validate_data: bool = False,
    validation_baseline: str = "",
    validation_thresholds: str = "",
    **step,
) -> NamedTuple("Outputs", [("auc", float), ("passed", bool), ("model", Model), ("metrics", Metrics),
                            ("report", HTML)]):
    """Train a click-through-rate model on raw click logs and publish it if its test AUC is good enough.

    Args:
        data_uri: raw click logs (a file or a directory of files) in Criteo TSV or the layout feature_spec declares, as a URI the pipeline can read: minio://, s3:// or gs:// on a cluster, a local path under kfp.local.
        hash_buckets: size of the categorical feature hash space (embedding rows).
        test_fraction: share of rows held out for evaluation.
        shards: number of training-data shards; trainers take whole shards, so use a multiple of trainers.
        max_bad_fraction: the prep step fails if more than this share of raw lines is malformed.
        seed: seed of the train/test split.
        feature_spec: the raw data's layout as a JSON feature spec (CSV/TSV/Parquet, named columns, multi-valued features; docs/features.md); empty means Criteo TSV.
        prep_fanout: 0 preps in one step; N > 0 fans prep out to N workers (Criteo TSV): N processes in the prep step, or in the legacy variant a Volcano Job of N prep pods on pvc_name. The output is the same for every value.
        threshold: probability at or above which an impression counts as a predicted click (confusion matrix).
        min_auc: quality gate: the model is published only if its test AUC is at least this.
        validate_data: compare the data's profile with validation_baseline before training; a failed validation stops the run (docs/validation.md).
        validation_baseline: with validate_data: the reference profile (a profile.json, a prep output or an exported model, as a path the step can read); empty checks the data alone.
        validation_thresholds: with validate_data: thresholds as JSON over the feature spec's validation: section, e.g. {"js_divergence": 0.5}.

    Returns:
        auc: the test AUC; passed: whether the gate let the model through; model, metrics and report
        from the training and evaluation steps.
    """
    pvc_name = step.pop("pvc_name", None)   # the legacy variant's claim; None: the run workspace
    cpu, memory = step.pop("cpu"), step.pop("memory")
    raw = dsl.importer(artifact_uri=data_uri, artifact_class=Dataset, reimport=False)
    if pvc_name is None:
        # Not in the legacy variant: a KFP 2.14.3 importer records its display name as its task
        # name in ML Metadata, and the next task's driver then finds no task "importer"
        # ("cannot find producer task"): every run failed before prep on a real 2.14.3 backend.
        raw.set_display_name("raw data")
    on_claim = {} if pvc_name is None else dict(pvc_name=pvc_name, pvc_mount_path=PVC_MOUNT_PATH,
                                                namespace=step["namespace"], queue=step["queue"])
    prep = prepare_ctr_data(
        raw_data=raw.output, hash_buckets=hash_buckets, test_fraction=test_fraction, shards=shards,
        max_bad_fraction=max_bad_fraction, seed=seed, feature_spec=feature_spec, fanout=prep_fanout, **on_claim)
    prep.set_display_name("prepare data")
    if pvc_name is not None:    # the legacy variant's claim: the prep pods' when prep_fanout > 0
        kubernetes.mount_pvc(prep, pvc_name=pvc_name, mount_path=PVC_MOUNT_PATH)
    validate = validate_ctr_data(data=prep.outputs["train_data"], feature_spec=feature_spec,
                                 validation_thresholds=validation_thresholds,
                                 validation_baseline=validation_baseline, enabled=validate_data)
    validate.set_display_name("validate data")
    if pvc_name is not None:
        kubernetes.mount_pvc(validate, pvc_name=pvc_name, mount_path=PVC_MOUNT_PATH)
    common = dict(train_data=prep.outputs["train_data"], run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
                  task_name=dsl.PIPELINE_TASK_NAME_PLACEHOLDER, **step)
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
    train.after(validate)   # off by default (a no-op step); on, a failed validation stops the run here
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
#: What the training pipeline adds to the step's own parameter texts.
_NOTES = {"cpu": "this pipeline sets it on the training task, which passes it through to the gang",
          "memory": "this pipeline sets it on the training task, which passes it through to the gang"}


def _define(legacy: bool):
    """The pipeline as KFP builds it: the body's parameters and the training step's (declared once in
    ``StepParams``) after ``prep_fanout``; the default variant has no ``pvc_name`` (its body then
    uses the run workspace)."""
    step = kfp_parameters("pipeline", exclude=() if legacy else ("pvc_name",), notes=_NOTES)
    return dsl.pipeline(with_parameters(_BODY, step, after="prep_fanout"), name=PIPELINE_NAME,
                        display_name="CTR training: PaddlePaddle parameter server on Volcano",
                        pipeline_config=None if legacy else dsl.PipelineConfig(workspace=WORKSPACE))


ctr_training_pipeline_legacy = _define(legacy=True)
ctr_training_pipeline = _define(legacy=False)
