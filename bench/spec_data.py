"""The spec-shaped datasets of ``bench/models.py``, each ``gen-data``'s plant for one model family's
strength, generated once and prepped once per way the bench reads them:

* the history log (:data:`HISTORY`): a click driven by how much of a user's history of ads is
  relevant to the candidate ad, read with the history pooled by DIN's target attention against the ad
  and pooled by ``sum`` (what a spec without attention does);
* the click + conversion log (:data:`MULTITASK`, Ali-CCP's shape): a purchase drawn after a click with
  its own signal, read as one two-task spec (``esmm``, ``mmoe``) and as two single-label specs (a DNN
  per label, the other label ignored);
* the crosses log (:data:`CROSSES`): planted interactions of two pairs of ids, read with the crosses
  declared (Wide&Deep's wide part) and without (the DNN).

The oracle is ``oracle.json``'s: the planted probabilities' AUC on a fresh sample of ``--oracle-rows``
(about 0.002 AUC from a test split's either way; every reading of a log is judged against the same
figure), per task for the two-task log (``tasks``)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any, Dict

__all__ = ["POOLINGS", "HISTORY", "MULTITASK", "CROSSES", "make_spec_data"]

_ADS = {"format": "csv", "header": True, "label": "click", "hash_buckets": 1_000_003, "embedding_dim": 10,
        "dense": [{"name": "price", "transform": "log1p"}]}


def _history(pooling: str) -> Dict[str, Any]:
    seen: Dict[str, Any] = {"name": "seen_ads", "multivalued": True, "max_length": 6, "pooling": pooling}
    if pooling == "attention":
        seen["query"] = "ad"
    return {**_ADS, "categorical": [{"name": "user"}, {"name": "ad"}, seen]}


#: What the bench compares on the history log: the label in the RESULT line -> the history's pooling.
POOLINGS = {"din": "attention", "sum": "sum"}
_ALI = {**_ADS, "categorical": [{"name": n} for n in ("user", "item", "shop", "cate")]}
_PAIRS = [{"features": ["user", "ad"]}, {"features": ["site", "ad"]}]
_CROSSED = {**_ADS, "categorical": [{"name": n} for n in ("user", "site", "ad", "device")]}

#: Each log: the spec gen-data draws it from, and the specs it is prepped with, by reading.
HISTORY = {"name": "history", "gen": _history("attention"),
           "readings": {p: _history(p) for p in POOLINGS.values()}}
MULTITASK = {"name": "multitask", "gen": {**_ALI, "labels": ["click", "purchase"],
                                          "depends_on": {"purchase": "click"}},
             "readings": {"tasks": {**_ALI, "labels": ["click", "purchase"], "depends_on": {"purchase": "click"}},
                          "click": {**_ALI, "ignore": ["purchase"]},
                          "purchase": {**_ALI, "label": "purchase", "ignore": ["click"]}}}
CROSSES = {"name": "crosses", "gen": {**_CROSSED, "crosses": _PAIRS},
           "readings": {"crossed": {**_CROSSED, "crosses": _PAIRS}, "plain": _CROSSED}}


def _cli(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "ctr_volcano.app.cli.main", *args], check=True, stdout=subprocess.DEVNULL)


def _write(path: str, doc: Dict[str, Any]) -> str:
    with open(path, "w") as fh:
        json.dump(doc, fh)
    return path


def make_spec_data(workdir: str, log: Dict[str, Any], reading: str, rows: int, seed: int,
                   oracle_rows: int) -> Dict[str, Any]:
    """Generate ``log`` (cached by its arguments) and prep it for ``reading``; returns its prep dir, the
    oracle (``auc``, ``logloss``: the first task's) and ``oracle.json`` whole (``sample_oracle``)."""
    name = f"rows{rows}-{log['name']}-seed{seed}"
    raw_dir = os.path.join(workdir, "raw-" + name)
    prep_dir = os.path.join(workdir, f"prep-{name}-{reading}")
    oracle_path = os.path.join(raw_dir, "oracle.json")
    if not os.path.exists(oracle_path):
        spec = _write(os.path.join(workdir, f"spec-{name}.json"), log["gen"])
        _cli("gen-data", "--feature-spec", spec, "--rows", str(rows), "--out", raw_dir, "--seed", str(seed),
             "--oracle-rows", str(oracle_rows))
    if not os.path.exists(os.path.join(prep_dir, "stats.json")):
        spec = _write(os.path.join(workdir, f"spec-{name}-{reading}.json"), log["readings"][reading])
        _cli("prep", "--feature-spec", spec, "--input", raw_dir, "--out", prep_dir, "--shards", "8")
    with open(oracle_path) as fh:
        oracle = json.load(fh)
    return {"prep": prep_dir, "oracle": {"auc": oracle["auc"], "logloss": oracle["logloss"]}, "sample_oracle": oracle}
