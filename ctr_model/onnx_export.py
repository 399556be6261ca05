"""The exported model as an ONNX graph a serving stack loads (Triton, KServe, onnxruntime).

``paddle2onnx`` cannot convert the training program (it has no mapper for the parameter server's
``distributed_lookup_table``), so the graph is built directly from what trainer 0 exports,
``dense.npz`` + ``sparse.npz``, and computes exactly what the numpy scorer
(:meth:`ctr_model.infer.Scorer.predict`) computes:

- inputs ``dense`` float32 ``[N, 13]`` (the prep transform of ``I1..I13``) and ``ids`` int64
  ``[N, 26]`` (the hashed ids of ``C1..C26``, in column order); for a model trained on a feature
  spec, its dense and categorical features in the spec's order (``serving.json`` names them). Every
  feature must be single-valued (there is no padded multi-valued input; a spec with a multi-valued
  one is :class:`NotServable`);
- per sparse table (one per distinct ``embedding_dim``; Criteo has one): ``ai.onnx.ml.LabelEncoder``
  maps each id to its row in a compact table of the ids seen in training; ids never seen (also
  negative ones) map to one extra zero row, as the scorer does;
- ``Gather``, ``Reshape`` (with several tables: the table's columns of ``ids`` gathered first, the
  tables' embeddings concatenated and gathered back into slot order), ``Concat`` with ``dense``, the
  FC stack (float32, ReLU), the output
  layer with the calibrated bias, the margin of its two logits in float64 and a float64
  ``Sigmoid``: output ``probability`` float64 ``[N]``.

The LabelEncoder's keys are node attributes, which cannot live in external data, so one model must
fit protobuf's 2 GB limit: about 1M keys x dim 10 is 40 MB, so tens of millions of keys fit; past
the limit the export refuses (:class:`OnnxTooLarge`) rather than write a model nothing loads.
"""
from __future__ import annotations

import hashlib
import json
import os
from typing import TYPE_CHECKING, Any, Dict, Optional

from ctr_model.atomic import write_json
from ctr_model.features import DENSE_COLUMNS, HASH_VERSION, SCHEMA_VERSION, SPARSE_COLUMNS
from ctr_model.infer import ModelError, Scorer, load_model

if TYPE_CHECKING:
    import onnx

__all__ = ["ONNX_FILE", "MANIFEST_FILE", "REPOSITORY_DIR", "TRITON_MODEL", "MAX_MODEL_BYTES",
           "OnnxTooLarge", "NotServable", "build_graph", "export_onnx", "write_repository", "estimated_bytes"]

ONNX_FILE = "model.onnx"
#: What a server needs besides the graph: inputs, their column order, the transform and buckets.
MANIFEST_FILE = "serving.json"
#: The Triton/KServe model repository written beside the model: ``serving/ctr/1/model.onnx``.
REPOSITORY_DIR = "serving"
TRITON_MODEL = "ctr"
#: protobuf's hard limit on one serialized message, less room for the graph's other fields.
MAX_MODEL_BYTES = 2 ** 31 - 2 ** 26
_INT64_MAX = 2 ** 63 - 1
_OPSET = 17
_ML_OPSET = 2       # LabelEncoder with int64 keys and values


class OnnxTooLarge(ModelError):
    """The model does not fit one ONNX file: bad input naming the model, the size, the limit and the
    way out."""


class NotServable(ModelError):
    """The graph covers the ``dnn`` family on single-valued features: bad input naming what the model
    is instead."""


def _layers(scorer: Scorer) -> list:
    """The DNN's ``(weight, bias)`` pairs in forward order, the output layer last.

    Raises:
        NotServable: another family, or a feature spec with a multi-valued feature.
    """
    from ctr_model.models.layers import mlp_names

    spec = scorer.features
    multi = [c.name for c in spec.categorical if c.multivalued] if spec is not None else []
    if scorer.config.model != "dnn" or multi:
        what = f"model family {scorer.config.model!r}" if scorer.config.model != "dnn" else \
            f"multi-valued feature {multi[0]!r}"
        raise NotServable("model", scorer.config.model, f"ONNX export covers the dnn family on single-valued "
                                                        f"features, not this {what}: score it with "
                                                        f"ctr_model.infer.load_model (ctr-volcano evaluate)")
    names = mlp_names(scorer.config.fc_sizes)
    return [(scorer.params[w], scorer.params[b]) for w, b in zip(names[0::2], names[1::2])]


def estimated_bytes(scorer: Scorer) -> int:
    """Serialized size of the graph, from above: the table, the keys and values (at most 10 bytes
    each as varints), the dense layers."""
    dense = sum(w.size + b.size for w, b in _layers(scorer)) * 4
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


def _dense_part(helper: Any, numpy_helper: Any, scorer: Scorer, nodes: list, inits: list) -> str:
    """The FC stack and output layer as nodes; returns the name of the float64 margin."""
    x = "x"
    layers = _layers(scorer)
    for i, (w, b) in enumerate(layers):
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        nodes += [helper.make_node("MatMul", [x, f"w{i}"], [f"mm{i}"]),
                  helper.make_node("Add", [f"mm{i}", f"b{i}"], [f"h{i}"])]
        x = f"h{i}"
        if i < len(layers) - 1:
            nodes.append(helper.make_node("Relu", [x], [f"r{i}"]))
            x = f"r{i}"
    import numpy as np

    inits += [numpy_helper.from_array(np.array([0], dtype=np.int64), "col0"),
              numpy_helper.from_array(np.array([1], dtype=np.int64), "col1")]
    nodes += [helper.make_node("Gather", [x, "col1"], ["l1"], axis=1),
              helper.make_node("Gather", [x, "col0"], ["l0"], axis=1),
              helper.make_node("Cast", ["l1"], ["l1d"], to=11),
              helper.make_node("Cast", ["l0"], ["l0d"], to=11),
              helper.make_node("Sub", ["l1d", "l0d"], ["margin2d"]),
              helper.make_node("Squeeze", ["margin2d", "col1"], ["margin"])]
    return "margin"


def _input_columns(scorer: Scorer) -> Dict[str, list]:
    """The columns of the graph's ``dense`` and ``ids`` inputs, in order."""
    spec = scorer.features
    if spec is None:
        return {"dense": list(DENSE_COLUMNS), "ids": list(SPARSE_COLUMNS)}
    return {"dense": [d.name for d in spec.dense], "ids": [c.name for c in spec.categorical]}


def _table_lookup(helper: Any, numpy_helper: Any, scorer: Scorer, k: int, nodes: list, inits: list) -> str:
    """Table ``k``'s nodes: its ids' rows, flattened to ``[N, slots * width]``; returns that name.
    Table 0 of a one-table model keeps the names the graph always had."""
    import numpy as np

    table = scorer.tables[k]
    keys_arr = scorer.table_arrays(k)[0]
    width = scorer.rows_and_zero(k).shape[1]
    keys = [int(key) for key in keys_arr] or [-1]        # no keys: everything is the zero row
    rows = scorer.rows_and_zero(k) if len(keys_arr) else np.zeros((1, width), dtype=np.float32)
    one = len(scorer.tables) == 1
    sfx = "" if one else f"_{k}"
    ids = "ids"
    if not one:
        inits.append(numpy_helper.from_array(np.array(table.slots, dtype=np.int64), f"slots{sfx}"))
        nodes.append(helper.make_node("Gather", ["ids", f"slots{sfx}"], [f"ids{sfx}"], axis=1))
        ids = f"ids{sfx}"
    inits += [numpy_helper.from_array(rows, f"table{sfx}"),
              numpy_helper.from_array(np.array([-1, len(table.slots) * width], dtype=np.int64), f"flat_shape{sfx}")]
    nodes += [helper.make_node("LabelEncoder", [ids], [f"pos{sfx}"], domain="ai.onnx.ml", keys_int64s=keys,
                               values_int64s=list(range(len(keys))), default_int64=len(keys_arr)),
              helper.make_node("Gather", [f"table{sfx}", f"pos{sfx}"], [f"emb{sfx}"], axis=0),
              helper.make_node("Reshape", [f"emb{sfx}", f"flat_shape{sfx}"], [f"emb_flat{sfx}"])]
    return f"emb_flat{sfx}"


def _slot_order(scorer: Scorer) -> "list":
    """For the tables' flattened embeddings concatenated, the column of each slot-order column."""
    widths = [scorer.rows_and_zero(k).shape[1] for k in range(len(scorer.tables))]
    start, by_slot = 0, {}
    for table, width in zip(scorer.tables, widths):
        for slot in table.slots:
            by_slot[slot] = list(range(start, start + width))
            start += width
    return [col for slot in sorted(by_slot) for col in by_slot[slot]]


def _embeddings(helper: Any, numpy_helper: Any, scorer: Scorer, nodes: list, inits: list) -> str:
    """Every slot's embedding, in slot order, as one ``[N, sum of widths]``; returns its name."""
    import numpy as np

    flats = [_table_lookup(helper, numpy_helper, scorer, k, nodes, inits) for k in range(len(scorer.tables))]
    if len(flats) == 1:
        return flats[0]
    inits.append(numpy_helper.from_array(np.array(_slot_order(scorer), dtype=np.int64), "slot_order"))
    nodes += [helper.make_node("Concat", flats, ["emb_tables"], axis=1),
              helper.make_node("Gather", ["emb_tables", "slot_order"], ["emb_flat"], axis=1)]
    return "emb_flat"


def build_graph(scorer: Scorer, max_bytes: int = MAX_MODEL_BYTES) -> "onnx.ModelProto":
    """The ONNX model of ``scorer`` (see the module docstring for its inputs, nodes and output).

    Raises:
        OnnxTooLarge: past ``max_bytes``; ModelError: a key beyond int64; NotServable: not a dnn
            on single-valued features.
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    _check_fits(scorer, max_bytes)
    inits: list = []
    nodes: list = []
    emb = _embeddings(helper, numpy_helper, scorer, nodes, inits)
    nodes.append(helper.make_node("Concat", [emb, "dense"], ["x"], axis=1))
    margin = _dense_part(helper, numpy_helper, scorer, nodes, inits)
    nodes.append(helper.make_node("Sigmoid", [margin], ["probability"]))
    cols = _input_columns(scorer)
    graph = helper.make_graph(
        nodes, "ctr_dnn", [helper.make_tensor_value_info("dense", TensorProto.FLOAT, ["N", len(cols["dense"])]),
                           helper.make_tensor_value_info("ids", TensorProto.INT64, ["N", len(cols["ids"])])],
        [helper.make_tensor_value_info("probability", TensorProto.DOUBLE, ["N"])], initializer=inits)
    model = helper.make_model(graph, producer_name="ctr-volcano",
                              opset_imports=[helper.make_opsetid("", _OPSET),
                                             helper.make_opsetid("ai.onnx.ml", _ML_OPSET)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _manifest(scorer: Scorer, onnx_bytes: bytes) -> Dict[str, Any]:
    """``serving.json``; a model trained on a feature spec also carries the spec (its transforms and
    hashing are the inputs' recipe)."""
    cols = _input_columns(scorer)
    doc = {"format": "ctr-onnx-v1", "onnx": ONNX_FILE, "sha256": hashlib.sha256(onnx_bytes).hexdigest(),
           "schema_version": SCHEMA_VERSION, "hash_version": HASH_VERSION,
           "hash_buckets": int(scorer.meta["hash_buckets"]),
           "sparse_keys": sum(int(len(scorer.table_arrays(k)[0])) for k in range(len(scorer.tables))),
           "inputs": {"dense": {"dtype": "FP32", "columns": cols["dense"]},
                      "ids": {"dtype": "INT64", "columns": cols["ids"]}},
           "outputs": {"probability": {"dtype": "FP64"}},
           "transform": "ctr_model.features: dense_value (log1p) for I*, hash_value for C*"}
    if scorer.features is not None:
        doc["feature_spec"] = scorer.meta["feature_spec"]
        doc["transform"] = "ctr_model.transforms: feature_spec's dense transforms and per-feature hash"
    return doc


def export_onnx(model_dir: str, out_dir: Optional[str] = None, max_bytes: int = MAX_MODEL_BYTES) -> Dict[str, Any]:
    """Write ``model.onnx`` and ``serving.json`` for the exported model in ``model_dir`` into
    ``out_dir`` (default: the model directory itself) and the Triton repository under it; returns
    the manifest."""
    scorer = load_model(model_dir)
    data = build_graph(scorer, max_bytes).SerializeToString()
    out = out_dir or model_dir
    os.makedirs(out, exist_ok=True)
    tmp = os.path.join(out, ONNX_FILE + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
    os.replace(tmp, os.path.join(out, ONNX_FILE))
    manifest = _manifest(scorer, data)
    write_json(os.path.join(out, MANIFEST_FILE), manifest, indent=1, sort_keys=True)
    write_repository(out, data, len(manifest["inputs"]["dense"]["columns"]), len(manifest["inputs"]["ids"]["columns"]))
    return manifest


_CONFIG_PBTXT = """name: "{name}"
backend: "onnxruntime"
max_batch_size: 0
input [
  {{ name: "dense" data_type: TYPE_FP32 dims: [ -1, {dense} ] }},
  {{ name: "ids" data_type: TYPE_INT64 dims: [ -1, {sparse} ] }}
]
output [
  {{ name: "probability" data_type: TYPE_FP64 dims: [ -1 ] }}
]
"""


def write_repository(out_dir: str, onnx_bytes: bytes, n_dense: int = len(DENSE_COLUMNS),
                     n_ids: int = len(SPARSE_COLUMNS)) -> str:
    """The Triton/KServe model repository (``serving/ctr/config.pbtxt``, ``serving/ctr/1/model.onnx``)
    that KServe's stock ONNX runtime (Triton) loads from ``/mnt/models``; returns its path.
    ``n_dense``/``n_ids``: the widths of the graph's inputs (Criteo's by default)."""
    root = os.path.join(out_dir, REPOSITORY_DIR)
    version = os.path.join(root, TRITON_MODEL, "1")
    os.makedirs(version, exist_ok=True)
    with open(os.path.join(version, ONNX_FILE), "wb") as fh:
        fh.write(onnx_bytes)
    with open(os.path.join(root, TRITON_MODEL, "config.pbtxt"), "w", encoding="utf-8") as fh:
        fh.write(_CONFIG_PBTXT.format(name=TRITON_MODEL, dense=n_dense, sparse=n_ids))
    return root


def read_manifest(model_dir: str) -> Dict[str, Any]:
    """``serving.json`` of an ONNX export; a ModelError naming the fix if absent."""
    path = os.path.join(model_dir, MANIFEST_FILE)
    try:
        with open(path, encoding="utf-8") as fh:
            return dict(json.load(fh))
    except FileNotFoundError:
        raise ModelError("model", model_dir, f"no {MANIFEST_FILE}: run `ctr-volcano export --model {model_dir}` "
                                             f"first") from None
