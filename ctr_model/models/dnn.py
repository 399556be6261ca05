"""The embedding-concat DNN (PaddleRec's ``rank/dnn`` shape): every slot's embedding and the dense
input concatenated, through the FC stack. No family-specific hyper-parameters."""
from __future__ import annotations

from typing import Any, Dict, List

from ctr_model.models import Family
from ctr_model.models.layers import mlp, mlp_names, np_mlp

__all__ = ["FAMILY"]


def _build(embs, dense, config):
    import paddle

    width = dense.shape[1] + sum(e.shape[1] for e in embs)
    return mlp(paddle.concat(list(embs) + [dense], axis=1), width, config.fc_sizes)


def _logits(params: Dict[str, Any], embs, dense, config):
    import numpy as np

    x = np.concatenate(list(embs) + [dense], axis=1)
    return np_mlp(params, x, config.fc_sizes)


def _names(config, num_dense: int, slots: int) -> List[str]:
    return mlp_names(config.fc_sizes)


FAMILY = Family(name="dnn", defaults={}, check=lambda key, value: None,
                table_width=lambda dim: dim, build=_build, dense_names=_names, logits=_logits)
