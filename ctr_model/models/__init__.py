"""Model families behind one small interface, chosen by ``TrainConfig.model``.

Why an interface and not one network with switches: a CTR team compares families (the DNN,
Wide&Deep, DeepFM, DCN-v2) on its own data, and each family touches the same four places -- the
program the gang trains, the names of the dense parameters trainer 0 exports, the numpy forward pass
that scores the export (:mod:`ctr_model.infer`, calibration, evaluation) and the hyper-parameters in
``model_config``. :mod:`ctr_model.net` creates the feeds and the sparse lookups (so how slots are
made stays in one place) and hands every family the same inputs: one ``[-1, width]`` embedding per
slot (as wide as its feature's ``embedding_dim`` asks) and the dense input. Every family ends in the
same 2-way output layer ``out.w``/``out.b``, so the softmax, the loss, the AUC and the export's bias calibration are shared.

Families whose wide part or first-order term needs a 1-wide sparse weight per id (``wide_deep``,
``deepfm``) get it as column 0 of the pservers' sparse table (``table_width`` = ``embedding_dim + 1``;
it is also the accessor's own 1-wide ``embed_w`` column): one table keeps checkpoints, export, warm
start and the pservers' table configuration what they are for the DNN.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping

__all__ = ["FAMILIES", "MULTI_TASK", "Family", "family", "validate_model_config"]

#: The families, the default first.
FAMILIES = ("dnn", "wide_deep", "deepfm", "dcn_v2", "esmm", "mmoe")
#: The families that train several labels at once (a spec's ``labels``), :mod:`.multitask`.
MULTI_TASK = ("esmm", "mmoe")


@dataclass(frozen=True)
class Family:
    """What a model family provides.

    Attributes:
        name: the ``model`` value.
        defaults: its ``model_config`` keys with their defaults (no other key is accepted).
        check: ``check(key, value) -> error fix or None`` for one ``model_config`` value.
        table_width: ``table_width(embedding_dim)``: the sparse table's row width.
        build: ``build(embs, dense, config) -> logits [-1, 2]``: adds the family's layers to the
            current Paddle program (``embs``: one ``[-1, table_width(dim)]`` variable per slot, ``dim``
            the slot's feature's ``embedding_dim``).
        dense_names: ``dense_names(config, num_dense, slots)``: dense parameter names, the export's.
        logits: ``logits(params, embs, dense, config) -> float32 [n, 2]``: the same network in numpy
            (``embs``: one ``[n, table_width(dim)]`` array per slot).
        mixes_dims: whether slots of different ``embedding_dim`` can feed it (``deepfm``'s
            second-order term takes inner products of every pair of slots: one width).
        tasks: a multi-task family's :class:`~ctr_model.models.multitask.Tasks` (``build`` then
            returns one probability ``[-1, 1]`` per task and ``logits`` ``[n, tasks]`` probabilities;
            :mod:`ctr_model.models.multitask`); ``None``: one task.
    """

    name: str
    defaults: Mapping[str, Any]
    check: Callable[[str, Any], Any]
    table_width: Callable[[int], int]
    build: Callable[..., Any]
    dense_names: Callable[..., List[str]]
    logits: Callable[..., Any]
    mixes_dims: bool = True
    tasks: Any = None


def family(name: str) -> Family:
    """The family named ``name`` (one of :data:`FAMILIES`); imports only its module."""
    import importlib

    if name not in FAMILIES:
        raise ValueError(f"model {name!r} is not one of {', '.join(FAMILIES)}")
    module = importlib.import_module(f"ctr_model.models.{name}")
    fam: Family = module.FAMILY
    return fam


def validate_model_config(name: str, data: Any) -> Dict[str, Any]:
    """``model_config`` for family ``name`` with its defaults filled in.

    Returns:
        the complete config, or raises ``ValueError(key, value, fix)`` args for the caller to word.
    """
    fam = family(name)
    if not isinstance(data, Mapping):
        raise ValueError("model_config", data, f"pass a JSON object of {name}'s keys "
                                               f"({_known(fam)})")
    unknown = sorted(set(data) - set(fam.defaults))
    if unknown:
        raise ValueError(f"model_config.{unknown[0]}", data[unknown[0]],
                         f"not a key of model {name!r}; its keys are: {_known(fam)}")
    full = {**fam.defaults, **data}
    for key in sorted(full):
        fix = fam.check(key, full[key])
        if fix:
            raise ValueError(f"model_config.{key}", full[key], fix)
    return full


def _known(fam: Family) -> str:
    return ", ".join(f"{k} (default {v!r})" for k, v in sorted(fam.defaults.items())) or "none"
