"""The Kubernetes-native deployment of the same gang, for the comparison with the Volcano Job.

Why this exists: the product's argument is that a parameter-server job deployed the native way (the
shape of PaddlePaddle's original CTR demo: pservers as a ReplicaSet, trainers as a batch Job,
discovery by DNS) has no gang semantics, so two such jobs competing for a cluster that fits one can
each start partially and hold their slots forever. ``bench/seed_comparison.py`` shows it on real
processes; this builder makes that deployment from the same :class:`TrainJobSpec`, image, entrypoint
and ``role_env`` contract as :func:`ctr_volcano.training.volcano.manifest.build_job`, so the comparison runs
our own code paths on both sides.

Shape (typed spec -> pure list of manifests, no I/O):

* **pservers**: one ReplicaSet of one replica per pserver index, ``<job>-pserver-<i>``, whose pod has
  ``hostname: <job>-pserver-<i>`` and ``subdomain: <job>``, so its DNS name is exactly the one
  Volcano's svc plugin gives (``<job>-pserver-<i>.<job>``). A single ReplicaSet of P replicas cannot
  carry the contract: its pods are interchangeable, and a Paddle pserver must know which endpoint of
  the list is its own (``VC_TASK_INDEX``). ``restartPolicy: Always`` (a ReplicaSet allows nothing else).
* **trainers**: one ``batch/v1`` Job ``<job>-trainer`` with ``completionMode: Indexed`` and
  ``completions = parallelism = T``: Kubernetes sets pod ``i``'s hostname to ``<job>-trainer-<i>``
  and writes ``i`` into the annotation ``batch.kubernetes.io/job-completion-index``, which feeds
  ``VC_TASK_INDEX`` by ``fieldRef``. ``backoffLimit`` is the spec's ``max_retry``.
* **discovery**: a headless Service ``<job>`` over every pod of the gang, with
  ``publishNotReadyAddresses`` (a pserver resolves its own name before it is Ready). Pods need no
  API rights.
* **env**: the spec's ``role_env`` (``CTR_*``) plus what Volcano's env and svc plugins would inject
  (``VC_TASK_INDEX``/``VK_TASK_INDEX``, ``VC_<TASK>_HOSTS``, ``VC_<TASK>_NUM``); the pods' entrypoint
  cannot tell the two deployments apart.
* **no gang**: pods go to ``scheduler_name`` (the default kube-scheduler) one by one. Volcano-only
  fields of the spec (``queue``, ``scheduler_name``, ``disable_network_policy``) are not used.
* **lifecycle**: the trainer Job completes when every trainer succeeded; the pservers then keep
  serving (a ReplicaSet restarts them) until the caller deletes the ReplicaSets, as a user of the
  original demo had to.
"""
from __future__ import annotations

import copy
from typing import Any, Dict, List

from ctr_model.contract import PSERVER, TRAINER, volcano_plugin_env
from ctr_volcano.errors import BadInput
from ctr_volcano.training.volcano.manifest import LABEL_JOB, pod_template
from ctr_volcano.training.volcano.names import pod_name
from ctr_volcano.training.volcano.spec import TrainJobSpec

__all__ = ["build_native", "pserver_set_name", "trainer_job_name", "DEFAULT_SCHEDULER",
           "LABEL_INDEX", "COMPLETION_INDEX_ANNOTATION"]

DEFAULT_SCHEDULER = "default-scheduler"
#: Label carrying a pserver's index (its ReplicaSet selects on it).
LABEL_INDEX = "ctr-volcano/task-index"
#: Where an Indexed Job's controller writes a pod's completion index.
COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"


def pserver_set_name(job: str, index: int) -> str:
    """Name of the ReplicaSet of pserver ``index`` (also its pods' hostname)."""
    return pod_name(job, PSERVER, index)


def trainer_job_name(job: str) -> str:
    """Name of the trainer Job; its pods' hostnames are ``<this>-<index>``."""
    return f"{job}-{TRAINER}"


def _hosts(spec: TrainJobSpec) -> Dict[str, List[str]]:
    return {role: [f"{pod_name(spec.name, role, i)}.{spec.name}" for i in range(count)]
            for role, count in ((PSERVER, spec.pservers), (TRAINER, spec.trainers))}


def _with_env(template: Dict[str, Any], extra: List[Dict[str, Any]]) -> Dict[str, Any]:
    out = copy.deepcopy(template)
    container = out["spec"]["containers"][0]
    names = {e["name"] for e in extra}
    container["env"] = [e for e in container["env"] if e["name"] not in names] + extra
    return out


def _owner_refs(spec: TrainJobSpec) -> List[Dict[str, Any]]:
    return [{"apiVersion": r["apiVersion"], "kind": r["kind"], "name": r["name"], "uid": r["uid"],
             "controller": False, "blockOwnerDeletion": False} for r in spec.owner_references]


def _metadata(spec: TrainJobSpec, name: str, labels: Dict[str, str]) -> Dict[str, Any]:
    meta: Dict[str, Any] = {"name": name, "namespace": spec.namespace, "labels": labels}
    if spec.owner_references:
        meta["ownerReferences"] = _owner_refs(spec)
    return meta


def build_native(spec: TrainJobSpec, scheduler_name: str = DEFAULT_SCHEDULER) -> List[Dict[str, Any]]:
    """Render ``spec`` as the native deployment: Service, pserver ReplicaSets, trainer Job.

    Args:
        spec: the same validated spec the Volcano builder takes.
        scheduler_name: the pods' scheduler (the default kube-scheduler unless told otherwise).

    Returns:
        The manifests in apply order: the headless Service, one ReplicaSet per pserver, the
        trainer Job.
    """
    if not scheduler_name or len(scheduler_name) > 63:
        raise BadInput("scheduler_name", scheduler_name, "name the scheduler, e.g. 'default-scheduler'")
    hosts = _hosts(spec)
    objects: List[Dict[str, Any]] = []
    common_labels = {"app.kubernetes.io/name": "ctr-volcano", "app.kubernetes.io/component": "training",
                     LABEL_JOB: spec.name}

    objects.append({
        "apiVersion": "v1", "kind": "Service",
        "metadata": _metadata(spec, spec.name, dict(common_labels)),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {LABEL_JOB: spec.name},
            "ports": [{"name": "ps", "port": spec.ps_port, "targetPort": spec.ps_port, "protocol": "TCP"},
                      {"name": "gloo", "port": spec.gloo_port, "targetPort": spec.gloo_port,
                       "protocol": "TCP"}],
        },
    })

    base = pod_template(spec, PSERVER, spec.pserver_resources)
    for i in range(spec.pservers):
        plugin_env = volcano_plugin_env(PSERVER, i, hosts)
        tpl = _with_env(base, [{"name": k, "value": v} for k, v in sorted(plugin_env.items())])
        selector = {LABEL_JOB: spec.name, "ctr-volcano/role": PSERVER, LABEL_INDEX: str(i)}
        tpl["metadata"]["labels"].update(selector)
        tpl["spec"].update(schedulerName=scheduler_name, restartPolicy="Always",
                           hostname=pserver_set_name(spec.name, i), subdomain=spec.name)
        objects.append({
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": _metadata(spec, pserver_set_name(spec.name, i), dict(tpl["metadata"]["labels"])),
            "spec": {"replicas": 1, "selector": {"matchLabels": selector}, "template": tpl},
        })

    index_ref = {"fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX_ANNOTATION}']"}}
    plugin_env = {k: v for k, v in volcano_plugin_env(TRAINER, 0, hosts).items()
                  if k not in ("VC_TASK_INDEX", "VK_TASK_INDEX")}
    trainer_env: List[Dict[str, Any]] = [{"name": k, "value": v} for k, v in sorted(plugin_env.items())]
    trainer_env += [{"name": "VC_TASK_INDEX", "valueFrom": copy.deepcopy(index_ref)},
                    {"name": "VK_TASK_INDEX", "valueFrom": copy.deepcopy(index_ref)}]
    tpl = _with_env(pod_template(spec, TRAINER, spec.trainer_resources), trainer_env)
    tpl["spec"].update(schedulerName=scheduler_name, restartPolicy="Never", subdomain=spec.name)
    job_spec: Dict[str, Any] = {
        "completionMode": "Indexed",
        "completions": spec.trainers,
        "parallelism": spec.trainers,
        "backoffLimit": spec.max_retry,
        "template": tpl,
    }
    if spec.ttl_seconds_after_finished is not None:
        job_spec["ttlSecondsAfterFinished"] = spec.ttl_seconds_after_finished
    objects.append({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": _metadata(spec, trainer_job_name(spec.name), dict(tpl["metadata"]["labels"])),
        "spec": job_spec,
    })
    return objects
