"""Warm start: continue training from an exported model through Paddle's own PS load path.

Why a checkpoint inside the export: the exported ``model/`` holds what serving needs (the sparse table
without optimizer state, dense parameters as ``dnn_plugin/`` files), not what the pservers load. So at
export trainer 0 also copies the run's last complete checkpoint (``fleet.save_persistables``: sparse
table *with* its Adam state, dense table with its moments) to ``model/warm_start/``. A later run given
that model as ``init_model`` has its pservers load it with ``fleet.load_model(path, mode=0)`` -- the
same call a restarted gang uses to resume -- before the first epoch. Ids never seen before are
created fresh by the pservers on first pull, as in any run; the stable hash keeps known ids identical
across days.

What must match, checked before the gang starts and again in every trainer (the refusal names both
values): the feature schema version, ``hash_buckets``, the model family and its shape (``model``,
``model_config``, ``embedding_dim``, ``fc_sizes``; a config without ``model``, as one exported before
families existed, is a ``dnn``), the feature spec feature by feature (each feature's ``embedding_dim``,
which decides the sparse tables it is grouped into) and the number of pservers (each pserver loads
its own shard files of every table).
"""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional

from ctr_model.errors import BadInput

__all__ = ["WARM_START_DIR", "WarmStartError", "WarmStart", "read_init_model", "check_compatible",
           "export_checkpoint"]

#: Sub-directory of an exported model holding the loadable checkpoint.
WARM_START_DIR = "warm_start"
_MODEL_META = "model_meta.json"
_CKPT_META = "meta.json"


class WarmStartError(BadInput):
    """The init model cannot be continued by this run: bad input naming the field ``init_model``, the
    model directory, and (in the fix) what differs, both values and the way out."""

    def __init__(self, model_dir: str, fix: str):
        super().__init__("init_model", model_dir, fix)


@dataclass(frozen=True)
class WarmStart:
    """A model a run can warm-start from.

    Attributes:
        model_dir: the exported model directory.
        checkpoint: its ``warm_start/`` checkpoint (what the pservers load).
        meta: the model's ``model_meta.json``.
        pservers: pservers that wrote the checkpoint (the new gang must have as many).
    """

    model_dir: str
    checkpoint: str
    meta: Mapping[str, Any]
    pservers: int


def read_init_model(model_dir: str) -> WarmStart:
    """Read an exported model's metadata and locate its checkpoint.

    Raises:
        WarmStartError: not an exported model, or exported before warm start existed.
    """
    meta_path = os.path.join(model_dir, _MODEL_META)
    try:
        with open(meta_path, encoding="utf-8") as fh:
            meta = json.load(fh)
    except (OSError, ValueError):
        raise WarmStartError(model_dir, f"no readable {_MODEL_META}; pass the model/ directory written by "
                                        f"ctr-volcano train (or a registry version)") from None
    checkpoint = os.path.join(model_dir, WARM_START_DIR)
    try:
        with open(os.path.join(checkpoint, _CKPT_META), encoding="utf-8") as fh:
            ckpt_meta = json.load(fh)
    except (OSError, ValueError):
        raise WarmStartError(model_dir, f"no {WARM_START_DIR}/{_CKPT_META}: it was exported without a "
                                        f"loadable checkpoint; retrain it from scratch once with this "
                                        f"version and warm-start from that") from None
    return WarmStart(model_dir=model_dir, checkpoint=checkpoint, meta=meta,
                     pservers=int(ckpt_meta.get("pservers", meta.get("pservers", 0))))


def check_compatible(init: WarmStart, config: Mapping[str, Any], pservers: int,
                     schema_version: int, feature_spec: Optional[Mapping[str, Any]] = None) -> None:
    """Refuse an init model this run cannot continue.

    Args:
        init: from :func:`read_init_model`.
        config: the new run's training config (``TrainConfig.to_dict()``).
        pservers: the new gang's pservers.
        schema_version: the feature schema version of the new run's data.
        feature_spec: the new data's feature spec (``to_dict()``; ``None``: Criteo); the init
            model's must be the same, feature by feature.

    Raises:
        WarmStartError: naming the field, the init model's value, this run's value and the fix.
    """
    old_cfg = dict(init.meta.get("config") or {})
    checks = [("schema_version", init.meta.get("schema_version"), schema_version,
               "re-prep the data with the init model's schema or train from scratch"),
              ("hash_buckets", init.meta.get("hash_buckets", old_cfg.get("hash_buckets")),
               config.get("hash_buckets"), "prep the new data with the init model's hash_buckets"),
              ("model", old_cfg.get("model", "dnn"), config.get("model", "dnn"),
               "warm-start from a model of the same family or train from scratch"),
              ("model_config", _full_model_config(old_cfg), _full_model_config(config),
               "use the init model's model_config or train from scratch"),
              ("embedding_dim", old_cfg.get("embedding_dim"), config.get("embedding_dim"),
               "use the init model's network shape or train from scratch"),
              ("fc_sizes", list(old_cfg.get("fc_sizes") or []), list(config.get("fc_sizes") or []),
               "use the init model's network shape or train from scratch"),
              ("pservers", init.pservers, pservers,
               "run as many pservers as the init model had (each loads its own table shards)")]
    _check_same_features(init, init.meta.get("feature_spec"), feature_spec)
    for name, old, new, fix in checks:
        if old != new:
            raise WarmStartError(init.model_dir, f"cannot warm-start from it: its {name} is {old!r} but "
                                                 f"this run's is {new!r}; {fix}")


def _check_same_features(init: WarmStart, old: Optional[Mapping[str, Any]],
                         new: Optional[Mapping[str, Any]]) -> None:
    """Refuse an init model trained on other features, naming the first feature that differs.
    ``standardize`` statistics may differ (each prep computes its own from its data)."""
    old, new = _without_stats(old), _without_stats(new)
    if old == new:
        return
    if old is None or new is None:
        raise WarmStartError(init.model_dir, f"cannot warm-start from it: it was trained on "
                                             f"{'the Criteo layout' if old is None else 'a feature spec'} "
                                             f"but this run's data has "
                                             f"{'the Criteo layout' if new is None else 'a feature spec'}; "
                                             f"prep the data like the init model's or train from scratch")
    _check_same_dims(init, old, new)
    for kind, what in (("dense", "dense feature"), ("categorical", "categorical feature"), ("crosses", "cross")):
        before = {f["name"]: f for f in old.get(kind) or []}
        after = {f["name"]: f for f in new.get(kind) or []}
        for name in list(before) + [n for n in after if n not in before]:
            if before.get(name) != after.get(name):
                raise WarmStartError(init.model_dir, f"cannot warm-start from it: {what} {name!r} is "
                                                     f"{before.get(name)!r} there but {after.get(name)!r} in "
                                                     f"this run's data; prep with the init model's feature "
                                                     f"spec or train from scratch")
    raise WarmStartError(init.model_dir, "cannot warm-start from it: its feature spec differs from this run's "
                                         "data (label, order or layout); prep with the init model's spec")


def _check_same_dims(init: WarmStart, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
    """Refuse a categorical feature whose ``embedding_dim`` differs (its rows, and the tables the
    features are grouped into, would not fit), naming the feature and both dims."""
    before = {f["name"]: f.get("embedding_dim") for f in old.get("categorical") or []}
    for f in new.get("categorical") or []:
        if f["name"] in before and before[f["name"]] != f.get("embedding_dim"):
            raise WarmStartError(init.model_dir, f"cannot warm-start from it: categorical feature {f['name']!r} "
                                                 f"has embedding_dim {before[f['name']]} there but "
                                                 f"{f.get('embedding_dim')} in this run's data; prep with "
                                                 f"embedding_dim {before[f['name']]} for it (the init model's "
                                                 f"feature spec) or train from scratch")


def _full_model_config(cfg: Mapping[str, Any]) -> Dict[str, Any]:
    """A config's ``model_config`` with its family's defaults filled in: a key a family gained later
    (``wide_deep``'s ``crosses``) is its default in a model exported before it."""
    from ctr_model.models import FAMILIES, family

    model = cfg.get("model", "dnn")
    defaults = family(model).defaults if model in FAMILIES else {}
    return {**defaults, **dict(cfg.get("model_config") or {})}


def _without_stats(spec: Optional[Mapping[str, Any]]) -> Optional[Dict[str, Any]]:
    if spec is None:
        return None
    doc = {k: v for k, v in spec.items() if k != "validation"}    # thresholds do not shape the model
    doc["dense"] = [{k: v for k, v in d.items() if k not in ("mean", "std")} for d in spec.get("dense") or []]
    return doc


def export_checkpoint(checkpoint_path: str, model_dir: str) -> str:
    """Copy a complete checkpoint into ``model_dir/warm_start`` (replacing one); returns the path."""
    dst = os.path.join(model_dir, WARM_START_DIR)
    tmp = dst + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(checkpoint_path, tmp)
    shutil.rmtree(dst, ignore_errors=True)
    os.replace(tmp, dst)
    return dst
