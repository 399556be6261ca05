"""KFP component ``train_ctr``: one training step, two backends, the same parameters.

Thin adapter over :func:`ctr_volcano.training.step.run_training_step`, which is tested without KFP:

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

from ctr_volcano.images import component_image

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
def train_ctr(
    train_data: Input[Dataset],
    model: Output[Model],
    metrics: Output[Metrics],
    job_info: Output[Artifact],
    task_config: dsl.TaskConfig,
    backend: str = "local",
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
    pvc_name: str = "",
    pvc_mount_path: str = "/mnt/ctr",
    s3_endpoint: str = "",
    s3_secret: str = "",
    s3_root: str = "",
    schedule_timeout_s: int = 600,
    stall_timeout_s: float = 300.0,
    run_id: str = "",
    task_name: str = "",
    service_account: str = "",
    cpu: str = "1",
    memory: str = "2Gi",
    gpus: int = 0,
    ttl_seconds_after_finished: int = 3600,
    poll_interval_s: float = 5.0,   # a literal (KFP runs the source alone): DEFAULT_POLL_S
    workspace_path: str = "",
    init_model: Input[Model] = None,
    warm_start: bool = True,
):
    """Train the CTR model with a PaddlePaddle parameter-server gang.

    Args:
        train_data: the data-prep output (train Parquet shards + stats.json).
        model: the exported model directory (includes model_meta.json).
        metrics: training metrics (final loss, rows, seconds, attempts, ...).
        job_info: the gang's identity (backend, job name, namespace, uid), written as soon as known.
        task_config: filled by KFP: the task's resources, env, node selector, tolerations, affinity
            and volumes, for the gang's pods; empty under kfp.local.
        backend: "local" runs the gang as local processes; "volcano" submits a Volcano Job.
        pservers: number of parameter servers.
        trainers: number of trainers.
        epochs: passes over the training data.
        batch_size: rows per trainer batch.
        learning_rate: optimizer learning rate.
        model_family: the network: "dnn" (embedding-concat DNN), "wide_deep" (Wide & Deep),
            "deepfm" (DeepFM) or "dcn_v2" (DCN-v2, stacked cross layers).
        model_config: the family's own hyper-parameters as a JSON object, e.g. {"cross_layers": 3,
            "low_rank": 0} for dcn_v2 (dnn, wide_deep and deepfm have none); empty means the
            family's defaults.
        max_retry: how many times a failed gang is restarted before the step fails.
        namespace: Volcano only: the Job's namespace; empty means this pod's namespace.
        image: Volcano only: the trainer image; empty means ctr_volcano.images.trainer_image().
        queue: Volcano only: the Volcano queue.
        priority_class: Volcano only: a PriorityClass name; empty for the cluster default.
        artifact_store: Volcano only: "pvc" (a shared ReadWriteMany volume: the run workspace or
            pvc_name) or "s3" (the object store, no volume).
        pvc_name: Volcano only, without a run workspace: a ReadWriteMany PVC mounted by this step and
            by the gang's pods.
        pvc_mount_path: Volcano only: where this step and the gang's pods mount the PVC.
        s3_endpoint: Volcano, s3 only: the S3 API as the pods reach it; empty means KFP's store
            (http://minio-service.kubeflow:9000).
        s3_secret: Volcano, s3 only: the Secret (keys accesskey, secretkey) the gang's pods read
            the credentials from; empty means KFP's own, mlpipeline-minio-artifact.
        s3_root: Volcano, s3 only: s3://BUCKET/PREFIX for run directories (deleted after
            success); empty means the data's bucket, ctr-runs/.
        schedule_timeout_s: Volcano only: seconds the gang may stay Pending before the step fails.
        stall_timeout_s: seconds a trainer may print nothing before it counts as hung (local: the
            gang restarts; Volcano: the step fails and the Job is deleted).
        run_id: Volcano only: the KFP run id (pass dsl.PIPELINE_JOB_ID_PLACEHOLDER); names the Job
            so a retried step re-attaches instead of creating a duplicate.
        task_name: Volcano only: the KFP task name (pass dsl.PIPELINE_TASK_NAME_PLACEHOLDER).
        service_account: Volcano only: the gang pods' service account; empty for the default.
        cpu: Volcano only: CPU request of every gang pod, unless the task sets CPU (set_cpu_request).
        memory: Volcano only: memory request (and limit) of every gang pod, unless the task sets
            memory (set_memory_request/limit).
        gpus: Volcano only: GPUs per trainer pod, unless the task sets an accelerator.
        ttl_seconds_after_finished: Volcano only: Volcano deletes the finished Job after this long;
            -1 keeps it.
        poll_interval_s: Volcano only: seconds between status polls (and log reads) of the Job.
        workspace_path: Volcano only: the run workspace (pass dsl.WORKSPACE_PATH_PLACEHOLDER); data
            and model travel through it instead of pvc_name.
        init_model: optional: a model to warm-start from (its pservers load its checkpoint before the
            first epoch); a find_champion output with found=False means train from scratch.
        warm_start: False ignores init_model and trains from scratch (e.g. after changing the network
            shape, which an init model must match).
    """
    import json
    import os

    from ctr_model.logs import setup_logging
    from ctr_volcano.training.params import StepParams
    from ctr_volcano.training.step import run_training_step

    setup_logging()

    params = StepParams.from_component(
        backend=backend, pservers=pservers, trainers=trainers, epochs=epochs,
        batch_size=batch_size, learning_rate=learning_rate, model_family=model_family,
        model_config=model_config, max_retry=max_retry, namespace=namespace, image=image, queue=queue, priority_class=priority_class,
        artifact_store=artifact_store, pvc_name=pvc_name, pvc_mount_path=pvc_mount_path,
        s3_endpoint=s3_endpoint, s3_secret=s3_secret, s3_root=s3_root,
        schedule_timeout_s=schedule_timeout_s, stall_timeout_s=stall_timeout_s,
        run_id=run_id, task_name=task_name, service_account=service_account, cpu=cpu,
        memory=memory, gpus=gpus, ttl_seconds_after_finished=ttl_seconds_after_finished,
        poll_s=poll_interval_s, workspace_path=workspace_path, task_config=task_config)

    def record_identity(identity: dict) -> None:
        with open(job_info.path, "w", encoding="utf-8") as fh:
            json.dump(identity, fh, indent=2, sort_keys=True)
        for key, value in identity.items():
            job_info.metadata[key] = value

    import logging

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
