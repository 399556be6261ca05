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
from ctr_model.models.layers import add_margin, columns, linear, mlp, mlp_names, np_add_margin, np_linear, np_mlp

__all__ = ["FAMILY"]


def _build(embs, dense, config):
    import paddle

    dim = config.embedding_dim
    vs = columns(embs, 1, dim + 1)
    stacked = paddle.stack(vs, axis=1)                              # [-1, slots, D]
    square_of_sum = paddle.square(paddle.sum(stacked, axis=1))
    sum_of_square = paddle.sum(paddle.square(stacked), axis=1)
    second = 0.5 * paddle.sum(square_of_sum - sum_of_square, axis=1, keepdim=True)
    first = linear(embs, dense, dense.shape[1], "fm_dense")
    width = dense.shape[1] + len(embs) * dim
    deep = mlp(paddle.concat(vs + [dense], axis=1), width, config.fc_sizes)
    return add_margin(deep, first + second)


def _logits(params: Dict[str, Any], embs, dense, config):
    import numpy as np

    v = np.stack(embs, axis=1)[:, :, 1:]
    second = 0.5 * (np.square(v.sum(axis=1)) - np.square(v).sum(axis=1)).sum(axis=1, keepdims=True)
    first = np_linear(params, embs, dense, "fm_dense")
    deep = np_mlp(params, np.concatenate([v.reshape(v.shape[0], -1), dense], axis=1), config.fc_sizes)
    return np_add_margin(deep, first + second)


def _names(config, num_dense: int, slots: int) -> List[str]:
    return ["fm_dense.w"] + mlp_names(config.fc_sizes)


FAMILY = Family(name="deepfm", defaults={}, check=lambda key, value: None,
                table_width=lambda dim: dim + 1, build=_build, dense_names=_names, logits=_logits,
                mixes_dims=False)
