"""Calibration in the large of a multi-task export, per task (:mod:`ctr_model.calibrate` for one task).

Each task's tower ends in its own 1-wide output layer ``t{t}_out``, so each task gets its own scalar:
the shift of ``t{t}_out.b`` that makes the tower's mean conditional probability on (a bounded sample
of) the training rows equal the observed rate where the task is observed -- over every row for a root
task (the click), over the rows whose parent is 1 for a task that ``depends_on`` it (the conversion
among clicks). Ranking within a task is unchanged. Asynchronous training leaves the towers' biases
wherever the last updates put them (seen: an ESMM export whose mean pCTR was 7% for a 25% click rate).
"""
from __future__ import annotations

import os
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

from ctr_model.calibrate import MAX_CALIBRATION_ROWS, intercept_shift

__all__ = ["calibrate_tasks"]


def _sample(scorer: Any, train_files: Sequence[str], max_rows: int) -> Tuple[np.ndarray, np.ndarray]:
    """(labels [n, tasks], impression probabilities [n, tasks]) of up to ``max_rows`` training rows,
    the same share from the start of every shard."""
    import pyarrow.parquet as pq

    names = list(scorer.task_names)
    columns = names + scorer._columns_wanted()[1]
    per_file = max(1, max_rows // max(1, len(train_files)))
    ys: List[np.ndarray] = []
    ps: List[np.ndarray] = []
    for path in train_files:
        taken = 0
        for batch in pq.ParquetFile(path).iter_batches(batch_size=min(per_file, 65536), columns=columns):
            batch = batch.slice(0, per_file - taken)
            ys.append(np.stack([batch.column(n).to_numpy(zero_copy_only=False) for n in names], axis=1))
            ps.append(scorer.predict_tasks(batch))
            taken += batch.num_rows
            if taken >= per_file:
                break
    if not ys:
        return np.zeros((0, len(names)), np.int64), np.zeros((0, len(names)))
    return np.concatenate(ys).astype(np.int64), np.concatenate(ps)


def calibrate_tasks(model_dir: str, train_files: Sequence[str],
                    max_rows: int = MAX_CALIBRATION_ROWS) -> Dict[str, Any]:
    """Shift every task's output bias in ``model_dir``'s ``dense.npz`` (see the module docstring);
    returns what it did per task (a task whose sample has one class only is left, with the reason)."""
    from ctr_model.infer import DENSE_FILE, load_model
    from ctr_model.models.multitask import parent_index

    scorer = load_model(model_dir)
    names = list(scorer.task_names)
    y, p = _sample(scorer, train_files, max_rows)
    parents = parent_index(names, scorer.parents)
    path = os.path.join(model_dir, DENSE_FILE)
    with np.load(path) as data:
        arrays = {name: data[name] for name in data.files}
    done: Dict[str, Any] = {}
    for t, (name, parent) in enumerate(zip(names, parents)):
        seen = np.ones(len(y), dtype=bool) if parent is None else y[:, parent] == 1
        q = p[seen, t] if parent is None else p[seen, t] / np.maximum(p[seen, parent], 1e-300)
        rate = float(y[seen, t].mean()) if seen.any() else float("nan")
        if not 0.0 < rate < 1.0:
            done[name] = {"rows": int(seen.sum()), "shift": 0.0, "skipped": "single-class training sample"}
            continue
        shift = intercept_shift(np.clip(q, 0.0, 1.0), rate)
        key = f"t{t}_out.b"
        arrays[key] = (arrays[key].astype(np.float64) + shift).astype(arrays[key].dtype)
        done[name] = {"rows": int(seen.sum()), "rate": round(rate, 6),
                      "mean_prediction_before": round(float(q.mean()), 6), "shift": round(shift, 6)}
    tmp = path + ".tmp.npz"
    np.savez(tmp, **arrays)
    os.replace(tmp, path)
    return {"rows": int(len(y)), "tasks": done}
