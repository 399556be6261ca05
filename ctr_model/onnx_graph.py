"""The ONNX graph of an exported model, every family, every feature spec: the numpy scorer's forward
pass (:meth:`ctr_model.infer.Scorer.predict`) written as plain ONNX operators.

Why built by hand: ``paddle2onnx`` has no mapper for the parameter server's
``distributed_lookup_table``, and PyTorch-style ``EmbeddingBag`` exports are known to be broken
(HugeCTR's converter rewrites its layers as primitive operators for the same reason). The graph:

- **Inputs** (:class:`ctr_model.onnx_inputs.GraphLayout`): ``dense`` float32 ``[N, dense features]``
  (absent when the spec has none), ``ids`` int64 ``[N, single-valued features]`` (absent when none),
  and one int64 ``[N, max_length]`` input per multi-valued feature, named as the feature, padded with
  :data:`~ctr_model.onnx_inputs.PAD_ID`.
- **Lookup**, per sparse table (one per distinct ``embedding_dim``): the table's id columns (its
  single-valued slots of ``ids`` and its multi-valued inputs) concatenated, one
  ``ai.onnx.ml.LabelEncoder`` (id -> row of a compact table of the ids seen in training; an unseen,
  negative or pad id -> one extra zero row, as the scorer's lookup), one ``Gather``. One encoder per
  table, because its keys are node attributes: two would store them twice.
- **Pooling** of a multi-valued feature: ``ReduceSum`` over its padded positions (a pad is the zero
  row, so it adds nothing); ``mean`` divides by the count of non-pad positions (the mask
  ``ids != PAD_ID``), at least 1; ``attention`` weights each position by the activation unit's
  score against its query's row (``MatMul``/``Sigmoid`` over ``[h, q, h - q, h * q]``) before the
  ``ReduceSum``.
- **Family head**, from every slot's embedding columns in slot order: ``dnn`` (concat, FC stack),
  ``wide_deep`` (the wide sum of column 0 of each slot's row plus ``dense @ wide.w``, beside the DNN
  over the other columns), ``deepfm`` (first order as wide, the FM's second order
  ``0.5 * sum((sum v)^2 - sum v^2)`` as ``ReduceSum``/``Mul``/``Sub``, the DNN over ``v``),
  ``dcn_v2`` (each cross layer ``x0 * (x W + b) + x``, or ``x0 * ((x V) U + b) + x`` at low rank,
  then the FC stack).
- **Output**: the 2-way output layer with the calibrated bias, the click logit plus the family's
  extra term in float32 as the scorer adds it, the margin of the two logits in float64 and a float64
  ``Sigmoid``: ``probability`` float64 ``[N]``; a multi-task family (``esmm``, ``mmoe``) has one
  output per task (:mod:`ctr_model.onnx_tasks`).

Every internal tensor is named ``ctr/...``, so a feature may be called anything but an input's name.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

from ctr_model.onnx_inputs import DENSE_INPUT, IDS_INPUT, OUTPUT, PAD_ID, GraphLayout, layout_of

if TYPE_CHECKING:
    import onnx

    from ctr_model.infer import Scorer

__all__ = ["OPSET", "ML_OPSET", "build_model"]

OPSET = 17
ML_OPSET = 2        # LabelEncoder with int64 keys and values
_FLOAT, _DOUBLE, _INT64 = 1, 11, 7     # onnx.TensorProto's element types


class _Graph:
    """Nodes and initializers under construction; every output gets a fresh ``ctr/`` name."""

    def __init__(self) -> None:
        from onnx import helper, numpy_helper

        self.helper, self.numpy_helper = helper, numpy_helper
        self.nodes: List[Any] = []
        self.inits: List[Any] = []
        self._count = 0

    def _name(self, stem: str) -> str:
        self._count += 1
        return f"ctr/{stem}{self._count}"

    def const(self, array: Any, stem: str = "c") -> str:
        """An initializer holding ``array``; returns its name."""
        name = self._name(stem)
        self.inits.append(self.numpy_helper.from_array(array, name))
        return name

    def ints(self, values: Sequence[int]) -> str:
        import numpy as np

        return self.const(np.asarray(list(values), dtype=np.int64), "i")

    def op(self, op_type: str, inputs: Sequence[str], domain: Optional[str] = None, **attrs: Any) -> str:
        """One node with one output; returns the output's name."""
        out = self._name(op_type.lower())
        kwargs = {"domain": domain} if domain else {}
        self.nodes.append(self.helper.make_node(op_type, list(inputs), [out], **kwargs, **attrs))
        return out

    def columns(self, x: str, cols: Sequence[int], width: int) -> str:
        """Columns ``cols`` of the ``[N, width]`` tensor ``x`` (``x`` itself when that is all of it)."""
        if list(cols) == list(range(width)):
            return x
        return self.op("Gather", [x, self.ints(cols)], axis=1)

    def row_sum(self, x: str, axis: int, keepdims: int) -> str:
        return self.op("ReduceSum", [x, self.ints([axis])], keepdims=keepdims)

    def concat(self, parts: Sequence[str]) -> str:
        return parts[0] if len(parts) == 1 else self.op("Concat", list(parts), axis=1)


# ------------------------------------------------------------------------------------------------
# the embeddings


def _table_ids(g: _Graph, layout: GraphLayout, scorer: "Scorer", k: int) -> Tuple[Optional[str], list, list]:
    """(the table's id columns as one ``[N, S]`` tensor, its single-valued slots, its multi-valued
    slots with their offsets in that tensor)."""
    spec_slots = scorer.tables[k].slots
    single = [s for s in spec_slots if s in layout.single_slots]
    multi = [s for s in spec_slots if s in layout.multi_slots]
    parts = []
    if single:
        positions = [layout.single_slots.index(s) for s in single]
        parts.append(IDS_INPUT if positions == list(range(len(layout.ids))) else
                     g.op("Gather", [IDS_INPUT, g.ints(positions)], axis=1))
    offsets, start = [], len(single)
    for s in multi:
        name, length = layout.padded[layout.multi_slots.index(s)]
        parts.append(name)
        offsets.append((s, name, start, length))
        start += length
    return (g.concat(parts) if parts else None), single, offsets


def _lookup(g: _Graph, scorer: "Scorer", k: int, ids: str) -> Tuple[str, int]:
    """``[N, S, width]`` rows of table ``k`` for the ``[N, S]`` ids; returns (name, width)."""
    import numpy as np

    keys_arr = scorer.table_arrays(k)[0]
    rows = scorer.rows_and_zero(k)
    width = int(rows.shape[1])
    keys = [int(key) for key in keys_arr] or [PAD_ID]     # no keys: everything is the zero row
    if not len(keys_arr):
        rows = np.zeros((1, width), dtype=np.float32)
    pos = g.op("LabelEncoder", [ids], domain="ai.onnx.ml", keys_int64s=keys,
               values_int64s=list(range(len(keys))), default_int64=len(keys_arr))
    return g.op("Gather", [g.const(rows, "table"), pos], axis=0), width


def _pooled(g: _Graph, emb: str, raw: str, start: int, length: int, mean: bool) -> str:
    """``[N, width]``: the sum (or mean over non-pad ids) of positions ``start..start+length`` of the
    ``[N, S, width]`` rows, ``raw`` being the feature's padded input."""
    import numpy as np

    part = g.op("Slice", [emb, g.ints([start]), g.ints([start + length]), g.ints([1])])
    total = g.row_sum(part, 1, 0)
    if not mean:
        return total
    real = g.op("Cast", [g.op("Not", [g.op("Equal", [raw, g.const(np.array(PAD_ID, dtype=np.int64))])])], to=_FLOAT)
    count = g.op("Max", [g.row_sum(real, 1, 1), g.const(np.array(1.0, dtype=np.float32))])
    return g.op("Div", [total, count])


def _attention_pooled(g: _Graph, scorer: "Scorer", emb: str, query: int, start: int, length: int,
                      att: Any) -> str:
    """``[N, width]``: target attention (:mod:`ctr_model.models.attention`) over positions
    ``start..start+length`` of the ``[N, S, width]`` rows against position ``query``'s row (a pad
    is the zero row: its weighted row adds nothing)."""
    p = scorer.params
    items = g.op("Slice", [emb, g.ints([start]), g.ints([start + length]), g.ints([1])])
    q = g.op("Expand", [g.op("Slice", [emb, g.ints([query]), g.ints([query + 1]), g.ints([1])]),
                        g.op("Shape", [items])])
    x = g.op("Concat", [items, q, g.op("Sub", [items, q]), g.op("Mul", [items, q])], axis=2)
    for k in range(len(att.units)):
        x = g.op("Sigmoid", [g.op("Add", [g.op("MatMul", [x, g.const(p[f"{att.name}.fc{k}.w"], "w")]),
                                          g.const(p[f"{att.name}.fc{k}.b"], "b")])])
    score = g.op("Add", [g.op("MatMul", [x, g.const(p[f"{att.name}.out.w"], "w")]),
                         g.const(p[f"{att.name}.out.b"], "b")])
    return g.row_sum(g.op("Mul", [items, score]), 1, 0)


def _embeddings(g: _Graph, layout: GraphLayout, scorer: "Scorer") -> Tuple[Optional[str], Dict[int, List[int]]]:
    """Every slot's embedding in one ``[N, total]`` tensor (or None without categorical features),
    and the columns of each slot in it."""
    from ctr_model.models.attention import attention_slots

    spec = scorer.features
    attention = {a.slot: a for a in attention_slots(spec)}
    pieces: List[str] = []
    cols: Dict[int, List[int]] = {}
    at = 0
    for k, table in enumerate(scorer.tables):
        ids, single, multi = _table_ids(g, layout, scorer, k)
        if ids is None:
            continue
        emb, width = _lookup(g, scorer, k, ids)
        if single:
            head = emb if not multi else g.op("Slice", [emb, g.ints([0]), g.ints([len(single)]), g.ints([1])])
            pieces.append(g.op("Reshape", [head, g.ints([-1, len(single) * width])]))
            for i, slot in enumerate(single):
                cols[slot] = list(range(at + i * width, at + (i + 1) * width))
            at += len(single) * width
        for slot, raw, start, length in multi:
            if slot in attention:
                query = single.index(attention[slot].query_slot)
                pieces.append(_attention_pooled(g, scorer, emb, query, start, length, attention[slot]))
            else:
                mean = spec is not None and spec.categorical[slot].pooling == "mean"
                pieces.append(_pooled(g, emb, raw, start, length, mean))
            cols[slot] = list(range(at, at + width))
            at += width
    return (g.concat(pieces) if pieces else None), cols


# ------------------------------------------------------------------------------------------------
# the family heads


def _mlp(g: _Graph, scorer: "Scorer", x: str) -> str:
    """The FC stack (ReLU) and the 2-way output layer: logits ``[N, 2]``."""
    from ctr_model.models.layers import mlp_names

    names = mlp_names(scorer.config.fc_sizes)
    pairs = list(zip(names[0::2], names[1::2]))
    for i, (w, b) in enumerate(pairs):
        x = g.op("Add", [g.op("MatMul", [x, g.const(scorer.params[w], "w")]), g.const(scorer.params[b], "b")])
        if i < len(pairs) - 1:
            x = g.op("Relu", [x])
    return x


def _linear(g: _Graph, scorer: "Scorer", emb: Optional[str], cols: Dict[int, List[int]],
            dense: Optional[str], name: str) -> Optional[str]:
    """The 1-wide sparse weights (column 0 of each slot's row) summed, plus ``dense @ name``: ``[N, 1]``."""
    terms = []
    if emb is not None and cols:
        width = sum(len(c) for c in cols.values())
        terms.append(g.row_sum(g.columns(emb, [cols[s][0] for s in sorted(cols)], width), 1, 1))
    if dense is not None:
        terms.append(g.op("MatMul", [dense, g.const(scorer.params[name], "w")]))
    if not terms:
        return None
    return terms[0] if len(terms) == 1 else g.op("Add", terms)


def _deep_input(g: _Graph, emb: Optional[str], cols: Dict[int, List[int]], dense: Optional[str],
                skip_first: bool) -> str:
    """The slots' embeddings in slot order (without column 0 when ``skip_first``), then ``dense``."""
    parts = []
    if emb is not None and cols:
        width = sum(len(c) for c in cols.values())
        parts.append(g.columns(emb, [c for s in sorted(cols) for c in cols[s][int(skip_first):]], width))
    if dense is not None:
        parts.append(dense)
    return g.concat(parts)


def _deep_cols(scorer: "Scorer", cols: Dict[int, List[int]]) -> Dict[int, List[int]]:
    """``cols`` without Wide&Deep's crosses (its last ``model_config.crosses`` slots: wide part only)."""
    crosses = int(scorer.config.model_config.get("crosses", 0))
    slots = len(scorer.features.slot_features) if scorer.features is not None else len(cols)
    return {s: c for s, c in cols.items() if s < slots - crosses}


def _fm_second_order(g: _Graph, emb: Optional[str], cols: Dict[int, List[int]]) -> Optional[str]:
    """``0.5 * sum_d((sum_slots v)^2 - sum_slots v^2)``: ``[N, 1]``."""
    import numpy as np

    if emb is None or not cols:
        return None
    width = sum(len(c) for c in cols.values())
    dim = len(cols[min(cols)]) - 1
    v = g.columns(emb, [c for s in sorted(cols) for c in cols[s][1:]], width)
    stacked = g.op("Reshape", [v, g.ints([-1, len(cols), dim])])
    total = g.row_sum(stacked, 1, 0)
    squares = g.row_sum(g.op("Mul", [stacked, stacked]), 1, 0)
    diff = g.op("Sub", [g.op("Mul", [total, total]), squares])
    return g.op("Mul", [g.row_sum(diff, 1, 1), g.const(np.array(0.5, dtype=np.float32))])


def _cross(g: _Graph, scorer: "Scorer", x0: str) -> str:
    """DCN-v2's cross layers on ``x0``."""
    mc = scorer.config.model_config
    x = x0
    for layer in range(int(mc["cross_layers"])):
        p = scorer.params
        if mc["low_rank"]:
            xw = g.op("MatMul", [g.op("MatMul", [x, g.const(p[f"cross{layer}.v"], "v")]),
                                 g.const(p[f"cross{layer}.u"], "u")])
        else:
            xw = g.op("MatMul", [x, g.const(p[f"cross{layer}.w"], "w")])
        gate = g.op("Add", [xw, g.const(p[f"cross{layer}.b"], "b")])
        x = g.op("Add", [g.op("Mul", [x0, gate]), x])
    return x


def _head(g: _Graph, scorer: "Scorer", emb: Optional[str], cols: Dict[int, List[int]],
          dense: Optional[str]) -> Tuple[str, Optional[str]]:
    """(logits ``[N, 2]``, the ``[N, 1]`` term the family adds to the click logit, or None)."""
    model = scorer.config.model
    if model == "dnn":
        return _mlp(g, scorer, _deep_input(g, emb, cols, dense, False)), None
    if model == "dcn_v2":
        return _mlp(g, scorer, _cross(g, scorer, _deep_input(g, emb, cols, dense, False))), None
    if model == "wide_deep":
        return (_mlp(g, scorer, _deep_input(g, emb, _deep_cols(scorer, cols), dense, True)),
                _linear(g, scorer, emb, cols, dense, "wide.w"))
    if model == "deepfm":
        first = _linear(g, scorer, emb, cols, dense, "fm_dense.w")
        second = _fm_second_order(g, emb, cols)
        terms = [t for t in (first, second) if t is not None]
        term = None if not terms else terms[0] if len(terms) == 1 else g.op("Add", terms)
        return _mlp(g, scorer, _deep_input(g, emb, cols, dense, True)), term
    raise ValueError(f"model {model!r}: no ONNX head for this family")


def _probability(g: _Graph, logits: str, term: Optional[str]) -> None:
    """``sigmoid(float64(l1 + term) - float64(l0))`` into the graph's output."""
    l1 = g.op("Gather", [logits, g.ints([1])], axis=1)
    if term is not None:
        l1 = g.op("Add", [l1, term])
    l0 = g.op("Gather", [logits, g.ints([0])], axis=1)
    margin = g.op("Sub", [g.op("Cast", [l1], to=_DOUBLE), g.op("Cast", [l0], to=_DOUBLE)])
    squeezed = g.op("Squeeze", [margin, g.ints([1])])
    g.nodes.append(g.helper.make_node("Sigmoid", [squeezed], [OUTPUT]))


def _outputs(g: _Graph, scorer: "Scorer", emb: Optional[str], cols: Dict[int, List[int]],
             dense: Optional[str]) -> List[str]:
    """The family's head and the graph's outputs: ``probability``, or one per task for a multi-task
    family (:mod:`ctr_model.onnx_tasks`); returns their names."""
    from ctr_model.models import family

    if family(scorer.config.model).tasks is not None:
        from ctr_model.onnx_tasks import task_outputs

        return task_outputs(g, scorer, _deep_input(g, emb, cols, dense, False))
    logits, term = _head(g, scorer, emb, cols, dense)
    _probability(g, logits, term)
    return [OUTPUT]


def build_model(scorer: "Scorer") -> "onnx.ModelProto":
    """The checked ONNX model of ``scorer`` (its layout: :func:`ctr_model.onnx_inputs.layout_of`)."""
    import onnx
    from onnx import TensorProto, helper

    layout = layout_of(scorer.features)
    g = _Graph()
    emb, cols = _embeddings(g, layout, scorer)
    dense = DENSE_INPUT if layout.dense else None
    outputs = _outputs(g, scorer, emb, cols, dense)
    inputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT if dtype == "FP32" else TensorProto.INT64,
                                            ["N", width])
              for name, dtype, width in layout.inputs()]
    graph = helper.make_graph(g.nodes, f"ctr_{scorer.config.model}", inputs,
                              [helper.make_tensor_value_info(name, TensorProto.DOUBLE, ["N"]) for name in outputs],
                              initializer=g.inits)
    model = helper.make_model(graph, producer_name="ctr-volcano",
                              opset_imports=[helper.make_opsetid("", OPSET),
                                             helper.make_opsetid("ai.onnx.ml", ML_OPSET)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model
