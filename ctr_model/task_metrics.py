"""Evaluation of a multi-task model, per task, on labelled Parquet files.

Each task (one of the spec's ``labels``) is scored over every impression with its impression-level
probability (:meth:`ctr_model.infer.Scorer.predict_tasks`): for ``labels: [click, purchase]`` with
``depends_on: {purchase: click}`` that is CTR (pCTR against ``click``) and CTCVR (pCTCVR against
``purchase``). A task that depends on another is also scored where it is observed, on the rows whose
parent label is 1, with its conditional probability ``p_task / p_parent`` (CVR over clicked rows),
under ``after_<parent>``. The first task's figures are also the result's top-level ``auc``,
``logloss``, ``rows`` and ``ctr`` (what the gate and the report read for a single-task model).
"""
from __future__ import annotations

from typing import Any, Dict, Iterator, Sequence, Tuple

from ctr_model.errors import BadInput
from ctr_model.metrics import auc, logloss

__all__ = ["evaluate_tasks", "task_rows", "task_scores", "scores_of"]


def task_rows(scorer: Any, paths: Sequence[str], batch_size: int = 65536) -> Iterator[Tuple[Any, Any]]:
    """Yields ``(labels [n, tasks] int, probabilities [n, tasks])`` per batch of the files.

    Raises:
        BadInput: a file lacks one of the task labels (naming it).
    """
    import numpy as np
    import pyarrow.parquet as pq

    names = list(scorer.task_names)
    features = scorer._columns_wanted()[1]
    for path in paths:
        pf = pq.ParquetFile(path)
        missing = [n for n in names if n not in pf.schema_arrow.names]
        if missing:
            raise BadInput("data", path, f"no label column {missing[0]!r}: evaluate a multi-task model on "
                                           f"data prepped with its feature spec (labels {names})")
        for batch in pf.iter_batches(batch_size=batch_size, columns=names + features):
            ys = np.stack([batch.column(n).to_numpy(zero_copy_only=False) for n in names], axis=1)
            yield ys.astype(np.int64), scorer.predict_tasks(batch)


def scores_of(y: Any, p: Any) -> Dict[str, Any]:
    """AUC, log loss, rows and the label's rate of one task's labels and probabilities."""
    n = int(y.size)
    return {"auc": auc(y, p) if n else float("nan"), "logloss": logloss(y, p) if n else float("nan"),
            "rows": n, "rate": float(y.mean()) if n else float("nan")}


def task_scores(names: Sequence[str], parents: Dict[str, str], y: Any, p: Any) -> Dict[str, Any]:
    """Per task its :func:`scores_of` over impressions and, for a task with a parent, ``after_<parent>``
    over the rows whose parent is 1 (``y``, ``p``: ``[n, tasks]`` labels and impression probabilities)."""
    import numpy as np

    from ctr_model.models.multitask import parent_index

    tasks: Dict[str, Any] = {}
    for t, (name, parent) in enumerate(zip(names, parent_index(list(names), parents))):
        tasks[name] = scores_of(y[:, t], p[:, t])
        if parent is not None:
            seen = y[:, parent] == 1
            cond = np.clip(p[seen, t] / np.maximum(p[seen, parent], 1e-300), 0.0, 1.0)
            tasks[name][f"after_{names[parent]}"] = scores_of(y[seen, t], cond)
    return tasks


def evaluate_tasks(scorer: Any, paths: Sequence[str], batch_size: int = 65536) -> Dict[str, Any]:
    """The first task's ``auc``/``logloss``/``rows``/``ctr`` and ``tasks`` (:func:`task_scores`)."""
    import numpy as np

    names = list(scorer.task_names)
    parts = list(task_rows(scorer, paths, batch_size))
    y = np.concatenate([a for a, _ in parts]) if parts else np.zeros((0, len(names)), np.int64)
    p = np.concatenate([b for _, b in parts]) if parts else np.zeros((0, len(names)))
    tasks = task_scores(names, scorer.parents, y, p)
    first = tasks[names[0]]
    return {"auc": first["auc"], "logloss": first["logloss"], "rows": first["rows"], "ctr": first["rate"],
            "tasks": tasks}
