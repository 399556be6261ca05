"""The pieces the families share, each in Paddle (static program) and in numpy (the scorer).

Both halves of a piece sit side by side so the exported model's numpy forward pass stays the
network the gang trained: same parameter names, same order of operations, ``x @ W + b`` with ``W``
shaped ``[in, out]`` as ``paddle.static.nn.fc`` stores it.
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Sequence

__all__ = ["mlp", "mlp_names", "np_mlp", "linear", "np_linear", "add_margin", "np_add_margin",
           "column", "columns"]


def _fc(x, size: int, name: str, fan_in: int, activation=None, bias: bool = True):
    import paddle

    return paddle.static.nn.fc(
        x, size=size, activation=activation,
        weight_attr=paddle.ParamAttr(name=f"{name}.w", initializer=paddle.nn.initializer.Normal(
            std=1.0 / math.sqrt(fan_in))),
        bias_attr=(paddle.ParamAttr(name=f"{name}.b", initializer=paddle.nn.initializer.Constant(0.0))
                   if bias else False))


def mlp(x, width: int, fc_sizes: Sequence[int]):
    """The FC stack ``fc0..`` (ReLU) and the 2-way output layer ``out``: logits ``[-1, 2]``."""
    for i, size in enumerate(fc_sizes):
        x = _fc(x, size, f"fc{i}", width, activation="relu")
        width = size
    return _fc(x, 2, "out", width)


def mlp_names(fc_sizes: Sequence[int]) -> List[str]:
    """Names of :func:`mlp`'s parameters, in forward order (weight, bias per layer)."""
    names = []
    for i in range(len(fc_sizes)):
        names += [f"fc{i}.w", f"fc{i}.b"]
    return names + ["out.w", "out.b"]


def np_mlp(params: Dict[str, Any], x, fc_sizes: Sequence[int]):
    """:func:`mlp` in numpy (float32)."""
    import numpy as np

    for i in range(len(fc_sizes)):
        x = np.maximum(x @ params[f"fc{i}.w"] + params[f"fc{i}.b"], 0.0)
    return x @ params["out.w"] + params["out.b"]


def column(emb, start: int, end: int):
    """Columns ``start:end`` of a ``[-1, width]`` variable."""
    import paddle

    return paddle.slice(emb, axes=[1], starts=[start], ends=[end])


def columns(embs: Sequence[Any], start: int, end: int) -> List[Any]:
    """:func:`column` of every slot's embedding."""
    return [column(e, start, end) for e in embs]


def linear(embs: Sequence[Any], dense, num_dense: int, name: str):
    """A logistic-regression term ``[-1, 1]``: every slot's 1-wide sparse weight (column 0 of its
    row) summed, plus ``dense @ {name}.w`` (no bias: the output layer has it)."""
    import paddle

    sparse = paddle.add_n(columns(embs, 0, 1))
    return sparse + _fc(dense, 1, name, num_dense, bias=False)


def np_linear(params: Dict[str, Any], embs: Sequence[Any], dense, name: str):
    """:func:`linear` in numpy: ``[n, 1]`` (``embs``: one ``[n, width]`` array per slot)."""
    import numpy as np

    return np.stack([e[:, 0] for e in embs], axis=1).sum(axis=1, keepdims=True) + dense @ params[f"{name}.w"]


def add_margin(logits, margin):
    """Add a ``[-1, 1]`` term to the click logit of 2-way logits (the no-click logit is unchanged),
    so the 2-way softmax's click probability is ``sigmoid(deep margin + term)``."""
    import paddle

    return logits + paddle.concat([paddle.zeros_like(margin), margin], axis=1)


def np_add_margin(logits, margin):
    """:func:`add_margin` in numpy."""
    import numpy as np

    return logits + np.concatenate([np.zeros_like(margin), margin], axis=1)
