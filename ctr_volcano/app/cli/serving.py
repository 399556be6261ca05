"""``ctr-volcano export`` (the model as ONNX + a Triton/KServe repository) and, for serving, the
verbs that load it. Training writes the same files at export; this verb redoes it for a model
trained before, or into another directory."""
from __future__ import annotations

import argparse
import logging

__all__ = ["register"]

_log = logging.getLogger(__name__)


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "export", help="write model.onnx, serving.json and the Triton repository of an exported model",
        description="Build the ONNX graph of an exported model (dense.npz + sparse.npz; no Paddle) and "
                    "write OUT/model.onnx, OUT/serving.json and OUT/serving/ctr/{config.pbtxt,1/model.onnx}.")
    p.add_argument("--model", required=True, metavar="DIR", help="exported model directory (has model_meta.json)")
    p.add_argument("--out", default=None, metavar="DIR", help="where the files go (default: the model directory)")
    p.set_defaults(func=_export)


def _export(args: argparse.Namespace) -> int:
    from ctr_model.infer import ModelError
    from ctr_model.onnx_export import export_onnx
    from ctr_volcano.errors import BadInput

    try:
        manifest = export_onnx(args.model, args.out)
    except ModelError as exc:
        raise BadInput("--model", args.model, str(exc)) from None
    _log.info("wrote %s/model.onnx (%d sparse keys, sha256 %s) and the Triton repository serving/ctr/",
              args.out or args.model, manifest["sparse_keys"], manifest["sha256"][:12])
    return 0
