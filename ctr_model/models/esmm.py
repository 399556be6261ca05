"""ESMM, the Entire Space Multi-task Model (Ma et al., SIGIR 2018): click and conversion in one model.

Two towers over the same input (every slot's embedding and the dense input, the shared embedding
table of every family): the CTR tower's ``pCTR`` and the CVR tower's ``pCVR``. The conversion task is
trained over every impression through ``pCTCVR = pCTR x pCVR`` against its label (a conversion after
a click), never on clicked rows alone, which is what corrects CVR's sample-selection bias
(:mod:`.multitask`, loss ``product``). Each tower is ``TrainConfig.fc_sizes`` wide (ReLU) ending in a
1-wide sigmoid; the parameters are ``t0_fc0.w ..`` (the CTR tower) and ``t1_fc0.w ..`` (the CVR tower).

It takes exactly two labels, the second declared ``depends_on`` the first (``labels: [click,
purchase]``, ``depends_on: {purchase: click}``). ``model_config``: ``tasks`` (2; set from the spec).
"""
from __future__ import annotations

from typing import Any, Dict, List

from ctr_model.models import Family
from ctr_model.models.layers import concat, width_of
from ctr_model.models.multitask import Tasks, np_tower, tower, tower_names

__all__ = ["FAMILY"]


def _check(key: str, value: Any):
    if key == "tasks" and value != 2:
        return "esmm trains two tasks (click, then conversion): use 2, or train model mmoe"
    return None


def _build(embs, dense, config):
    x = concat(list(embs) + [dense])        # no dense input on a log without a numeric column
    width = width_of(dense) + sum(e.shape[1] for e in embs)
    return [tower(x, width, config.fc_sizes, f"t{t}_") for t in range(2)]


def _logits(params: Dict[str, Any], embs, dense, config):
    import numpy as np

    x = np.concatenate(list(embs) + [dense], axis=1)
    return np.stack([np_tower(params, x, config.fc_sizes, f"t{t}_") for t in range(2)], axis=1)


def _names(config, num_dense: int, slots: int) -> List[str]:
    return tower_names(config.fc_sizes, "t0_") + tower_names(config.fc_sizes, "t1_")


FAMILY = Family(name="esmm", defaults={"tasks": 2}, check=_check, table_width=lambda dim: dim,
                build=_build, dense_names=_names, logits=_logits,
                tasks=Tasks(loss="product", needs_parent=True, fixed=2))
