"""``ctr-volcano train``: train a CTR model on the local gang (default) or as a Volcano Job.

Both backends go through the one training interface: the flags (derived from the step's declaration,
:mod:`ctr_volcano.app.cli.step_flags`) become one :class:`~ctr_volcano.training.params.StepParams`
(:func:`params_from_args`) and :func:`~ctr_volcano.training.step.run_training_step` runs it, exactly
as the ``train_ctr`` component does. Heavy imports stay inside the handler so ``ctr-volcano --help``
is fast.
"""
from __future__ import annotations

import argparse
import json
from typing import Any

from ctr_volcano.app.cli.step_flags import add_step_arguments, params_from_args

__all__ = ["register", "params_from_args"]


def register(subparsers: Any) -> None:
    """Add ``train`` to the ``ctr-volcano`` command line."""
    p = subparsers.add_parser(
        "train", help="train a CTR model in parameter-server mode",
        description="Train a CTR model with P pservers and T trainers, checkpoint every epoch and "
                    "export the model to --model-out. The flags are the train_ctr component's "
                    "parameters (docs/parameters.md).")
    p.add_argument("--data", required=True, metavar="PREP_DIR",
                   help="output dir of `ctr-volcano prep` (on Volcano with --artifact-store s3: its s3:// URI)")
    p.add_argument("--model-out", required=True, metavar="DIR", help="where the exported model goes")
    p.add_argument("--init-model", metavar="DIR", default=None,
                   help="an exported model to warm-start from (the train_ctr component's init_model): "
                        "its schema, hash buckets, network and pservers must be this run's, checked "
                        "before the gang starts")
    add_step_arguments(p, "train")
    p.set_defaults(func=_handle)


def _handle(args: argparse.Namespace) -> int:
    from ctr_volcano.errors import BadInput
    from ctr_volcano.training.step import run_training_step

    if args.output_uri and args.backend == "volcano":
        raise BadInput("--output", args.output_uri, "is for the local backend; on Volcano the output goes to "
                                                    "the hand-off (--artifact-store, --s3-root)")
    result = run_training_step(args.data, args.model_out, params_from_args(args), init_model=args.init_model)
    summary = {"model_dir": result.model_dir, "output_dir": result.output_dir,
               "attempts": result.attempts, "epochs": result.metrics.get("epochs"),
               "test": result.metrics.get("test"), "init_model": result.metrics.get("init_model")}
    print(json.dumps(summary, sort_keys=True, default=str))
    return 0
