"""The run's numbers: each trainer's per-epoch records, and trainer 0's ``metrics.json``.

Every trainer appends one record per epoch to its progress file in the workspace
(``.gang/trainer-<i>.json``; a resumed run keeps the records up to the epoch it resumes after).
Trainer 0 merges them into ``OUTPUT/metrics.json`` after the export, with the exported model's AUC
and log loss on the test split when the data has one.
"""
from __future__ import annotations

import json
import os
import time
from typing import Any, Dict, List

from ctr_model import store as s3
from ctr_model import workspace as wsp
from ctr_model.config import TrainConfig
from ctr_model.contract import RoleSpec
from ctr_model.data import SplitInfo, resolve_split
from ctr_model.train import METRICS_FILE, MODEL_DIR, say

__all__ = ["progress_file", "load_history", "save_history", "write_metrics"]


def progress_file(spec: RoleSpec) -> str:
    """This trainer's per-epoch records, relative to the workspace."""
    return f"{wsp.GANG_DIR}/{spec.name}.json"


def load_history(ws: wsp.Workspace, spec: RoleSpec, start_epoch: int) -> List[Dict[str, Any]]:
    """This trainer's records of the epochs up to ``start_epoch`` (a resumed run's earlier epochs)."""
    try:
        data = json.loads(ws.read_text(progress_file(spec)) or "[]")
    except ValueError:
        return []
    return [r for r in data if r.get("epoch", 0) <= start_epoch]


def save_history(ws: wsp.Workspace, spec: RoleSpec, history: List[Dict[str, Any]]) -> None:
    ws.write_text(progress_file(spec), json.dumps(history, indent=1, sort_keys=True))


def _per_trainer(spec: RoleSpec, ws: wsp.Workspace) -> Dict[int, List[Dict[str, Any]]]:
    per_trainer = {}
    for i in range(spec.trainers):
        try:
            per_trainer[i] = json.loads(ws.read_text(f"{wsp.GANG_DIR}/trainer-{i}.json") or "[]")
        except ValueError:
            per_trainer[i] = []
    return per_trainer


def _epochs(config: TrainConfig, per_trainer: Dict[int, List[Dict[str, Any]]]) -> List[Dict[str, Any]]:
    """One gang-wide record per epoch: examples and examples/s summed, seconds the slowest trainer's."""
    epochs = []
    for e in range(1, config.epochs + 1):
        recs = [r for hist in per_trainer.values() for r in hist if r.get("epoch") == e]
        if not recs:
            continue
        n = sum(r["examples"] for r in recs)
        epochs.append({
            "epoch": e, "examples": n, "seconds": max(r["seconds"] for r in recs),
            "examples_per_sec": round(sum(r["examples_per_sec"] for r in recs), 1),
            "loss": sum(r["loss"] * r["examples"] for r in recs if r["loss"] is not None) / max(n, 1),
            "auc_trainer0": next((r["auc"] for r in per_trainer.get(0, []) if r.get("epoch") == e), None),
            "convert_seconds": max(r.get("convert_seconds", 0.0) for r in recs),
            "convert_wait_seconds": max(r.get("convert_wait_seconds", 0.0) for r in recs),
            "progress_errors": sum(r.get("progress_errors", 0) for r in recs),
        })
    return epochs


def _score_test(spec: RoleSpec, ws: wsp.Workspace) -> Dict[str, Any]:
    """The exported model's AUC and log loss on the data's test split (``{}`` without one)."""
    test = None
    if not spec.data_dir:
        return {}
    if s3.is_uri(spec.data_dir):
        assert spec.store is not None   # the contract reads the store's settings for s3:// data
        client = ws.store if isinstance(ws, wsp.StoreWorkspace) else s3.Store(spec.store)
        staged = wsp.stage_split(client, spec.data_dir, "test", os.path.join("data", "test"),
                                 lambda files: files)
        if staged:
            test = staged[0]
            staged[2]()
    else:
        test = resolve_split(spec.data_dir, "test")
    return {} if test is None else {"test": _evaluate(spec, ws, test)}


def _evaluate(spec: RoleSpec, ws: wsp.Workspace, test: SplitInfo) -> Dict[str, Any]:
    from ctr_model.infer import evaluate_files, load_model

    t = time.time()
    scorer = load_model(ws.local(MODEL_DIR))
    result = evaluate_files(scorer, list(test.files))
    result["seconds"] = round(time.time() - t, 2)
    say(spec, f"test: {result}")
    return result


def write_metrics(spec: RoleSpec, config: TrainConfig, ws: wsp.Workspace, start_epoch: int) -> None:
    """Trainer 0, after the export: write ``metrics.json`` (the gang's epochs, each trainer's
    records, the config, and the test split's scores)."""
    per_trainer = _per_trainer(spec, ws)
    metrics: Dict[str, Any] = {"epochs": _epochs(config, per_trainer), "pservers": spec.pservers,
                               "trainers": spec.trainers, "resumed_from_epoch": start_epoch,
                               "config": config.to_dict(), "init_model": spec.init_model or None,
                               "per_trainer": {str(k): v for k, v in per_trainer.items()}}
    metrics.update(_score_test(spec, ws))
    ws.write_text(METRICS_FILE, json.dumps(metrics, indent=1, sort_keys=True))
