"""The ONNX heads of the multi-task families (``esmm``, ``mmoe``): one float64 ``[N]`` output per task.

The outputs, in the spec's ``labels`` order (:func:`output_names`): the first task's is
``probability`` (what a single-task model outputs, so a server that reads only it serves the first
task), every later task's ``probability_<label>``. Each is the numpy scorer's column of
:meth:`ctr_model.infer.Scorer.predict_tasks`: a task's tower in float32, its logit cast to float64
before the ``Sigmoid``, and a task that ``depends_on`` another multiplied (in float64) by its parent's
probability (pCTCVR = pCTR x pCVR). The graph object is :mod:`ctr_model.onnx_graph`'s, handed in (this
module does not import it).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, List, Sequence

from ctr_model.onnx_inputs import OUTPUT

if TYPE_CHECKING:
    from ctr_model.infer import Scorer

__all__ = ["output_names", "task_outputs"]

_DOUBLE = 11     # onnx.TensorProto.DOUBLE


def output_names(labels: Sequence[str]) -> List[str]:
    """The graph's outputs for tasks ``labels``: ``probability``, then ``probability_<label>``."""
    return [OUTPUT] + [f"{OUTPUT}_{name}" for name in labels[1:]]


def _fc(g: Any, scorer: "Scorer", x: str, name: str, relu: bool) -> str:
    p = scorer.params
    out = g.op("Add", [g.op("MatMul", [x, g.const(p[f"{name}.w"], "w")]), g.const(p[f"{name}.b"], "b")])
    return g.op("Relu", [out]) if relu else out


def _tower(g: Any, scorer: "Scorer", x: str, sizes: Sequence[int], prefix: str) -> str:
    """A task's conditional probability, float64 ``[N, 1]``."""
    for i in range(len(sizes)):
        x = _fc(g, scorer, x, f"{prefix}fc{i}", True)
    logit = _fc(g, scorer, x, f"{prefix}out", False)
    return g.op("Sigmoid", [g.op("Cast", [logit], to=_DOUBLE)])


def _esmm(g: Any, scorer: "Scorer", x: str) -> List[str]:
    return [_tower(g, scorer, x, scorer.config.fc_sizes, f"t{t}_") for t in range(2)]


def _mmoe(g: Any, scorer: "Scorer", x: str) -> List[str]:
    mc = scorer.config.model_config
    experts = [g.op("Unsqueeze", [_fc(g, scorer, x, f"expert{e}", True), g.ints([1])])
               for e in range(int(mc["experts"]))]
    stacked = g.concat(experts)                                                   # [N, E, S]
    out = []
    for t in range(int(mc["tasks"])):
        gate = g.op("Softmax", [_fc(g, scorer, x, f"gate{t}", False)], axis=1)     # [N, E]
        mixed = g.row_sum(g.op("Mul", [stacked, g.op("Unsqueeze", [gate, g.ints([2])])]), 1, 0)
        out.append(_tower(g, scorer, mixed, mc["tower_sizes"], f"t{t}_"))
    return out


def task_outputs(g: Any, scorer: "Scorer", x: str) -> List[str]:
    """Add the family's towers on the ``[N, width]`` input ``x`` (every slot's embedding, then the
    dense input) and the graph's outputs; returns their names (:func:`output_names`)."""
    from ctr_model.models.multitask import parent_index

    heads = {"esmm": _esmm, "mmoe": _mmoe}
    if scorer.config.model not in heads:
        raise ValueError(f"model {scorer.config.model!r}: no multi-task ONNX head")
    q = heads[scorer.config.model](g, scorer, x)
    names = list(scorer.task_names)
    probs: List[str] = []
    for t, parent in enumerate(parent_index(names, scorer.parents)):
        probs.append(q[t] if parent is None else g.op("Mul", [q[t], probs[parent]]))
    outputs = output_names(names)
    for prob, name in zip(probs, outputs):
        g.nodes.append(g.helper.make_node("Squeeze", [prob, g.ints([1])], [name]))
    return outputs
