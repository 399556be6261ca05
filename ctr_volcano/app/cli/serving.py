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
    register_serve(subparsers)


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


def register_serve(subparsers) -> None:
    p = subparsers.add_parser(
        "serve", help="serve an exported model over KServe's V2 protocol on this machine",
        description="Start the KServe model server (raw columns in, probabilities out) on --host:--port, "
                    "127.0.0.1 by default; readiness at /v2/health/ready. Needs the serving environment "
                    "(pip install -r serving/requirements.txt): kserve takes pandas < 3.")
    p.add_argument("--model", required=True, metavar="DIR", help="model directory with model.onnx (ctr-volcano export)")
    p.add_argument("--port", type=int, default=8080, help="HTTP port (default 8080)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: loopback only)")
    p.set_defaults(func=_serve)


def _serve(args: argparse.Namespace) -> int:
    import importlib.util

    from ctr_model.onnx_export import read_manifest
    from ctr_volcano.errors import BadInput

    if importlib.util.find_spec("kserve") is None:
        raise BadInput("serve", "kserve not installed",
                       "run it from the serving environment: pip install -r serving/requirements.txt "
                       "into its own venv (kserve 0.21 takes pandas < 3), or the serving image")
    try:
        read_manifest(args.model)
    except ValueError as exc:
        raise BadInput("--model", args.model, str(exc)) from None
    from ctr_volcano.serving.server import serve

    serve(args.model, args.host, args.port)
    return 0
