"""The pieces the families share, each in Paddle (static program) and in numpy (the scorer).

Both halves of a piece sit side by side so the exported model's numpy forward pass stays the
network the gang trained: same parameter names, same order of operations, ``x @ W + b`` with ``W``
shaped ``[in, out]`` as ``paddle.static.nn.fc`` stores it.
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence

__all__ = ["fc", "mlp", "mlp_names", "np_mlp", "linear", "np_linear", "add_margin", "np_add_margin",
           "column", "columns", "concat", "width_of", "output_bias", "sum_terms", "linear_names"]


def output_bias(base_rate: Optional[float]) -> List[float]:
    """The output layer's initial bias ``[0, logit(base_rate)]``: an untrained network (whose other
    terms start near zero) predicts the training click rate, not 0.5. ``None``: ``[0, 0]``."""
    if base_rate is None:
        return [0.0, 0.0]
    rate = min(max(float(base_rate), 1e-6), 1.0 - 1e-6)
    return [0.0, math.log(rate) - math.log1p(-rate)]


def _fc(x, size: int, name: str, fan_in: int, activation=None, bias: bool = True,
        bias_init: Optional[Sequence[float]] = None, zero_weights: bool = False):
    import numpy as np
    import paddle

    init = (paddle.nn.initializer.Constant(0.0) if bias_init is None
            else paddle.nn.initializer.Assign(np.asarray(bias_init, dtype=np.float32)))
    weights = (paddle.nn.initializer.Constant(0.0) if zero_weights
               else paddle.nn.initializer.Normal(std=1.0 / math.sqrt(fan_in)))
    return paddle.static.nn.fc(
        x, size=size, activation=activation,
        weight_attr=paddle.ParamAttr(name=f"{name}.w", initializer=weights),
        bias_attr=paddle.ParamAttr(name=f"{name}.b", initializer=init) if bias else False)


def fc(x, size: int, name: str, fan_in: int, activation=None):
    """One fully connected layer ``{name}.w``/``{name}.b``: weights drawn ``N(0, 1/fan_in)``, bias 0."""
    return _fc(x, size, name, fan_in, activation=activation)


def mlp(x, width: int, fc_sizes: Sequence[int], base_rate: Optional[float] = None):
    """The FC stack ``fc0..`` (ReLU) and the 2-way output layer ``out``: logits ``[-1, 2]``.

    The output layer starts at the base rate: its bias at :func:`output_bias` of ``base_rate``, its
    weights at zero (drawn at random they shifted the untrained mean prediction by a draw-dependent
    offset: 0.14 for a base rate of 0.2 on two standardised dense inputs). The hidden layers are
    random, so the first step already moves ``out.w`` and from then on the gradient reaches them."""
    for i, size in enumerate(fc_sizes):
        x = _fc(x, size, f"fc{i}", width, activation="relu")
        width = size
    return _fc(x, 2, "out", width, bias_init=output_bias(base_rate), zero_weights=True)


def width_of(var) -> int:
    """Columns of a ``[-1, width]`` variable; 0 for ``None`` (no dense input)."""
    return 0 if var is None else int(var.shape[1])


def concat(parts: Sequence[Any]):
    """The non-``None`` parts side by side (a spec without dense features has no dense input)."""
    import paddle

    parts = [p for p in parts if p is not None]
    return parts[0] if len(parts) == 1 else paddle.concat(parts, axis=1)


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


def linear(embs: Sequence[Any], dense, name: str):
    """A logistic-regression term ``[-1, 1]``: every slot's 1-wide sparse weight (column 0 of its
    row) summed, plus ``dense @ {name}.w`` (no bias: the output layer has it); either part is left
    out when the spec has no such feature (``None`` when it has neither). Like a logistic
    regression's, the weights start at zero (the pservers start column 0 at zero too), so the term
    leaves the untrained prediction at the base rate."""
    import paddle

    terms = []
    if embs:
        terms.append(paddle.add_n(columns(embs, 0, 1)))
    if dense is not None:
        terms.append(_fc(dense, 1, name, width_of(dense), bias=False, zero_weights=True))
    return sum_terms(terms)


def sum_terms(terms: Sequence[Any]):
    """The sum of the non-``None`` terms, ``None`` if there are none."""
    terms = [t for t in terms if t is not None]
    if not terms:
        return None
    total = terms[0]
    for term in terms[1:]:
        total = total + term
    return total


def linear_names(name: str, num_dense: int) -> List[str]:
    """The dense weight of :func:`linear` (none without dense features)."""
    return [f"{name}.w"] if num_dense else []


def np_linear(params: Dict[str, Any], embs: Sequence[Any], dense, name: str):
    """:func:`linear` in numpy: ``[n, 1]`` (``embs``: one ``[n, width]`` array per slot; ``dense``
    ``[n, 0]`` for a spec without dense features)."""
    import numpy as np

    out = np.zeros((dense.shape[0], 1), dtype=np.float32)
    if len(embs):
        out = out + np.stack([e[:, 0] for e in embs], axis=1).sum(axis=1, keepdims=True)
    if dense.shape[1]:
        out = out + dense @ params[f"{name}.w"]
    return out


def add_margin(logits, margin):
    """Add a ``[-1, 1]`` term to the click logit of 2-way logits (the no-click logit is unchanged),
    so the 2-way softmax's click probability is ``sigmoid(deep margin + term)``; ``None`` adds nothing."""
    import paddle

    if margin is None:
        return logits
    return logits + paddle.concat([paddle.zeros_like(margin), margin], axis=1)


def np_add_margin(logits, margin):
    """:func:`add_margin` in numpy."""
    import numpy as np

    return logits + np.concatenate([np.zeros_like(margin), margin], axis=1)
