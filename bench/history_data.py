"""The history dataset of ``bench/models.py``: a log whose click is driven by how much of a user's
history of ads is relevant to the candidate ad (``gen-data``'s plant for an attention-pooled history,
docs/features.md), prepped twice from the same raw rows: the history pooled by DIN's target attention
against the ad, and pooled by ``sum`` (what a spec without attention does). The oracle is
``oracle.json``'s: the planted probabilities' AUC on a fresh sample of ``--oracle-rows`` (about 0.002
AUC from a test split's either way; both poolings are judged against the same figure)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any, Dict

__all__ = ["POOLINGS", "history_spec", "make_history"]

#: What the bench compares: the label in the RESULT line -> the history's pooling.
POOLINGS = {"din": "attention", "sum": "sum"}


def history_spec(pooling: str) -> Dict[str, Any]:
    """The history log's spec with the history pooled by ``pooling`` (``attention`` or ``sum``)."""
    seen: Dict[str, Any] = {"name": "seen_ads", "multivalued": True, "max_length": 6, "pooling": pooling}
    if pooling == "attention":
        seen["query"] = "ad"
    return {"format": "csv", "header": True, "label": "click", "hash_buckets": 1_000_003, "embedding_dim": 10,
            "dense": [{"name": "price", "transform": "log1p"}],
            "categorical": [{"name": "user"}, {"name": "ad"}, seen]}


def _cli(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "ctr_volcano.app.cli.main", *args], check=True, stdout=subprocess.DEVNULL)


def make_history(workdir: str, rows: int, seed: int, oracle_rows: int, pooling: str) -> Dict[str, Any]:
    """Generate (cached by its arguments) and prep the history log for ``pooling``; returns its prep dir
    and the oracle (``auc``, ``logloss``)."""
    name = f"rows{rows}-history-seed{seed}"
    raw_dir = os.path.join(workdir, "raw-" + name)
    prep_dir = os.path.join(workdir, f"prep-{name}-{pooling}")
    oracle_path = os.path.join(raw_dir, "oracle.json")
    if not os.path.exists(oracle_path):
        spec = os.path.join(workdir, f"spec-{name}.json")
        with open(spec, "w") as fh:
            json.dump(history_spec("attention"), fh)   # the raw rows are the same for both poolings
        _cli("gen-data", "--feature-spec", spec, "--rows", str(rows), "--out", raw_dir, "--seed", str(seed),
             "--oracle-rows", str(oracle_rows))
    if not os.path.exists(os.path.join(prep_dir, "stats.json")):
        spec = os.path.join(workdir, f"spec-{name}-{pooling}.json")
        with open(spec, "w") as fh:
            json.dump(history_spec(pooling), fh)
        _cli("prep", "--feature-spec", spec, "--input", raw_dir, "--out", prep_dir, "--shards", "8")
    with open(oracle_path) as fh:
        oracle = json.load(fh)
    return {"prep": prep_dir, "oracle": {"auc": oracle["auc"], "logloss": oracle["logloss"]}, "sample_oracle": oracle}
