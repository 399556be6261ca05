"""The embedding-concat DNN (PaddleRec's ``rank/dnn`` shape): every slot's embedding and the dense
input concatenated, through the FC stack. No family-specific hyper-parameters."""
from __future__ import annotations

from typing import Any, Dict, List

from ctr_model.models import Family
from ctr_model.models.layers import concat, mlp, mlp_names, np_mlp, width_of

__all__ = ["FAMILY"]


def _build(embs, dense, config):
    width = width_of(dense) + sum(e.shape[1] for e in embs)
    return mlp(concat(list(embs) + [dense]), width, config.fc_sizes, config.base_rate)


def _logits(params: Dict[str, Any], embs, dense, config):
    import numpy as np

    x = np.concatenate(list(embs) + [dense], axis=1)
    return np_mlp(params, x, config.fc_sizes)


def _names(config, num_dense: int, slots: int) -> List[str]:
    return mlp_names(config.fc_sizes)


FAMILY = Family(name="dnn", defaults={}, check=lambda key, value: None,
                table_width=lambda dim: dim, build=_build, dense_names=_names, logits=_logits)
