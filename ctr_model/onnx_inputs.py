"""The exported ONNX graph's inputs, and prepped columns turned into them.

One layout per feature spec, derived, never stored apart from it: ``dense`` float32
``[N, dense features]`` (the prep transform of each, in the spec's order; absent when the spec has
none), ``ids`` int64 ``[N, single-valued categorical features]`` (prep's hashed ids, in the spec's
order, then each cross's ids, :func:`ctr_model.transforms.cross_column`; absent when none), and for each multi-valued feature an int64 ``[N, max_length]`` input named
as the feature: its row's ids (prep's, at most ``max_length``) left-aligned, the rest
:data:`PAD_ID`. The Criteo layout is ``dense [N, 13]`` (``I1..I13``) and ``ids [N, 26]``
(``C1..C26``). The model server, the tests and a batch scorer all build their feeds here, so the
padding convention exists once.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from ctr_model.errors import BadInput
from ctr_model.features import DENSE_COLUMNS, SPARSE_COLUMNS

if TYPE_CHECKING:
    import numpy as np

    from ctr_model.feature_spec import FeatureSpec

__all__ = ["PAD_ID", "DENSE_INPUT", "IDS_INPUT", "OUTPUT", "GraphLayout", "layout_of", "padded", "feeds"]

#: The id that fills a multi-valued feature's row past its last id. Prep's ids are in
#: ``[0, hash_buckets)``, so -1 is never one; it looks up the zero row and is not counted by ``mean``.
PAD_ID = -1
DENSE_INPUT = "dense"
IDS_INPUT = "ids"
OUTPUT = "probability"


@dataclass(frozen=True)
class GraphLayout:
    """The graph's inputs for one feature spec.

    Attributes:
        dense: the dense features (columns of ``dense``), in the spec's order.
        ids: the single-valued categorical features (columns of ``ids``), in the spec's order.
        single_slots: their slots (indices in the spec's categorical order).
        padded: ``(feature, max_length)`` of each multi-valued feature, in the spec's order.
        multi_slots: their slots.
    """

    dense: Tuple[str, ...]
    ids: Tuple[str, ...]
    single_slots: Tuple[int, ...]
    padded: Tuple[Tuple[str, int], ...]
    multi_slots: Tuple[int, ...]

    def inputs(self) -> List[Tuple[str, str, int]]:
        """``(name, V2 datatype, width)`` of every input, in the graph's order."""
        out = [(DENSE_INPUT, "FP32", len(self.dense))] if self.dense else []
        out += [(IDS_INPUT, "INT64", len(self.ids))] if self.ids else []
        return out + [(name, "INT64", length) for name, length in self.padded]

    def manifest(self) -> Dict[str, Any]:
        """``serving.json``'s ``inputs``: each input's datatype and what fills it."""
        doc: Dict[str, Any] = {}
        if self.dense:
            doc[DENSE_INPUT] = {"dtype": "FP32", "columns": list(self.dense)}
        if self.ids:
            doc[IDS_INPUT] = {"dtype": "INT64", "columns": list(self.ids)}
        for name, length in self.padded:
            doc[name] = {"dtype": "INT64", "feature": name, "max_length": length, "pad_id": PAD_ID}
        return doc


def layout_of(spec: Optional["FeatureSpec"]) -> GraphLayout:
    """The layout of a model trained on ``spec`` (``None`` or the preset: Criteo's).

    Raises:
        ValueError: a multi-valued feature named as one of the graph's fixed inputs or output.
    """
    if spec is None or spec.is_criteo:
        return GraphLayout(DENSE_COLUMNS, SPARSE_COLUMNS, tuple(range(len(SPARSE_COLUMNS))), (), ())
    cats = list(enumerate(spec.slot_features))     # a cross is a single-valued slot, its ids prep's
    single = [(i, c.name) for i, c in cats if not c.multivalued]
    multi = [(i, c) for i, c in cats if c.multivalued]
    for _, c in multi:
        if c.name in (DENSE_INPUT, IDS_INPUT, OUTPUT) or c.name.startswith("ctr/"):
            raise BadInput("categorical", c.name, f"a multi-valued feature would be the graph's input of "
                                                  f"that name, which {DENSE_INPUT!r}, {IDS_INPUT!r}, "
                                                  f"{OUTPUT!r} and 'ctr/...' are already: rename the "
                                                  f"column in the feature spec")
    return GraphLayout(tuple(d.name for d in spec.dense), tuple(n for _, n in single),
                       tuple(i for i, _ in single), tuple((c.name, int(c.max_length)) for _, c in multi),
                       tuple(i for i, _ in multi))


def padded(offsets: "np.ndarray", values: "np.ndarray", width: int, what: str = "feature") -> "np.ndarray":
    """``[n, width]`` int64: row ``i`` holds ``values[offsets[i]:offsets[i+1]]``, then :data:`PAD_ID`.

    Raises:
        ValueError: a row longer than ``width`` (prep keeps at most ``max_length`` ids).
    """
    import numpy as np

    offsets = np.asarray(offsets, dtype=np.int64)
    lengths = np.diff(offsets)
    n = len(lengths)
    if n and int(lengths.max()) > width:
        row = int(np.argmax(lengths))
        raise ValueError(f"{what}[{row}] has {int(lengths[row])} ids, more than its max_length {width}: "
                         f"feed prep's output (it keeps the first max_length)")
    out = np.full((n, width), PAD_ID, dtype=np.int64)
    rows = np.repeat(np.arange(n), lengths)
    pos = np.arange(len(rows)) - np.repeat(offsets[:-1] - offsets[0], lengths)
    out[rows, pos] = np.asarray(values, dtype=np.int64)[offsets[0]:offsets[-1]]
    return out


def _list_parts(column: Any) -> Tuple["np.ndarray", "np.ndarray"]:
    """``(offsets, values)`` of an arrow list column (a Table's, a RecordBatch's, or an array)."""
    if hasattr(column, "combine_chunks"):
        column = column.combine_chunks()
    return (column.offsets.to_numpy(zero_copy_only=False),
            column.values.to_numpy(zero_copy_only=False))


def feeds(layout: GraphLayout, columns: Any) -> Dict[str, "np.ndarray"]:
    """The graph's feed from prepped columns (a pyarrow Table or RecordBatch, or a mapping of each
    feature to its column: dense float32, single-valued int64 ids, multi-valued an arrow list array
    or ``(offsets, values)``)."""
    import numpy as np

    def col(name: str) -> Any:
        return columns.column(name) if hasattr(columns, "column") else columns[name]

    def flat(name: str) -> Any:
        c = col(name)
        return c.to_numpy(zero_copy_only=False) if hasattr(c, "to_numpy") and hasattr(c, "type") else np.asarray(c)

    out: Dict[str, np.ndarray] = {}
    if layout.dense:
        out[DENSE_INPUT] = np.stack([flat(d).astype(np.float32) for d in layout.dense], axis=1)
    if layout.ids:
        out[IDS_INPUT] = np.stack([flat(c).astype(np.int64) for c in layout.ids], axis=1)
    for name, length in layout.padded:
        c = col(name)
        offsets, values = c if isinstance(c, tuple) else _list_parts(c)
        out[name] = padded(offsets, values, length, name)
    return out
