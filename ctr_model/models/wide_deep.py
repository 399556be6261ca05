"""Wide & Deep (Cheng et al., DLRS 2016): a logistic regression on the raw features and their crosses
beside the DNN.

Each id's row on the pservers is ``[w, e_1..e_D]`` (``table_width`` = ``embedding_dim + 1``, ``D``
the feature's own ``embedding_dim``): ``w`` is its weight in the wide part (a 1-wide sparse weight
per id; the wide part also weighs the dense input linearly, ``wide.w``), ``e`` its embedding in the
deep part (the DNN over every feature's ``e`` and the dense input). The click logit is
``wide + deep``.

The paper's wide part is cross-product columns: a feature spec's ``crosses`` (hashed products of two
or more categorical features, :mod:`ctr_model.spec_crosses`) are the last ``model_config.crosses``
slots (set from the spec), whose ``w`` enters the wide part only; their rows' one embedding column is
never read.
"""
from __future__ import annotations

from typing import Any, Dict, List

from ctr_model.checks import is_int
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

__all__ = ["FAMILY", "deep_slots"]


def deep_slots(embs: List[Any], config) -> List[Any]:
    """The slots the deep part reads: all but the last ``model_config.crosses`` (the crosses)."""
    crosses = int(config.model_config.get("crosses", 0))
    return list(embs[:len(embs) - crosses])


def _build(embs, dense, config):
    deep = deep_slots(embs, config)
    deep_in = [column(e, 1, e.shape[1]) for e in deep]
    width = width_of(dense) + sum(e.shape[1] - 1 for e in deep)
    deep = mlp(concat(deep_in + [dense]), width, config.fc_sizes, config.base_rate)
    return add_margin(deep, linear(embs, dense, "wide"))


def _logits(params: Dict[str, Any], embs, dense, config):
    import numpy as np

    deep_in = np.concatenate([e[:, 1:] for e in deep_slots(embs, config)] + [dense], axis=1)
    return np_add_margin(np_mlp(params, deep_in, config.fc_sizes), np_linear(params, embs, dense, "wide"))


def _names(config, num_dense: int, slots: int) -> List[str]:
    return linear_names("wide", num_dense) + mlp_names(config.fc_sizes)


def _check(key: str, value: Any):
    if key == "crosses" and not is_int(value, 0, 10 ** 6):
        return "the number of the spec's crosses (set from the feature spec): an integer >= 0"
    return None


FAMILY = Family(name="wide_deep", defaults={"crosses": 0}, check=_check,
                table_width=lambda dim: dim + 1, build=_build, dense_names=_names, logits=_logits)
