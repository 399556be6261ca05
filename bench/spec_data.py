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

The oracle is the planted probabilities' AUC on the very test split each reading's prep made
(``split_oracle``: gen-data's ``planted.npz`` with prep's split replayed), per task for the two-task
log (``tasks``); ``oracle.json``'s fresh sample of ``--oracle-rows`` (about 0.002 AUC from a test
split's either way) is kept as ``sample_oracle``."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from typing import Any, Dict, Tuple

__all__ = ["POOLINGS", "HISTORY", "MULTITASK", "CROSSES", "history_log", "make_spec_data"]

_ADS = {"format": "csv", "header": True, "label": "click", "hash_buckets": 1_000_003, "embedding_dim": 10,
        "dense": [{"name": "price", "transform": "log1p"}]}


def _history(pooling: str, units: Tuple[int, ...] = ()) -> Dict[str, Any]:
    seen: Dict[str, Any] = {"name": "seen_ads", "multivalued": True, "max_length": 6, "pooling": pooling}
    if pooling == "attention":
        seen["query"] = "ad"
        if units:
            seen["attention_units"] = list(units)
    return {**_ADS, "categorical": [{"name": "user"}, {"name": "ad"}, seen]}


#: What the bench compares on the history log: the label in the RESULT line -> the history's pooling.
POOLINGS = {"din": "attention", "sum": "sum"}
_ALI = {**_ADS, "categorical": [{"name": n} for n in ("user", "item", "shop", "cate")]}
_PAIRS = [{"features": ["user", "ad"]}, {"features": ["site", "ad"]}]
_CROSSED = {**_ADS, "categorical": [{"name": n} for n in ("user", "site", "ad", "device")]}


def history_log(units: Tuple[int, ...] = ()) -> Dict[str, Any]:
    """The history log, its attention reading's activation unit ``units`` wide (() : the spec's default)."""
    return {"name": "history", "gen": _history("attention"),
            "readings": {p: _history(p, units) for p in POOLINGS.values()}}


#: Each log: the spec gen-data draws it from, and the specs it is prepped with, by reading.
HISTORY = history_log()
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
    oracle on the very test split (``auc``, ``logloss``: the reading's label's; ``tasks``: every
    task's; :func:`~ctr_volcano.data.synthetic_spec.split_oracle`) and ``oracle.json`` whole
    (``sample_oracle``: a fresh sample's)."""
    from ctr_volcano.data.synthetic_spec import PLANTED_FILE, split_oracle

    name = f"rows{rows}-{log['name']}-seed{seed}"
    raw_dir = os.path.join(workdir, "raw-" + name)
    key = hashlib.sha256(json.dumps(log["readings"][reading], sort_keys=True).encode()).hexdigest()[:8]
    prep_dir = os.path.join(workdir, f"prep-{name}-{reading}-{key}")     # a changed spec is prepped anew
    oracle_path = os.path.join(raw_dir, "oracle.json")
    if not os.path.exists(os.path.join(raw_dir, PLANTED_FILE)):
        spec = _write(os.path.join(workdir, f"spec-{name}.json"), log["gen"])
        _cli("gen-data", "--feature-spec", spec, "--rows", str(rows), "--out", raw_dir, "--seed", str(seed),
             "--oracle-rows", str(oracle_rows))
    if not os.path.exists(os.path.join(prep_dir, "stats.json")):
        spec = _write(os.path.join(workdir, f"spec-{name}-{reading}.json"), log["readings"][reading])
        _cli("prep", "--feature-spec", spec, "--input", raw_dir, "--out", prep_dir, "--shards", "8")
    with open(oracle_path) as fh:
        sample = json.load(fh)
    return {"prep": prep_dir, "oracle": split_oracle(raw_dir, prep_dir), "sample_oracle": sample}
