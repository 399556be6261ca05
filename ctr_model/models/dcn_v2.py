"""DCN-v2 (Wang et al., WWW 2021), the stacked structure: cross layers, then the DNN.

``x0`` is every slot's embedding and the dense input concatenated (width ``d``); each cross layer
computes ``x_{l+1} = x0 * (W_l x_l + b_l) + x_l``, an explicit interaction of one more order per layer;
the FC stack and the output layer follow. ``low_rank`` r > 0 factors each ``W_l`` (``d x d``) as
``U_l V_l`` (``d x r``, ``r x d``): the paper's cheaper variant, which it finds as accurate for
moderate r.

Each cross layer starts as the identity (``W_l``, or its ``U_l``, is zero at first; ``V_l`` is
random so the gradient reaches ``U_l``): an untrained DCN-v2 is the DNN, and its cross terms grow
only as far as the data pays for them. Drawn at random like the FC weights, 3 full-rank layers
trained 0.007 AUC below the DNN on the linear planted data and no better than it on the planted
interactions. The defaults, one cross layer of rank 32, were the best of the settings measured
(docs/training.md): one layer already holds every pairwise product of ``x0``'s coordinates.
"""
from __future__ import annotations

import math
from typing import Any, Dict, List

from ctr_model.models import Family
from ctr_model.models.layers import concat, mlp, mlp_names, np_mlp, width_of

__all__ = ["FAMILY"]

_MAX_LAYERS = 16


def _check(key: str, value: Any):
    ok = isinstance(value, int) and not isinstance(value, bool)
    if key == "cross_layers" and not (ok and 1 <= value <= _MAX_LAYERS):
        return f"use an integer in 1..{_MAX_LAYERS} (cross layers before the DNN)"
    if key == "low_rank" and not (ok and 0 <= value <= 4096):
        return "use 0 (full-rank cross layers) or a rank in 1..4096"
    return None


def _param(name: str, fan_in: int):
    import paddle

    return paddle.ParamAttr(name=name, initializer=paddle.nn.initializer.Normal(std=1.0 / math.sqrt(fan_in)))


def _zero(name: str):
    import paddle

    return paddle.ParamAttr(name=name, initializer=paddle.nn.initializer.Constant(0.0))


def _cross(x0, x, d: int, layer: int, rank: int):
    import paddle

    bias = _zero(f"cross{layer}.b")
    if rank:
        low = paddle.static.nn.fc(x, size=rank, weight_attr=_param(f"cross{layer}.v", d), bias_attr=False)
        xw = paddle.static.nn.fc(low, size=d, weight_attr=_zero(f"cross{layer}.u"), bias_attr=bias)
    else:
        xw = paddle.static.nn.fc(x, size=d, weight_attr=_zero(f"cross{layer}.w"), bias_attr=bias)
    return x0 * xw + x


def _build(embs, dense, config):
    x0 = concat(list(embs) + [dense])
    d = width_of(dense) + sum(e.shape[1] for e in embs)
    x = x0
    for layer in range(config.model_config["cross_layers"]):
        x = _cross(x0, x, d, layer, config.model_config["low_rank"])
    return mlp(x, d, config.fc_sizes, config.base_rate)


def _logits(params: Dict[str, Any], embs, dense, config):
    import numpy as np

    x0 = np.concatenate(list(embs) + [dense], axis=1)
    x = x0
    for layer in range(config.model_config["cross_layers"]):
        if config.model_config["low_rank"]:
            xw = (x @ params[f"cross{layer}.v"]) @ params[f"cross{layer}.u"]
        else:
            xw = x @ params[f"cross{layer}.w"]
        x = x0 * (xw + params[f"cross{layer}.b"]) + x
    return np_mlp(params, x, config.fc_sizes)


def _names(config, num_dense: int, slots: int) -> List[str]:
    weights = ["v", "u"] if config.model_config["low_rank"] else ["w"]
    names = [f"cross{i}.{w}" for i in range(config.model_config["cross_layers"]) for w in weights + ["b"]]
    return names + mlp_names(config.fc_sizes)


FAMILY = Family(name="dcn_v2", defaults={"cross_layers": 1, "low_rank": 32}, check=_check,
                table_width=lambda dim: dim, build=_build, dense_names=_names, logits=_logits)
