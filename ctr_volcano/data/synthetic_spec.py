"""Synthetic click logs in any feature spec's layout, drawn from a planted model whose quality is known.

Why: a team's own layout (named columns, string ids, multi-valued features, CSV/TSV/Parquet) needs
the same yardstick Criteo has in :mod:`ctr_volcano.data.synthetic`: ``oracle.json`` records the
AUC and logloss of the true click probabilities on a fresh sample, the best any learner can reach,
so a training run on the spec is judged by how close it gets.

The planted model: per dense feature a raw value (non-negative long-tailed integers for the
``criteo`` transform, log-normal for ``log1p``, normal otherwise, 5% empty) whose log-odds effect is
linear in the standardised transformed value of what the learner sees (an empty field as the
feature's ``fill``, so the oracle is reachable: an effect of a value the data hides is not); per categorical feature a vocabulary of 300 ids
(text ``<name>_<k>``, or integers for a Parquet single-valued feature, so both id kinds are used)
with Zipf-like frequencies and a normal weight each, 3% empty; a multi-valued feature draws 0-6
ids and adds the mean of their weights (so ``mean`` pooling can represent it exactly). The log-odds
spread is normalised (oracle AUC about 0.78) and the intercept set for a ~25% click rate.
Deterministic for a seed.

A spec with several ``labels`` gets one planted task each. The first is the click above. Every later
task has its own signal: its own normal weight per categorical id (the same draws of the ids), the
same spread, and a rate of :data:`TASK_RATE`; a task declared ``depends_on`` a parent (a purchase after
a click) is drawn only where the parent is 1, with that rate among those rows, so its impression
probability is the product of the two. ``oracle.json`` then also holds ``tasks``: per task the AUC
and logloss of its true impression probabilities and, for a dependent task, of its true conditional
probabilities over the rows where the parent is 1 (``after_<parent>``).

An attention-pooled history (``pooling: attention``, ``query: item``) holds ids of its query's
vocabulary (written as the query's values are), 0-6 per row, each from the candidate's group (``id %
GROUPS``) with probability :data:`HISTORY_FOCUS`; each item of the candidate's group adds
:data:`RELEVANCE_WEIGHT` to the click's log-odds (and nothing else of the history does), so how much
of the history is relevant to *this* candidate drives the click: what target attention sees and a
sum or mean of the history cannot single out.

A spec with ``crosses`` gets a planted interaction per cross: a normal weight (times
:data:`CROSS_WEIGHT`) for every combination of its features' ids (none when one is empty), added to
the click's log-odds, so only a model that sees the combination (Wide&Deep's crossed wide part, or
an interaction a deep part learns) reaches the oracle. Without crosses the draws are what they were.
"""
from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Tuple

import numpy as np

from ctr_model import metrics
from ctr_model.atomic import write_json
from ctr_model.checks import is_int
from ctr_model.feature_spec import FeatureSpec, spec_from_dict
from ctr_model.spec_attention import ATTENTION
from ctr_volcano.errors import BadInput

__all__ = ["generate_spec", "split_oracle", "VOCAB", "ORACLE_FILE", "PLANTED_FILE", "CROSS_WEIGHT"]

ORACLE_FILE = "oracle.json"
#: Every generated row's labels and true probabilities, in input order (``labels``, ``p``: each
#: task's over impressions, ``q``: each task's conditional one): what :func:`split_oracle` scores on
#: the very test split prep makes of the files.
PLANTED_FILE = "planted.npz"
#: Ids per categorical feature.
VOCAB = 300
_SPREAD = 1.6     # standard deviation of the planted log-odds
#: The rate of each task after the first (among its parent's 1s for a dependent task).
TASK_RATE = 0.2
#: Standard deviation of a planted cross's weight per combination of ids (a feature's own: 1).
CROSS_WEIGHT = 1.0
#: An attention-pooled history's items fall into GROUPS groups (``id % GROUPS``); an item of the
#: candidate's group adds RELEVANCE_WEIGHT to the click's log-odds; a history item is drawn from the
#: candidate's group with probability HISTORY_FOCUS (else from the whole vocabulary, as any id).
GROUPS = 10
RELEVANCE_WEIGHT = 1.0
HISTORY_FOCUS = 0.4
#: Combinations of ids a cross's planted weights cover (every pair of :data:`VOCAB` ids; a cross of
#: three or more features folds its combinations into these).
_CROSS_CELLS = VOCAB * VOCAB


def _planted(spec: FeatureSpec, seed: int) -> Dict[str, np.ndarray]:
    rng = np.random.default_rng([seed, 7])
    model = {d.name: rng.normal() * np.ones(1) for d in spec.dense}
    model.update({c.name: rng.normal(size=VOCAB) for c in spec.categorical})
    model.update({f"cross:{x.name}": rng.normal(size=_CROSS_CELLS) * CROSS_WEIGHT for x in spec.crosses})
    return model


def _cross_effect(x: Any, model: Dict[str, np.ndarray], raw: Dict[str, Any]) -> np.ndarray:
    """The planted log-odds of cross ``x`` on drawn rows: its weight of the row's combination of ids,
    0 where one of them is empty."""
    ids = [raw[name] for name in x.features]
    cell = np.zeros(len(ids[0]), dtype=np.int64)
    for k in ids:
        cell = (cell * VOCAB + np.maximum(k, 0)) % _CROSS_CELLS
    empty = np.any(np.stack([k < 0 for k in ids]), axis=0)
    return np.where(empty, 0.0, model[f"cross:{x.name}"][cell])


def _draw(spec: FeatureSpec, model: Dict[str, np.ndarray], rng: np.random.Generator, n: int
          ) -> Tuple[Dict[str, Any], np.ndarray]:
    """(raw columns: float arrays with NaN = empty, id arrays with -1 = empty, lists of id arrays;
    un-normalised log-odds)."""
    raw: Dict[str, Any] = {}
    logit = np.zeros(n)
    zipf = 1.0 / np.arange(1, VOCAB + 1) ** 1.1
    zipf /= zipf.sum()
    for d in spec.dense:
        if d.transform == "criteo":
            x = np.floor(rng.lognormal(1.5, 1.2, n))
        elif d.transform == "log1p":
            x = np.round(rng.lognormal(1.0, 1.0, n), 3)
        else:
            x = np.round(rng.normal(40.0, 12.0, n), 3)
        x[rng.random(n) < 0.05] = np.nan
        raw[d.name] = x
        seen = np.where(np.isnan(x), 0.0 if d.transform == "criteo" else d.fill, x)
        t = np.log1p(np.maximum(seen, 0)) if d.transform in ("criteo", "log1p") else seen
        logit += model[d.name][0] * (t - t.mean()) / (t.std() or 1.0)
    for c in spec.categorical:
        w = model[c.name]
        if c.pooling == ATTENTION:
            continue        # drawn below, once its query's ids are
        if c.multivalued:
            lengths = rng.integers(0, 7, n)
            ids = rng.choice(VOCAB, size=int(lengths.sum()), p=zipf)
            bounds = np.concatenate([[0], np.cumsum(lengths)])
            raw[c.name] = [ids[bounds[i]:bounds[i + 1]] for i in range(n)]
            sums = np.bincount(np.repeat(np.arange(n), lengths), weights=w[ids], minlength=n)
            logit += np.where(lengths > 0, sums / np.maximum(lengths, 1), 0.0) * 1.5
        else:
            ids = rng.choice(VOCAB, size=n, p=zipf)
            empty = rng.random(n) < 0.03
            logit += np.where(empty, 0.0, w[ids])
            raw[c.name] = np.where(empty, -1, ids)
    for cross in spec.crosses:
        logit += _cross_effect(cross, model, raw)
    for c in spec.categorical:
        if c.pooling == ATTENTION:
            raw[c.name], effect = _history(raw[c.query], rng, zipf)
            logit += effect
    return raw, logit


def _history(candidate: np.ndarray, rng: np.random.Generator, zipf: np.ndarray
             ) -> Tuple[List[np.ndarray], np.ndarray]:
    """(an attention-pooled history per row, ids of its query's vocabulary; its planted log-odds):
    0-6 items, each of the candidate's group with probability :data:`HISTORY_FOCUS` (else any id),
    and :data:`RELEVANCE_WEIGHT` per item of the candidate's group (none for an empty candidate)."""
    n = candidate.size
    lengths = rng.integers(0, 7, n)
    rows = np.repeat(np.arange(n), lengths)
    ids = rng.choice(VOCAB, size=rows.size, p=zipf)
    own = candidate[rows]
    focus = (own >= 0) & (rng.random(rows.size) < HISTORY_FOCUS)
    same_group = (rng.integers(0, VOCAB // GROUPS, rows.size) * GROUPS + np.maximum(own, 0) % GROUPS)
    ids = np.where(focus, same_group, ids)
    relevant = (own >= 0) & (ids % GROUPS == np.maximum(own, 0) % GROUPS)
    bounds = np.concatenate([[0], np.cumsum(lengths)])
    history = [ids[bounds[i]:bounds[i + 1]] for i in range(n)]
    return history, RELEVANCE_WEIGHT * np.bincount(rows, weights=relevant, minlength=n)


def _labels(logit: np.ndarray, rng: np.random.Generator, scale: float, bias: float
            ) -> Tuple[np.ndarray, np.ndarray]:
    p = 1.0 / (1.0 + np.exp(-(logit * scale + bias)))
    return (rng.random(p.size) < p).astype(np.int8), p


def _calibrate(logit: np.ndarray, rate: float = 0.25) -> Tuple[float, float]:
    """(scale, bias) for a log-odds spread of :data:`_SPREAD` and a ~``rate`` positive rate."""
    scale = _SPREAD / (logit.std() or 1.0)
    z = logit * scale
    lo, hi = -10.0, 10.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if np.mean(1.0 / (1.0 + np.exp(-(z + mid)))) < rate:
            lo = mid
        else:
            hi = mid
    return float(scale), float((lo + hi) / 2)


def _task_logit(spec: FeatureSpec, weights: Dict[str, np.ndarray], raw: Dict[str, Any]) -> np.ndarray:
    """A later task's un-normalised log-odds: its own weight per categorical id of the drawn rows."""
    n = len(next(iter(raw.values())))
    logit = np.zeros(n)
    for c in spec.categorical:
        w = weights[c.name]
        if c.multivalued:
            logit += np.array([w[ids].mean() * 1.5 if len(ids) else 0.0 for ids in raw[c.name]])
        else:
            logit += np.where(raw[c.name] < 0, 0.0, w[np.maximum(raw[c.name], 0)])
    return logit


class _Tasks:
    """The planted tasks after the first (see the module docstring): their weights, calibrated once."""

    def __init__(self, spec: FeatureSpec, seed: int, probe_raw: Dict[str, Any]):
        self.spec, self.parents = spec, spec.parents
        self.weights, self.calibration = [], []
        for t in range(1, len(spec.task_labels)):
            rng = np.random.default_rng([seed, 11, t])
            w = {c.name: rng.normal(size=VOCAB) for c in spec.categorical}
            self.weights.append(w)
            self.calibration.append(_calibrate(_task_logit(spec, w, probe_raw), TASK_RATE))

    def draw(self, raw: Dict[str, Any], click: np.ndarray, p_click: np.ndarray, rng: np.random.Generator
             ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(labels [n, tasks], impression probabilities [n, tasks], conditional ones [n, tasks])."""
        names = self.spec.task_labels
        labels, p, q = [click], [p_click], [p_click]
        for t in range(1, len(names)):
            scale, bias = self.calibration[t - 1]
            qt = 1.0 / (1.0 + np.exp(-(_task_logit(self.spec, self.weights[t - 1], raw) * scale + bias)))
            drawn = (rng.random(qt.size) < qt).astype(np.int8)
            parent = names.index(self.parents[names[t]]) if names[t] in self.parents else None
            labels.append(drawn if parent is None else drawn * labels[parent])
            p.append(qt if parent is None else qt * p[parent])
            q.append(qt)
        return np.stack(labels, axis=1), np.stack(p, axis=1), np.stack(q, axis=1)

    def oracle(self, labels: np.ndarray, p: np.ndarray, q: np.ndarray) -> Dict[str, Any]:
        """Per task: AUC and logloss of the true probabilities (see the module docstring)."""
        return _task_oracle(self.spec, labels, p, q)


def _task_oracle(spec: FeatureSpec, labels: np.ndarray, p: np.ndarray, q: np.ndarray) -> Dict[str, Any]:
    """Per task of ``spec``: AUC, logloss and positive rate of the true impression probabilities
    ``p``, and for a dependent task the AUC of its conditional ones ``q`` over its parent's 1s."""
    names = spec.task_labels
    out: Dict[str, Dict[str, Any]] = {}
    for t, name in enumerate(names):
        out[name] = {"auc": round(metrics.auc(labels[:, t], p[:, t]), 6),
                     "logloss": round(metrics.logloss(labels[:, t], p[:, t]), 6),
                     "positive_rate": round(float(labels[:, t].mean()), 6)}
        if name in spec.parents:
            parent = spec.parents[name]
            seen = labels[:, names.index(parent)] == 1
            out[name][f"after_{parent}"] = {"auc": round(metrics.auc(labels[seen, t], q[seen, t]), 6),
                                            "rows": int(seen.sum())}
    return out


def _text_table(spec: FeatureSpec, raw: Dict[str, Any], labels: np.ndarray) -> Dict[str, List[str]]:
    cols: Dict[str, List[str]] = {name: [str(int(v)) for v in labels[:, k]]
                                  for k, name in enumerate(spec.task_labels)}
    for d in spec.dense:
        cols[d.name] = ["" if np.isnan(v) else (str(int(v)) if d.transform == "criteo" else repr(float(v)))
                        for v in raw[d.name]]
    for c in spec.categorical:
        if c.multivalued:
            text = c.query or c.name       # a history holds its query's ids: the same text
            cols[c.name] = [c.separator.join(f"{text}_{k}" for k in ids) for ids in raw[c.name]]
        else:
            cols[c.name] = ["" if k < 0 else f"{c.name}_{k}" for k in raw[c.name]]
    for name in spec.ignore:
        cols[name] = ["0"] * len(labels)
    return cols


def _write_text(spec: FeatureSpec, cols: Dict[str, List[str]], path: str) -> None:
    order = list(spec.columns) if spec.columns else list(cols)
    with open(path, "w", encoding="utf-8", newline="") as fh:
        if spec.header:
            fh.write(spec.delimiter.join(order) + "\n")
        for row in zip(*(cols[name] for name in order)):
            fh.write(spec.delimiter.join(row) + "\n")


def _write_parquet(spec: FeatureSpec, raw: Dict[str, Any], labels: np.ndarray, path: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    cols: Dict[str, Any] = {name: pa.array(labels[:, k].astype(np.int64)) for k, name in enumerate(spec.task_labels)}
    for d in spec.dense:
        cols[d.name] = pa.array(raw[d.name], from_pandas=True)
    for c in spec.categorical:
        if c.multivalued and c.query:      # a history holds its query's ids: integers, as the query's
            cols[c.name] = pa.array([[int(k) for k in ids] for ids in raw[c.name]], pa.list_(pa.int64()))
        elif c.multivalued:
            cols[c.name] = pa.array([[f"{c.name}_{k}" for k in ids] for ids in raw[c.name]],
                                    pa.list_(pa.string()))
        else:
            cols[c.name] = pa.array([None if k < 0 else int(k) for k in raw[c.name]], pa.int64())
    for name in spec.ignore:
        cols[name] = pa.array(np.zeros(len(labels), dtype=np.int64))
    pq.write_table(pa.table(cols), path, row_group_size=65_536)


def generate_spec(out_dir: str, spec: FeatureSpec, rows: int, seed: int = 0, files: int = 1,
                  oracle_rows: int = 200_000) -> Dict[str, Any]:
    """Write ``rows`` rows in ``spec``'s layout into ``out_dir/part-NNNNN.<ext>`` and ``oracle.json``.

    Raises:
        BadInput: the Criteo format (use :func:`ctr_volcano.data.synthetic.generate`), or bad sizes.
    """
    if spec.is_criteo:
        raise BadInput("feature_spec", "criteo", "the Criteo layout has its own generator: run "
                       "gen-data without --feature-spec")
    for name, value, lo in (("rows", rows, 1), ("files", files, 1), ("oracle_rows", oracle_rows, 1000)):
        if not is_int(value, lo, 10 ** 9):
            raise BadInput(name, value, f"use an integer >= {lo}")
    model = _planted(spec, seed)
    probe_raw, probe_logit = _draw(spec, model, np.random.default_rng([seed, 1]), 20_000)
    scale, bias = _calibrate(probe_logit)
    tasks = _Tasks(spec, seed, probe_raw)
    os.makedirs(out_dir, exist_ok=True)
    ext = {"csv": "csv", "tsv": "tsv", "parquet": "parquet"}[spec.format]
    rng = np.random.default_rng([seed, 2])
    names: List[str] = []
    planted: List[Tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for k, n in enumerate(np.diff(np.linspace(0, rows, files + 1).astype(np.int64))):
        raw, logit = _draw(spec, model, rng, int(n))
        click, p_click = _labels(logit, rng, scale, bias)
        planted.append(tasks.draw(raw, click, p_click, rng))
        labels = planted[-1][0]
        path = os.path.join(out_dir, f"part-{k:05d}.{ext}")
        if spec.format == "parquet":
            _write_parquet(spec, raw, labels, path)
        else:
            _write_text(spec, _text_table(spec, raw, labels), path)
        names.append(os.path.basename(path))
    np.savez(os.path.join(out_dir, PLANTED_FILE), labels=np.concatenate([part[0] for part in planted]),
             p=np.concatenate([part[1] for part in planted]), q=np.concatenate([part[2] for part in planted]))
    fresh = np.random.default_rng([seed, 3])
    fresh_raw, logit = _draw(spec, model, fresh, int(oracle_rows))
    labels, p = _labels(logit, fresh, scale, bias)
    all_labels, all_p, all_q = tasks.draw(fresh_raw, labels, p, fresh)
    oracle = {"auc": round(metrics.auc(labels, p), 6), "logloss": round(metrics.logloss(labels, p), 6),
              "positive_rate": round(float(labels.mean()), 6), "oracle_sample_rows": int(oracle_rows),
              "rows": int(rows), "seed": int(seed), "files": names, "feature_spec": spec.to_dict(),
              "note": "AUC/logloss of the true click probabilities on a fresh sample: the best any "
                      "learner can do on this data; planted.npz holds every generated row's, for the "
                      "oracle on the very test split (split_oracle)"}
    if len(spec.task_labels) > 1:
        oracle["tasks"] = tasks.oracle(all_labels, all_p, all_q)
    write_json(os.path.join(out_dir, ORACLE_FILE), oracle, sort_keys=True)
    return json.loads(json.dumps(oracle))


def split_oracle(raw_dir: str, prep_dir: str) -> Dict[str, Any]:
    """The planted probabilities' AUC and log loss on the very test split ``prep_dir`` holds of the
    files generated into ``raw_dir``, shaped as ``oracle.json``: a model's gap to it carries no second
    sample's noise. Prep's stratified split is replayed on the planted labels in input order, by the
    label prep split on (the prep spec's first: a reading of the log may take another label than the
    generator's first); ``auc``/``logloss`` are that label's, ``tasks`` every generated task's on the
    same rows (a dependent task's also over its parent's test positives).

    Raises:
        ValueError: the prep output is not of these files as generated (rows, rejected rows, or a
            test split of other labels: each combination of the labels counted): the replayed split
            would not be prep's.
    """
    import pyarrow.parquet as pq

    from ctr_volcano.data.prep.split import StratifiedSplit

    with np.load(os.path.join(raw_dir, PLANTED_FILE)) as planted:
        labels, p, q = planted["labels"], planted["p"], planted["q"]
    with open(os.path.join(raw_dir, ORACLE_FILE), encoding="utf-8") as fh:
        generated = spec_from_dict(json.load(fh)["feature_spec"])
    with open(os.path.join(prep_dir, "stats.json"), encoding="utf-8") as fh:
        stats = json.load(fh)
    if stats["rows_in"] != len(labels) or stats["rows_rejected"]:
        raise ValueError(f"{prep_dir}: {stats['rows_in']} rows in, {stats['rows_rejected']} rejected; "
                         f"{raw_dir} generated {len(labels)}")
    kept = list(spec_from_dict(stats["feature_spec"]).task_labels)        # the labels the reading keeps
    label, columns = kept[0], [list(generated.task_labels).index(k) for k in kept]
    column = columns[0]
    test = StratifiedSplit(stats["config"]["seed"], stats["config"]["test_fraction"]).is_test(labels[:, column])
    split_dir = os.path.join(prep_dir, "test")
    seen = np.concatenate([np.stack([c.to_numpy() for c in pq.read_table(os.path.join(split_dir, f), columns=kept)
                                     .columns], axis=1)
                           for f in sorted(os.listdir(split_dir)) if f.endswith(".parquet")])
    # the shards hold slices of each block, so compare what does not depend on the order: each
    # combination of the labels, counted
    combos = [np.unique(x, axis=0, return_counts=True) for x in (seen, labels[test][:, columns])]
    if len(seen) != int(test.sum()) or any(not np.array_equal(a, b) for a, b in zip(*combos)):
        raise ValueError(f"{prep_dir}: its test split's labels are not the replayed split's")
    tasks = _task_oracle(generated, labels[test], p[test], q[test])
    doc: Dict[str, Any] = {**{k: tasks[label][k] for k in ("auc", "logloss", "positive_rate")},
                           "rows": int(test.sum()), "label": label}
    if len(generated.task_labels) > 1:
        doc["tasks"] = tasks
    return doc
