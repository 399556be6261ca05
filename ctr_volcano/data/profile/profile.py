"""A data profile: what a day of click logs looks like, column by column, in prep's single pass.

Prep builds one :class:`DataProfile` per piece of input, in its lanes (so it is spread over the same
cores as the parsing), merges them per block and the blocks into the run's, and writes
``profile.json`` beside ``stats.json`` and into the train split's directory, which carries it to
training: the exported model keeps the profile of the data it was trained on
(:func:`attach_to_model`). Validation (:mod:`ctr_volcano.validation`) compares two profiles.

What is profiled is what the model is fed: the raw numbers of the dense features (before their
transform: a unit change shows in the values a user knows), the hashed ids of the categorical ones
(ids, not strings: a re-keyed column shows as new ids), and the label, over the rows prep kept (both
splits). The sketches are in :mod:`.sketches`; every part merges exactly except the frequent-id
sample, which merges deterministically in prep's fixed order, so a fanned-out prep writes the
profile a one-process prep writes, byte for byte.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

import numpy as np

from ctr_model.atomic import write_json
from ctr_volcano.data.profile.sketches import (
    BINS_PER_UNIT,
    HISTOGRAM_BINS,
    KMV_K,
    KMV_RATE,
    TOP_KEEP,
    TOP_STRIDE,
    DenseSketch,
    IdSketch,
)
from ctr_volcano.errors import BadInput

__all__ = ["DataProfile", "PROFILE_FILE", "MODEL_PROFILE_FILE", "PROFILE_VERSION", "QUANTILES", "TOP_K",
           "SKETCH_PARAMETERS", "criteo_piece", "spec_piece", "read_profile", "attach_to_model", "profile_path_of"]

#: The profile's file name beside ``stats.json`` and in the train split's directory.
PROFILE_FILE = "profile.json"
#: The copy an exported model keeps of its training data's profile (named in ``model_meta.json``).
MODEL_PROFILE_FILE = "data_profile.json"
PROFILE_VERSION = 1
#: Quantiles reported per dense feature.
QUANTILES = (0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99)
#: Frequent ids reported per categorical feature (and compared by the L-infinity check).
TOP_K = 100
#: The sketches' parameters, written into every profile: two profiles compare only if they agree.
SKETCH_PARAMETERS = {"bins_per_unit": BINS_PER_UNIT, "histogram_bins": HISTOGRAM_BINS, "kmv_k": KMV_K,
                     "kmv_rate": KMV_RATE, "top_stride": TOP_STRIDE, "top_keep": TOP_KEEP}


@dataclass
class DataProfile:
    """Rows, label count and one sketch per feature, in the spec's order."""

    label: str = "label"
    rows: int = 0
    positives: int = 0
    dense: Dict[str, DenseSketch] = field(default_factory=dict)
    categorical: Dict[str, IdSketch] = field(default_factory=dict)

    @property
    def label_rate(self) -> float:
        return self.positives / self.rows if self.rows else 0.0

    def merge(self, other: "DataProfile") -> "DataProfile":
        """Add ``other`` (same features) into this profile; returns it. An empty profile (no
        features yet) takes ``other``'s features."""
        merged = DataProfile.merged([self, other])
        self.label, self.rows, self.positives = merged.label, merged.rows, merged.positives
        self.dense, self.categorical = merged.dense, merged.categorical
        return self

    @classmethod
    def merged(cls, profiles: Sequence["DataProfile"]) -> "DataProfile":
        """The profiles combined, in order; empty ones (no features) are skipped."""
        parts = [p for p in profiles if p.dense or p.categorical]
        if not parts:
            return cls()
        first = parts[0]
        for p in parts[1:]:
            if list(p.dense) != list(first.dense) or list(p.categorical) != list(first.categorical):
                raise ValueError("cannot merge profiles of different features")   # a bug, never bad input
        return cls(label=first.label, rows=sum(p.rows for p in parts), positives=sum(p.positives for p in parts),
                   dense={k: DenseSketch.merged([p.dense[k] for p in parts]) for k in first.dense},
                   categorical={k: IdSketch.merged([p.categorical[k] for p in parts]) for k in first.categorical})

    def __reduce__(self) -> Tuple[Any, Tuple[Any, ...]]:
        """Pickled as three arrays, not ~130 small ones (one per sketch part): a forked prep lane
        sends every piece's profile back, which cost ~0.36 ms a piece pickled and unpickled."""
        return _unpacked, _packed(self)

    def to_state(self) -> Dict[str, Any]:
        """A JSON-ready dict :meth:`from_state` turns back into an equal profile (prep's work files)."""
        return {"label": self.label, "rows": self.rows, "positives": self.positives,
                "dense": {k: s.to_state() for k, s in self.dense.items()},
                "categorical": {k: s.to_state() for k, s in self.categorical.items()}}

    @classmethod
    def from_state(cls, doc: Mapping[str, Any]) -> "DataProfile":
        return cls(label=doc["label"], rows=int(doc["rows"]), positives=int(doc["positives"]),
                   dense={k: DenseSketch.from_state(v) for k, v in doc["dense"].items()},
                   categorical={k: IdSketch.from_state(v) for k, v in doc["categorical"].items()})

    def to_doc(self, spec: Optional[Mapping[str, Any]] = None,
               source: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
        """``profile.json``: the readable figures per feature and, under ``sketch``, the state."""
        return {
            "profile_version": PROFILE_VERSION,
            "rows": self.rows,
            "label": {"name": self.label, "positives": self.positives, "rate": self.label_rate},
            "dense": {k: _dense_doc(s) for k, s in self.dense.items()},
            "categorical": {k: _id_doc(s) for k, s in self.categorical.items()},
            "sketches": dict(SKETCH_PARAMETERS),
            "feature_spec": dict(spec) if spec is not None else None,
            "source": dict(source or {}),
        }

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> "DataProfile":
        """The profile of a ``profile.json`` document (its ``sketch`` parts).

        Raises:
            ValueError: not a profile of this version, or one of other sketch parameters.
        """
        if doc.get("profile_version") != PROFILE_VERSION:
            raise ValueError(f"profile_version {doc.get('profile_version')!r} found, this code reads "
                             f"{PROFILE_VERSION}")
        if doc.get("sketches") != SKETCH_PARAMETERS:
            raise ValueError(f"sketches {doc.get('sketches')!r} found, this code reads {SKETCH_PARAMETERS}")
        return cls(label=doc["label"]["name"], rows=int(doc["rows"]), positives=int(doc["label"]["positives"]),
                   dense={k: DenseSketch.from_state(v["sketch"]) for k, v in doc["dense"].items()},
                   categorical={k: IdSketch.from_state(v["sketch"]) for k, v in doc["categorical"].items()})


#: Each sketch kind's fields by how they are packed: (integers, floats, arrays), in that order.
_LAYOUT: Dict[type, Tuple[Tuple[str, ...], Tuple[str, ...], Tuple[str, ...]]] = {
    DenseSketch: (("rows", "missing"), ("total", "squares", "min", "max"), ("index", "count")),
    IdSketch: (("rows", "missing", "sample_rows"), (), ("kmv_ids", "kmv_counts", "top_ids", "top_counts")),
}


def _packed(p: DataProfile) -> Tuple[Any, ...]:
    """:class:`DataProfile`'s pickled form: names, the sketches' integers, floats and arrays, each
    kind in one array (the arrays end to end, with their lengths), field by field as :data:`_LAYOUT`
    lists them."""
    sketches = list(p.dense.values()) + list(p.categorical.values())
    ints, floats, arrays = ([getattr(s, name) for s in sketches for name in _LAYOUT[type(s)][kind]]
                            for kind in range(3))
    return (p.label, p.rows, p.positives, tuple(p.dense), tuple(p.categorical), np.array(ints, np.int64),
            np.array(floats, np.float64), np.array([a.size for a in arrays], np.int64),
            np.concatenate(arrays).astype(np.int64, copy=False) if arrays else np.zeros(0, np.int64))


def _unpacked(label: str, rows: int, positives: int, dense: Tuple[str, ...], categorical: Tuple[str, ...],
              ints: np.ndarray, floats: np.ndarray, lengths: np.ndarray, flat: np.ndarray) -> DataProfile:
    """The profile :func:`_packed` describes."""
    values = (iter(ints.tolist()), iter(floats.tolist()),
              iter(np.split(flat, np.cumsum(lengths)[:-1]) if lengths.size else []))

    def sketch(kind: type) -> Any:
        return kind(**{name: next(values[k]) for k, names in enumerate(_LAYOUT[kind]) for name in names})
    return DataProfile(label=label, rows=rows, positives=positives, dense={name: sketch(DenseSketch) for name in dense},
                       categorical={name: sketch(IdSketch) for name in categorical})


def _rate(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


def _dense_doc(s: DenseSketch) -> Dict[str, Any]:
    hist = s.histogram()
    keys = sorted(hist)
    return {"rows": s.rows, "count": s.n, "missing_rate": _rate(s.missing, s.rows),
            "mean": s.mean if s.n else None, "std": s.std if s.n else None,
            "min": s.min if s.n else None, "max": s.max if s.n else None,
            "quantiles": {f"p{round(q * 100):02d}": v for q, v in zip(QUANTILES, s.quantiles(QUANTILES))},
            "histogram": {"unit": "sign(x)*log1p(|x|)", "width": HISTOGRAM_BINS / BINS_PER_UNIT,
                          "bins": keys, "counts": [hist[k] for k in keys]},
            "sketch": s.to_state()}


def _id_doc(s: IdSketch) -> Dict[str, Any]:
    return {"rows": s.rows, "count": s.n, "missing_rate": _rate(s.missing, s.rows), "distinct": s.distinct(),
            "top": [[i, round(f, 6)] for i, f in s.top(TOP_K)], "sketch": s.to_state()}


# ------------------------------------------------------------------------------------------------
# building a piece's profile


def criteo_piece(out: Any, missing: np.ndarray, dense: Sequence[DenseSketch]) -> DataProfile:
    """The profile of a piece of Criteo TSV prep transformed into ``out``, with the 39 missing counts
    and the 13 dense sketches the transform computed (:func:`~ctr_volcano.data.prep.parse.transform`)."""
    from ctr_model.features import DENSE_COLUMNS, LABEL, SPARSE_COLUMNS

    profile = DataProfile(label=LABEL, rows=out.num_rows, positives=_positives(out.column(0)),
                          dense=dict(zip(DENSE_COLUMNS, dense)))
    first = 1 + len(DENSE_COLUMNS)
    ids = [out.column(first + c).to_numpy() for c in range(len(SPARSE_COLUMNS))]
    profile.categorical = dict(zip(SPARSE_COLUMNS, IdSketch.of_columns(ids, len(SPARSE_COLUMNS),
                                                                       missing[len(DENSE_COLUMNS):].tolist())))
    return profile


def spec_piece(spec: Any, raw: Mapping[str, np.ndarray], out: Any) -> DataProfile:
    """The profile of a batch a feature spec's prep kept: ``raw`` the dense features' raw values of
    the kept rows (float64, NaN = empty), ``out`` the transformed rows."""
    profile = DataProfile(label=spec.label, rows=out.num_rows, positives=_positives(out.column(0)))
    for d in spec.dense:
        profile.dense[d.name] = DenseSketch.of(raw[d.name])
    columns = []
    for c in spec.categorical:
        column = out.column(c.name)
        if c.multivalued:
            column = column.combine_chunks() if hasattr(column, "combine_chunks") else column
            columns.append(column.values.to_numpy() if len(column) else np.zeros(0, np.int64))
        else:
            columns.append(column.to_numpy())
    names = [c.name for c in spec.categorical]
    profile.categorical = dict(zip(names, IdSketch.of_columns(columns, len(names))))
    return profile


def _positives(label: Any) -> int:
    """The sum of the label column (0/1): numpy's where it has no nulls (~10 us a piece, where
    pyarrow's cast and sum took ~150)."""
    if not len(label):
        return 0
    if label.null_count == 0:
        return int(np.sum(label.to_numpy(), dtype=np.int64))
    import pyarrow.compute as pc

    return int(pc.sum(label.cast("int64")).as_py() or 0)


# ------------------------------------------------------------------------------------------------
# files


def profile_path_of(path: str) -> str:
    """The ``profile.json`` that ``path`` names: the file itself, a prep output directory (beside
    ``stats.json``), a split directory, or an exported model (``model_meta.json`` names its copy).

    Raises:
        BadInput: nothing there is a profile, naming the fix.
    """
    if os.path.isfile(path):
        return path
    meta = os.path.join(path, "model_meta.json")
    if os.path.isfile(meta):
        with open(meta, encoding="utf-8") as fh:
            name = (json.load(fh).get("data_profile") or {}).get("file")
        if name and os.path.isfile(os.path.join(path, name)):
            return os.path.join(path, name)
        raise BadInput("reference", path, "this model carries no profile of its training data (trained "
                                          "before profiles existed): pass its training data's prep output "
                                          "directory (or its profile.json) instead")
    for candidate in (os.path.join(path, PROFILE_FILE), os.path.join(path, "train", PROFILE_FILE)):
        if os.path.isfile(candidate):
            return candidate
    raise BadInput("data", path, "no profile.json there: give a prep output directory, a split "
                                 "directory, an exported model or a profile.json (re-run prep with this "
                                 "version if the data was prepped before profiles existed)")


def read_profile(path: str) -> Tuple[DataProfile, Dict[str, Any]]:
    """The profile at ``path`` (see :func:`profile_path_of`) and its whole document.

    Raises:
        BadInput: no profile there, or an unreadable one.
    """
    found = profile_path_of(path)
    try:
        with open(found, encoding="utf-8") as fh:
            doc = json.load(fh)
        return DataProfile.from_doc(doc), doc
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BadInput("profile", found, f"not a readable data profile ({str(exc)[:120]}); re-run prep to "
                                         f"write it again") from None


def attach_to_model(data_dir: str, model_dir: str) -> Optional[str]:
    """Copy the training data's profile (``data_dir/profile.json``, written by prep into the train
    split) into the exported model as ``data_profile.json`` and name it in ``model_meta.json``.
    Returns the copy's path; ``None`` when the data has no profile (prepped before profiles)."""
    import shutil

    src = os.path.join(data_dir, PROFILE_FILE)
    meta_path = os.path.join(model_dir, "model_meta.json")
    if not os.path.isfile(src) or not os.path.isfile(meta_path):
        return None
    dst = os.path.join(model_dir, MODEL_PROFILE_FILE)
    shutil.copyfile(src, dst)
    with open(meta_path, encoding="utf-8") as fh:
        meta = json.load(fh)
    with open(src, encoding="utf-8") as fh:
        doc = json.load(fh)
    meta["data_profile"] = {"file": MODEL_PROFILE_FILE, "rows": doc.get("rows"),
                            "label_rate": (doc.get("label") or {}).get("rate")}
    write_json(meta_path, meta, indent=1, sort_keys=True)
    return dst
