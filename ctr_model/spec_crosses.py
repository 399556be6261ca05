"""A feature spec's ``crosses``: hashed cross-product columns of named categorical features, the wide
part of Wide&Deep (Cheng et al. 2016), read from the document and checked, each problem as
``(field, value, fix)``.

Why materialised by prep: a cross is one more single-valued id per row (its id computed from its
features' ids by :func:`ctr_model.transforms.cross_column`), so prep writes it as a column after the
categorical features and the trainer, the numpy scorer, the ONNX graph's ``ids`` input, batch scoring
and the server take it as any single-valued slot; only Wide&Deep reads it, in its wide part alone
(``model_config.crosses``, set from the spec). The raw input has no such column: prep, scoring and the
server compute it from the features' ids, in that one function.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

__all__ = ["Cross", "CROSS_KEYS", "CROSS_EMBEDDING_DIM", "read_crosses", "check_crosses", "cross_name",
           "CROSS_FAMILIES", "crosses_refusal"]

CROSS_KEYS = ("features", "hash_buckets", "name")
#: The ``embedding_dim`` of a cross's slot: its row is the wide weight and one unused column (a
#: pserver table's row has an ``embed_w`` and at least one ``embedx`` column).
CROSS_EMBEDDING_DIM = 1
#: The graph's fixed input and output names (:mod:`ctr_model.onnx_inputs`), which no cross may take.
_RESERVED = ("dense", "ids", "probability")


@dataclass(frozen=True)
class Cross:
    """A cross-product column of two or more single-valued categorical features.

    Attributes:
        features: the crossed features' names, in the spec's ``categorical``.
        hash_buckets: ids of the cross (the product of the features' values hashed into
            ``[0, hash_buckets)``); the spec's ``hash_buckets`` by default.
        name: the cross's column in prep's output (default: the features joined by ``_x_``).
    """

    features: Tuple[str, ...]
    hash_buckets: int
    name: str


def cross_name(features: Sequence[Any]) -> str:
    """The default name of a cross of ``features`` (``a_x_b``)."""
    return "_x_".join(str(f) for f in features)


def read_crosses(items: Any, hash_buckets: Any, problems: List[Tuple[str, Any, str]]) -> Tuple[Cross, ...]:
    """The ``crosses`` list of a document: each entry a mapping ``{features: [a, b], hash_buckets,
    name}`` (or just the list of features); bad entries reported and left out."""
    import difflib

    if not isinstance(items, list):
        problems.append(("crosses", items, "write a list of crosses, each {features: [a, b]}"))
        return ()
    out = []
    for i, item in enumerate(items):
        if isinstance(item, list):
            item = {"features": item}
        if not isinstance(item, Mapping) or "features" not in item:
            problems.append((f"crosses[{i}]", item, "write a mapping with features: [a, b] (two or more "
                             "categorical features)"))
            continue
        for key in (k for k in item if k not in CROSS_KEYS):
            close = difflib.get_close_matches(str(key), list(CROSS_KEYS), n=1)
            fix = f"did you mean {close[0]!r}?" if close else f"use one of {', '.join(CROSS_KEYS)}"
            problems.append((f"crosses[{i}].{key}", item[key], f"unknown key; {fix}"))
        features = item["features"]
        features = tuple(features) if isinstance(features, (list, tuple)) else features
        out.append(Cross(features, item.get("hash_buckets", hash_buckets),
                         item.get("name", cross_name(features) if isinstance(features, tuple) else "")))
    return tuple(out)


def check_crosses(spec: Any, problems: List[Tuple[str, Any, str]]) -> None:
    """A :class:`~ctr_model.feature_spec.FeatureSpec`'s ``crosses``: each of two or more distinct
    single-valued categorical features, ``hash_buckets`` >= 2, a name no column or other cross has."""
    from ctr_model.checks import is_int

    if spec.crosses and spec.format == "criteo":
        problems.append(("crosses", [list(x.features) for x in spec.crosses], "the criteo format is the "
                         "fixed layout; use format tsv with columns to declare crosses"))
        return
    cats = {c.name: c for c in spec.categorical}
    taken = set(spec.columns) | set(spec.task_labels) | {d.name for d in spec.dense} | set(cats) | set(spec.ignore)
    for i, x in enumerate(spec.crosses):
        where = f"crosses[{i}]"
        _check_features(x, where, cats, {d.name for d in spec.dense}, problems)
        if not is_int(x.hash_buckets, 2, 2 ** 62):
            problems.append((f"{where}.hash_buckets", x.hash_buckets, "use an integer >= 2"))
        if not isinstance(x.name, str) or not x.name:
            problems.append((f"{where}.name", x.name, "use a non-empty name"))
        elif x.name in taken or x.name in _RESERVED or x.name.startswith("ctr/"):
            problems.append((f"{where}.name", x.name, "already a column's or another cross's name (or "
                             "one of the model's inputs): give the cross another name"))
        taken.add(x.name)


def _check_features(x: Cross, where: str, cats: Dict[str, Any], dense: Any,
                    problems: List[Tuple[str, Any, str]]) -> None:
    import difflib

    names = x.features
    if not isinstance(names, tuple) or not all(isinstance(n, str) and n for n in names):
        problems.append((f"{where}.features", names, "write a list of categorical feature names, e.g. "
                         "[user_id, ad_id]"))
        return
    if len(names) < 2 or len(set(names)) != len(names):
        problems.append((f"{where}.features", list(names), "name two or more distinct categorical "
                         "features (a cross of one feature is that feature)"))
    for name in names:
        if name in dense:
            problems.append((f"{where}.features", name, "a dense feature: crosses take categorical "
                             "features; bucket it into a categorical column first"))
        elif name not in cats:
            close = difflib.get_close_matches(name, list(cats), n=1)
            fix = f"did you mean {close[0]!r}?" if close else f"use one of {', '.join(list(cats)[:10])}"
            problems.append((f"{where}.features", name, f"not a categorical feature of the spec; {fix}"))
        elif cats[name].multivalued is True:
            problems.append((f"{where}.features", name, "multi-valued: a cross takes single-valued "
                             "features (one id per row); remove it from the cross"))


#: The model families that read crosses (in their wide part).
CROSS_FAMILIES = ("wide_deep",)


def crosses_refusal(model: str, crosses: Sequence[Cross]) -> Optional[str]:
    """``None``, or why model family ``model`` cannot train a spec with ``crosses`` (one line naming
    the model, a cross and the fix)."""
    if not crosses or model in CROSS_FAMILIES:
        return None
    return (f"the feature spec's crosses (e.g. {crosses[0].name!r}) feed Wide&Deep's wide part, which "
            f"model {model!r} has not: train --model {CROSS_FAMILIES[0]}, or remove crosses from the "
            f"feature spec and prep again")
