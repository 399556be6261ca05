"""``ctr-volcano train``: train the CTR DNN on the local gang (default) or on Volcano.

Heavy imports stay inside the handler so ``ctr-volcano --help`` is fast.
"""
from __future__ import annotations

import argparse
import json

from ctr_volcano.volcano.cli import add_train_arguments, cli_train

__all__ = ["register"]


def register(subparsers) -> None:
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
    p.add_argument("--config", default=None, metavar="FILE", help="TrainConfig JSON file")
    p.add_argument("--max-retry", type=int, default=2, help="whole-gang restarts (default: %(default)s)")
    p.add_argument("--stall-timeout", type=float, default=None, metavar="SECONDS",
                   help="a trainer that prints nothing this long is hung: the local backend restarts the "
                        "gang, the volcano backend fails and deletes the Job (default: 300)")
    p.add_argument("--workdir", default=None,
                   help="local backend: logs and checkpoints (reuse it to resume); default: a temp dir")
    g = p.add_argument_group(
        "object store (s3:// --data and --output)",
        "The gang reads s3:// data and writes checkpoints, model and metrics to an s3:// prefix over "
        "the S3 API, with no shared volume. Credentials: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY "
        "here; on Volcano the pods read them from --s3-secret.")
    g.add_argument("--output", default=None, metavar="S3_URI",
                   help="s3://BUCKET/PREFIX for checkpoints, model and metrics (reuse it to resume)")
    g.add_argument("--s3-endpoint", default=None, metavar="URL",
                   help="S3 API endpoint, http(s)://HOST:PORT (scheme = TLS off/on); default "
                        "$CTR_S3_ENDPOINT, else AWS")
    g.add_argument("--s3-region", default=None, help="signing region (default: $CTR_S3_REGION or us-east-1)")
    g.add_argument("--s3-addressing", choices=("path", "virtual"), default=None,
                   help="bucket addressing (default: path, what in-cluster stores serve)")
    add_train_arguments(p)
    p.set_defaults(func=_handle)


def _config(args: argparse.Namespace) -> dict:
    from ctr_model.config import ConfigError, TrainConfig
    from ctr_volcano.errors import BadInput

    data: dict = {}
    if args.config:
        try:
            with open(args.config, encoding="utf-8") as fh:
                data = json.load(fh)
        except (OSError, ValueError) as exc:
            raise BadInput("--config", args.config, f"cannot read a JSON object ({exc})") from None
    for flag, key in (("epochs", "epochs"), ("batch_size", "batch_size"), ("lr", "learning_rate")):
        value = getattr(args, flag)
        if value is not None:
            data[key] = value
    try:
        TrainConfig.from_dict(data)
    except ConfigError as exc:
        raise BadInput(f"config.{exc.field}", exc.value, exc.fix) from None   # cli names the flag
    return data


def store_env(args: argparse.Namespace) -> dict:
    """This process's environment with the ``--s3-*`` flags applied (``ctr_model.store`` names)."""
    import os

    env = dict(os.environ)
    for flag, var in (("s3_endpoint", "CTR_S3_ENDPOINT"), ("s3_region", "CTR_S3_REGION"),
                      ("s3_addressing", "CTR_S3_ADDRESSING")):
        if getattr(args, flag, None):
            env[var] = getattr(args, flag)
    return env


def _handle(args: argparse.Namespace) -> int:
    config = _config(args)
    if args.backend == "volcano":
        if args.epochs is None or args.batch_size is None or args.lr is None:
            from ctr_model.config import TrainConfig

            base = TrainConfig.from_dict(config)
            args.epochs = base.epochs if args.epochs is None else args.epochs
            args.batch_size = base.batch_size if args.batch_size is None else args.batch_size
            args.lr = base.learning_rate if args.lr is None else args.lr
        return int(cli_train(args, config) or 0)

    from ctr_volcano.backends import DEFAULT_STALL_TIMEOUT_S
    from ctr_volcano.backends.local import train_local

    result = train_local(args.data, args.model_out, config, pservers=args.pservers,
                         trainers=args.trainers, max_retry=args.max_retry,
                         stall_timeout_s=args.stall_timeout or DEFAULT_STALL_TIMEOUT_S,
                         workdir=args.workdir, output_dir=args.output, store_env=store_env(args))
    summary = {"model_dir": result.model_dir, "output_dir": result.output_dir,
               "attempts": result.attempts, "epochs": result.metrics.get("epochs"),
               "test": result.metrics.get("test")}
    print(json.dumps(summary, sort_keys=True, default=str))
    return 0
