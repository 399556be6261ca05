"""MMoE, Multi-gate Mixture-of-Experts (Ma et al., KDD 2018): shared experts, one gate per task.

``experts`` experts, each one ReLU layer ``expert_size`` wide over the input (every slot's embedding
and the dense input); per task ``t`` a gate (a softmax over the experts, ``gate{t}``) mixes the
experts' outputs, and the task's tower (``tower_sizes``, ReLU, then a 1-wide sigmoid: ``t{t}_fc0 ..
t{t}_out``) gives its probability. A task declared ``depends_on`` another is trained where it is
observed, on the rows whose parent label is 1 (:mod:`.multitask`, loss ``masked``), and scored over
impressions as the product with its parent's probability.

``model_config``: ``experts`` (4), ``expert_size`` (16), ``tower_sizes`` ([16]); ``tasks`` is the
number of the spec's ``labels`` (set from the spec).
"""
from __future__ import annotations

from typing import Any, Dict, List

from ctr_model.checks import is_int
from ctr_model.models import Family
from ctr_model.models.layers import concat, width_of
from ctr_model.models.multitask import Tasks, fc, np_fc, np_tower, task_count, tower, tower_names

__all__ = ["FAMILY"]

DEFAULTS = {"experts": 4, "expert_size": 16, "tower_sizes": [16], "tasks": 2}


def _check(key: str, value: Any):
    if key == "experts" and not is_int(value, 1, 64):
        return "use an integer in 1..64"
    if key == "expert_size" and not is_int(value, 1, 4096):
        return "use an integer in 1..4096"
    if key == "tower_sizes" and not (isinstance(value, list) and len(value) <= 8
                                     and all(is_int(v, 1, 4096) for v in value)):
        return "use a list of up to 8 integers in 1..4096 (the tower's hidden widths; [] for none)"
    if key == "tasks" and not is_int(value, 2, 16):
        return "use an integer in 2..16 (the spec's labels set it)"
    return None


def _build(embs, dense, config):
    import paddle

    mc = config.model_config
    x = concat(list(embs) + [dense])        # no dense input on a log without a numeric column
    width = width_of(dense) + sum(e.shape[1] for e in embs)
    experts = paddle.stack([fc(x, mc["expert_size"], f"expert{e}", width, activation="relu")
                            for e in range(mc["experts"])], axis=1)            # [-1, E, S]
    probs = []
    for t in range(task_count(config)):
        gate = paddle.nn.functional.softmax(fc(x, mc["experts"], f"gate{t}", width))   # [-1, E]
        mixed = paddle.sum(experts * paddle.unsqueeze(gate, axis=2), axis=1)          # [-1, S]
        probs.append(tower(mixed, mc["expert_size"], mc["tower_sizes"], f"t{t}_"))
    return probs


def _logits(params: Dict[str, Any], embs, dense, config):
    import numpy as np

    mc = config.model_config
    x = np.concatenate(list(embs) + [dense], axis=1)
    experts = np.stack([np.maximum(np_fc(params, x, f"expert{e}"), 0.0) for e in range(mc["experts"])], axis=1)
    out = []
    for t in range(task_count(config)):
        g = np_fc(params, x, f"gate{t}")
        g = np.exp(g - g.max(axis=1, keepdims=True))
        g = g / g.sum(axis=1, keepdims=True)
        out.append(np_tower(params, (experts * g[:, :, None]).sum(axis=1), mc["tower_sizes"], f"t{t}_"))
    return np.stack(out, axis=1)


def _names(config, num_dense: int, slots: int) -> List[str]:
    mc = config.model_config
    names = [f"expert{e}.{p}" for e in range(mc["experts"]) for p in ("w", "b")]
    for t in range(task_count(config)):
        names += [f"gate{t}.w", f"gate{t}.b"] + tower_names(mc["tower_sizes"], f"t{t}_")
    return names


FAMILY = Family(name="mmoe", defaults=DEFAULTS, check=_check, table_width=lambda dim: dim,
                build=_build, dense_names=_names, logits=_logits, tasks=Tasks(loss="masked"))
