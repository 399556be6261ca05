"""What the multi-task families (``esmm``, ``mmoe``) share: towers, how a task that depends on another
is composed and trained, and the same in numpy.

A multi-task family's ``build`` returns one *conditional* probability ``q_t`` per task (``[-1, 1]``),
in the spec's ``labels`` order; its numpy ``logits`` returns them as ``[n, tasks]``. A task declared
``depends_on`` a parent (a conversion observed only after a click) is, over impressions,
``p_t = q_t * p_parent`` (pCTCVR = pCVR x pCTR); a root task's ``p_t`` is ``q_t``. The scorer's output
per task is ``p_t``: the probability of that label's 1 on an impression, what the label column holds.

How a dependent task is trained is the family's (:class:`Tasks` ``loss``):

- ``product`` (ESMM, Ma et al., SIGIR 2018): the log loss of ``p_t`` against the task's label over
  every impression, so ``q_t`` (the CVR) is learnt over the whole space, never on clicked rows alone;
- ``masked`` (MMoE, Ma et al., KDD 2018, as used for CVR): the log loss of ``q_t`` on the rows whose
  parent label is 1 (the rows where the task is observed).

Root tasks are trained on their own label over every row. The loss of a row is the sum over tasks.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence

__all__ = ["Tasks", "LOSSES", "task_count", "check_tasks", "tasks_refusal", "tower", "tower_names", "np_tower", "fc", "np_fc",
           "parent_index", "task_losses", "np_impression_probs", "EPS"]

LOSSES = ("product", "masked")
#: Probabilities are clipped to ``[EPS, 1 - EPS]`` inside the log loss.
EPS = 1e-7


@dataclass(frozen=True)
class Tasks:
    """A multi-task family's tasks.

    Attributes:
        loss: ``product`` or ``masked`` (see the module docstring), for the tasks with a parent.
        needs_parent: every task after the first must depend on another (``esmm``).
        fixed: the number of tasks the family takes (``esmm``: 2); ``None``: any number >= 2.
    """

    loss: str
    needs_parent: bool = False
    fixed: Optional[int] = None


def task_count(config: Any) -> int:
    """The number of tasks of a multi-task config (``model_config.tasks``, set from the spec)."""
    return int(config.model_config["tasks"])


def tasks_refusal(model: str, labels: Sequence[str], parents: Mapping[str, str]) -> Optional[str]:
    """``None``, or why family ``model`` cannot train these labels (one line with the fix): a
    single-task family on several labels, or a multi-task family on labels it cannot train."""
    from ctr_model.models import MULTI_TASK, family

    tasks = family(model).tasks
    if tasks is None:
        if len(labels) < 2:
            return None
        return (f"the data has {len(labels)} labels ({', '.join(labels)}); train a multi-task model "
                f"({', '.join(MULTI_TASK)}), or prep with one label and list the others under ignore")
    return check_tasks(model, tasks, labels, parents)


def check_tasks(model: str, tasks: Tasks, labels: Sequence[str], parents: Mapping[str, str]) -> Optional[str]:
    """``None``, or why multi-task family ``model`` cannot train these labels (one line with the fix)."""
    if len(labels) < 2:
        from ctr_model.models import FAMILIES, MULTI_TASK

        single = ", ".join(f for f in FAMILIES if f not in MULTI_TASK)
        return (f"model {model!r} trains several labels; declare them in the feature spec, e.g. "
                f"labels: [click, purchase], or train a single-task model ({single})")
    if tasks.fixed is not None and len(labels) != tasks.fixed:
        return (f"model {model!r} trains exactly {tasks.fixed} labels, the spec has {len(labels)} "
                f"({', '.join(labels)}); keep {tasks.fixed} or train model mmoe")
    if tasks.needs_parent:
        lone = [t for t in labels[1:] if t not in parents]
        if lone:
            return (f"model {model!r} needs each later task to depend on an earlier one; add depends_on: "
                    f"{{{lone[0]}: {labels[0]}}} to the feature spec, or train model mmoe")
    return None


def parent_index(labels: Sequence[str], parents: Mapping[str, str]) -> List[Optional[int]]:
    """For each task, the index of the task it depends on (``None`` for a root task)."""
    return [labels.index(parents[t]) if t in parents else None for t in labels]


def fc(x, size: int, name: str, fan_in: int, activation=None):
    """A fully connected layer ``{name}.w`` ``[in, size]``, ``{name}.b`` (Paddle)."""
    import paddle

    return paddle.static.nn.fc(
        x, size=size, activation=activation,
        weight_attr=paddle.ParamAttr(name=f"{name}.w", initializer=paddle.nn.initializer.Normal(
            std=1.0 / math.sqrt(fan_in))),
        bias_attr=paddle.ParamAttr(name=f"{name}.b", initializer=paddle.nn.initializer.Constant(0.0)))


def np_fc(params: Dict[str, Any], x, name: str):
    """:func:`fc` without its activation, in numpy."""
    return x @ params[f"{name}.w"] + params[f"{name}.b"]


def tower(x, width: int, sizes: Sequence[int], prefix: str):
    """A task's tower: ``{prefix}fc0..`` (ReLU) and ``{prefix}out`` (1 wide): its probability ``[-1, 1]``."""
    import paddle

    for i, size in enumerate(sizes):
        x = fc(x, size, f"{prefix}fc{i}", width, activation="relu")
        width = size
    return paddle.nn.functional.sigmoid(fc(x, 1, f"{prefix}out", width))


def tower_names(sizes: Sequence[int], prefix: str) -> List[str]:
    """:func:`tower`'s parameter names in forward order."""
    names: List[str] = []
    for i in range(len(sizes)):
        names += [f"{prefix}fc{i}.w", f"{prefix}fc{i}.b"]
    return names + [f"{prefix}out.w", f"{prefix}out.b"]


def np_tower(params: Dict[str, Any], x, sizes: Sequence[int], prefix: str):
    """:func:`tower` in numpy: ``[n]`` probabilities (float32 network, float64 sigmoid)."""
    import numpy as np

    for i in range(len(sizes)):
        x = np.maximum(np_fc(params, x, f"{prefix}fc{i}"), 0.0)
    logit = np_fc(params, x, f"{prefix}out")[:, 0].astype(np.float64)
    return 1.0 / (1.0 + np.exp(-logit))


def task_losses(q: Sequence[Any], labels: Sequence[Any], parents: Sequence[Optional[int]], loss: str):
    """``(impression probabilities p_t, per-row loss [-1, 1])`` of a multi-task program."""
    import paddle

    ys = [paddle.cast(y, "float32") for y in labels]
    p: List[Any] = []
    for t, qt in enumerate(q):
        parent = parents[t]
        p.append(qt if parent is None else qt * p[parent])
    terms = []
    for t, qt in enumerate(q):
        parent = parents[t]
        if parent is None or loss == "product":
            terms.append(_log_loss(p[t], ys[t]))
        else:                                   # masked: observed only where the parent is 1
            terms.append(_log_loss(qt, ys[t]) * ys[parent])
    return p, paddle.add_n(terms)


def _log_loss(prob, y):
    import paddle

    prob = paddle.clip(prob, EPS, 1.0 - EPS)
    return -(y * paddle.log(prob) + (1.0 - y) * paddle.log(1.0 - prob))


def np_impression_probs(q, parents: Sequence[Optional[int]]):
    """``[n, tasks]`` conditional probabilities -> impression probabilities (float64)."""
    import numpy as np

    p = np.asarray(q, dtype=np.float64).copy()
    for t, parent in enumerate(parents):
        if parent is not None:
            p[:, t] = p[:, t] * p[:, parent]
    return p
