"""The ``--backend volcano`` half of ``ctr-volcano train``: its flags and its handler.

``ctr_volcano.commands.train`` registers the verb and calls :func:`add_train_arguments` and
:func:`cli_train`; both feed the same :func:`~ctr_volcano.volcano.step.run_training_step` as the
``train_ctr`` component. Heavy imports stay inside the handler.
"""
from __future__ import annotations

import argparse
from typing import Any, Mapping, Optional

from ctr_volcano.volcano.handoff import PVC_MOUNT_PATH

__all__ = ["add_train_arguments", "cli_train"]


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the Volcano-only flags of ``ctr-volcano train`` (used with ``--backend volcano``)."""
    g = parser.add_argument_group("volcano backend (--backend volcano)")
    g.add_argument("--namespace", default=None, help="namespace of the Volcano Job (default: the current "
                                                     "pod's namespace, else 'default')")
    g.add_argument("--image", default=None, help="trainer image (default: $CTR_VOLCANO_TRAINER_IMAGE or "
                                                 "ctr_volcano.images.TRAINER_IMAGE)")
    g.add_argument("--queue", default="default", help="Volcano queue (default: %(default)s)")
    g.add_argument("--priority-class", default=None, help="PriorityClass of the gang")
    g.add_argument("--artifact-store", choices=("pvc", "s3"), default="pvc",
                   help="hand data and model over a shared RWX PVC (--pvc-name) or the object store "
                        "(s3: no volume; --data may be an s3:// URI) (default: %(default)s)")
    g.add_argument("--s3-secret", default=None, metavar="SECRET",
                   help="s3: Secret with keys accesskey/secretkey the pods read the credentials from "
                        "(default: KFP's mlpipeline-minio-artifact)")
    g.add_argument("--s3-root", default=None, metavar="S3_URI",
                   help="s3: where run directories go (default: s3://<data bucket>/ctr-runs)")
    g.add_argument("--s3-step-endpoint", default=None, metavar="URL",
                   help="s3: the S3 API as this command reaches it, when --s3-endpoint (the pods') is not "
                        "reachable from here, e.g. a port-forward to the in-cluster store (default: "
                        "--s3-endpoint)")
    g.add_argument("--pvc-name", default=None, help="shared ReadWriteMany PVC for data and model handoff")
    g.add_argument("--pvc-mount-path", default=PVC_MOUNT_PATH,
                   help="where the PVC is mounted here and in the gang's pods (default: %(default)s)")
    g.add_argument("--schedule-timeout", type=int, default=600, metavar="SECONDS",
                   help="fail (and delete the Job) if the gang stays Pending this long (default: %(default)s)")
    g.add_argument("--run-id", default=None, help="run identity: the same id re-attaches to its Job")
    g.add_argument("--task-name", default="train-ctr", help="task identity (default: %(default)s)")
    g.add_argument("--job-name", default=None, help="explicit Job name (overrides --run-id/--task-name)")
    g.add_argument("--service-account", default=None, help="service account of the gang's pods")
    g.add_argument("--cpu", default="1", help="CPU request per pod (default: %(default)s)")
    g.add_argument("--memory", default="2Gi", help="memory request/limit per pod (default: %(default)s)")
    g.add_argument("--gpus", type=int, default=0, help="GPUs per trainer pod (default: %(default)s)")
    g.add_argument("--ttl", type=int, default=3600, metavar="SECONDS",
                   help="Volcano deletes the finished Job after this long; -1 keeps it (default: %(default)s)")
    g.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config "
                                                      "or in-cluster config)")
    g.add_argument("--context", default=None, help="kubeconfig context")
    g.add_argument("--poll", type=float, default=5.0, metavar="SECONDS", help="status poll interval")
    g.add_argument("--explain-every", type=float, default=30.0, metavar="SECONDS",
                   help="how often a Pending gang's reason is printed")


def cli_train(args: Any, config: Optional[Mapping[str, Any]] = None) -> int:
    """``ctr-volcano train --backend volcano``: submit, watch, and copy the model to ``--model-out``.

    Reads the shared flags registered by the ``train`` verb (``data``, ``model_out``, ``pservers``,
    ``trainers``, ``epochs``, ``batch_size``, ``lr``, ``max_retry``) and the flags of
    :func:`add_train_arguments`; ``config`` is the TrainConfig the verb read from ``--config`` (the
    flags above win over it). Returns the exit code (0 on success).
    """
    import json

    from ctr_volcano.backends import DEFAULT_STALL_TIMEOUT_S
    from ctr_volcano.volcano.step import StepParams, run_training_step

    def opt(name: str, default: Any = None) -> Any:
        return getattr(args, name, default)

    ttl = opt("ttl", 3600)
    params = StepParams(
        backend="volcano", pservers=args.pservers, trainers=args.trainers, epochs=args.epochs,
        batch_size=args.batch_size, learning_rate=args.lr, max_retry=args.max_retry,
        namespace=opt("namespace"), image=opt("image"), queue=opt("queue", "default"),
        priority_class=opt("priority_class"), pvc_name=opt("pvc_name"),
        pvc_mount_path=opt("pvc_mount_path", PVC_MOUNT_PATH), schedule_timeout_s=opt("schedule_timeout", 600),
        stall_timeout_s=opt("stall_timeout") or DEFAULT_STALL_TIMEOUT_S,
        run_id=opt("run_id"), task_name=opt("task_name", "train-ctr"), job_name=opt("job_name"),
        service_account=opt("service_account"), cpu=opt("cpu", "1"), memory=opt("memory", "2Gi"),
        gpus=opt("gpus", 0), ttl_seconds_after_finished=None if ttl == -1 else ttl,
        kubeconfig=opt("kubeconfig"), context=opt("context"), poll_s=opt("poll", 5.0),
        explain_every_s=opt("explain_every", 30.0), config=dict(config or {}),
        artifact_store=opt("artifact_store", "pvc"), s3_endpoint=opt("s3_endpoint"),
        s3_secret=opt("s3_secret"), s3_region=opt("s3_region") or "us-east-1",
        s3_root=opt("s3_root"), s3_step_endpoint=opt("s3_step_endpoint"))
    result = run_training_step(args.data, args.model_out, params)
    print(json.dumps({"model_dir": result.model_dir, "output_dir": result.output_dir,
                      "attempts": result.attempts, "metrics": result.metrics}, default=str, sort_keys=True))
    return 0
