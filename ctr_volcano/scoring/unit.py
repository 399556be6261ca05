"""One unit scored: its raw rows through prep's checks and transforms and the server's ONNX graph into
one Parquet shard, its rejects and counts into a side file of the work directory.

The checks are prep's (:mod:`ctr_volcano.data.prep.generic`'s ``_clean``: an empty line, a wrong
field count, a dense value that is not a number, a label other than 0/1 when the file has one), the transforms are
prep's (:mod:`ctr_model.transforms`, which the server imports too), the feed is
:func:`ctr_model.onnx_inputs.feeds` and the graph the bytes :func:`ctr_model.onnx_export.servable`
gives the server, run by onnxruntime on one thread, so a unit's shard is the same bytes whichever
worker writes it. Memory: one unit's bytes and one batch's columns.

Also the worker's entrypoint: ``python -m ctr_volcano.scoring.unit [score] --work DIR --index i
--count N`` scores the units ``u % N == i`` of the plan in ``DIR`` (a Volcano pod's index from
``VC_TASK_INDEX``).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import Any, List, Optional, Sequence

import numpy as np

from ctr_model.atomic import write_json
from ctr_model.feature_spec import FeatureSpec, spec_from_dict
from ctr_model.onnx_inputs import feeds, layout_of
from ctr_model.onnx_tasks import output_names
from ctr_volcano.data.prep.generic import _clean, _transform, record_lines
from ctr_volcano.errors import BadInput
from ctr_volcano.scoring.reading import feature_columns, unit_batches

__all__ = ["PLAN_FILE", "MODEL_FILE", "PHASE", "shard_name", "side_name", "error_name", "score_unit",
           "score_share", "main"]

logger = logging.getLogger(__name__)

PLAN_FILE = "plan.json"
MODEL_FILE = "model.onnx"
#: The workers' one phase (prep's fan-out has three), in their argv and their error files' names.
PHASE = "score"


def shard_name(unit: int) -> str:
    """The output shard of unit ``unit``."""
    return f"part-{unit:05d}.parquet"


def error_name(index: int) -> str:
    """Where worker ``index`` leaves the :class:`BadInput` it exited 2 with (prep's fan-out's name)."""
    return f"error-{PHASE}-{index}.json"


def side_name(unit: int) -> str:
    """The unit's counts and rejects in the work directory."""
    return f"unit-{unit:05d}.json"


def _session(path: str) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def _out_schema(spec: FeatureSpec, path: str, keep: Sequence[str]) -> Any:
    """The shard's schema: the kept columns (text from csv/tsv, as stored from Parquet), then
    ``probability`` float64 and, for a multi-task model, ``probability_<task>`` per later task (the
    graph's outputs, :func:`ctr_model.onnx_tasks.output_names`)."""
    import pyarrow as pa

    if spec.format == "parquet":
        import pyarrow.parquet as pq

        stored = pq.read_schema(path)
        fields = [stored.field(k) for k in keep]
    else:
        fields = [pa.field(k, pa.string()) for k in keep]
    return pa.schema(fields + [pa.field(name, pa.float64()) for name in output_names(spec.task_labels)])


class _Tally:
    """A unit's counts, rejects (unit line numbers) and, with labels, the scored rows' labels and
    probabilities (``[rows, tasks]`` each)."""

    def __init__(self) -> None:
        self.records = 0
        self.skipped: List[int] = []
        self.rejects: List[list] = []
        self.scored = 0
        self.labels: List[np.ndarray] = []
        self.probs: List[np.ndarray] = []


def _score_batch(spec: FeatureSpec, session: Any, table: Any, with_label: bool, keep_cols: Sequence[str],
                 tally: _Tally, header: bool) -> Optional[Any]:
    """The batch's scored rows as the shard's columns (None when none is left); rejects tallied."""
    import pyarrow as pa

    keep, reasons, raw, label = _clean(spec, table, with_label)
    reasons.sort()
    rows = np.array([r[0] for r in reasons], dtype=np.int64)
    lines = record_lines(tally.records + rows, sorted(tally.skipped), header, spec.format == "parquet")
    tally.rejects += [[int(line), reason, detail] for line, (_, reason, detail) in zip(lines, reasons)]
    tally.records += table.num_rows
    if not keep.any():
        return None
    prepped, _ = _transform(spec, table, keep, raw, label)
    names = output_names(spec.task_labels)
    outputs = [p.astype(np.float64) for p in session.run(names, feeds(layout_of(spec), prepped))]
    tally.scored += len(outputs[0])
    if with_label:
        tally.labels.append(label[keep])                 # [rows, tasks], each task over impressions
        tally.probs.append(np.stack(outputs, axis=1))
    kept = table.select(list(keep_cols)).filter(pa.array(keep))
    for name, column in zip(names, outputs):
        kept = kept.append_column(name, pa.array(column, pa.float64()))
    return kept


def score_unit(work: str, u: int) -> None:
    """Score unit ``u`` of the plan in ``work``: its shard into the plan's output directory, its
    counts and rejects into ``work``."""
    import pyarrow.parquet as pq

    plan = _read(work, PLAN_FILE)
    spec, unit, keep_cols = spec_from_dict(plan["spec"]), plan["units"][u], plan["keep"]
    path = plan["files"][unit["file"]]
    with_label = bool(plan["has_label"][path])
    columns = list(dict.fromkeys(feature_columns(spec) + (list(spec.task_labels) if with_label else []) + keep_cols))
    session, schema, tally = _session(os.path.join(work, MODEL_FILE)), _out_schema(spec, path, keep_cols), _Tally()
    target = os.path.join(plan["out"], shard_name(u))
    with pq.ParquetWriter(target + ".tmp", schema) as writer:
        for table, bad, header in unit_batches(spec, path, unit, columns, with_label):
            tally.skipped += sorted(int(b[0]) for b in bad if b[0] is not None)
            tally.rejects += [[int(b[0] or 0), "wrong field count", b[1]] for b in bad]
            if table is None:
                continue
            out = _score_batch(spec, session, table, with_label, keep_cols, tally, header)
            if out is not None:
                writer.write_table(out.cast(schema))
    os.replace(target + ".tmp", target)
    if with_label:
        empty = np.zeros((0, len(spec.task_labels)))
        np.savez(os.path.join(work, f"unit-{u:05d}.npz"), labels=np.concatenate(tally.labels or [empty]),
                 probs=np.concatenate(tally.probs or [empty]))
    write_json(os.path.join(work, side_name(u)),
               {"rows_in": tally.records + len(tally.skipped), "scored": tally.scored,
                "rejects": sorted(tally.rejects, key=lambda r: r[0]), "with_label": with_label})


def score_share(work: str, index: int, count: int) -> None:
    """Worker ``index`` of ``count``: the units ``u % count == index``."""
    plan = _read(work, PLAN_FILE)
    for u in range(len(plan["units"])):
        if u % count == index:
            score_unit(work, u)
    logger.info("scoring: worker %d of %d done", index, count)


def _read(work: str, name: str) -> Any:
    with open(os.path.join(work, name), encoding="utf-8") as fh:
        return json.load(fh)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """The worker: exit 0, or 2 with its :class:`BadInput` in :func:`error_name` for the parent."""
    parser = argparse.ArgumentParser(prog="python -m ctr_volcano.scoring.unit")
    parser.add_argument("phase", nargs="?", default=PHASE, choices=(PHASE,))
    parser.add_argument("--work", required=True)
    parser.add_argument("--index", type=int, default=None, help="default: $VC_TASK_INDEX (a Volcano pod's)")
    parser.add_argument("--count", type=int, required=True)
    args = parser.parse_args(argv)
    if args.index is None:
        args.index = int(os.environ.get("VC_TASK_INDEX", "0"))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        score_share(args.work, args.index, args.count)
    except BadInput as exc:
        write_json(os.path.join(args.work, error_name(args.index)),
                   {"field": exc.field, "value": exc.value, "fix": exc.fix})
        logger.error("%s", exc)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
