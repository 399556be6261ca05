"""``ctr-volcano score``: check everything, plan the units, score them on N workers, merge the counts.

Every argument is checked before any row is read (the model loads and its graph builds, every file
has the model's feature columns and the ``--keep`` columns); the work directory (the plan, the
graph's bytes, each unit's side file) lives in the output directory until the merge has written
``scores.json`` and ``rejects.jsonl``. The merge turns each unit's line numbers into the file's by
adding the lines of the file's units before it, so a rejected row is named by file and line.
"""
from __future__ import annotations

import glob
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from typing import Any, Dict, List, Optional, Protocol, Sequence, Tuple

import numpy as np

from ctr_model.atomic import write_json
from ctr_model.feature_spec import FeatureSpec
from ctr_model.onnx_tasks import output_names
from ctr_model.task_metrics import task_scores
from ctr_volcano.data.prep.inputs import resolve_inputs
from ctr_volcano.errors import BadInput
from ctr_volcano.scoring.reading import BLOCK_BYTES, block_lines, check_inputs, plan
from ctr_volcano.scoring.staging import STAGE_DIR, stage_inputs
from ctr_volcano.scoring.unit import MODEL_FILE, PLAN_FILE, error_name, score_share, shard_name, side_name

__all__ = ["ScoreArgs", "Runner", "LocalRunner", "ScoringFailed", "SCORES_FILE", "REJECTS_FILE", "WORK_DIR",
           "check_args", "score"]

logger = logging.getLogger(__name__)

SCORES_FILE = "scores.json"
REJECTS_FILE = "rejects.jsonl"
WORK_DIR = ".scoring"


class ScoringFailed(RuntimeError):
    """A worker failed for a reason that is not the input's (its last log line is in the message)."""


@dataclass(frozen=True)
class ScoreArgs:
    """One scoring run.

    Attributes:
        model: the model directory (``model_meta.json``; its ``model.onnx`` when exported).
        inputs: files, globs or directories in the model's spec format (plain or gzip), or
            ``s3://`` objects and prefixes (:mod:`.staging`).
        out: the output directory (shards, ``scores.json``, ``rejects.jsonl``).
        keep: input columns copied into every shard beside ``probability``, in this order.
        workers: local processes over the units (1: this process).
        block_bytes: a plain file's unit size (prep's fan-out blocks).
    """

    model: str
    inputs: Tuple[str, ...]
    out: str
    keep: Tuple[str, ...] = ()
    workers: int = 1
    block_bytes: int = BLOCK_BYTES


class Runner(Protocol):
    """Runs ``count`` workers over the plan in ``work``; returns when all have exited 0.

    ``shared_dirs``: the workers run as another user (a pod's UID), so the output and work
    directories are made world-writable.

    Raises:
        BadInput: a worker refused the input; ScoringFailed: a worker failed otherwise.
    """

    shared_dirs: bool

    def run(self, work: str, count: int) -> None: ...


class LocalRunner:
    """The workers as processes of this machine; one worker runs in this process."""

    shared_dirs = False

    def run(self, work: str, count: int) -> None:
        if count == 1:
            score_share(work, 0, 1)
            return
        procs = [subprocess.Popen([sys.executable, "-m", "ctr_volcano.scoring.unit", "--work", work,
                                   "--index", str(i), "--count", str(count)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for i in range(count)]
        tails = [p.communicate()[1].decode("utf-8", "replace").strip().splitlines() for p in procs]
        for i, (proc, tail) in enumerate(zip(procs, tails)):
            if proc.returncode:
                error = os.path.join(work, error_name(i))
                if os.path.exists(error):
                    with open(error, encoding="utf-8") as fh:
                        doc = json.load(fh)
                    raise BadInput(doc["field"], doc["value"], doc["fix"])
                raise ScoringFailed(f"scoring worker {i} exited {proc.returncode}: {tail[-1] if tail else ''}")


def _keep_names(keep: Sequence[str]) -> Tuple[str, ...]:
    names = tuple(k.strip() for k in keep if k.strip())
    dup = sorted({k for k in names if names.count(k) > 1})
    if dup:
        raise BadInput("--keep", dup[0], "name each column once")
    if "probability" in names:
        raise BadInput("--keep", "probability", "the output's own column is named probability: keep the input's "
                                                "column under another name")
    return names


def check_args(args: ScoreArgs) -> Tuple[FeatureSpec, Dict[str, Any], bytes, List[str], Dict[str, bool]]:
    """``(spec, manifest, graph bytes, files, {file: has label})``, refusing bad arguments first.

    Raises:
        BadInput: naming the flag, the value and the fix.
    """
    from ctr_model.onnx_export import servable
    from ctr_volcano.serving.raw import request_spec

    _check_flags(args)
    keep = _keep_names(args.keep)
    files = resolve_inputs(list(args.inputs))
    manifest, graph, where = servable(args.model)
    spec = request_spec(manifest)
    clash = [name for name in output_names(spec.task_labels) if name in keep]
    if clash:
        raise BadInput("--keep", clash[0], f"the model writes a column {clash[0]!r}: keep the input's column "
                                           "under another name")
    logger.info("model %s (%s), %s", args.model, manifest.get("model"), where)
    return spec, manifest, graph, files, check_inputs(spec, files, keep)


def _check_flags(args: ScoreArgs) -> None:
    """The flags that need no input read: workers, the output directory, the model directory."""
    if not isinstance(args.workers, int) or isinstance(args.workers, bool) or not 1 <= args.workers <= 256:
        raise BadInput("--workers", args.workers, "give a whole number of worker processes from 1 to 256")
    if os.path.isfile(args.out):
        raise BadInput("--out", args.out, "is a file: give a directory for the shards and scores.json")
    if not os.path.isfile(os.path.join(args.model, "model_meta.json")):
        raise BadInput("--model", args.model, "not a model directory (no model_meta.json): give the directory "
                                              "`ctr-volcano train` exported (or its copy from the registry)")


def _prepare(args: ScoreArgs, spec: FeatureSpec, graph: bytes, files: List[str], has_label: Dict[str, bool],
             shared: bool = False) -> Tuple[str, List[Dict[str, Any]]]:
    """The work directory with the plan and the graph; stale outputs of an earlier run removed;
    ``shared``: both directories world-writable (the workers are pods with their own UID)."""
    out = os.path.abspath(args.out)
    work = os.path.join(out, WORK_DIR)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    for d in (out, work) if shared else ():
        os.chmod(d, 0o777)
    for stale in glob.glob(os.path.join(out, "part-*.parquet")) + [os.path.join(out, SCORES_FILE),
                                                                     os.path.join(out, REJECTS_FILE)]:
        if os.path.exists(stale):
            os.remove(stale)
    units = plan(spec, files, args.block_bytes)
    with open(os.path.join(work, MODEL_FILE), "wb") as fh:
        fh.write(graph)
    write_json(os.path.join(work, PLAN_FILE), {"spec": spec.to_dict(), "files": files, "units": units,
                                               "keep": list(_keep_names(args.keep)), "out": out,
                                               "has_label": has_label})
    return work, units


def _unit_first_lines(files: List[str], units: List[Dict[str, Any]]) -> List[int]:
    """Each unit's first line in its file (1-based): the lines of the file's units before it."""
    first, seen = [], {}  # type: List[int], Dict[int, int]
    for unit in units:
        f = unit["file"]
        first.append(seen.get(f, 0) + 1)
        if "start" in unit:
            fd = os.open(files[f], os.O_RDONLY)
            try:
                data = os.pread(fd, unit["end"] - unit["start"], unit["start"])
            finally:
                os.close(fd)
            seen[f] = seen.get(f, 0) + block_lines(data)
    return first


def _merge(work: str, out: str, files: List[str], units: List[Dict[str, Any]], spec: FeatureSpec,
           names: List[str]) -> Dict[str, Any]:
    """The counts, rejects (file and line) and metrics of every unit, in input order; ``names``: each
    file as the rejects and shards name it (a downloaded file: its URI)."""
    first = _unit_first_lines(files, units)
    totals: Dict[str, Any] = {"rows_in": 0, "rows_scored": 0, "rows_rejected": 0, "rejected_by_reason": {}}
    shards, labels, probs = [], [], []
    with open(os.path.join(out, REJECTS_FILE), "w", encoding="utf-8") as rejects:
        for u, unit in enumerate(units):
            with open(os.path.join(work, side_name(u)), encoding="utf-8") as fh:
                side = json.load(fh)
            path = names[unit["file"]]
            for line, reason, detail in side["rejects"]:
                rejects.write(json.dumps({"file": path, "line": first[u] - 1 + line, "reason": reason,
                                          "detail": detail}) + "\n")
                by = totals["rejected_by_reason"]
                by[reason] = by.get(reason, 0) + 1
            totals["rows_in"] += side["rows_in"]
            totals["rows_scored"] += side["scored"]
            totals["rows_rejected"] += len(side["rejects"])
            shards.append({"shard": shard_name(u), "file": path, "rows": side["scored"]})
            if side["with_label"]:
                with np.load(os.path.join(work, f"unit-{u:05d}.npz")) as arrays:
                    labels.append(arrays["labels"])
                    probs.append(arrays["probs"])
    totals["shards"] = shards
    if labels and sum(len(x) for x in labels):
        totals["metrics"] = _metrics(np.concatenate(labels), np.concatenate(probs), spec)
    return totals


def _metrics(y: np.ndarray, p: np.ndarray, spec: FeatureSpec) -> Dict[str, Any]:
    """The first task's AUC and log loss over the labelled rows (``y``, ``p``: ``[rows, tasks]``) and,
    for a multi-task model, ``tasks``: the evaluation's per-task figures
    (:func:`ctr_model.task_metrics.task_scores`: each over impressions, as its column, and a dependent
    task's ``after_<parent>``)."""
    names = list(spec.task_labels)
    tasks = task_scores(names, spec.parents, y, p)
    first = tasks[names[0]]
    doc: Dict[str, Any] = {"rows": first["rows"], "auc": first["auc"], "logloss": first["logloss"]}
    if len(names) > 1:
        doc["tasks"] = tasks
    return doc


def score(args: ScoreArgs, runner: Optional[Runner] = None) -> Dict[str, Any]:
    """Score ``args.inputs`` with ``args.model`` into ``args.out``; returns ``scores.json``'s document.

    Raises:
        BadInput: a bad argument or input file, before any row is scored.
    """
    started = time.monotonic()
    _check_flags(args)
    stage = os.path.join(os.path.abspath(args.out), STAGE_DIR)
    try:
        inputs, origin = stage_inputs(args.inputs, stage)
        return _score(replace(args, inputs=tuple(inputs)), runner, origin, started)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _score(args: ScoreArgs, runner: Optional[Runner], origin: Dict[str, str], started: float) -> Dict[str, Any]:
    spec, manifest, graph, files, has_label = check_args(args)
    names = [origin.get(f, f) for f in files]
    runner = runner or LocalRunner()
    work, units = _prepare(args, spec, graph, files, has_label, shared=bool(getattr(runner, "shared_dirs", False)))
    runner.run(work, min(args.workers, max(1, len(units))))
    doc: Dict[str, Any] = {"model": {"dir": os.path.abspath(args.model), "sha256": hashlib.sha256(graph).hexdigest(),
                     "family": manifest.get("model")},
           "feature_spec": spec.to_dict(), "inputs": names, "keep": list(_keep_names(args.keep)),
           "workers": args.workers, "units": len(units)}
    doc.update(_merge(work, os.path.abspath(args.out), files, units, spec, names))
    doc["seconds"] = round(time.monotonic() - started, 3)
    write_json(os.path.join(args.out, SCORES_FILE), doc, indent=1, sort_keys=True)
    shutil.rmtree(work, ignore_errors=True)
    logger.info("scored %d of %d rows (%d rejected) into %s", doc["rows_scored"], doc["rows_in"],
                doc["rows_rejected"], args.out)
    if doc["rows_in"] and not doc["rows_scored"]:
        reasons = ", ".join(f"{reason}: {n}" for reason, n in sorted(doc["rejected_by_reason"].items(),
                                                                     key=lambda kv: -kv[1])[:3])
        raise BadInput("input", names[0] if len(names) == 1 else names,
                       f"none of its {doc['rows_in']} row(s) could be scored ({reasons}); each refused line "
                       f"is in {os.path.join(args.out, REJECTS_FILE)}: score files in the layout the model "
                       f"was trained on")
    return doc
