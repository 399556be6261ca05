"""``ctr-volcano score``: raw candidates in the model's own spec format to Parquet shards of
probabilities with the chosen columns kept (:mod:`ctr_volcano.scoring`; docs/scoring.md)."""
from __future__ import annotations

import argparse
import logging

__all__ = ["register"]

_log = logging.getLogger(__name__)


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "score", help="score raw candidates with a trained model into Parquet shards (ids kept)",
        description="Score raw rows (the model's feature-spec format: files, directories, globs, gzip, s3://; the "
                    "label optional) with the same transforms and ONNX graph as `ctr-volcano serve`. Writes "
                    "OUT/part-*.parquet (the --keep columns, then probability, and probability_<task> per later task "
                    "of a multi-task model; input order), OUT/scores.json "
                    "(counts, rejects by reason, model sha256, spec, inputs; AUC/log loss when the input has "
                    "the label) and OUT/rejects.jsonl (file and line of every refused row).")
    p.add_argument("--model", required=True, metavar="DIR", help="model directory (has model_meta.json)")
    p.add_argument("--input", required=True, nargs="+", metavar="PATH",
                   help="files, globs or directories of raw rows (plain or .gz; Parquet for a parquet spec), or s3:// "
                        "objects and prefixes (the store of CTR_S3_ENDPOINT and the AWS keys, as training reads)")
    p.add_argument("--out", required=True, metavar="DIR", help="output directory")
    p.add_argument("--keep", default="", metavar="COL,...", help="input columns copied into the output (e.g. id)")
    p.add_argument("--workers", default="1", metavar="N", help="local worker processes (default 1)")
    p.set_defaults(func=_score)


def _workers(text: str) -> int:
    from ctr_volcano.errors import BadInput

    try:
        return int(text)
    except ValueError:
        raise BadInput("--workers", text, "give a whole number of worker processes from 1 to 256") from None


def _score(args: argparse.Namespace) -> int:
    from ctr_volcano.scoring import ScoreArgs, score

    doc = score(ScoreArgs(model=args.model, inputs=tuple(args.input), out=args.out,
                          keep=tuple(args.keep.split(",")) if args.keep else (), workers=_workers(args.workers)))
    _log.info("%d rows in, %d scored, %d rejected: %s/scores.json", doc["rows_in"], doc["rows_scored"],
              doc["rows_rejected"], args.out)
    return 0
