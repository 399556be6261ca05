"""Deterministic, Kubernetes-valid names for the Volcano Job of one KFP task.

Why deterministic: a retried KFP step (or a restarted launcher pod) must find the Job its earlier
attempt created instead of creating a duplicate gang. The name is derived only from the KFP run id and
the task name, so every attempt of the same task computes the same name.

Why so short: Volcano names pods ``<job>-<task>-<index>``, uses the job name as the headless Service
name (a DNS-1035 label: starts with a letter, at most 63 characters) and as every pod's DNS subdomain,
and uses the pod name as the pod's hostname (a DNS-1123 label, at most 63 characters).
"""
from __future__ import annotations

import hashlib
import re

__all__ = ["MAX_JOB_NAME", "job_name_for", "pod_name"]

#: Longest job name we generate: leaves room for ``-trainer-99999`` inside a 63-character pod name.
MAX_JOB_NAME = 48


def _slug(text: str) -> str:
    text = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return re.sub(r"-+", "-", text)


def job_name_for(run_id: str, task_name: str, prefix: str = "ctr") -> str:
    """The Job name of KFP task ``task_name`` in run ``run_id``.

    The name is ``<prefix>-<task slug>-<10 hex digits of sha256(run_id, task_name)>``, cut to
    :data:`MAX_JOB_NAME` characters; the hash keeps names of different runs apart even when the
    readable part is cut.

    Args:
        run_id: the KFP run (pipeline job) id; any non-empty string.
        task_name: the KFP task name (e.g. ``train-ctr``); any non-empty string.
        prefix: readable start of the name; must start with a letter.

    Returns:
        A DNS-1035 label of at most :data:`MAX_JOB_NAME` characters.
    """
    from ctr_volcano.errors import BadInput

    if not run_id:
        raise BadInput("run_id", run_id, "pass the KFP run id (dsl.PIPELINE_JOB_ID_PLACEHOLDER) "
                                         "so that a retried step finds its job")
    if not task_name:
        raise BadInput("task_name", task_name, "pass the KFP task name "
                                               "(dsl.PIPELINE_TASK_NAME_PLACEHOLDER)")
    prefix_slug = _slug(prefix)
    if not prefix_slug or not prefix_slug[0].isalpha():
        raise BadInput("prefix", prefix, "use a prefix that starts with a letter, e.g. 'ctr'")
    digest = hashlib.sha256(f"{run_id}\0{task_name}".encode("utf-8")).hexdigest()[:10]
    room = MAX_JOB_NAME - len(prefix_slug) - len(digest) - 2
    middle = _slug(task_name)[:max(room, 0)].strip("-")
    parts = [prefix_slug[:MAX_JOB_NAME - len(digest) - 1]] + ([middle] if middle else []) + [digest]
    return "-".join(parts)


def pod_name(job: str, task: str, index: int) -> str:
    """The name Volcano gives pod ``index`` of ``task`` (``<job>-<task>-<index>``)."""
    return f"{job}-{task}-{index}"
