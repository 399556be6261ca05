"""KFP component ``train_ctr``: one training step, two backends, the same parameters.

Thin adapter over :func:`ctr_volcano.training.step.run_training_step`, which is tested without KFP.
Its training parameters are the step's, declared once in
:class:`~ctr_volcano.training.params.StepParams` and spelled out in the shipped source by
:func:`components.signature.shipped`:

* ``backend="local"`` (the embedded default, used when no cluster is configured) runs the
  pserver/trainer gang as local processes through ``ctr_volcano.training.local.backend.train_local``;
* ``backend="volcano"`` is a remote runner: it creates (or, for a retried step, re-attaches to) a
  gang-scheduled Volcano Job, streams its pods' logs into this step's log, explains a gang stuck
  Pending, deletes the Job on SIGTERM, and hands data and model over through a shared ReadWriteMany
  volume: the KFP run workspace (``workspace_path``), else a PVC this step mounts at
  ``pvc_mount_path`` (``kfp.kubernetes.mount_pvc``); or, with ``artifact_store="s3"``, through the
  object store: the gang reads ``train_data.uri`` and writes a run-scoped prefix, with credentials
  from a Secret by reference (this step needs the same keys as
  ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``: ``kfp.kubernetes.use_secret_as_env``).

Configured the KFP way (KFP >= 2.15): the task's resources, env, node selector, tolerations, node
affinity and volumes, set with KFP's own API on the task, reach the gang's pods through
``task_config_passthroughs`` and the ``task_config`` parameter. Only env and volumes also apply to
this step's own pod: it needs the hand-off volume, and nothing of the gang's size or placement.
Where each field lands and the precedence over ``cpu``/``memory``/``gpus``:
:mod:`ctr_volcano.training.task_config` and docs/kfp-task-config.md.

The job's identity is written to ``job_info`` as soon as it is known, and ``metrics.path`` always
gets a JSON file (``kfp.local`` counts a Metrics output without a file as a cache miss).
"""

from kfp import dsl
from kfp.dsl import Artifact, Dataset, Input, Metrics, Model, Output

from components.signature import shipped
from ctr_volcano.images import component_image
from ctr_volcano.training.params import kfp_parameters

__all__ = ["train_ctr", "TASK_CONFIG_PASSTHROUGHS"]

#: What the training task hands to its gang. ``apply_to_task`` only where this step's own pod needs
#: the setting too: env (credentials, proxies) and volumes (it writes the hand-off directory).
TASK_CONFIG_PASSTHROUGHS = [
    dsl.TaskConfigField.RESOURCES,
    dsl.TaskConfigPassthrough(field=dsl.TaskConfigField.ENV, apply_to_task=True),
    dsl.TaskConfigField.KUBERNETES_NODE_SELECTOR,
    dsl.TaskConfigField.KUBERNETES_TOLERATIONS,
    dsl.TaskConfigField.KUBERNETES_AFFINITY,
    dsl.TaskConfigPassthrough(field=dsl.TaskConfigField.KUBERNETES_VOLUMES, apply_to_task=True),
]


@dsl.component(base_image=component_image(), install_kfp_package=False,
               task_config_passthroughs=TASK_CONFIG_PASSTHROUGHS)
@shipped(extra=kfp_parameters())   # the step's parameters, declared once in StepParams
def train_ctr(
    train_data: Input[Dataset],
    model: Output[Model],
    metrics: Output[Metrics],
    job_info: Output[Artifact],
    task_config: dsl.TaskConfig,
    init_model: Input[Model] = None,
    warm_start: bool = True,
    **step,
):
    """Train the CTR model with a PaddlePaddle parameter-server gang.

    Args:
        train_data: the data-prep output (train Parquet shards + stats.json).
        model: the exported model directory (includes model_meta.json).
        metrics: training metrics (final loss, rows, seconds, attempts, ...).
        job_info: the gang's identity (backend, job name, namespace, uid), written as soon as known.
        task_config: filled by KFP: the task's resources, env, node selector, tolerations, affinity
            and volumes, for the gang's pods; empty under kfp.local.
        init_model: optional: a model to warm-start from (its pservers load its checkpoint before the
            first epoch); a find_champion output with found=False means train from scratch.
        warm_start: False ignores init_model and trains from scratch (e.g. after changing the network
            shape, which an init model must match).
    """
    import json
    import logging
    import os

    from ctr_model.logs import setup_logging
    from ctr_volcano.training.params import StepParams
    from ctr_volcano.training.step import run_training_step

    setup_logging()

    params = StepParams.from_component(task_config=task_config, **step)

    def record_identity(identity: dict) -> None:
        with open(job_info.path, "w", encoding="utf-8") as fh:
            json.dump(identity, fh, indent=2, sort_keys=True)
        for key, value in identity.items():
            job_info.metadata[key] = value

    init = None
    if init_model is not None and not warm_start:
        logging.info("train_ctr: warm_start=False: cold start (init_model ignored)")
    elif init_model is not None and init_model.metadata.get("found", True):
        init = init_model.path
        logging.info("train_ctr: warm start from version %s (%s)",
                     init_model.metadata.get("version") or "?", init_model.uri)
    elif init_model is not None:
        logging.info("train_ctr: no champion to warm-start from: cold start")
    os.makedirs(model.path, exist_ok=True)
    # object-store mode hands the gang the artifact's URI, not this pod's local copy
    data = train_data.uri if params.backend == "volcano" and params.artifact_store == "s3" else train_data.path
    result = run_training_step(data, model.path, params, on_identity=record_identity, init_model=init)
    if data != train_data.path:     # the model keeps its training data's profile (validation's reference)
        from ctr_volcano.data.profile import attach_to_model

        attach_to_model(train_data.path, model.path)
    numeric = {k: v for k, v in dict(result.metrics).items()
               if isinstance(v, (int, float)) and not isinstance(v, bool)}
    numeric["attempts"] = result.attempts
    for key, value in sorted(numeric.items()):
        metrics.log_metric(key, value)
    with open(metrics.path, "w", encoding="utf-8") as fh:
        json.dump(dict(result.metrics), fh, indent=2, sort_keys=True, default=str)
    model.metadata["backend"] = params.backend
    if init is not None:
        model.metadata["warm_start_from"] = init_model.metadata.get("version") or init_model.uri
