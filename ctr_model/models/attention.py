"""DIN's target attention: a behaviour history pooled by weights that depend on the candidate, in Paddle
(the program the gang trains) and in numpy (the scorer), side by side as :mod:`.layers` keeps them.

For history items ``h_1..h_L`` (embedding rows) and the candidate's row ``q`` (the history's
``query`` feature, same table: :mod:`ctr_model.spec_attention`), the activation unit scores each item
from ``[h_i, q, h_i - q, h_i * q]`` through ``attention_units`` sigmoid layers and a linear 1-wide
output, and the pooled row is ``sum_i score_i * h_i``. As in the DIN paper the scores are not
normalised by a softmax, so the pooled row keeps how much of the history is relevant, not only
which part. A row's empty history is its one "empty" id, scored like any item. Parameters are named
``att<slot>.fc<k>.w/b`` and ``att<slot>.out.w/b`` (``slot`` the history's slot), dense parameters
like the family's, so the pservers train them and the export carries them.

Every family takes the pooled row as it takes a ``sum``-pooled one: attention is a pooling, not a
family (:mod:`ctr_model.net`, :mod:`ctr_model.infer`, :mod:`ctr_model.onnx_graph`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from ctr_model.models.layers import fc
from ctr_model.spec_attention import query_of

if TYPE_CHECKING:
    from ctr_model.feature_spec import FeatureSpec

__all__ = ["AttentionSlot", "attention_slots", "param_names", "pool", "np_pool", "np_scores"]


@dataclass(frozen=True)
class AttentionSlot:
    """One attention-pooled history: its slot, its query's slot and the activation unit's widths."""

    slot: int
    query_slot: int
    units: Tuple[int, ...]

    @property
    def name(self) -> str:
        return f"att{self.slot}"

    def names(self) -> List[str]:
        """Its parameters' names, in forward order."""
        out: List[str] = []
        for k in range(len(self.units)):
            out += [f"{self.name}.fc{k}.w", f"{self.name}.fc{k}.b"]
        return out + [f"{self.name}.out.w", f"{self.name}.out.b"]


def attention_slots(features: Optional["FeatureSpec"]) -> List[AttentionSlot]:
    """The spec's attention-pooled histories, in slot order (none for Criteo)."""
    if features is None or features.is_criteo:
        return []
    index = {c.name: i for i, c in enumerate(features.categorical)}
    out = []
    for slot, c in enumerate(features.categorical):
        query = query_of(features, c)
        if query is not None:
            out.append(AttentionSlot(slot, index[query.name], tuple(int(u) for u in c.attention_units)))
    return out


def param_names(features: Optional["FeatureSpec"]) -> List[str]:
    """Every attention parameter's name (what the export adds to the family's)."""
    return [n for a in attention_slots(features) for n in a.names()]


def pool(items, query, att: AttentionSlot):
    """Paddle: the ``[-1, width]`` pooled rows of ``items`` (the history's looked-up rows, a LoD
    tensor ``[total items, width]``) against ``query`` (``[-1, width]``, one row per example)."""
    import paddle

    width = int(items.shape[1])
    q = paddle.static.nn.sequence_expand(query, items)      # row i repeated for each of its items
    x = paddle.concat([items, q, items - q, items * q], axis=1)
    fan = 4 * width
    for k, size in enumerate(att.units):
        x = fc(x, size, f"{att.name}.fc{k}", fan, activation="sigmoid")
        fan = size
    score = fc(x, 1, f"{att.name}.out", fan)
    return paddle.static.nn.sequence_pool(input=items * score, pool_type="sum")


def np_scores(params: Dict[str, Any], items, query, att: AttentionSlot):
    """numpy: each item's score ``[total, 1]`` (``query`` already one row per item)."""
    import numpy as np

    x = np.concatenate([items, query, items - query, items * query], axis=1)
    for k in range(len(att.units)):
        x = x @ params[f"{att.name}.fc{k}.w"] + params[f"{att.name}.fc{k}.b"]
        x = (1.0 / (1.0 + np.exp(-x))).astype(np.float32)
    return x @ params[f"{att.name}.out.w"] + params[f"{att.name}.out.b"]


def np_pool(params: Dict[str, Any], items, offsets, query, att: AttentionSlot):
    """numpy :func:`pool`: ``items`` ``[total, width]`` rows, row ``i``'s at
    ``offsets[i]:offsets[i+1]`` (relative to ``offsets[0]``), ``query`` ``[n, width]``."""
    import numpy as np

    lengths = np.diff(offsets)
    q = np.repeat(query, lengths, axis=0)
    weighted = (items * np_scores(params, items, q, att)).astype(np.float32)
    if not len(lengths):
        return weighted[:0]
    return np.add.reduceat(weighted, offsets[:-1] - offsets[0], axis=0).astype(np.float32)
