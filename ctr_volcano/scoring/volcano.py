"""Batch scoring fanned out on a cluster: the workers as a Volcano Job of N scoring pods sharing one
claim, over the same units as ``--workers N`` on one machine (:mod:`.run`), so the shards are the same
bytes whichever runs them.

The Job is prep's fan-out Job (:func:`ctr_volcano.training.volcano.prep_job.build_prep_job`: a gang
of N, ``VC_TASK_INDEX`` from the env plugin, exit 2 ends the Job, a failed pod restarts) with the
scoring worker's module as its entrypoint and one phase, ``score``; it is watched, diagnosed and
deleted by prep's :class:`~ctr_volcano.training.volcano.prep_job.VolcanoRunner`. The inputs, the work
directory and the output are on the claim; the output is copied to ``args.out`` at the end.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import shutil
from typing import Any, Callable, Dict

from ctr_model.space import copy_tree
from ctr_volcano.scoring.run import ScoreArgs, score
from ctr_volcano.scoring.unit import PHASE
from ctr_volcano.training.volcano.handoff import put_on_claim
from ctr_volcano.training.volcano.prep_job import PrepPods, VolcanoRunner, claim_root
from ctr_volcano.util.outputs import room_for

__all__ = ["SCORE_ENTRYPOINT", "VolcanoScoringRunner", "score_on_volcano", "score_step_pods"]

logger = logging.getLogger(__name__)

#: The scoring pods' command before ``score --work DIR --count N`` (argv, never a shell string).
SCORE_ENTRYPOINT = ("python", "-m", "ctr_volcano.scoring.unit")


class VolcanoScoringRunner:
    """A :class:`~ctr_volcano.scoring.run.Runner`: the workers as the pods of one Volcano Job."""

    shared_dirs = True     # the pods run as their own UID

    def __init__(self, client: Any, pods: PrepPods, log: Callable[[str], None] = logger.info):
        self.inner = VolcanoRunner(client, dataclasses.replace(pods, entrypoint=SCORE_ENTRYPOINT), log=log)

    def run(self, work: str, count: int) -> None:
        self.inner.run(PHASE, work, count)


def score_on_volcano(args: ScoreArgs, pods: PrepPods, client: Any,
                     log: Callable[[str], None] = logger.info) -> Dict[str, Any]:
    """Score ``args`` with ``args.workers`` scoring pods; returns ``scores.json``'s document.

    Inputs already on the claim are read where they are, others are copied to
    ``<mount>/ctr-runs/<job>/inputs/<k>``; the pods write ``<mount>/ctr-runs/<job>/scores``, which is
    copied to ``args.out`` and removed.

    Raises:
        BadInput: the claim is not mounted at ``pods.mount_path``, or a bad argument or input.
    """
    root = claim_root(pods)
    inputs = []
    for k, path in enumerate(args.inputs):
        on_claim, copied = put_on_claim(path, pods.mount_path, os.path.join(root, "inputs", str(k)))
        inputs.append(on_claim)
        if copied:
            log(f"score: copied {path} to the claim ({on_claim})")
    out = os.path.join(root, "scores")
    doc = score(dataclasses.replace(args, inputs=tuple(inputs), out=out),
                runner=VolcanoScoringRunner(client, pods, log=log))
    with room_for("out", args.out):
        copy_tree(out, args.out, dirs_exist_ok=True)
    shutil.rmtree(out, ignore_errors=True)
    return doc


def score_step_pods(args: ScoreArgs, *, pvc_name: str, pvc_mount_path: str, namespace: str = "", image: str = "",
                    queue: str = "default", cpu: str = "1", memory: str = "2Gi") -> Dict[str, Any]:
    """The ``score_ctr`` step with ``fanout`` > 0 and a claim: its parameters turned into pods (the
    Job named after the step's output, so one per run and task; the step's namespace and image by
    default), then :func:`score_on_volcano` through the in-cluster client."""
    import hashlib

    from ctr_volcano.images import component_image
    from ctr_volcano.training.volcano.client import KubeClient, in_cluster_namespace

    name = "ctr-score-" + hashlib.sha256(os.path.abspath(args.out).encode()).hexdigest()[:10]
    pods = PrepPods(namespace=namespace or in_cluster_namespace(), image=image or component_image(),
                    claim_name=pvc_name, mount_path=pvc_mount_path, job_name=name, queue=queue, cpu=cpu,
                    memory=memory)
    return score_on_volcano(args, pods, KubeClient.auto())
