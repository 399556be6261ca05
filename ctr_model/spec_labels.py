"""A feature spec's several labels (``labels: [click, purchase]``) and the order of their tasks
(``depends_on: {purchase: click}``: purchase is observed only after a click): read from the document,
and checked, each problem as ``(field, value, fix)``. Single-label specs never reach the checks'
refusals."""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Tuple

__all__ = ["read_labels", "check_labels"]


def read_labels(top: Dict[str, Any], problems: List[Tuple[str, Any, str]]) -> None:
    """``labels``' first entry is the ``label`` (unless named otherwise: then checked);
    ``depends_on: {task: parent}`` becomes ``((task, parent), ..)``."""
    labels = top.get("labels")
    if isinstance(labels, tuple) and labels and "label" not in top:
        top["label"] = labels[0]
    if "depends_on" not in top:
        return
    deps = top["depends_on"]
    if isinstance(deps, Mapping):
        top["depends_on"] = tuple((k, v) for k, v in deps.items())
    elif not (isinstance(deps, (list, tuple)) and all(isinstance(p, (list, tuple)) and len(p) == 2
                                                      for p in deps)):
        problems.append(("depends_on", deps, "write a mapping of task to parent label, e.g. "
                         "{purchase: click}"))
        del top["depends_on"]
    else:
        top["depends_on"] = tuple((p[0], p[1]) for p in deps)

def check_labels(spec: Any, problems: List[Tuple[str, Any, str]]) -> None:
    """A :class:`~ctr_model.feature_spec.FeatureSpec`'s ``labels``: two or more distinct columns, the
    first the ``label``; ``depends_on``: each task a later label than its parent."""
    labels = spec.labels
    if not isinstance(labels, tuple) or not all(isinstance(n, str) and n for n in labels):
        problems.append(("labels", labels, "write a list of label column names, e.g. [click, purchase]"))
        return
    if labels and spec.format == "criteo":
        problems.append(("labels", list(labels), "the criteo format has one label; use csv, tsv or "
                         "parquet with columns"))
    if len(labels) == 1 or len(set(labels)) != len(labels):
        problems.append(("labels", list(labels), "name two or more distinct label columns (one task "
                         "each), or use label for one"))
        return
    if labels and labels[0] != spec.label:
        problems.append(("label", spec.label, f"with labels, label is the first of them ({labels[0]!r}); "
                         f"remove label or put it first in labels"))
    for task, parent in spec.depends_on:
        order = spec.task_labels
        if task not in order[1:]:
            problems.append((f"depends_on.{task}", parent, f"{task!r} is not a task after the first: name "
                             f"one of labels {list(order[1:]) or '(declare labels first)'}"))
        elif parent not in order[:order.index(task)]:
            problems.append((f"depends_on.{task}", parent, f"the parent must be a label before {task!r} "
                             f"in labels: one of {list(order[:order.index(task)])}"))
    if len(dict(spec.depends_on)) != len(spec.depends_on):
        problems.append(("depends_on", [t for t, _ in spec.depends_on], "name each task once"))
