"""Small polling and inspection helpers shared by the cluster-tier tests."""
from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Optional

import pytest

__all__ = ["wait_for", "job_pods", "set_outcome", "get_job", "get_podgroups", "pod_phases",
           "bound_pods", "OUTCOME_LABEL", "AFTER_ANNOTATION", "MESSAGE_ANNOTATION",
           "EXIT_CODE_ANNOTATION", "plain_job"]

OUTCOME_LABEL = "kwok-test/outcome"
AFTER_ANNOTATION = "kwok-test/after"
MESSAGE_ANNOTATION = "kwok-test/message"
EXIT_CODE_ANNOTATION = "kwok-test/exit-code"


def wait_for(what: str, probe: Callable[[], Any], timeout: float = 60.0, interval: float = 0.25,
             cluster=None) -> Any:
    """Poll ``probe`` until it returns something truthy (returned); fail naming ``what``.

    With ``cluster`` given, a dead control-plane component fails the test at once with its log.
    """
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        if cluster is not None:
            dead = [n for n, ok in cluster.alive().items() if not ok]
            if dead:
                pytest.fail(f"while waiting for {what}: components died: {dead}\n"
                            + "\n".join(cluster.log_tail(n) for n in dead))
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


def _core(api):
    from kubernetes import client
    return client.CoreV1Api(api)


def _co(api):
    from kubernetes import client
    return client.CustomObjectsApi(api)


def job_pods(api, namespace: str, job: str) -> List[Any]:
    """The pods Volcano created for ``job`` (label ``volcano.sh/job-name``), sorted by name."""
    pods = _core(api).list_namespaced_pod(namespace, label_selector=f"volcano.sh/job-name={job}").items
    return sorted(pods, key=lambda p: p.metadata.name)


def pod_phases(api, namespace: str, job: str) -> Dict[str, str]:
    return {p.metadata.name: p.status.phase for p in job_pods(api, namespace, job)
            if p.metadata.deletion_timestamp is None}


def bound_pods(api, namespace: str, job: str) -> List[str]:
    return [p.metadata.name for p in job_pods(api, namespace, job) if p.spec.node_name]


def set_outcome(api, namespace: str, pod: str, outcome: str, *, after: Optional[str] = None,
                message: Optional[str] = None, exit_code: Optional[int] = None) -> None:
    """Tell kwok how a Running pod ends: ``succeed`` or ``fail`` (see kwok-stages.yaml)."""
    annotations: Dict[str, str] = {}
    if after:
        annotations[AFTER_ANNOTATION] = after
    if message:
        annotations[MESSAGE_ANNOTATION] = message
    if exit_code is not None:
        annotations[EXIT_CODE_ANNOTATION] = str(exit_code)
    body: Dict[str, Any] = {"metadata": {"labels": {OUTCOME_LABEL: outcome}}}
    if annotations:
        body["metadata"]["annotations"] = annotations
    _core(api).patch_namespaced_pod(pod, namespace, body)


def get_job(api, namespace: str, name: str) -> Optional[Dict[str, Any]]:
    from kubernetes import client
    try:
        return _co(api).get_namespaced_custom_object("batch.volcano.sh", "v1alpha1", namespace, "jobs", name)
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise


def get_podgroups(api, namespace: str) -> List[Dict[str, Any]]:
    return _co(api).list_namespaced_custom_object("scheduling.volcano.sh", "v1beta1", namespace,
                                                  "podgroups")["items"]


def plain_job(name: str, *, pservers: int, trainers: int, cpu: str = "1",
              node_selector: Optional[Dict[str, str]] = None, queue: str = "default",
              max_retry: int = 3, priority_class: Optional[str] = None) -> Dict[str, Any]:
    """A hand-written Volcano Job (used only to check the cluster itself, not the product)."""
    def task(role: str, replicas: int, policies=None) -> Dict[str, Any]:
        spec: Dict[str, Any] = {
            "restartPolicy": "Never",
            "containers": [{"name": role, "image": "example.invalid/none:0",
                            "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]}
        if node_selector:
            spec["nodeSelector"] = dict(node_selector)
        t: Dict[str, Any] = {"name": role, "replicas": replicas, "minAvailable": replicas,
                             "template": {"metadata": {"labels": {"role": role}}, "spec": spec}}
        if policies:
            t["policies"] = policies
        return t

    spec: Dict[str, Any] = {
        "schedulerName": "volcano", "queue": queue, "minAvailable": pservers + trainers,
        "maxRetry": max_retry,
        "policies": [{"event": "PodFailed", "action": "RestartJob"},
                     {"event": "PodEvicted", "action": "RestartJob"}],
        "tasks": [task("pserver", pservers),
                  task("trainer", trainers, [{"event": "TaskCompleted", "action": "CompleteJob"}])],
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": name}, "spec": spec}
