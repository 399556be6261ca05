"""The exported model as an ONNX graph a serving stack loads (Triton, KServe, onnxruntime), with the
manifest a server reads beside it and the Triton model repository.

Every family (``dnn``, ``wide_deep``, ``deepfm``, ``dcn_v2``) on every feature spec (multi-valued
features, several ``embedding_dim``, no dense or no categorical feature) exports: the graph
(:mod:`ctr_model.onnx_graph`) computes what the numpy scorer (:meth:`ctr_model.infer.Scorer.predict`)
computes, from what trainer 0 exports (``dense.npz`` + ``sparse.npz``); its inputs are
:mod:`ctr_model.onnx_inputs`' layout (``dense``, ``ids``, one padded input per multi-valued feature).

The LabelEncoder's keys are node attributes, which cannot live in external data, so one model must
fit protobuf's 2 GB limit: about 1M keys x dim 10 is 40 MB, so tens of millions of keys fit; past
the limit the export refuses (:class:`OnnxTooLarge`) rather than write a model nothing loads.
"""
from __future__ import annotations

import hashlib
import json
import os
from typing import TYPE_CHECKING, Any, Dict, Optional, Sequence, Tuple

from ctr_model.atomic import write_json
from ctr_model.errors import BadInput
from ctr_model.features import HASH_VERSION, SCHEMA_VERSION
from ctr_model.infer import ModelError, Scorer, load_model
from ctr_model.onnx_inputs import OUTPUT, PAD_ID, GraphLayout, layout_of
from ctr_model.onnx_tasks import output_names

if TYPE_CHECKING:
    import onnx

__all__ = ["ONNX_FILE", "MANIFEST_FILE", "MANIFEST_FORMAT", "REPOSITORY_DIR", "TRITON_MODEL", "MAX_MODEL_BYTES",
           "OnnxTooLarge", "NotServable", "build_graph", "graph_layout", "export_onnx", "write_repository",
           "estimated_bytes", "read_manifest", "servable"]

ONNX_FILE = "model.onnx"
#: What a server needs besides the graph: inputs, their column order, the spec (transforms, hashing).
MANIFEST_FILE = "serving.json"
#: ``serving.json``'s ``format``; v2 added the padded multi-valued inputs and the optional ones.
MANIFEST_FORMAT = "ctr-onnx-v2"
#: The Triton/KServe model repository written beside the model: ``serving/ctr/1/model.onnx``.
REPOSITORY_DIR = "serving"
TRITON_MODEL = "ctr"
#: protobuf's hard limit on one serialized message, less room for the graph's other fields.
MAX_MODEL_BYTES = 2 ** 31 - 2 ** 26
_INT64_MAX = 2 ** 63 - 1


class OnnxTooLarge(ModelError):
    """The model does not fit one ONNX file: bad input naming the model, the size, the limit and the
    way out."""


class NotServable(ModelError):
    """The model cannot be given the graph's inputs (a multi-valued feature named as a fixed input)."""


def estimated_bytes(scorer: Scorer) -> int:
    """Serialized size of the graph, from above: the tables, their keys and values (at most 10 bytes
    each as varints), the dense parameters."""
    dense = sum(int(v.size) for v in scorer.params.values()) * 4
    tables = [scorer.table_arrays(k) for k in range(len(scorer.tables))]
    return int(sum(rows.size * 4 + len(keys) * 20 for keys, rows in tables) + dense + 2 ** 16)


def _check_fits(scorer: Scorer, max_bytes: int) -> None:
    size = estimated_bytes(scorer)
    n_keys = sum(len(scorer.table_arrays(k)[0]) for k in range(len(scorer.tables)))
    if size > max_bytes:
        raise OnnxTooLarge(
            "hash_buckets", scorer.config.hash_buckets,
            f"the model would be about {size / 2**20:.0f} MiB as ONNX ({n_keys} sparse keys x "
            f"dim {scorer.embedding_dim}), over the {max_bytes / 2**20:.0f} MiB one ONNX file can hold "
            f"(the LabelEncoder's keys are attributes, not external data): train with fewer "
            f"hash_buckets, or serve the embeddings from a key-value store (docs/serving.md)")
    for k in range(len(scorer.tables)):
        keys = scorer.table_arrays(k)[0]
        if len(keys) and int(keys[-1]) > _INT64_MAX:
            raise ModelError("hash_buckets", scorer.config.hash_buckets,
                             f"sparse key {int(keys[-1])} does not fit int64, which ONNX's Gather and "
                             f"LabelEncoder take: retrain with hash_buckets <= 2**62 (prep's limit)")


def graph_layout(scorer: Scorer) -> GraphLayout:
    """The graph's inputs for ``scorer``'s feature spec.

    Raises:
        NotServable: a multi-valued feature named as one of the graph's fixed inputs.
    """
    try:
        return layout_of(scorer.features)
    except BadInput as exc:
        raise NotServable(exc.field, exc.value, exc.fix) from None


def build_graph(scorer: Scorer, max_bytes: int = MAX_MODEL_BYTES) -> "onnx.ModelProto":
    """The ONNX model of ``scorer``, any family and feature spec (:mod:`ctr_model.onnx_graph`).

    Raises:
        OnnxTooLarge: past ``max_bytes``; ModelError: a key beyond int64; NotServable: a
            multi-valued feature named ``dense``, ``ids`` or ``probability``.
    """
    from ctr_model.onnx_graph import build_model

    graph_layout(scorer)
    _check_fits(scorer, max_bytes)
    return build_model(scorer)


def _manifest(scorer: Scorer, layout: GraphLayout, onnx_bytes: bytes) -> Dict[str, Any]:
    """``serving.json``; a model trained on a feature spec also carries the spec (its transforms and
    hashing are the inputs' recipe)."""
    doc = {"format": MANIFEST_FORMAT, "onnx": ONNX_FILE, "sha256": hashlib.sha256(onnx_bytes).hexdigest(),
           "schema_version": SCHEMA_VERSION, "hash_version": HASH_VERSION,
           "hash_buckets": int(scorer.meta["hash_buckets"]), "model": scorer.config.model,
           "sparse_keys": sum(int(len(scorer.table_arrays(k)[0])) for k in range(len(scorer.tables))),
           "inputs": layout.manifest(), "pad_id": PAD_ID,
           "outputs": _outputs(scorer),
           "transform": "ctr_model.features: dense_value (log1p) for I*, hash_value for C*"}
    if scorer.features is not None:
        doc["feature_spec"] = scorer.meta["feature_spec"]
        doc["transform"] = "ctr_model.transforms: feature_spec's dense transforms and per-feature hash"
    return doc


def _outputs(scorer: Scorer) -> Dict[str, Any]:
    """``serving.json``'s outputs: ``probability``, or one per task naming its label."""
    tasks = scorer.task_names
    if len(tasks) == 1:
        return {OUTPUT: {"dtype": "FP64"}}
    return {name: {"dtype": "FP64", "task": task} for name, task in zip(output_names(tasks), tasks)}


def _exported(model_dir: str, max_bytes: int) -> Tuple[Dict[str, Any], bytes, GraphLayout]:
    """(manifest, serialized graph, layout) of the model in ``model_dir``, built in memory."""
    scorer = load_model(model_dir)
    layout = graph_layout(scorer)
    data = build_graph(scorer, max_bytes).SerializeToString()
    return _manifest(scorer, layout, data), data, layout


def export_onnx(model_dir: str, out_dir: Optional[str] = None, max_bytes: int = MAX_MODEL_BYTES) -> Dict[str, Any]:
    """Write ``model.onnx`` and ``serving.json`` for the exported model in ``model_dir`` into
    ``out_dir`` (default: the model directory itself) and the Triton repository under it; returns
    the manifest."""
    manifest, data, layout = _exported(model_dir, max_bytes)
    out = out_dir or model_dir
    os.makedirs(out, exist_ok=True)
    tmp = os.path.join(out, ONNX_FILE + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
    os.replace(tmp, os.path.join(out, ONNX_FILE))
    write_json(os.path.join(out, MANIFEST_FILE), manifest, indent=1, sort_keys=True)
    write_repository(out, data, layout, list(manifest["outputs"]))
    return manifest


def _config_pbtxt(layout: GraphLayout, outputs: Sequence[str] = (OUTPUT,)) -> str:
    """Triton's ``config.pbtxt``: every input by name, type and width, every output."""
    types = {"FP32": "TYPE_FP32", "INT64": "TYPE_INT64"}
    inputs = ",\n".join(f'  {{ name: "{name}" data_type: {types[dtype]} dims: [ -1, {width} ] }}'
                        for name, dtype, width in layout.inputs())
    outs = ",\n".join(f'  {{ name: "{name}" data_type: TYPE_FP64 dims: [ -1 ] }}' for name in outputs)
    return (f'name: "{TRITON_MODEL}"\nbackend: "onnxruntime"\nmax_batch_size: 0\ninput [\n{inputs}\n]\n'
            f'output [\n{outs}\n]\n')


def write_repository(out_dir: str, onnx_bytes: bytes, layout: Optional[GraphLayout] = None,
                     outputs: Sequence[str] = (OUTPUT,)) -> str:
    """The Triton/KServe model repository (``serving/ctr/config.pbtxt``, ``serving/ctr/1/model.onnx``)
    that KServe's stock ONNX runtime (Triton) loads from ``/mnt/models``; returns its path.
    ``layout``: the graph's inputs (Criteo's by default); ``outputs``: one per task."""
    root = os.path.join(out_dir, REPOSITORY_DIR)
    version = os.path.join(root, TRITON_MODEL, "1")
    os.makedirs(version, exist_ok=True)
    with open(os.path.join(version, ONNX_FILE), "wb") as fh:
        fh.write(onnx_bytes)
    with open(os.path.join(root, TRITON_MODEL, "config.pbtxt"), "w", encoding="utf-8") as fh:
        fh.write(_config_pbtxt(layout or layout_of(None), outputs))
    return root


def read_manifest(model_dir: str) -> Optional[Dict[str, Any]]:
    """``serving.json`` of an ONNX export, or None when the directory has none."""
    path = os.path.join(model_dir, MANIFEST_FILE)
    try:
        with open(path, encoding="utf-8") as fh:
            return dict(json.load(fh))
    except FileNotFoundError:
        return None
    except ValueError as exc:
        raise ModelError("model", path, f"not JSON ({exc}): run `ctr-volcano export --model {model_dir}` "
                                        f"to write it again") from None


def servable(model_dir: str, max_bytes: int = MAX_MODEL_BYTES) -> Tuple[Dict[str, Any], bytes, str]:
    """``(manifest, graph bytes, where they came from)`` for a server: the export's ``model.onnx`` and
    ``serving.json`` when both are there and agree, else the graph built in memory from the model's
    ``dense.npz``/``sparse.npz`` (a model exported before this version, or without the files).

    Raises:
        ModelError: not a model directory (no ``model_meta.json``), or one the graph cannot take.
    """
    manifest = read_manifest(model_dir)
    path = os.path.join(model_dir, ONNX_FILE)
    if manifest is not None and manifest.get("format") == MANIFEST_FORMAT and os.path.exists(path):
        with open(path, "rb") as fh:
            data = fh.read()
        if hashlib.sha256(data).hexdigest() == manifest.get("sha256"):
            return manifest, data, path
    built, data, _ = _exported(model_dir, max_bytes)
    return built, data, f"the graph built in memory from {model_dir} (no current {ONNX_FILE} + {MANIFEST_FILE})"
