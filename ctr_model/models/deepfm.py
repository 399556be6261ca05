"""DeepFM (Guo et al., IJCAI 2017): a factorization machine and a DNN sharing the embeddings.

Each id's row on the pservers is ``[w, v_1..v_D]`` (``table_width`` = ``embedding_dim + 1``): ``w`` is
its FM first-order weight, ``v`` its embedding, which the FM's second-order term (every pair of slots'
``<v_i, v_j>``, computed as ``0.5 * ((sum v)^2 - sum v^2)``) and the DNN (``v`` of every slot and the
dense input) share. The inner products need one ``embedding_dim`` for every slot
(``mixes_dims=False``: a spec whose features differ is refused before training). The first-order
term also weighs the dense input linearly (``fm_dense.w``). The
click logit is ``first order + second order + the DNN's``.
"""
from __future__ import annotations

from typing import Any, Dict, List

from ctr_model.models import Family
from ctr_model.models.layers import (
    add_margin,
    columns,
    concat,
    linear,
    linear_names,
    mlp,
    mlp_names,
    np_add_margin,
    np_linear,
    np_mlp,
    sum_terms,
    width_of,
)

__all__ = ["FAMILY"]


def _second_order(vs):
    """``sum_{i<j} <v_i, v_j>`` of the slots' embeddings: ``[-1, 1]`` (``None`` without slots)."""
    import paddle

    if not vs:
        return None
    stacked = paddle.stack(vs, axis=1)                              # [-1, slots, D]
    square_of_sum = paddle.square(paddle.sum(stacked, axis=1))
    sum_of_square = paddle.sum(paddle.square(stacked), axis=1)
    return 0.5 * paddle.sum(square_of_sum - sum_of_square, axis=1, keepdim=True)


def _build(embs, dense, config):
    dim = config.embedding_dim
    vs = columns(embs, 1, dim + 1)
    first = linear(embs, dense, "fm_dense")
    width = width_of(dense) + len(embs) * dim
    deep = mlp(concat(vs + [dense]), width, config.fc_sizes, config.base_rate)
    return add_margin(deep, sum_terms([first, _second_order(vs)]))


def _logits(params: Dict[str, Any], embs, dense, config):
    import numpy as np

    first = np_linear(params, embs, dense, "fm_dense")
    if not len(embs):
        return np_add_margin(np_mlp(params, dense, config.fc_sizes), first)
    v = np.stack(embs, axis=1)[:, :, 1:]
    second = 0.5 * (np.square(v.sum(axis=1)) - np.square(v).sum(axis=1)).sum(axis=1, keepdims=True)
    deep = np_mlp(params, np.concatenate([v.reshape(v.shape[0], -1), dense], axis=1), config.fc_sizes)
    return np_add_margin(deep, first + second)


def _names(config, num_dense: int, slots: int) -> List[str]:
    return linear_names("fm_dense", num_dense) + mlp_names(config.fc_sizes)


FAMILY = Family(name="deepfm", defaults={}, check=lambda key, value: None,
                table_width=lambda dim: dim + 1, build=_build, dense_names=_names, logits=_logits,
                mixes_dims=False)
