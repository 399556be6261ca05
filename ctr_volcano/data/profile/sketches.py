"""Small mergeable sketches of one column, cheap enough for prep's single pass.

Each sketch is built from a piece of a column (numpy, a few vectorised passes) and merged with another
of its kind; merging is how prep's pieces, blocks and fanned-out workers combine. Three kinds:

* :class:`DenseSketch`: count, missing, mean and M2 (Chan et al.'s parallel update), min, max, and a
  fixed-bin histogram of ``symlog(x) = sign(x) * log1p(|x|)`` with :data:`BINS_PER_UNIT` bins per unit.
  The bins are a quantile sketch in the manner of DDSketch: bin ``b >= 0`` holds ``x`` with
  ``b <= 32 log1p(x) < b + 1``, so any quantile read back from it is within a factor ``e^(1/32)``
  (3.2%) of ``1 + |x|``. Merging adds the bin counts: exact, associative and commutative.
* :class:`IdSketch`: for a categorical column of hashed ids, the rows and missing rows, a hash sample
  of its distinct ids -- the :data:`KMV_K` ids of smallest hash among those whose hash is below
  1/:data:`KMV_RATE` of the hash space (a KMV sketch, Bar-Yossef et al., Beyer et al., with a fixed
  first cut), with their row counts -- and the most frequent ids of a 1-in-:data:`TOP_STRIDE` row
  sample, with their counts in that sample. The hash sample merges exactly (the ``k`` smallest hashes
  of a union are among each part's ``k`` smallest), and so do its counts (an id among the union's
  ``k`` smallest is among the ``k`` smallest of every part it occurs in). The frequent-id part is a
  pruned summary (the :data:`TOP_KEEP` largest counts are kept at each merge); exact for ids frequent
  enough to never be pruned, deterministic for a fixed order of merges, which prep keeps (piece,
  block, run; see :mod:`ctr_volcano.data.prep.fanout`).

Why samples, and a fixed first cut: prep spends ~2.7 us a row on everything, 70 ns a value; counting
every id of a piece exactly is a sort (~20 ns a value), finding the ``k`` smallest hashes of a whole
column about as much, where counting every 16th row and keeping the rows under a fixed cut are ~2 ns.
The frequencies of the ids that matter for drift (those above ~1%) are estimated within
~1/sqrt(rows/16); the distinct count combines both samples (:meth:`IdSketch.distinct`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

__all__ = ["BINS_PER_UNIT", "HISTOGRAM_BINS", "KMV_K", "KMV_RATE", "TOP_STRIDE", "TOP_KEEP", "DenseSketch", "IdSketch",
           "symlog_bins", "kmv_hash", "js_divergence", "sample_rows"]

#: Fine bins per unit of ``symlog(x)``: quantiles within 3.2% of ``1 + |x|``.
BINS_PER_UNIT = 32
#: Fine bins per bin of the coarse histogram drift is measured on (width 1/4 of a symlog unit).
HISTOGRAM_BINS = 8
#: Ids of smallest hash kept per categorical column (distinct counts within ~1/sqrt(k - 2) = 6%).
KMV_K = 256
#: Only ids whose hash is below 1/KMV_RATE of the hash space are candidates for the hash sample.
KMV_RATE = 32
#: One row in this many is counted for the frequent ids.
TOP_STRIDE = 16
#: Candidate frequent ids kept per column at each merge.
TOP_KEEP = 400
#: Candidate frequent ids a piece (~16k rows, ~1k sampled) passes on: its own 100 most frequent (an
#: id of 1% or more is never dropped; merging pieces costs a quarter of what 400 would).
TOP_KEEP_PIECE = 100

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)         # odd: multiplying by it permutes the 64-bit ids
_TWO64 = float(1 << 64)


def kmv_hash(ids: np.ndarray) -> np.ndarray:
    """The KMV hash of non-negative int64 ids: a multiplication modulo 2^64 (a bijection, so hashes
    and ids determine each other). Prep's ids are already outputs of a mixing hash; this spreads ids
    of any other origin too."""
    return np.asarray(ids, dtype=np.int64).view(np.uint64) * _GOLDEN


def symlog_bins(f32: np.ndarray) -> np.ndarray:
    """Fine bin indices of values whose ``float32(log1p(|x|))`` is ``f32`` (non-negative)."""
    return np.floor(f32 * np.float32(BINS_PER_UNIT)).astype(np.int64)


def _squares(x: np.ndarray) -> float:
    """The sum of squares, without BLAS (``np.dot`` there starts OpenBLAS's threads, which cost ~100x
    the arithmetic on a loaded machine)."""
    return float(np.einsum("i,i->", x, x))


def _bin_value(index: int) -> float:
    """The value a fine bin stands for: the middle of its symlog range (0 for the two bins next to 0)."""
    if index == 0 or index == -1:
        return 0.0
    b = index if index >= 0 else -1 - index
    value = math.expm1((b + 0.5) / BINS_PER_UNIT)
    return value if index >= 0 else -value


def _runs(values: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """The distinct values of a sorted array and the start of each one's run in it."""
    if not values.size:
        return values, np.zeros(0, np.int64)
    starts = np.flatnonzero(np.concatenate(([True], values[1:] != values[:-1])))
    return values[starts], starts


def _add_sparse(*parts: Tuple[np.ndarray, np.ndarray]) -> Tuple[np.ndarray, np.ndarray]:
    """Sum of sparse count vectors given as ``(index, count)`` arrays, sorted by index."""
    parts = tuple(p for p in parts if len(p[0]))
    if not parts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    if len(parts) == 1:
        return parts[0]
    index = np.concatenate([p[0] for p in parts])
    order = np.argsort(index, kind="stable")
    index, starts = _runs(index[order])
    count = np.add.reduceat(np.concatenate([p[1] for p in parts]).astype(np.int64)[order], starts)
    return index, count


@dataclass
class DenseSketch:
    """One numeric column: see the module docstring. ``index``/``count``: the non-empty fine bins;
    ``total``/``squares``: the sum of the values and of their squares."""

    rows: int = 0
    missing: int = 0
    total: float = 0.0
    squares: float = 0.0
    min: float = math.inf
    max: float = -math.inf
    index: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    count: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    @property
    def n(self) -> int:
        """Rows with a value."""
        return self.rows - self.missing

    @classmethod
    def of(cls, x: np.ndarray) -> "DenseSketch":
        """The sketch of the raw values ``x`` (float64, NaN = missing)."""
        x = np.asarray(x, dtype=np.float64)
        nan = np.isnan(x)
        missing = int(np.count_nonzero(nan))
        values = x[~nan] if missing else x
        sketch = cls(rows=int(x.shape[0]), missing=missing)
        if values.size:
            sketch.total, sketch.squares = float(values.sum()), float(_squares(values))
            sketch.min, sketch.max = float(values.min()), float(values.max())
            positive = values[values >= 0] if sketch.min < 0 else values
            sketch._set_bins(np.bincount(symlog_bins(np.log1p(positive).astype(np.float32))), values)
        return sketch

    @classmethod
    def of_integers(cls, raw: np.ndarray, positive: np.ndarray, missing: int) -> "DenseSketch":
        """Prep's Criteo transform's half of the sketch, from what it computes anyway: ``raw`` the
        column as numpy (int64, or float64 with NaN for the empty fields), ``positive`` its
        ``fmax(raw, 0)`` (empty -> 0). The bins of the non-negative values follow with
        :meth:`add_bins`; the negative ones are binned here."""
        sketch = cls(rows=int(raw.shape[0]), missing=int(missing))
        if sketch.n:
            sketch.min = float(np.fmin.reduce(raw))
            sketch.max = float(np.fmax.reduce(raw))
            sketch.total, sketch.squares = float(positive.sum()), float(_squares(positive))
            if sketch.min < 0:
                negative = raw[raw < 0].astype(np.float64)
                sketch.total += float(negative.sum())
                sketch.squares += float(_squares(negative))
                sketch._set_bins(np.zeros(1, np.int64), negative)
        return sketch

    def add_bins(self, f32: np.ndarray) -> "DenseSketch":
        """The bins of :meth:`of_integers`' non-negative values from ``f32 = float32(log1p(fmax(raw,
        0)))`` (the transformed column, where the empty and the negative values are at 0)."""
        if self.n:
            counts = np.bincount((f32 * np.float32(BINS_PER_UNIT)).astype(np.int32))
            counts[0] -= self.missing + int(self.count[self.index < 0].sum())
            index = np.flatnonzero(counts)
            self.index, self.count = _add_sparse((self.index, self.count),
                                                 (index.astype(np.int64), counts[index].astype(np.int64)))
        return self

    def _set_bins(self, counts: np.ndarray, values: np.ndarray) -> None:
        """Fine bins from the bin counts of the non-negative values and the negative ``values``."""
        negative = values[values < 0] if self.min < 0 else values[:0]
        index = np.flatnonzero(counts)
        self.index, self.count = index.astype(np.int64), counts[index].astype(np.int64)
        if negative.size:
            neg = -1 - symlog_bins(np.log1p(-negative.astype(np.float64)).astype(np.float32))
            ni, nc = np.unique(neg, return_counts=True)
            self.index, self.count = _add_sparse((ni, nc.astype(np.int64)), (self.index, self.count))

    def merge(self, other: "DenseSketch") -> "DenseSketch":
        """This sketch and ``other`` combined (a new sketch; neither is changed)."""
        return DenseSketch.merged([self, other])

    @classmethod
    def merged(cls, sketches: Sequence["DenseSketch"]) -> "DenseSketch":
        """The sketches combined, in order (the sums are added in this order)."""
        out = cls()
        for s in sketches:
            out.rows, out.missing = out.rows + s.rows, out.missing + s.missing
            out.total, out.squares = out.total + s.total, out.squares + s.squares
            out.min, out.max = min(out.min, s.min), max(out.max, s.max)
        out.index, out.count = _add_sparse(*((s.index, s.count) for s in sketches))
        return out

    @property
    def mean(self) -> float:
        return self.total / self.n if self.n else 0.0

    @property
    def std(self) -> float:
        return math.sqrt(max(self.squares / self.n - self.mean ** 2, 0.0)) if self.n else 0.0

    def quantiles(self, qs: Sequence[float]) -> List[Optional[float]]:
        """The values at the quantiles ``qs`` (within 3.2% of ``1 + |x|``), clamped to [min, max]."""
        if not self.n:
            return [None for _ in qs]
        cum = np.cumsum(self.count)
        out: List[Optional[float]] = []
        for q in qs:
            k = int(np.searchsorted(cum, q * (self.n - 1), side="right"))
            value = _bin_value(int(self.index[min(k, len(self.index) - 1)]))
            out.append(min(max(value, self.min), self.max))
        return out

    def histogram(self) -> Dict[int, int]:
        """The coarse histogram drift is measured on: bin ``i`` holds ``i/4 <= symlog(x) < (i+1)/4``."""
        coarse: Dict[int, int] = {}
        for i, c in zip((self.index // HISTOGRAM_BINS).tolist(), self.count.tolist()):
            coarse[i] = coarse.get(i, 0) + c
        return coarse

    def to_state(self) -> Dict[str, Any]:
        """A JSON-ready dict :meth:`from_state` turns back into an equal sketch."""
        return {"rows": self.rows, "missing": self.missing, "total": self.total, "squares": self.squares,
                "min": None if self.n == 0 else self.min, "max": None if self.n == 0 else self.max,
                "bins": {"index": self.index.tolist(), "count": self.count.tolist()}}

    @classmethod
    def from_state(cls, doc: Dict[str, Any]) -> "DenseSketch":
        return cls(rows=int(doc["rows"]), missing=int(doc["missing"]), total=float(doc["total"]),
                   squares=float(doc["squares"]), min=math.inf if doc["min"] is None else float(doc["min"]),
                   max=-math.inf if doc["max"] is None else float(doc["max"]),
                   index=np.asarray(doc["bins"]["index"], dtype=np.int64),
                   count=np.asarray(doc["bins"]["count"], dtype=np.int64))


_OFFSETS = np.random.default_rng(0x5A3B1E).integers(0, TOP_STRIDE, 1 << 16)
_POSITIONS: List[np.ndarray] = [np.zeros(0, np.int64)]


def sample_rows(n: int) -> np.ndarray:
    """The rows of a piece of ``n`` rows the frequent-id sample counts: one in each run of
    :data:`TOP_STRIDE`, at a fixed pseudo-random offset (a plain stride would see only some values of
    a column that repeats with a period sharing a factor with it)."""
    runs = -(-n // TOP_STRIDE)
    if _POSITIONS[0].size < runs:
        size = max(runs, 2 * _POSITIONS[0].size)
        j = np.arange(size, dtype=np.int64)
        _POSITIONS[0] = j * TOP_STRIDE + _OFFSETS[j % _OFFSETS.size]
    positions = _POSITIONS[0][:runs]
    return positions[positions < n] if runs and positions[-1] >= n else positions


def _top(ids: np.ndarray, counts: np.ndarray, keep: int) -> Tuple[np.ndarray, np.ndarray]:
    """Of ``ids`` sorted by id, the ``keep`` with the largest counts (ties: the smaller id), still
    sorted by id: a total order, so the same input always keeps the same ids."""
    if ids.size <= keep:
        return ids, counts
    threshold = np.partition(counts, ids.size - keep)[ids.size - keep]   # the keep-th largest count
    chosen = counts > threshold
    short = keep - int(np.count_nonzero(chosen))
    chosen[np.flatnonzero(counts == threshold)[:short]] = True            # ties: the smaller ids
    return ids[chosen], counts[chosen]


@dataclass
class IdSketch:
    """One categorical column of hashed ids: see the module docstring.

    Attributes:
        rows: rows seen (for a multi-valued column: values).
        missing: rows with the column's empty id.
        kmv_ids: the distinct ids of smallest :func:`kmv_hash` (all of them when there are fewer
            than ``KMV_K``), sorted by id.
        kmv_counts: each of those ids' rows.
        top_ids, top_counts: candidate frequent ids (sorted by id) and their counts among the sampled
            rows.
        sample_rows: the sampled rows that have a value (the frequencies' denominator).
    """

    rows: int = 0
    missing: int = 0
    kmv_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    kmv_counts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    top_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    top_counts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    sample_rows: int = 0

    @classmethod
    def of(cls, ids: np.ndarray, empty: int, slots: int, missing: Optional[int] = None) -> "IdSketch":
        """The sketch of a column's ids; ids below ``slots`` are empty ids (``empty`` is this column's;
        ``missing``, if known, is how many rows have it)."""
        ids = np.asarray(ids, dtype=np.int64)
        if missing is None:
            missing = int(np.count_nonzero(ids == empty))
        return cls.of_columns([ids], slots, [missing])[0]

    @classmethod
    def of_columns(cls, columns: Sequence[np.ndarray], slots: int,
                   missing: Optional[Sequence[int]] = None) -> List["IdSketch"]:
        """The sketches of a piece's categorical columns, equal to :meth:`of` on each; ids below
        ``slots`` are empty ids, column ``k``'s is ``k`` (``missing``, if known, counts each column's).

        The passes over every row (the row sample's gather, the hash sample's cut) are made column
        by column; the counting that follows is made once for all columns, on their samples end to
        end: a piece's ~26 columns cost a few dozen numpy calls instead of ~20 each (prep's profile
        cost; docs/validation.md)."""
        columns = [np.asarray(ids, dtype=np.int64) for ids in columns]
        if missing is None:
            missing = [int(np.count_nonzero(ids == k)) for k, ids in enumerate(columns)]
        sketches = [cls(rows=int(ids.shape[0]), missing=int(m)) for ids, m in zip(columns, missing)]
        live = [k for k, s in enumerate(sketches) if s.rows != s.missing]
        samples, candidates = [], []
        for k in live:
            ids = columns[k]
            sample = ids[sample_rows(ids.shape[0])]   # copies: sorted in place
            sample.sort()
            samples.append(sample)
            chosen = ids[kmv_hash(ids) < _KMV_CUT]
            chosen.sort()
            candidates.append(chosen)
        top_ids, top_counts, top_at, sampled = _grouped_counts(samples, slots)
        kmv_ids, kmv_counts, kmv_at, _ = _grouped_counts(candidates, slots)
        for j, k in enumerate(live):
            s, top, kmv = sketches[k], slice(top_at[j], top_at[j + 1]), slice(kmv_at[j], kmv_at[j + 1])
            s.sample_rows = int(sampled[j])
            s.top_ids, s.top_counts = _top(top_ids[top], top_counts[top], TOP_KEEP_PIECE)
            s.kmv_ids, s.kmv_counts = _smallest_hashes(kmv_ids[kmv], kmv_counts[kmv])
        return sketches

    def merge(self, other: "IdSketch") -> "IdSketch":
        """This sketch and ``other`` combined (a new sketch; neither is changed)."""
        return IdSketch.merged([self, other])

    @classmethod
    def merged(cls, sketches: Sequence["IdSketch"]) -> "IdSketch":
        """The sketches combined (the frequent-id candidates pruned once, after adding them all)."""
        out = cls(rows=sum(s.rows for s in sketches), missing=sum(s.missing for s in sketches),
                  sample_rows=sum(s.sample_rows for s in sketches))
        out.kmv_ids, out.kmv_counts = _smallest_hashes(*_add_sparse(*((s.kmv_ids, s.kmv_counts) for s in sketches)))
        out.top_ids, out.top_counts = _top(*_add_sparse(*((s.top_ids, s.top_counts) for s in sketches)), TOP_KEEP)
        return out

    @property
    def n(self) -> int:
        """Rows with a value."""
        return self.rows - self.missing

    @property
    def kmv_threshold(self) -> float:
        """The hash sample's reach as a fraction of the hash space: every id of the column whose hash
        is below it is in ``kmv_ids``. 1/KMV_RATE until ``k`` ids are kept, then the largest kept."""
        if len(self.kmv_ids) < KMV_K:
            return 1.0 / KMV_RATE
        return float(kmv_hash(self.kmv_ids).max()) / _TWO64

    def distinct(self) -> int:
        """Distinct ids, estimated: the frequent ids the row sample found, plus the ids it did not find,
        counted in the hash sample and scaled by its reach (exact for a column whose ids all show in
        the row sample; the KMV estimate, within ~6%, for a column of many)."""
        unseen = np.count_nonzero(~np.isin(self.kmv_ids, self.top_ids))
        return int(round(self.top_ids.size + unseen / self.kmv_threshold))

    def top(self, k: int) -> List[Tuple[int, float]]:
        """The ``k`` most frequent ids, most frequent first, with their share of the rows that have
        a value (in the row sample)."""
        if not self.sample_rows:
            return []
        order = np.lexsort((self.top_ids, -self.top_counts))[:k]
        return [(int(self.top_ids[i]), int(self.top_counts[i]) / self.sample_rows) for i in order]

    def to_state(self) -> Dict[str, Any]:
        return {"rows": self.rows, "missing": self.missing, "sample_rows": self.sample_rows,
                "kmv": {"ids": self.kmv_ids.tolist(), "counts": self.kmv_counts.tolist()},
                "top": {"ids": self.top_ids.tolist(), "counts": self.top_counts.tolist()}}

    @classmethod
    def from_state(cls, doc: Dict[str, Any]) -> "IdSketch":
        def arr(values: Any) -> np.ndarray:
            return np.asarray(values, dtype=np.int64)
        return cls(rows=int(doc["rows"]), missing=int(doc["missing"]), sample_rows=int(doc["sample_rows"]),
                   kmv_ids=arr(doc["kmv"]["ids"]), kmv_counts=arr(doc["kmv"]["counts"]),
                   top_ids=arr(doc["top"]["ids"]), top_counts=arr(doc["top"]["counts"]))


_KMV_CUT = np.uint64((1 << 64) // KMV_RATE)


def _grouped_counts(parts: Sequence[np.ndarray], slots: int
                    ) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The distinct values >= ``slots`` of each sorted array of ``parts`` and their counts, found for
    all parts at once: ``(values, counts, at, kept)``, part ``j``'s distinct values being
    ``values[at[j]:at[j + 1]]`` (sorted) and ``kept[j]`` its values >= ``slots``."""
    group = np.repeat(np.arange(len(parts)), [p.size for p in parts])
    values = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    keep = values >= slots                      # the empty ids (below slots) are not counted
    values, group = values[keep], group[keep]
    first = np.empty(values.size, dtype=bool)   # where a run of one value in one part starts
    if values.size:
        first[0] = True
        np.not_equal(values[1:], values[:-1], out=first[1:])
        first[1:] |= group[1:] != group[:-1]
    starts = np.flatnonzero(first)
    counts = np.diff(starts, append=values.size).astype(np.int64)
    at = np.searchsorted(group[starts], np.arange(len(parts) + 1))
    return values[starts], counts, at, np.bincount(group, minlength=len(parts))


def _smallest_hashes(ids: np.ndarray, counts: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Of ``ids`` sorted by id, the ``KMV_K`` of smallest :func:`kmv_hash` with their counts, still
    sorted by id (all of them when there are no more)."""
    if ids.size <= KMV_K:
        return ids, counts
    keep = np.sort(np.argpartition(kmv_hash(ids), KMV_K - 1)[:KMV_K])
    return ids[keep], counts[keep]


def js_divergence(p: Dict[int, int], q: Dict[int, int]) -> float:
    """Jensen-Shannon divergence, in bits (0 = same, 1 = disjoint), of two histograms given as
    ``{bin: count}``; 0 when either is empty."""
    tp, tq = sum(p.values()), sum(q.values())
    if not tp or not tq:
        return 0.0
    keys = sorted(set(p) | set(q))
    a = np.array([p.get(k, 0) for k in keys], dtype=np.float64) / tp
    b = np.array([q.get(k, 0) for k in keys], dtype=np.float64) / tq
    m = 0.5 * (a + b)

    def kl(x: np.ndarray) -> float:
        nz = x > 0
        return float(np.sum(x[nz] * np.log2(x[nz] / m[nz])))
    return max(0.0, min(1.0, 0.5 * kl(a) + 0.5 * kl(b)))
