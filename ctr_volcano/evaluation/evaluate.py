"""Offline evaluation of an exported CTR model: exact metrics and a self-contained HTML report.

Why a separate core: the KFP component, the ``ctr-volcano evaluate`` verb and the notebooks all need the
same numbers, and the numbers must be trustworthy enough to gate a model release on. So:

* AUC is *exact*: the rank statistic (Mann-Whitney U) with average ranks for tied scores, not a
  histogram approximation like Paddle's in-graph ``auc`` op. Ties matter for CTR models, whose
  predictions collapse onto a few values early in training.
* Scoring streams the test Parquet shards in batches through the single-process loader
  (:func:`ctr_model.infer.load_model`); only the labels (int8) and probabilities (float64, as scored)
  are kept, 9 bytes per row, so ten million rows need ~90 MB.
* The report is one HTML file with inline SVG plots drawn here (no matplotlib), so it renders as-is in
  the KFP UI's HTML visualization and in a browser from a laptop.

The metric functions are pure numpy and take any array-likes; :func:`evaluate` is the I/O wrapper.
"""
from __future__ import annotations

import json
import logging
import os
from typing import Any, Dict, Iterable, List, Optional, Tuple

import numpy as np

from ctr_model import metrics as _metrics
from ctr_model.atomic import write_json, write_text
from ctr_model.checks import is_int
from ctr_model.defaults import DEFAULT_SCORE_BATCH
from ctr_model.logs import Progress
from ctr_volcano.errors import BadInput
from ctr_volcano.evaluation.report import render_report
from ctr_volcano.util.outputs import writable_dir

__all__ = [
    "LOGLOSS_EPS", "DEFAULT_BATCH_SIZE", "ROC_MAX_POINTS",
    "auc", "logloss", "calibration", "roc_curve", "confusion_matrix", "compute_metrics",
    "render_report", "evaluate", "find_split_dir", "model_summary",
]

logger = logging.getLogger(__name__)

#: Probabilities are clipped to ``[eps, 1 - eps]`` before the log: float32 models emit exact 0/1.
LOGLOSS_EPS = _metrics.LOGLOSS_EPS
#: Rows per scoring batch (:data:`ctr_model.defaults.DEFAULT_SCORE_BATCH`).
DEFAULT_BATCH_SIZE = DEFAULT_SCORE_BATCH
#: The ROC curve stored in metrics and shown in the KFP UI is thinned to at most this many points.
ROC_MAX_POINTS = 201


def _as_arrays(labels: Any, probs: Any) -> Tuple[np.ndarray, np.ndarray]:
    y = np.asarray(labels).reshape(-1)
    p = np.asarray(probs, dtype=np.float64).reshape(-1)
    if y.shape != p.shape:
        raise BadInput("probs", f"{p.size} values", f"must match the {y.size} labels one to one")
    if y.size == 0:
        raise BadInput("labels", "0 rows", "evaluate on a non-empty test split")
    bad = ~np.isin(y, (0, 1))
    if bad.any():
        raise BadInput("labels", y[bad][0].item(), "labels must be 0 (no click) or 1 (click)")
    if not np.isfinite(p).all():
        raise BadInput("probs", "NaN/inf", "the model produced non-finite scores; check the model export")
    if p.min() < 0.0 or p.max() > 1.0:
        raise BadInput("probs", f"[{p.min():.4g}, {p.max():.4g}]", "probabilities must lie in [0, 1]")
    return y.astype(np.int8), p


def auc(labels: Any, probs: Any) -> float:
    """Exact area under the ROC curve, ties counted as half (the Mann-Whitney U statistic).

    Args:
        labels: 0/1 click labels.
        probs: predicted click probabilities, same length.

    Returns:
        AUC in [0, 1].

    Raises:
        BadInput: if only one class is present (AUC is undefined) or the inputs are malformed.
    """
    y, p = _as_arrays(labels, probs)
    n_pos = int(y.sum())
    n_neg = y.size - n_pos
    if n_pos == 0 or n_neg == 0:
        raise BadInput("labels", f"{n_pos} positives / {n_neg} negatives",
                       "AUC needs both clicks and non-clicks in the test split; use more rows "
                       "or a larger test_fraction")
    return _metrics.auc(y, p)


def logloss(labels: Any, probs: Any, eps: float = LOGLOSS_EPS) -> float:
    """Mean binary cross-entropy, probabilities clipped to ``[eps, 1 - eps]``.

    Args:
        labels: 0/1 click labels.
        probs: predicted click probabilities.
        eps: clipping bound, so a confident wrong prediction costs ``-log(eps)`` rather than infinity.
    """
    y, p = _as_arrays(labels, probs)
    return _metrics.logloss(y, p, eps)


def calibration(labels: Any, probs: Any, bins: int = 10) -> List[Dict[str, float]]:
    """Predicted vs observed CTR per equal-count bin of the predictions (deciles by default).

    Rows are sorted by predicted probability and cut into ``bins`` groups of (nearly) equal size;
    a well-calibrated model has ``mean_predicted ~= observed_ctr`` in every group.

    Returns:
        One dict per non-empty bin: ``bin`` (1-based), ``rows``, ``mean_predicted``, ``observed_ctr``,
        ``min_predicted``, ``max_predicted``.
    """
    if bins < 1:
        raise BadInput("bins", bins, "use at least 1 calibration bin (10 gives deciles)")
    y, p = _as_arrays(labels, probs)
    order = np.argsort(p, kind="mergesort")
    out = []
    for i, idx in enumerate(np.array_split(order, bins)):
        if idx.size == 0:
            continue
        out.append({
            "bin": i + 1,
            "rows": int(idx.size),
            "mean_predicted": float(p[idx].mean()),
            "observed_ctr": float(y[idx].mean()),
            "min_predicted": float(p[idx].min()),
            "max_predicted": float(p[idx].max()),
        })
    return out


def roc_curve(labels: Any, probs: Any,
              max_points: Optional[int] = ROC_MAX_POINTS) -> List[Dict[str, float]]:
    """ROC points at every distinct score (thinned to ``max_points``), from (0, 0) to (1, 1).

    A row is predicted positive when ``prob >= threshold``. The first point's threshold sits just above
    the highest score (nothing predicted positive), so every threshold is a finite number that KFP can
    store.

    Returns:
        Dicts with ``threshold``, ``fpr`` and ``tpr``, thresholds decreasing.
    """
    y, p = _as_arrays(labels, probs)
    n_pos = int(y.sum())
    n_neg = y.size - n_pos
    order = np.argsort(-p, kind="mergesort")
    ps, ys = p[order], y[order]
    last_of_run = np.r_[ps[1:] != ps[:-1], True]     # cut only between distinct scores
    tps = np.cumsum(ys, dtype=np.int64)[last_of_run]
    fps = np.cumsum(1 - ys, dtype=np.int64)[last_of_run]
    thr = ps[last_of_run]
    tpr = np.r_[0.0, tps / n_pos] if n_pos else np.zeros(tps.size + 1)
    fpr = np.r_[0.0, fps / n_neg] if n_neg else np.zeros(fps.size + 1)
    thr = np.r_[np.nextafter(ps[0], np.inf), thr]
    keep = np.arange(thr.size)
    if max_points is not None and thr.size > max_points:
        keep = np.unique(np.linspace(0, thr.size - 1, max_points).round().astype(np.int64))
    return [{"threshold": float(thr[i]), "fpr": float(fpr[i]), "tpr": float(tpr[i])} for i in keep]


def confusion_matrix(labels: Any, probs: Any, threshold: float = 0.5) -> Dict[str, int]:
    """Counts at ``threshold`` (a row is predicted a click when ``prob >= threshold``).

    Returns:
        ``{"tn", "fp", "fn", "tp"}`` as ints.
    """
    if not 0.0 <= threshold <= 1.0:
        raise BadInput("threshold", threshold, "use a probability threshold in [0, 1], e.g. 0.5")
    y, p = _as_arrays(labels, probs)
    pred = p >= threshold
    pos = y == 1
    return {
        "tn": int(np.sum(~pred & ~pos)), "fp": int(np.sum(pred & ~pos)),
        "fn": int(np.sum(~pred & pos)), "tp": int(np.sum(pred & pos)),
    }


def compute_metrics(labels: Any, probs: Any, threshold: float = 0.5,
                    bins: int = 10) -> Dict[str, Any]:
    """Every metric of the report, as one JSON-ready dict.

    Keys: ``auc``, ``logloss``, ``constant_logloss``, ``normalized_entropy``, ``rows``,
    ``positives``, ``positive_rate``, ``mean_prediction``, ``threshold``, ``accuracy``,
    ``confusion_matrix``, ``calibration``, ``roc``.

    ``constant_logloss`` is the log loss of the constant predictor that always says the split's own
    click rate (the best any constant can do on it), and ``normalized_entropy`` the model's log loss
    divided by it: below 1 the model knows more than the click rate, at or above 1 it learned
    nothing usable (a small or wide log trained too little, or too much).
    """
    y, p = _as_arrays(labels, probs)
    cm = confusion_matrix(y, p, threshold)
    model_loss = logloss(y, p)
    constant = logloss(y, np.full(y.size, float(y.mean())))
    return {
        "auc": auc(y, p),
        "logloss": model_loss,
        "constant_logloss": constant,
        "normalized_entropy": model_loss / constant if constant > 0 else None,
        "rows": int(y.size),
        "positives": int(y.sum()),
        "positive_rate": float(y.mean()),
        "mean_prediction": float(p.mean()),
        "threshold": float(threshold),
        "accuracy": (cm["tp"] + cm["tn"]) / float(y.size),
        "confusion_matrix": cm,
        "calibration": calibration(y, p, bins),
        "roc": roc_curve(y, p),
    }


# ----------------------------------------------------------------------------------------------
# I/O wrapper


def find_split_dir(data_dir: str) -> str:
    """Resolve ``data_dir`` to a split directory holding ``schema.json`` and ``part-*.parquet``.

    Accepts a split directory itself (the ``test_data`` artifact of the prep component) or a prep
    output root with a ``test/`` split inside (what ``ctr-volcano prep --out DIR`` writes).
    """
    from ctr_model.data import split_dir_of
    from ctr_model.features import SCHEMA_FILE

    if not os.path.isdir(data_dir):
        raise BadInput("data", data_dir, "pass an existing directory: the prep output or its test/ split")
    split_dir = split_dir_of(data_dir, "test", accept_self=True)
    if split_dir is not None and os.path.isfile(os.path.join(split_dir, SCHEMA_FILE)):
        return split_dir
    raise BadInput("data", data_dir, f"no {SCHEMA_FILE} here or in test/: point at the test split written "
                                     "by the prep step (ctr-volcano prep)")


def _parquet_parts(split_dir: str) -> List[str]:
    from ctr_model.features import shard_files

    parts = shard_files(split_dir)
    if not parts:
        raise BadInput("data", split_dir, "the split holds no part-*.parquet shards; rerun the prep step")
    return parts


def _expected_rows(split_dir: str) -> Optional[int]:
    from ctr_model.features import SCHEMA_FILE

    with open(os.path.join(split_dir, SCHEMA_FILE)) as f:
        rows = json.load(f).get("rows")
    return None if rows is None else int(rows)


def _collect(batches: Iterable[Tuple[Any, Any]], total_rows: Optional[int] = None
             ) -> Tuple[np.ndarray, np.ndarray]:
    ys: List[np.ndarray] = []
    ps: List[np.ndarray] = []
    progress = Progress(logger, "evaluate", total_rows=total_rows)
    for labels, probs in batches:
        if labels is None:
            raise BadInput("data", "no label column", "evaluate on a labelled split (the prep step's test_data)")
        ys.append(np.asarray(labels, dtype=np.int8).reshape(-1))
        ps.append(np.asarray(probs, dtype=np.float64).reshape(-1))
        progress.update(rows=ys[-1].size)
    progress.done()
    if not ys:
        return np.zeros(0, np.int8), np.zeros(0, np.float64)
    return np.concatenate(ys), np.concatenate(ps)


def _scored(scorer: Any, parts: List[str], batch_size: int, expected: Optional[int]
            ) -> Tuple[np.ndarray, np.ndarray, Optional[Dict[str, Any]]]:
    """(labels, probabilities, None) of the first task; a multi-task model's per-task metrics
    (:func:`ctr_model.task_metrics.task_scores`) from the same pass instead of the None."""
    if len(getattr(scorer, "task_names", ())) < 2:
        return (*_collect(scorer.predict_files(parts, batch_size=batch_size), expected), None)
    from ctr_model.task_metrics import task_rows, task_scores

    kept: List[Tuple[np.ndarray, np.ndarray]] = []

    def first_task() -> Iterable[Tuple[Any, Any]]:
        for y, p in task_rows(scorer, parts, batch_size):
            kept.append((y, p))
            yield y[:, 0], p[:, 0]

    labels, probs = _collect(first_task(), expected)
    y = np.concatenate([a for a, _ in kept]) if kept else np.zeros((0, len(scorer.task_names)), np.int64)
    p = np.concatenate([b for _, b in kept]) if kept else np.zeros((0, len(scorer.task_names)))
    return labels, probs, task_scores(scorer.task_names, scorer.parents, y, p)




def _context(model_dir: str, split_dir: str, meta: Dict[str, Any]) -> Dict[str, str]:
    """What was evaluated, for the report's header table (only what is known)."""
    ctx = {"model": os.path.abspath(model_dir), "test split": os.path.abspath(split_dir)}
    if "hash_buckets" in meta:
        ctx["hash buckets"] = f"{int(meta['hash_buckets']):,}"
    if "pservers" in meta and "trainers" in meta:
        ctx["trained by"] = f"{meta['pservers']} pserver(s) x {meta['trainers']} trainer(s)"
    config = meta.get("config") or {}
    if config:
        model = model_summary(meta)
        ctx["model family"] = model["family"]
        ctx["model config"] = json.dumps(model["config"], sort_keys=True)
    if "epochs" in config:
        ctx["epochs"] = str(config["epochs"])
    return ctx


def model_summary(meta: Dict[str, Any]) -> Dict[str, Any]:
    """Which model was trained: its family (``dnn`` for models exported before families existed)
    and the config that shapes it (the family's ``model_config``, the layers, the embedding width,
    the click rate its output bias started from)."""
    config = meta.get("config") or {}
    shape = {k: config[k] for k in ("model_config", "fc_sizes", "embedding_dim", "base_rate") if k in config}
    return {"family": config.get("model", "dnn"), "config": shape}


def _features(meta: Dict[str, Any], split_dir: str) -> List[Dict[str, Any]]:
    """The report's feature table: the model's spec, with prep's missing rates when its
    ``stats.json`` sits beside the split (a prep output root)."""
    from ctr_volcano.evaluation.feature_table import feature_rows, model_spec

    stats_path = os.path.join(os.path.dirname(os.path.abspath(split_dir)), "stats.json")
    missing = None
    if os.path.isfile(stats_path):
        try:
            with open(stats_path, encoding="utf-8") as fh:
                missing = json.load(fh).get("missing_rate")
        except (OSError, ValueError):
            missing = None   # the table is informative; an unreadable stats file only drops a column
    config = meta.get("config") or {}
    return feature_rows(model_spec(meta), missing, config.get("embedding_dim"))


def evaluate(model_dir: str, data_dir: str, out_dir: str, *, threshold: float = 0.5,
             batch_size: int = DEFAULT_BATCH_SIZE, scorer: Any = None) -> Dict[str, Any]:
    """Score the test split with the exported model and write ``metrics.json`` and ``report.html``.

    Args:
        model_dir: exported model directory (holds ``model_meta.json``), as written by training.
        data_dir: the prep step's test split, or a prep output root with a ``test/`` split.
        out_dir: created if missing; receives ``metrics.json`` and ``report.html``.
        threshold: probability at or above which a row counts as a predicted click (confusion matrix).
        batch_size: rows per scoring batch.
        scorer: an already-loaded scorer (anything with ``predict_files(paths, batch_size=...)``
            yielding ``(labels, probs)``); by default ``ctr_model.infer.load_model(model_dir)``.

    Returns:
        The metrics dict written to ``metrics.json`` (see :func:`compute_metrics`), plus ``model_dir``,
        ``data_dir`` and ``report`` paths.

    Raises:
        BadInput: missing model or data, schema mismatch, a row count that does not match the split's
            ``schema.json``, or a single-class test split.
    """
    if not is_int(batch_size, 1):
        raise BadInput("batch_size", batch_size, f"use a positive number of rows per batch, e.g. {DEFAULT_SCORE_BATCH}")
    if not 0.0 <= threshold <= 1.0:
        raise BadInput("threshold", threshold, "use a probability threshold in [0, 1], e.g. 0.5")
    split_dir = find_split_dir(data_dir)
    out_dir = writable_dir("out", out_dir)
    if scorer is None:
        if not os.path.isdir(model_dir):
            raise BadInput("model", model_dir, "pass the exported model directory written by training")
        from ctr_model.infer import load_model

        scorer = load_model(model_dir)   # a ModelError (BadInput) names the missing file and the fix
    from ctr_model.features import check_split_schema

    meta = getattr(scorer, "meta", None) or {}
    # a SchemaMismatch (BadInput, field data): version, columns or buckets differ
    doc = check_split_schema(split_dir, expected_buckets=meta.get("hash_buckets"), any_spec="feature_spec" in meta)
    if doc.get("feature_spec", meta.get("feature_spec")) != meta.get("feature_spec", doc.get("feature_spec")):
        raise BadInput("data", split_dir, "prepped with another feature spec than the model was trained on "
                                          "(compare schema.json's feature_spec with model_meta.json's); "
                                          "prep the data with the model's spec")
    parts = _parquet_parts(split_dir)
    expected = _expected_rows(split_dir)
    labels, probs, tasks = _scored(scorer, parts, batch_size, expected)
    if expected is not None and expected != labels.size:
        raise BadInput("data", split_dir, f"scored {labels.size} rows but schema.json says {expected}: "
                                          "the split is incomplete or was modified; re-run the prep step")
    metrics = dict(compute_metrics(labels, probs, threshold=threshold), **({"tasks": tasks} if tasks else {}))
    metrics["context"] = _context(model_dir, split_dir, meta)
    metrics["model"] = model_summary(meta)
    metrics["features"] = _features(meta, split_dir)
    report_path = os.path.join(out_dir, "report.html")
    metrics.update({"model_dir": os.path.abspath(model_dir), "data_dir": os.path.abspath(split_dir),
                    "report": os.path.abspath(report_path)})
    write_text(report_path, render_report(metrics))
    write_json(os.path.join(out_dir, "metrics.json"), metrics, sort_keys=True)
    return metrics
