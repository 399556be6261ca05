"""KFP component ``train_ctr``: one training step, two backends, the same parameters.

Thin adapter over :func:`ctr_volcano.volcano.step.run_training_step`, which is tested without KFP:

* ``backend="local"`` (the embedded default, used when no cluster is configured) runs the
  pserver/trainer gang as local processes through ``ctr_volcano.training.train_local``;
* ``backend="volcano"`` is a remote runner: it creates (or, for a retried step, re-attaches to) a
  gang-scheduled Volcano Job, streams its pods' logs into this step's log, explains a gang stuck
  Pending, deletes the Job on SIGTERM, and hands the model back through a shared ReadWriteMany PVC
  that this step's pod must mount at ``pvc_mount_path`` (``kfp.kubernetes.mount_pvc``).

The job's identity is written to ``job_info`` as soon as it is known, and ``metrics.path`` always
gets a JSON file (``kfp.local`` counts a Metrics output without a file as a cache miss).
"""

from kfp import dsl
from kfp.dsl import Artifact, Dataset, Input, Metrics, Model, Output

from ctr_volcano.images import component_image

__all__ = ["train_ctr"]


@dsl.component(base_image=component_image(), install_kfp_package=False)
def train_ctr(
    train_data: Input[Dataset],
    model: Output[Model],
    metrics: Output[Metrics],
    job_info: Output[Artifact],
    backend: str = "local",
    pservers: int = 2,
    trainers: int = 2,
    epochs: int = 2,
    batch_size: int = 512,
    learning_rate: float = 0.001,
    max_retry: int = 2,
    namespace: str = "",
    image: str = "",
    queue: str = "default",
    priority_class: str = "",
    pvc_name: str = "",
    pvc_mount_path: str = "/mnt/ctr",
    schedule_timeout_s: int = 600,
    stall_timeout_s: float = 300.0,
    run_id: str = "",
    task_name: str = "",
    service_account: str = "",
    cpu: str = "1",
    memory: str = "2Gi",
    gpus: int = 0,
    ttl_seconds_after_finished: int = 3600,
    poll_interval_s: float = 10.0,
):
    """Train the CTR model with a PaddlePaddle parameter-server gang.

    Args:
        train_data: the data-prep output (train Parquet shards + stats.json).
        model: the exported model directory (includes model_meta.json).
        metrics: training metrics (final loss, rows, seconds, attempts, ...).
        job_info: the gang's identity (backend, job name, namespace, uid), written as soon as known.
        backend: "local" runs the gang as local processes; "volcano" submits a Volcano Job.
        pservers: number of parameter servers.
        trainers: number of trainers.
        epochs: passes over the training data.
        batch_size: rows per trainer batch.
        learning_rate: optimizer learning rate.
        max_retry: how many times a failed gang is restarted before the step fails.
        namespace: Volcano only: the Job's namespace; empty means this pod's namespace.
        image: Volcano only: the trainer image; empty means ctr_volcano.images.trainer_image().
        queue: Volcano only: the Volcano queue.
        priority_class: Volcano only: a PriorityClass name; empty for the cluster default.
        pvc_name: Volcano only: a ReadWriteMany PVC mounted by this step and by the gang's pods.
        pvc_mount_path: Volcano only: where this step and the gang's pods mount the PVC.
        schedule_timeout_s: Volcano only: seconds the gang may stay Pending before the step fails.
        stall_timeout_s: seconds a trainer may print nothing before it counts as hung (local: the
            gang restarts; Volcano: the step fails and the Job is deleted).
        run_id: Volcano only: the KFP run id (pass dsl.PIPELINE_JOB_ID_PLACEHOLDER); names the Job
            so a retried step re-attaches instead of creating a duplicate.
        task_name: Volcano only: the KFP task name (pass dsl.PIPELINE_TASK_NAME_PLACEHOLDER).
        service_account: Volcano only: the gang pods' service account; empty for the default.
        cpu: Volcano only: CPU request of every gang pod.
        memory: Volcano only: memory request (and limit) of every gang pod.
        gpus: Volcano only: GPUs per trainer pod.
        ttl_seconds_after_finished: Volcano only: Volcano deletes the finished Job after this long;
            -1 keeps it.
        poll_interval_s: Volcano only: seconds between status polls (and log reads) of the Job.
    """
    import json
    import os

    from ctr_volcano.volcano.step import StepParams, run_training_step

    params = StepParams.from_component(
        backend=backend, pservers=pservers, trainers=trainers, epochs=epochs,
        batch_size=batch_size, learning_rate=learning_rate, max_retry=max_retry,
        namespace=namespace, image=image, queue=queue, priority_class=priority_class,
        pvc_name=pvc_name, pvc_mount_path=pvc_mount_path, schedule_timeout_s=schedule_timeout_s,
        stall_timeout_s=stall_timeout_s, run_id=run_id, task_name=task_name,
        service_account=service_account, cpu=cpu,
        memory=memory, gpus=gpus, ttl_seconds_after_finished=ttl_seconds_after_finished,
        poll_s=poll_interval_s)

    def record_identity(identity: dict) -> None:
        with open(job_info.path, "w", encoding="utf-8") as fh:
            json.dump(identity, fh, indent=2, sort_keys=True)
        for key, value in identity.items():
            job_info.metadata[key] = value

    os.makedirs(model.path, exist_ok=True)
    result = run_training_step(train_data.path, model.path, params, on_identity=record_identity)
    numeric = {k: v for k, v in dict(result.metrics).items()
               if isinstance(v, (int, float)) and not isinstance(v, bool)}
    numeric["attempts"] = result.attempts
    for key, value in sorted(numeric.items()):
        metrics.log_metric(key, value)
    with open(metrics.path, "w", encoding="utf-8") as fh:
        json.dump(dict(result.metrics), fh, indent=2, sort_keys=True, default=str)
    model.metadata["backend"] = params.backend
