"""The features a model was trained on, for ``metrics.json`` and the report: one row per feature,
named as the feature spec names it (Criteo's ``I1..I13``, ``C1..C26`` for the preset).

Why in the evaluation: a report that says AUC 0.80 says nothing a reader can check unless it says
on what; a team comparing two runs on its own logs needs to see which columns went in, how each was
transformed, and how often each was empty in the prepped data (prep's ``stats.json``, when it sits
beside the split). Pure: the caller reads the files.
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional

from ctr_model.feature_spec import FeatureSpec, criteo_spec, spec_from_dict

__all__ = ["feature_rows", "model_spec"]


def model_spec(meta: Mapping[str, Any]) -> FeatureSpec:
    """The spec in ``model_meta.json``; a model exported without one is the Criteo preset."""
    if meta.get("feature_spec"):
        return spec_from_dict(meta["feature_spec"])
    return criteo_spec(int(meta.get("hash_buckets") or 1_000_001))


def feature_rows(spec: FeatureSpec, missing_rate: Optional[Mapping[str, float]] = None,
                 criteo_dim: Optional[int] = None) -> List[Dict[str, Any]]:
    """``[{name, kind, transform, ids, embedding_dim, missing_rate}]`` in the spec's order.

    ``criteo_dim`` is the model's embedding width for the Criteo preset, whose spec carries none
    (the model's config does).

    ``transform`` says what the model saw: the dense transform (with prep's mean/std for
    ``standardize``), or for a categorical feature whether it is multi-valued and how it is pooled.
    ``missing_rate`` is ``None`` where prep's statistics are not known.
    """
    missing = dict(missing_rate or {})
    rows: List[Dict[str, Any]] = []
    for d in spec.dense:
        how = d.transform
        if d.transform == "standardize" and d.mean is not None and d.std is not None:
            how = f"standardize (mean {d.mean:.4g}, std {d.std:.4g})"
        if d.transform != "criteo" and d.fill:
            how += f", empty -> {d.fill:g}"
        rows.append({"name": d.name, "kind": "dense", "transform": how, "ids": None,
                     "embedding_dim": None, "missing_rate": missing.get(d.name)})
    for c in spec.categorical:
        how = (f"multi-valued, {c.pooling} of up to {c.max_length}" if c.multivalued else "single id")
        rows.append({"name": c.name, "kind": "categorical", "transform": how, "ids": int(c.hash_buckets),
                     "embedding_dim": int(criteo_dim if spec.is_criteo and criteo_dim else c.embedding_dim),
                     "missing_rate": missing.get(c.name)})
    return rows
