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
    register_render(subparsers)


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
        description="Start the KServe model server (the raw columns of the model's feature spec in, "
                    "probabilities out) on --host:--port, 127.0.0.1 by default; readiness at "
                    "/v2/health/ready. Any family and feature spec; a model without model.onnx gets "
                    "its graph built in memory. Needs the serve extra: pip install \"ctr-volcano[serve]\".")
    p.add_argument("--model", required=True, metavar="DIR", help="model directory (model_meta.json, dense.npz, "
                                                                 "sparse.npz; model.onnx if exported)")
    p.add_argument("--port", type=int, default=8080, help="HTTP port (default 8080)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: loopback only)")
    p.add_argument("--request-log", metavar="FILE", default=None,
                   help="append a sample of the scored rows (raw columns and probability, JSON Lines) to FILE, "
                        "for ctr-volcano validate --serving-log (training/serving skew; docs/validation.md)")
    p.add_argument("--log-sample", metavar="RATE", type=float, default=0.01,
                   help="with --request-log: the share of rows logged (default 0.01)")
    p.set_defaults(func=_serve)


def _serve(args: argparse.Namespace) -> int:
    import importlib.util

    from ctr_model.infer import ModelError
    from ctr_volcano.errors import BadInput

    if importlib.util.find_spec("kserve") is None:
        raise BadInput("serve", "kserve not installed",
                       "install the serve extra into this environment: pip install -e \".[serve]\" "
                       "in a checkout, or pip install \"ctr-volcano[serve]\"")
    from ctr_volcano.serving.request_log import check_log_args
    from ctr_volcano.serving.server import serve

    check_log_args(args.request_log, args.log_sample)
    try:
        serve(args.model, args.host, args.port, args.request_log, args.log_sample)
    except ModelError as exc:
        raise BadInput("--model", args.model, str(exc)) from None
    return 0


def register_render(subparsers) -> None:
    p = subparsers.add_parser(
        "render-inference-service", help="print the KServe InferenceService that serves a model",
        description="Print (YAML) a KServe InferenceService running the serving image on a published "
                    "model (--model-uri) or the registry's champion (--registry), V2 protocol, S3 "
                    "credentials by service-account reference. --check validates it against the kserve "
                    "package's V1beta1InferenceService (needs the serve extra).")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model-uri", metavar="URI", help="the model directory, e.g. s3://bucket/prefix/model")
    src.add_argument("--registry", metavar="ROOT", help="model registry root: serve its champion")
    p.add_argument("--model-name", default="ctr-dnn", help="the registry's model name (default ctr-dnn)")
    p.add_argument("--name", default="ctr", help="the InferenceService's name (default ctr)")
    p.add_argument("--namespace", default=None)
    p.add_argument("--service-account", default=None, metavar="SA",
                   help="service account whose KServe-annotated secret holds the S3 credentials")
    p.add_argument("--image", default=None, help="serving image (default $CTR_VOLCANO_SERVING_IMAGE or the built-in)")
    p.add_argument("--cpu", default="1")
    p.add_argument("--memory", default="2Gi")
    p.add_argument("--check", action="store_true", help="validate against kserve's V1beta1InferenceService")
    p.set_defaults(func=_render)


def _storage_uri(args: argparse.Namespace) -> str:
    from ctr_volcano.errors import BadInput

    if args.model_uri:
        return str(args.model_uri)
    from ctr_volcano.retraining.registry import ModelRegistry

    champion = ModelRegistry(args.registry, args.model_name).champion()
    if champion is None:
        raise BadInput("--registry", args.registry, f"{args.model_name} has no champion yet: promote a "
                                                    f"version first, or pass --model-uri")
    return champion.model_uri


def _render(args: argparse.Namespace) -> int:
    import importlib.util
    import sys

    import yaml

    from ctr_volcano.errors import BadInput
    from ctr_volcano.images import serving_image
    from ctr_volcano.serving.inference_service import check, render

    manifest = render(args.name, _storage_uri(args), args.image or serving_image(), args.namespace,
                      args.service_account, args.cpu, args.memory)
    if args.check:
        if importlib.util.find_spec("kserve") is None:
            raise BadInput("--check", True, "install the serve extra (pip install \"ctr-volcano[serve]\"): "
                                            "the schema is the kserve package's")
        check(manifest)
    sys.stdout.write(yaml.safe_dump(manifest, sort_keys=False))
    return 0
