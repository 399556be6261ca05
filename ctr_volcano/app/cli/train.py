"""``ctr-volcano train``: train the CTR DNN on the local gang (default) or as a Volcano Job.

Both backends go through the one training interface: the flags become one
:class:`~ctr_volcano.training.params.StepParams` (:func:`params_from_args`) and
:func:`~ctr_volcano.training.step.run_training_step` runs it, exactly as the ``train_ctr`` component
does. Heavy imports stay inside the handler so ``ctr-volcano --help`` is fast.
"""
from __future__ import annotations

import argparse
import json
from typing import Any, Dict, Mapping, Optional

from ctr_model.models import FAMILIES
from ctr_volcano.training.params import DEFAULT_EXPLAIN_EVERY_S, DEFAULT_POLL_S, DEFAULT_STALL_TIMEOUT_S, PVC_MOUNT_PATH

__all__ = ["register", "params_from_args", "add_volcano_arguments"]


def register(subparsers: Any) -> None:
    """Add ``train`` to the ``ctr-volcano`` command line."""
    p = subparsers.add_parser(
        "train", help="train the CTR DNN in parameter-server mode",
        description="Train the CTR DNN with P pservers and T trainers, checkpoint every epoch and "
                    "export the model to --model-out.")
    p.add_argument("--data", required=True, metavar="PREP_DIR", help="output dir of `ctr-volcano prep`")
    p.add_argument("--model-out", required=True, metavar="DIR", help="where the exported model goes")
    p.add_argument("--backend", choices=("local", "volcano"), default="local",
                   help="local processes (default) or a Volcano Job")
    p.add_argument("--pservers", type=int, default=2, help="parameter servers (default: %(default)s)")
    p.add_argument("--trainers", type=int, default=2, help="trainers (default: %(default)s)")
    p.add_argument("--epochs", type=int, default=None, help="passes over the data (default: config's, 3)")
    p.add_argument("--batch-size", type=int, default=None, help="batch size per trainer thread")
    p.add_argument("--lr", type=float, default=None, help="learning rate")
    p.add_argument("--model", default=None, choices=FAMILIES,
                   help="model family (default: config's, dnn): dnn, wide_deep (Wide & Deep), deepfm, "
                        "dcn_v2 (stacked cross layers)")
    p.add_argument("--model-config", default=None, metavar="JSON",
                   help='the family\'s hyper-parameters as a JSON object, e.g. \'{"cross_layers": 2, '
                        '"low_rank": 8}\' for dcn_v2 (default: config\'s, else the family\'s defaults)')
    p.add_argument("--config", default=None, metavar="FILE", help="TrainConfig JSON file")
    p.add_argument("--max-retry", type=int, default=2, help="whole-gang restarts (default: %(default)s)")
    p.add_argument("--stall-timeout", type=float, default=None, metavar="SECONDS",
                   help="a trainer that prints nothing this long is hung: the local backend restarts the "
                        f"gang, the volcano backend fails and deletes the Job (default: {DEFAULT_STALL_TIMEOUT_S:g})")
    p.add_argument("--workdir", default=None,
                   help="local backend: logs and checkpoints (reuse it to resume); default: a temp dir")
    _add_store_arguments(p)
    add_volcano_arguments(p)
    p.set_defaults(func=_handle)


def _add_store_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "object store (s3:// --data and --output)",
        "The gang reads s3:// data and writes checkpoints, model and metrics to an s3:// prefix over "
        "the S3 API, with no shared volume. Credentials: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY "
        "here; on Volcano the pods read them from --s3-secret.")
    g.add_argument("--output", default=None, metavar="S3_URI",
                   help="local backend: s3://BUCKET/PREFIX for checkpoints, model and metrics (reuse it "
                        "to resume)")
    g.add_argument("--s3-endpoint", default=None, metavar="URL",
                   help="S3 API endpoint, http(s)://HOST:PORT (scheme = TLS off/on); default "
                        "$CTR_S3_ENDPOINT, else AWS (Volcano: KFP's store)")
    g.add_argument("--s3-region", default=None, help="signing region (default: $CTR_S3_REGION or us-east-1)")
    g.add_argument("--s3-addressing", choices=("path", "virtual"), default=None,
                   help="bucket addressing (default: path, what in-cluster stores serve)")


def add_volcano_arguments(parser: argparse.ArgumentParser) -> None:
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
    g.add_argument("--poll", type=float, default=DEFAULT_POLL_S, metavar="SECONDS",
                   help="status poll interval (default: %(default)s)")
    g.add_argument("--explain-every", type=float, default=DEFAULT_EXPLAIN_EVERY_S, metavar="SECONDS",
                   help="how often a Pending gang's reason is printed (default: %(default)s)")


def _config(args: argparse.Namespace) -> Dict[str, Any]:
    """The TrainConfig of ``--config`` with ``--epochs``/``--batch-size``/``--lr``/``--model``/
    ``--model-config`` applied, validated."""
    from ctr_volcano.errors import BadInput
    from ctr_volcano.training.params import checked_train_config

    data: Dict[str, Any] = {}
    if args.config:
        try:
            with open(args.config, encoding="utf-8") as fh:
                data = json.load(fh)
        except (OSError, ValueError) as exc:
            raise BadInput("--config", args.config, f"cannot read a JSON object ({exc})") from None
        if not isinstance(data, dict):
            raise BadInput("--config", args.config, "the file must hold one JSON object of TrainConfig fields")
    for flag, key in (("epochs", "epochs"), ("batch_size", "batch_size"), ("lr", "learning_rate"),
                      ("model", "model")):
        value = getattr(args, flag)
        if value is not None:
            data[key] = value
    if args.model_config is not None:
        try:
            data["model_config"] = json.loads(args.model_config)
        except ValueError as exc:
            raise BadInput("--model-config", args.model_config, f"not valid JSON ({exc}); pass a JSON "
                                                                'object such as \'{"cross_layers": 2}\'') from None
    return checked_train_config(data)   # main() names the flag for a config.<key> error


def params_from_args(args: argparse.Namespace, config: Optional[Mapping[str, Any]] = None) -> Any:
    """The :class:`~ctr_volcano.training.params.StepParams` of a ``ctr-volcano train`` command line.

    ``config`` is the TrainConfig read from ``--config`` (default: read it now); ``--epochs``,
    ``--batch-size`` and ``--lr`` win over it, and its own values (or TrainConfig's defaults) fill them.
    """
    from ctr_model.config import TrainConfig
    from ctr_volcano.training.params import StepParams

    config = _config(args) if config is None else dict(config)
    base = TrainConfig.from_dict(config)
    return StepParams(
        backend=args.backend, pservers=args.pservers, trainers=args.trainers, epochs=base.epochs,
        batch_size=base.batch_size, learning_rate=base.learning_rate, max_retry=args.max_retry,
        stall_timeout_s=args.stall_timeout or DEFAULT_STALL_TIMEOUT_S, config=config,
        workdir=args.workdir, output_uri=args.output, s3_endpoint=args.s3_endpoint,
        s3_region=args.s3_region, s3_addressing=args.s3_addressing,
        namespace=args.namespace, image=args.image, queue=args.queue, priority_class=args.priority_class,
        artifact_store=args.artifact_store, s3_secret=args.s3_secret, s3_root=args.s3_root,
        s3_step_endpoint=args.s3_step_endpoint, pvc_name=args.pvc_name, pvc_mount_path=args.pvc_mount_path,
        schedule_timeout_s=args.schedule_timeout, run_id=args.run_id, task_name=args.task_name,
        job_name=args.job_name, service_account=args.service_account, cpu=args.cpu, memory=args.memory,
        gpus=args.gpus, ttl_seconds_after_finished=None if args.ttl == -1 else args.ttl,
        kubeconfig=args.kubeconfig, context=args.context, poll_s=args.poll,
        explain_every_s=args.explain_every)


def _handle(args: argparse.Namespace) -> int:
    from ctr_volcano.errors import BadInput
    from ctr_volcano.training.step import run_training_step

    if args.output and args.backend == "volcano":
        raise BadInput("--output", args.output, "is for the local backend; on Volcano the output goes to "
                                                "the hand-off (--artifact-store, --s3-root)")
    result = run_training_step(args.data, args.model_out, params_from_args(args))
    summary = {"model_dir": result.model_dir, "output_dir": result.output_dir,
               "attempts": result.attempts, "epochs": result.metrics.get("epochs"),
               "test": result.metrics.get("test")}
    print(json.dumps(summary, sort_keys=True, default=str))
    return 0
