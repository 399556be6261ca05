"""Wide & Deep (Cheng et al., DLRS 2016): a logistic regression on the raw features beside the DNN.

Each id's row on the pservers is ``[w, e_1..e_D]`` (``table_width`` = ``embedding_dim + 1``, ``D``
the feature's own ``embedding_dim``): ``w`` is
its weight in the wide part (a 1-wide sparse weight per id; the wide part also weighs the dense input
linearly, ``wide.w``), ``e`` its embedding in the deep part (the DNN over every slot's ``e`` and the
dense input). The click logit is ``wide + deep``. No cross-product features are built: the planted
data's and Criteo's columns come hashed one by one, and crossing them is what DeepFM and DCN-v2 learn.
"""
from __future__ import annotations

from typing import Any, Dict, List

from ctr_model.models import Family
from ctr_model.models.layers import (
    add_margin,
    column,
    concat,
    linear,
    linear_names,
    mlp,
    mlp_names,
    np_add_margin,
    np_linear,
    np_mlp,
    width_of,
)

__all__ = ["FAMILY"]


def _build(embs, dense, config):
    deep_in = [column(e, 1, e.shape[1]) for e in embs]
    width = width_of(dense) + sum(e.shape[1] - 1 for e in embs)
    deep = mlp(concat(deep_in + [dense]), width, config.fc_sizes, config.base_rate)
    return add_margin(deep, linear(embs, dense, "wide"))


def _logits(params: Dict[str, Any], embs, dense, config):
    import numpy as np

    deep = np_mlp(params, np.concatenate([e[:, 1:] for e in embs] + [dense], axis=1), config.fc_sizes)
    return np_add_margin(deep, np_linear(params, embs, dense, "wide"))


def _names(config, num_dense: int, slots: int) -> List[str]:
    return linear_names("wide", num_dense) + mlp_names(config.fc_sizes)


FAMILY = Family(name="wide_deep", defaults={}, check=lambda key, value: None,
                table_width=lambda dim: dim + 1, build=_build, dense_names=_names, logits=_logits)
