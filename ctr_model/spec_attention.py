"""A feature spec's attention pooling (DIN's target attention): a multi-valued feature, a behaviour
history, pooled by weights that depend on the row's candidate, a named single-valued ``query``
feature. Checked here, each problem as ``(field, value, fix)``.

Why the query shares the history's id space: attention compares each history item with the
candidate, so ``item_7`` in the history and ``item_7`` as the candidate must be one id and one
embedding row. A history declared with ``query: item`` is hashed as the query's values are (its
salt, its ``hash_buckets``; :mod:`ctr_model.transforms`), so both sit in one table of one
``embedding_dim``; an empty history keeps the history's own empty id. ``attention_units`` are the
hidden layers (sigmoid) of the activation unit that scores each item (:mod:`ctr_model.models.attention`).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

__all__ = ["ATTENTION", "DEFAULT_UNITS", "attention_doc", "check_attention", "query_of", "read_attention"]

#: The ``pooling`` value of target attention.
ATTENTION = "attention"
#: The activation unit's hidden layers when the feature names none: the DIN authors' code's (and
#: DeepCTR's) 80 and 40. On the planted history log one layer of 32 left attention no better than
#: ``sum`` pooling; 80, 40 and wider did better (docs/training.md).
DEFAULT_UNITS = (80, 40)


def query_of(spec: Any, feature: Any) -> Optional[Any]:
    """The :class:`~ctr_model.feature_spec.CategoricalFeature` an attention-pooled ``feature`` is
    queried by (``None`` for any other feature)."""
    if getattr(feature, "pooling", None) != ATTENTION or not feature.query:
        return None
    return next((c for c in spec.categorical if c.name == feature.query), None)


def read_attention(entries: List[Dict[str, Any]]) -> None:
    """The ``categorical`` entries of a parsed document, their ``attention_units`` lists as tuples."""
    for c in entries:
        if isinstance(c.get("attention_units"), list):
            c["attention_units"] = tuple(c["attention_units"])


def attention_doc(doc: Dict[str, Any]) -> Dict[str, Any]:
    """A categorical feature's document: the attention keys only where it is attention-pooled (the
    documents written before attention existed stay the same)."""
    if doc.get("pooling") == ATTENTION:
        return {**doc, "attention_units": list(doc["attention_units"])}
    return {k: v for k, v in doc.items() if k not in ("query", "attention_units")}


def check_attention(spec: Any, problems: List[Tuple[str, Any, str]]) -> None:
    """Every categorical feature's ``pooling: attention``, ``query`` and ``attention_units``."""
    cats: Dict[str, Any] = {c.name: c for c in spec.categorical}
    for i, c in enumerate(spec.categorical):
        where = f"categorical[{i}]"
        if c.pooling != ATTENTION:
            if c.query:
                problems.append((f"{where}.query", c.query, "query belongs to pooling attention: set "
                                 "pooling: attention, or remove query"))
            if tuple(c.attention_units) != DEFAULT_UNITS:
                problems.append((f"{where}.attention_units", list(c.attention_units), "attention_units "
                                 "belong to pooling attention: set pooling: attention, or remove them"))
            continue
        _check_units(c.attention_units, where, problems)
        if c.multivalued is not True:
            problems.append((f"{where}.pooling", c.pooling, "attention pools a behaviour history: set "
                             "multivalued: true, or use pooling sum"))
        _check_query(c, cats, where, problems)


def _check_units(units: Any, where: str, problems: List[Tuple[str, Any, str]]) -> None:
    from ctr_model.checks import is_int

    if not isinstance(units, tuple) or not units or not all(is_int(u, 1, 4096) for u in units):
        problems.append((f"{where}.attention_units", list(units) if isinstance(units, tuple) else units,
                         "write a non-empty list of layer widths in [1, 4096], e.g. [32]"))


def _check_query(c: Any, cats: Dict[str, Any], where: str, problems: List[Tuple[str, Any, str]]) -> None:
    import difflib

    singles = [n for n, f in cats.items() if f.multivalued is not True]
    if not isinstance(c.query, str) or not c.query:
        problems.append((f"{where}.query", c.query, "name the candidate: the single-valued categorical "
                         f"feature whose ids this history holds (one of {', '.join(singles) or 'none'})"))
        return
    q = cats.get(c.query)
    if q is None:
        close = difflib.get_close_matches(c.query, singles, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"use one of {', '.join(singles) or 'none'}"
        problems.append((f"{where}.query", c.query, f"not a categorical feature; {hint}"))
    elif q is c or q.multivalued is True:
        problems.append((f"{where}.query", c.query, "the query is the candidate: a single-valued "
                         f"categorical feature other than the history (one of {', '.join(singles) or 'none'})"))
    else:
        for key in ("hash_buckets", "embedding_dim"):
            if getattr(q, key) != getattr(c, key):
                problems.append((f"{where}.{key}", getattr(c, key), f"the history and its query {q.name!r} "
                                 f"share one id space and one embedding: give both {key} {getattr(q, key)}"))
