"""``ctr-volcano evaluate``: score a test split with an exported model, outside any pipeline.

Useful to re-evaluate an old model on new data, or a model trained on a cluster on a laptop. The same
core (:func:`ctr_volcano.evaluation.evaluate.evaluate`) runs inside the pipeline's ``evaluate_ctr`` step.
"""
from __future__ import annotations

import argparse

from ctr_model.defaults import DEFAULT_SCORE_BATCH

__all__ = ["register"]


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "evaluate", help="score a test split with an exported model; write metrics.json + report.html",
        description="Load an exported model in this process, score the prep step's test split in "
                    "streaming batches and write DIR/metrics.json (exact AUC, log loss, calibration per "
                    "decile, positive rate, row count, ROC, confusion matrix) and DIR/report.html.")
    p.add_argument("--model", required=True, metavar="DIR", help="exported model directory (has model_meta.json)")
    p.add_argument("--data", required=True, metavar="PREP_DIR",
                   help="the prep output directory (its test/ split is used) or a split directory")
    p.add_argument("--out", required=True, metavar="DIR", help="where metrics.json and report.html go")
    p.add_argument("--threshold", type=float, default=0.5,
                   help="probability at or above which a row is a predicted click (default 0.5)")
    p.add_argument("--batch-size", type=int, default=DEFAULT_SCORE_BATCH,
                   help="rows per scoring batch (default %(default)s)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from ctr_volcano.evaluation.evaluate import evaluate

    m = evaluate(args.model, args.data, args.out, threshold=args.threshold, batch_size=args.batch_size)
    print(f"AUC {m['auc']:.6f}  log loss {m['logloss']:.6f}  rows {m['rows']}  "
          f"positive rate {m['positive_rate']:.4%}  mean prediction {m['mean_prediction']:.4%}")
    print(f"wrote {args.out}/metrics.json and {m['report']}")
    return 0
