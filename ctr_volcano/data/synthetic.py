"""Synthetic Criteo-format click logs drawn from a planted model whose own quality is known.

Real Criteo data cannot ship with the project and says nothing about how good a model *could* be.
Here the labels come from a known logistic model, so ``oracle.json`` records the best AUC and
logloss any learner can reach on the data (measured on a fresh sample from the same model); a
training run is judged by how close it gets.

The planted model (generator version 1):

* 13 integer features with Criteo-like missing rates and long tails (``I2`` has a few negatives).
  Their log-odds contribution is linear in the same transform prep applies
  (``log1p(max(x, 0))``, empty -> 0), so a model of prepped data can represent it exactly.
* 26 categorical features, each drawn from its own vocabulary of 8-hex-digit values with Zipf-like
  frequencies (exponent 1.05-1.2) and realistic missing rates. Only the 40 most frequent values of
  each column carry sizable weights; the long tail carries small ones, and vocabularies stay at
  most 3,000 values (real Criteo has millions), so the signal is learnable from a million rows and
  not hidden in ids nobody sees twice.
* ``vocab_scale`` (default 1) multiplies every vocabulary size, for scale measurements: with the
  same Zipf frequencies over up to 3,000 x ``vocab_scale`` values, the number of distinct ids seen
  (the sparse table, pserver memory, model size) keeps growing with the rows, as on real Criteo.
  Scale 1 is the model above, unchanged.
* Noise slots with zero weight: ``I9``, ``I13``, ``C3``, ``C16``, ``C21``.
* ``interactions`` K (default 0: the linear model above, unchanged) adds K pairwise interactions
  between categorical columns, so a model that learns interactions (DeepFM, DCN-v2) has something a
  sum of per-feature effects cannot fit. The shape is a factorization machine's: every interacting
  column has one latent vector (rank 4) per head value (its 40 most frequent; 0 for any other value),
  and a pair of columns adds the inner product of its two values' vectors. The pairs fill cliques
  over a random order of the non-noise columns ((c1, c2), (c1, c3), (c2, c3), (c1, c4), ...), so
  K = 6 is every pair of 4 columns, K = 10 of 5. One latent vector per column, shared by all its
  pairs, is what embedding products can represent (an earlier version drew a separate pair of
  tables per interaction, which one embedding per id can only approximate). They come from their
  own random stream, so K=0 draws exactly the linear model's numbers.
* The total log-odds spread is normalised per seed (oracle AUC about 0.78) and the intercept set for
  a click rate of about 25%.

Output is deterministic for a given seed: row ``r`` depends only on ``(seed, r)``, so the same rows
come out whatever ``files`` is.
"""
from __future__ import annotations

import functools
import gzip
import logging
import math
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from ctr_model import metrics as _metrics
from ctr_model.atomic import write_json
from ctr_model.checks import is_int
from ctr_model.features import (
    DENSE_COLUMNS,
    NUM_DENSE,
    NUM_SPARSE,
    RAW_COLUMNS,
    SPARSE_COLUMNS,
    dense_transform,
    hash_categorical,
)
from ctr_model.logs import Progress
from ctr_volcano.errors import BadInput

__all__ = ["generate", "PlantedModel", "planted_model", "auc_score", "logloss_score", "FREQUENT_VALUES",
           "ORACLE_FILE", "GENERATOR_VERSION", "CHUNK_ROWS", "MAX_VOCAB_SCALE", "Interaction",
           "MAX_INTERACTIONS", "planted_p", "ranks_of_ids"]

logger = logging.getLogger(__name__)

ORACLE_FILE = "oracle.json"
GENERATOR_VERSION = 1
#: Rows drawn per random stream; part of the determinism contract (row r is in chunk r // CHUNK_ROWS).
CHUNK_ROWS = 100_000
#: Rows of the fresh sample the oracle figures are measured on.
ORACLE_ROWS = 400_000
#: Largest ``vocab_scale``: 3,000,000 values in the widest column, about 0.8 GB of planted model.
MAX_VOCAB_SCALE = 1000

_DENSE_MISSING = (0.45, 0.0, 0.21, 0.22, 0.03, 0.22, 0.04, 0.0, 0.04, 0.45, 0.04, 0.77, 0.22)
_DENSE_CENTER = (0.8, 1.5, 2.2, 1.8, 7.5, 4.2, 1.9, 2.4, 3.8, 0.4, 0.9, 0.3, 1.9)
_DENSE_SPREAD = (1.0, 1.4, 1.3, 1.0, 2.2, 1.8, 1.2, 1.1, 1.4, 0.6, 0.8, 0.6, 1.2)
_DENSE_WEIGHT = (0.35, -0.25, 0.20, -0.30, 0.15, 0.30, -0.20, 0.25, 0.0, 0.40, -0.30, 0.20, 0.0)
_VOCAB = (1000, 500, 3000, 2500, 300, 24, 2000, 600, 3, 2000, 1500, 3000, 1200, 27, 2500,
          3000, 10, 1500, 800, 4, 3000, 18, 15, 2000, 100, 1800)
_SPARSE_MISSING = (0.0, 0.0, 0.04, 0.04, 0.0, 0.12, 0.0, 0.0, 0.0, 0.0, 0.0, 0.04, 0.0, 0.0,
                   0.0, 0.04, 0.0, 0.0, 0.44, 0.44, 0.04, 0.76, 0.0, 0.04, 0.44, 0.44)
_SPARSE_NOISE = (3, 16, 21)           # 1-based column numbers with zero weight
#: Values per categorical column that carry the big planted weights (the rest is a long tail).
FREQUENT_VALUES = 40
_TAIL_SCALE = 0.10                    # weight scale of the long tail relative to the head
_LOGIT_STD = 1.2                      # spread of the log-odds around the intercept
_POSITIVE_RATE = 0.25
#: Most pairwise interactions ``interactions`` may ask for (of the 253 pairs of non-noise columns).
MAX_INTERACTIONS = 100
_INTERACTION_RANK = 4
#: Scale of one interaction's term relative to a head value's own weight (about N(0, 1)).
_INTERACTION_WEIGHT = 0.45


@dataclass(frozen=True)
class Interaction:
    """One planted pairwise interaction: ``u[rank_a] . v[rank_b]`` when both ranks are in the head."""

    a: int                            # 0-based categorical column
    b: int
    u: np.ndarray                     # (FREQUENT_VALUES, rank)
    v: np.ndarray

    def term(self, ranks: np.ndarray) -> np.ndarray:
        """The interaction's log-odds term per row (``ranks``: (n, 26), -1 = empty)."""
        ra, rb = ranks[:, self.a], ranks[:, self.b]
        head = (ra >= 0) & (ra < len(self.u)) & (rb >= 0) & (rb < len(self.v))
        out = np.zeros(len(ranks))
        out[head] = np.einsum("ij,ij->i", self.u[ra[head]], self.v[rb[head]])
        return out


@dataclass(frozen=True)
class PlantedModel:
    """The generating model of one seed (numpy arrays; see the module docstring)."""

    seed: int
    dense_mean: np.ndarray            # (13,) mean of the transformed dense features
    dense_std: np.ndarray             # (13,)
    dense_weight: np.ndarray          # (13,) weight per standardised transformed feature
    vocab: List[Any]                  # per column: pyarrow string array of 8-hex values by rank
    cdf: List[np.ndarray]             # per column: cumulative Zipf probabilities by rank
    sparse_weight: List[np.ndarray]   # per column: weight per rank
    scale: float                      # multiplies the raw log-odds spread
    intercept: float
    vocab_scale: int = 1              # multiplies every vocabulary size (``_VOCAB``)
    interactions: Tuple[Interaction, ...] = ()

    def sample(self, rng: np.random.Generator, n: int) -> Dict[str, Any]:
        """Draw ``n`` rows: raw dense ints (masked), categorical ranks (-1 = empty), p and labels."""
        dense_raw = np.empty((n, NUM_DENSE), dtype=np.int64)
        dense_missing = np.empty((n, NUM_DENSE), dtype=bool)
        for j in range(NUM_DENSE):
            t = np.maximum(rng.normal(_DENSE_CENTER[j], _DENSE_SPREAD[j], n), 0.0)
            x = np.rint(np.expm1(t)).astype(np.int64)
            if j == 1:  # I2 has a few negative counts, as in Criteo
                neg = rng.random(n) < 0.05
                x[neg] = -rng.integers(1, 4, int(neg.sum()))
            dense_raw[:, j] = x
            dense_missing[:, j] = rng.random(n) < _DENSE_MISSING[j]
        ranks = np.empty((n, NUM_SPARSE), dtype=np.int64)
        for c in range(NUM_SPARSE):
            r = np.searchsorted(self.cdf[c], rng.random(n), side="right")
            np.minimum(r, len(self.cdf[c]) - 1, out=r)
            r[rng.random(n) < _SPARSE_MISSING[c]] = -1
            ranks[:, c] = r
        logit = self.intercept + self.scale * self.raw_logit(dense_raw, dense_missing, ranks)
        p = 1.0 / (1.0 + np.exp(-logit))
        label = (rng.random(n) < p).astype(np.int8)
        return {"dense": dense_raw, "dense_missing": dense_missing, "ranks": ranks, "p": p,
                "label": label}

    def raw_logit(self, dense_raw: np.ndarray, dense_missing: np.ndarray,
                  ranks: np.ndarray) -> np.ndarray:
        """The planted log-odds before the intercept and scale (the daily drift compares models on it)."""
        t = np.where(dense_missing, 0.0,
                     dense_transform(dense_raw.ravel()).reshape(dense_raw.shape).astype(np.float64))
        return self.transformed_logit(t, ranks)

    def transformed_logit(self, t: np.ndarray, ranks: np.ndarray) -> np.ndarray:
        """:meth:`raw_logit` of dense values already transformed as prep does (``t``: (n, 13),
        empty -> 0), so the planted model can score prepped rows."""
        out = ((t - self.dense_mean) / self.dense_std) @ self.dense_weight
        for c in range(NUM_SPARSE):
            r = ranks[:, c]
            w = np.where(r >= 0, self.sparse_weight[c][np.maximum(r, 0)], 0.0)
            out += w
        for interaction in self.interactions:
            out += interaction.term(ranks)
        return out


def _mix32(x: np.ndarray) -> np.ndarray:
    """A bijection on uint32 (so distinct ranks get distinct hex values)."""
    x = x.astype(np.uint32)
    x ^= x >> np.uint32(16)
    x *= np.uint32(0x7FEB352D)
    x ^= x >> np.uint32(15)
    x *= np.uint32(0x846CA68B)
    x ^= x >> np.uint32(16)
    return x


_HEX_DIGITS = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
_NIBBLE_SHIFTS = np.arange(28, -1, -4, dtype=np.uint32)


def _hex8(codes: np.ndarray):
    """``codes`` (uint32) as a pyarrow string array of 8 lowercase hex digits (``f"{v:08x}"``)."""
    import pyarrow as pa

    nibbles = (codes.astype(np.uint32)[:, None] >> _NIBBLE_SHIFTS) & np.uint32(0xF)
    data = _HEX_DIGITS[nibbles].tobytes()
    offsets = np.arange(0, 8 * len(codes) + 1, 8, dtype=np.int32)
    return pa.StringArray.from_buffers(len(codes), pa.py_buffer(offsets), pa.py_buffer(data))


def _check_vocab_scale(vocab_scale: Any) -> None:
    if not is_int(vocab_scale, 1) or vocab_scale > MAX_VOCAB_SCALE:
        raise BadInput("vocab_scale", vocab_scale,
                       f"use an integer in 1..{MAX_VOCAB_SCALE} (1: the standard vocabularies of at "
                       f"most 3,000 values per column; e.g. 100 for a sparse table that grows with "
                       f"the rows)")


def _check_interactions(interactions: Any) -> None:
    if not is_int(interactions, 0) or interactions > MAX_INTERACTIONS:
        raise BadInput("interactions", interactions,
                       f"use an integer in 0..{MAX_INTERACTIONS} (0: the linear planted model; e.g. 6 "
                       f"for data on which models that learn feature interactions can win)")


def _clique_pairs(columns: List[int], k: int) -> List[Tuple[int, int]]:
    """The first ``k`` pairs of ``columns`` taken clique by clique: (0,1), (0,2), (1,2), (0,3), ..."""
    pairs = [(columns[i], columns[j]) for j in range(1, len(columns)) for i in range(j)]
    return pairs[:k]


def _draw_interactions(seed: int, k: int) -> Tuple[Interaction, ...]:
    """K pairs of non-noise columns and each interacting column's latent vectors, from their own
    random stream (the module docstring says why the vectors are per column, not per pair)."""
    if not k:
        return ()
    rng = np.random.default_rng([int(seed), 0x1A7E])
    columns = [int(c) for c in rng.permutation([c for c in range(NUM_SPARSE) if (c + 1) not in _SPARSE_NOISE])]
    pairs = _clique_pairs(columns, k)
    std = _INTERACTION_WEIGHT ** 0.5 * _INTERACTION_RANK ** -0.25
    latent = {c: rng.normal(0.0, std, (FREQUENT_VALUES, _INTERACTION_RANK))
              for c in columns if any(c in pair for pair in pairs)}
    return tuple(Interaction(a=a, b=b, u=latent[a], v=latent[b]) for a, b in pairs)


def planted_model(seed: int, vocab_scale: int = 1, interactions: int = 0) -> PlantedModel:
    """Build the planted model of ``seed`` (deterministic; cached, treat it as read-only).

    Args:
        seed: selects the model.
        vocab_scale: every column's vocabulary has ``_VOCAB[c] * vocab_scale`` values (1..1000).
        interactions: planted pairwise interactions (0..100; see the module docstring).

    Raises:
        BadInput: if ``vocab_scale`` or ``interactions`` is out of range.
    """
    _check_vocab_scale(vocab_scale)
    _check_interactions(interactions)
    return _build_planted_model(int(seed), int(vocab_scale), int(interactions))


@functools.lru_cache(maxsize=4)
def _build_planted_model(seed: int, vocab_scale: int, interactions: int = 0) -> PlantedModel:
    rng = np.random.default_rng([int(seed), 0xA11CE])
    vocab, cdf, weights = [], [], []
    for c in range(NUM_SPARSE):
        size = _VOCAB[c] * int(vocab_scale)
        base = np.uint32((int(rng.integers(0, 2 ** 32)) ^ ((c + 1) << 26)) & 0xFFFFFFFF)
        # distinct ranks mod 2**32 through a bijection: the values of a column are distinct
        codes = _mix32(np.arange(size, dtype=np.uint32) + base)
        vocab.append(_hex8(codes))
        exponent = rng.uniform(1.05, 1.2)
        prob = (np.arange(size) + 1.0) ** -exponent
        cdf.append(np.cumsum(prob) / prob.sum())
        w = rng.normal(0.0, 1.0, size)
        w[FREQUENT_VALUES:] *= _TAIL_SCALE
        if (c + 1) in _SPARSE_NOISE:
            w[:] = 0.0
        weights.append(w * rng.uniform(0.5, 1.0))
    model = PlantedModel(seed=int(seed), dense_mean=np.zeros(NUM_DENSE),
                         dense_std=np.ones(NUM_DENSE),
                         dense_weight=np.array(_DENSE_WEIGHT, dtype=np.float64),
                         vocab=vocab, cdf=cdf, sparse_weight=weights, scale=1.0, intercept=0.0,
                         vocab_scale=int(vocab_scale),
                         interactions=_draw_interactions(seed, interactions))
    # Calibrate on a fixed sample: standardise dense features, set the spread and the base rate.
    cal = model.sample(np.random.default_rng([int(seed), 0xCA1]), 100_000)
    t = np.where(cal["dense_missing"], 0.0, dense_transform(cal["dense"].ravel())
                 .reshape(cal["dense"].shape).astype(np.float64))
    model = PlantedModel(**{**model.__dict__, "dense_mean": t.mean(axis=0),
                            "dense_std": np.maximum(t.std(axis=0), 1e-6)})
    raw_uncentered = model.raw_logit(cal["dense"], cal["dense_missing"], cal["ranks"])
    raw = raw_uncentered - raw_uncentered.mean()
    scale = _LOGIT_STD / max(float(raw.std()), 1e-9)
    lo, hi = -10.0, 10.0
    for _ in range(60):  # bisect the intercept for the target click rate
        mid = (lo + hi) / 2
        rate = float(np.mean(1.0 / (1.0 + np.exp(-(mid + scale * raw)))))
        lo, hi = (mid, hi) if rate < _POSITIVE_RATE else (lo, mid)
    intercept = (lo + hi) / 2 - scale * float(raw_uncentered.mean())
    return PlantedModel(**{**model.__dict__, "scale": scale, "intercept": intercept})


def ranks_of_ids(model: PlantedModel, ids: np.ndarray, hash_buckets: int) -> np.ndarray:
    """The planted ranks (-1 = empty or unknown) of prepped categorical ids (``ids``: (n, 26)),
    by hashing every vocabulary value as prep does: the inverse of prep's hash on this model. Two
    values of a column that hash to one id (a few per column at 1M buckets) are one id to a model
    too; such an id maps to the more frequent of them."""
    ranks = np.full(ids.shape, -1, dtype=np.int64)
    for c in range(NUM_SPARSE):
        keys = hash_categorical(model.vocab[c], c + 1, hash_buckets)
        order = np.argsort(keys, kind="stable")
        pos = np.minimum(np.searchsorted(keys[order], ids[:, c]), len(keys) - 1)
        found = keys[order][pos] == ids[:, c]
        ranks[found, c] = order[pos[found]]
    return ranks


def planted_p(model: PlantedModel, dense_t: np.ndarray, ids: np.ndarray, hash_buckets: int) -> np.ndarray:
    """The planted click probability of prepped rows (dense as prep wrote them, hashed ids): the
    oracle on the very rows a model is tested on, with no second sample's noise."""
    logit = model.intercept + model.scale * model.transformed_logit(
        dense_t.astype(np.float64), ranks_of_ids(model, ids, hash_buckets))
    return 1.0 / (1.0 + np.exp(-logit))


#: The shared implementations (``ctr_model.metrics``), under the names this module always exported.
auc_score = _metrics.auc
logloss_score = _metrics.logloss


def _chunk_table(model: PlantedModel, seed: int, chunk: int, n: int):
    import pyarrow as pa

    s = model.sample(np.random.default_rng([int(seed), 0x5EED, int(chunk)]), n)
    cols = [pa.array(s["label"], type=pa.int8())]
    for j in range(NUM_DENSE):
        cols.append(pa.array(s["dense"][:, j], mask=s["dense_missing"][:, j], type=pa.int64()))
    for c in range(NUM_SPARSE):
        r = s["ranks"][:, c]
        cols.append(pa.DictionaryArray.from_arrays(pa.array(r, mask=r < 0, type=pa.int32()),
                                                   model.vocab[c]))
    return pa.Table.from_arrays(cols, names=list(RAW_COLUMNS)), s


def _tsv_bytes(table) -> bytes:
    import pyarrow as pa
    import pyarrow.csv as pacsv

    sink = pa.BufferOutputStream()
    pacsv.write_csv(table, sink, write_options=pacsv.WriteOptions(
        include_header=False, delimiter="\t", quoting_style="none", batch_size=16384))
    return sink.getvalue().to_pybytes()


def generate(out_dir: str, rows: int, seed: int = 0, files: int = 1, gzip_level: int = 0,
             oracle_rows: int = ORACLE_ROWS, model: Optional[PlantedModel] = None,
             vocab_scale: int = 1, interactions: int = 0) -> Dict[str, Any]:
    """Write ``rows`` synthetic Criteo lines into ``out_dir`` and measure the oracle.

    Args:
        out_dir: created if missing; gets ``part-00000.tsv`` ... (``.tsv.gz`` if ``gzip_level``)
            and ``oracle.json``.
        rows: total number of lines (>= 1).
        seed: selects the planted model and the rows.
        files: number of files; rows are split into contiguous, near-equal ranges.
        gzip_level: 0 writes plain TSV; 1-9 writes gzip at that level (with a fixed header
            timestamp, so the bytes are reproducible).
        oracle_rows: size of the fresh sample the oracle is measured on (its standard error on
            the AUC is about 0.001 at the default).
        model: draw from this planted model instead of ``planted_model(seed)`` (``seed`` still
            selects the rows); :mod:`ctr_volcano.data.daily` passes each day's drifted model.
        vocab_scale: multiplies every column's vocabulary size (1..1000; see the module
            docstring); with ``model``, it must be that model's own.
        interactions: planted pairwise interactions between categorical columns (0..100; 0, the
            default, writes exactly the linear model's bytes); not with ``model``.

    Returns:
        The oracle dict (also written to ``out_dir/oracle.json``): ``auc``, ``logloss``,
        ``positive_rate``, ``prior_logloss`` and what produced the data (``vocab_scale`` only
        when it is not 1, ``interactions``, the column pairs, only when there are some).

    Raises:
        BadInput: on invalid arguments.
    """
    for name, value, lo in (("rows", rows, 1), ("files", files, 1)):
        if not is_int(value, lo):
            raise BadInput(name, value, f"must be an integer >= {lo}")
    if not is_int(seed, 0):
        raise BadInput("seed", seed, "must be a non-negative integer")
    if files > rows:
        raise BadInput("files", files, f"must be <= rows ({rows}); every file gets at least one row")
    if not is_int(oracle_rows, 1000):
        raise BadInput("oracle_rows", oracle_rows, "must be an integer >= 1000")
    if gzip_level not in range(10):
        raise BadInput("gzip_level", gzip_level, "must be 0 (plain TSV) or 1..9")
    _check_vocab_scale(vocab_scale)
    if model is not None and model.vocab_scale != vocab_scale:
        raise BadInput("vocab_scale", vocab_scale,
                       f"leave it at the given model's own ({model.vocab_scale})")
    _check_interactions(interactions)
    if model is not None and interactions:
        raise BadInput("interactions", interactions, "leave it at 0 with a given model (it has its own)")
    model = model if model is not None else planted_model(seed, vocab_scale, interactions)
    os.makedirs(out_dir, exist_ok=True)
    bounds = [rows * f // files for f in range(files + 1)]
    suffix = ".tsv.gz" if gzip_level else ".tsv"
    paths = [os.path.join(out_dir, f"part-{f:05d}{suffix}") for f in range(files)]
    positives = 0
    progress = Progress(logger, "gen-data", total_rows=int(rows))
    raws: List[Any] = []
    handles: List[Any] = []
    try:
        for path in paths:
            raws.append(open(path, "wb"))
            handles.append(gzip.GzipFile(filename="", mode="wb", fileobj=raws[-1], mtime=0,
                                         compresslevel=gzip_level) if gzip_level else raws[-1])
        for chunk in range((rows + CHUNK_ROWS - 1) // CHUNK_ROWS):
            start = chunk * CHUNK_ROWS
            n = min(CHUNK_ROWS, rows - start)
            table, s = _chunk_table(model, seed, chunk, n)
            positives += int(s["label"].sum())
            for f in range(files):
                lo, hi = max(bounds[f], start), min(bounds[f + 1], start + n)
                if lo < hi:
                    text = _tsv_bytes(table.slice(lo - start, hi - lo))
                    handles[f].write(text)
                    progress.update(rows=hi - lo, nbytes=len(text))
    finally:
        for h in handles + raws:
            h.close()
    progress.done()
    oracle = _measure_oracle(model, seed, oracle_rows)
    oracle.update({
        "rows": int(rows), "files": [os.path.basename(p) for p in paths],
        "data_positive_rate": positives / rows,
    })
    if model.vocab_scale != 1:
        oracle["vocab_scale"] = model.vocab_scale
    if model.interactions:
        oracle["interactions"] = [[SPARSE_COLUMNS[i.a], SPARSE_COLUMNS[i.b]] for i in model.interactions]
    write_json(os.path.join(out_dir, ORACLE_FILE), oracle, sort_keys=True)
    return oracle


def _measure_oracle(model: PlantedModel, seed: int, rows: int) -> Dict[str, Any]:
    s = model.sample(np.random.default_rng([int(seed), 0x0AC1E]), rows)
    rate = float(s["label"].mean())
    prior = -(rate * math.log(rate) + (1 - rate) * math.log(1 - rate)) if 0 < rate < 1 else 0.0
    return {
        "generator": "ctr_volcano.data.synthetic", "generator_version": GENERATOR_VERSION,
        "seed": int(seed),
        "auc": round(auc_score(s["label"], s["p"]), 5),
        "logloss": round(logloss_score(s["label"], s["p"]), 5),
        "positive_rate": round(rate, 5),
        "prior_logloss": round(prior, 5),
        "oracle_sample_rows": int(rows),
        "noise_columns": [DENSE_COLUMNS[j] for j in range(NUM_DENSE) if _DENSE_WEIGHT[j] == 0]
        + [SPARSE_COLUMNS[c - 1] for c in _SPARSE_NOISE],
        "note": "auc/logloss: the generating model's own predictions on a fresh sample of "
                "oracle_sample_rows rows: the best any learner can do on this data "
                "(prior_logloss: always predicting the click rate)",
    }
