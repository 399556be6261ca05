"""Which sparse table on the pservers holds which categorical feature: one table per distinct
``embedding_dim``.

Why group by width: a pserver table has one row width, so features of different ``embedding_dim``
cannot share one, but features of the same width can, as Criteo's 26 columns do (their ids are salted
per feature). The first width (in the spec's order) keeps the historical table name, so a spec with
one width and the Criteo layout build exactly the program, checkpoints and exports they always did;
the others are named ``<name>_<k>``. The grouping is pure (no Paddle) so the trainer, the numpy scorer,
the ONNX export and warm start all derive the same tables from the same spec.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ctr_model.feature_spec import FeatureSpec
from ctr_model.features import SPARSE_COLUMNS

__all__ = ["EMBEDDING_NAME", "SparseTable", "table_name", "sparse_tables", "tables_from_meta", "slot_widths",
           "mixed_dims_refusal"]

#: Name of the first (for Criteo and one-width specs: the only) sparse table.
EMBEDDING_NAME = "SparseFeatFactors"


@dataclass(frozen=True)
class SparseTable:
    """One sparse table of the pservers.

    Attributes:
        name: the Paddle parameter's name (``SparseFeatFactors``, ``SparseFeatFactors_1``, ..).
        dim: the ``embedding_dim`` of every feature in it (the row is the family's
            ``table_width(dim)`` wide).
        slots: the network's input slots (indices in the spec's categorical order) it serves.
        features: those slots' feature names.
    """

    name: str
    dim: int
    slots: Tuple[int, ...]
    features: Tuple[str, ...]

    def to_dict(self) -> Dict[str, Any]:
        """What ``model_meta.json`` records under ``sparse_tables``."""
        return {"name": self.name, "dim": self.dim, "features": list(self.features)}


def table_name(k: int) -> str:
    """The name of the ``k``-th table (0-based, in order of first appearance of its width)."""
    return EMBEDDING_NAME if k == 0 else f"{EMBEDDING_NAME}_{k}"


def sparse_tables(features: Optional[FeatureSpec], embedding_dim: int) -> List[SparseTable]:
    """The tables of a feature spec, one per distinct ``embedding_dim`` in order of first appearance.

    Args:
        features: the data's spec (``None`` or the Criteo preset: the 26 Criteo columns).
        embedding_dim: the width of Criteo's one table (``TrainConfig.embedding_dim``); a spec's
            features carry their own.
    """
    if features is None or features.is_criteo:
        return [SparseTable(EMBEDDING_NAME, embedding_dim, tuple(range(len(SPARSE_COLUMNS))), SPARSE_COLUMNS)]
    cats = features.slot_features      # a cross is a slot too (its own width: its own table)
    dims = list(dict.fromkeys(c.embedding_dim for c in cats))
    return [SparseTable(table_name(k), dim,
                        tuple(i for i, c in enumerate(cats) if c.embedding_dim == dim),
                        tuple(c.name for c in cats if c.embedding_dim == dim))
            for k, dim in enumerate(dims)]


def tables_from_meta(meta: Mapping[str, Any], names: Sequence[str], embedding_dim: int) -> List[SparseTable]:
    """The tables an exported model's ``model_meta.json`` records (``sparse_tables``); a model exported
    before it did has one table of every slot.

    Args:
        meta: the model's meta.
        names: the model's categorical feature names in slot order.
        embedding_dim: the config's width (that one table's).
    """
    recorded = meta.get("sparse_tables")
    if not recorded:
        return [SparseTable(EMBEDDING_NAME, embedding_dim, tuple(range(len(names))), tuple(names))]
    index = {name: i for i, name in enumerate(names)}
    return [SparseTable(t["name"], int(t["dim"]), tuple(index[f] for f in t["features"]), tuple(t["features"]))
            for t in recorded]


def slot_widths(tables: Sequence[SparseTable]) -> List[int]:
    """The ``embedding_dim`` of every slot, in slot order."""
    widths: Dict[int, int] = {}
    for t in tables:
        widths.update((s, t.dim) for s in t.slots)
    return [widths[s] for s in sorted(widths)]


def mixed_dims_refusal(model: str, tables: Sequence[SparseTable]) -> Optional[str]:
    """``None``, or why model family ``model`` cannot train ``tables`` (one line naming a feature,
    its ``embedding_dim`` and the fix): a family whose slots must share one width, on several."""
    from ctr_model.models import FAMILIES, family

    if len(tables) < 2 or family(model).mixes_dims:
        return None
    first, odd = tables[0], tables[1]
    others = ", ".join(f for f in FAMILIES if family(f).mixes_dims and family(f).tasks is None)
    return (f"model {model!r} needs one embedding_dim for every categorical feature, but feature "
            f"{odd.features[0]!r} has embedding_dim {odd.dim} and {first.features[0]!r} has {first.dim}: "
            f"give every categorical feature embedding_dim {first.dim}, or train model {others}")
