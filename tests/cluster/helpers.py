"""Small polling and inspection helpers shared by the cluster-tier tests."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import pytest

__all__ = ["root_image", "wait_for", "job_pods", "set_outcome", "get_job", "get_podgroups", "pod_phases",
           "bound_pods", "make_spec", "write_training_outputs", "LauncherThread", "job_phase", "running_pods", "finish_trainers", "GangMonitor", "OUTCOME_LABEL", "AFTER_ANNOTATION", "MESSAGE_ANNOTATION",
           "EXIT_CODE_ANNOTATION", "plain_job", "SHIPPED_RBAC", "ctr_volcano_cli", "create_queue"]

#: The launcher's RBAC as shipped to users; the cluster tier runs every launcher with its token.
SHIPPED_RBAC = Path(__file__).resolve().parents[2] / "deploy" / "rbac.yaml"
OUTCOME_LABEL = "kwok-test/outcome"
AFTER_ANNOTATION = "kwok-test/after"
MESSAGE_ANNOTATION = "kwok-test/message"
EXIT_CODE_ANNOTATION = "kwok-test/exit-code"


def ctr_volcano_cli(*args: str, timeout: float = 600):
    """Run ``ctr-volcano ARGS`` from this checkout; fail the test with its output unless it exits 0."""
    import os
    import subprocess
    import sys

    repo = SHIPPED_RBAC.parents[1]
    env = dict(os.environ, PYTHONPATH=str(repo))
    proc = subprocess.run([sys.executable, "-m", "ctr_volcano.app.cli.main", *args], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"ctr-volcano {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


#: How far below the planted oracle a cluster gang's model may score and still count as trained.
#: The quality goal (within 0.02 of the oracle) is measured quietly by ``bench/models.py``; here
#: 2x2 async gangs share 2 loaded cores with the control plane, and on the planted 180k rows at 3
#: epochs they scored 0.746-0.764 against an oracle of 0.773 (local 2x2 gangs on the same shared
#: box: 0.760-0.765; docs/training.md), so these tests check that the gang trained a real model,
#: not the goal itself.
TRAINED_GAP = 0.05


def assert_trained(auc: float, oracle: float, what: str = "") -> None:
    """The gang's model learned the planted signal: within :data:`TRAINED_GAP` of the oracle."""
    assert abs(auc - oracle) <= TRAINED_GAP, (what, auc, oracle)


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


# ----------------------------------------------------------------------------- the product's launcher
def make_spec(sandbox, name: str, output_dir: str, *, pservers: int = 2, trainers: int = 2,
              cpu: str = "1", **overrides: Any):
    """A :class:`TrainJobSpec` for this sandbox: pods pinned to its node pool, small requests."""
    from ctr_volcano.training.volcano.spec import Resources, TrainJobSpec

    res = Resources(cpu=cpu, memory="1Gi")
    fields: Dict[str, Any] = dict(
        name=name, namespace=sandbox.namespace, image="example.invalid/ctr-trainer:kwok",
        data_dir="/mnt/ctr/data", output_dir=output_dir, pservers=pservers, trainers=trainers,
        pserver_resources=res, trainer_resources=res, node_selector=sandbox.node_selector,
        ttl_seconds_after_finished=None, schedule_timeout_s=300, max_retry=1,
        train_config={"epochs": 1})
    fields.update(overrides)
    return TrainJobSpec(**fields)


def write_training_outputs(output_dir: str, auc: float = 0.75) -> None:
    """What trainer-0 writes at the end of a real run (kwok runs no process, so the test does)."""
    import json
    import os

    os.makedirs(os.path.join(output_dir, "model"), exist_ok=True)
    with open(os.path.join(output_dir, "model", "SIMULATED"), "w") as fh:
        fh.write("kwok pods run no process; this stands for the exported model\n")
    with open(os.path.join(output_dir, "metrics.json"), "w") as fh:
        json.dump({"auc": auc, "simulated": True}, fh)


class LauncherThread:
    """Runs ``VolcanoLauncher(...).run()`` in a thread; keeps its log lines, result or error."""

    def __init__(self, kubeconfig: str, spec, *, poll_s: float = 0.3, explain_every_s: float = 1.0,
                 **kwargs: Any) -> None:
        import threading

        from ctr_volcano.training.volcano.client import KubeClient
        from ctr_volcano.training.volcano.launcher import VolcanoLauncher

        self.lines: List[str] = []
        self.result: Any = None
        self.error: Optional[BaseException] = None
        self.client = KubeClient.from_kubeconfig(kubeconfig)
        self.launcher = VolcanoLauncher(self.client, spec, log=self.lines.append, poll_s=poll_s,
                                        explain_every_s=explain_every_s, handle_signals=False, **kwargs)
        self.thread = threading.Thread(target=self._run, name=f"launcher-{spec.name}", daemon=True)

    def _run(self) -> None:
        try:
            self.result = self.launcher.run()
        except BaseException as exc:  # handed to the test
            self.error = exc
        finally:
            self.client.close()

    def start(self) -> "LauncherThread":
        self.thread.start()
        return self

    def join(self, timeout: float = 120.0) -> "LauncherThread":
        self.thread.join(timeout)
        if self.thread.is_alive():
            self.launcher.cancel()
            self.thread.join(30)
            pytest.fail(f"launcher {self.launcher.name} still running after {timeout:.0f}s; log:\n"
                        + "\n".join(self.lines[-30:]))
        return self

    @property
    def log(self) -> str:
        return "\n".join(self.lines)


def job_phase(api, namespace: str, name: str) -> Optional[str]:
    job = get_job(api, namespace, name)
    if job is None:
        return None
    return ((job.get("status") or {}).get("state") or {}).get("phase") or "Pending"


def running_pods(api, namespace: str, job: str) -> List[Any]:
    return [p for p in job_pods(api, namespace, job)
            if p.status.phase == "Running" and p.metadata.deletion_timestamp is None]


def finish_trainers(api, namespace: str, job: str, output_dir: str) -> None:
    """Simulate a successful training: trainer-0 writes the outputs, every trainer exits 0."""
    write_training_outputs(output_dir)
    for pod in running_pods(api, namespace, job):
        if (pod.metadata.labels or {}).get("volcano.sh/task-spec") == "trainer":
            set_outcome(api, namespace, pod.metadata.name, "succeed")


class GangMonitor:
    """Samples, every ``interval`` seconds, how many live pods of each job are bound to a node.

    A gang is *partial* when it shows ``0 < bound < gang`` in two consecutive samples before it was
    ever whole (the scheduler binds a gang's pods one API call after another within milliseconds,
    so one sample can catch the middle of that burst; a real partial gang persists).
    """

    def __init__(self, api, namespace: str, jobs: List[str], gang: int, interval: float = 0.2):
        import threading

        self.api, self.namespace, self.jobs, self.gang = api, namespace, list(jobs), gang
        self.interval = interval
        self.samples: List[Dict[str, int]] = []
        self.times: List[float] = []      # time.monotonic() of each sample
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gang-monitor", daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            pods = _core(self.api).list_namespaced_pod(self.namespace).items
            counts = {j: 0 for j in self.jobs}
            for p in pods:
                job = (p.metadata.labels or {}).get("volcano.sh/job-name")
                if (job in counts and p.spec.node_name and p.metadata.deletion_timestamp is None
                        and p.status.phase not in ("Succeeded", "Failed")):
                    counts[job] += 1
            self.samples.append(counts)
            self.times.append(time.monotonic())
            self._stop.wait(self.interval)

    def start(self) -> "GangMonitor":
        self._thread.start()
        return self

    def stop(self) -> "GangMonitor":
        self._stop.set()
        self._thread.join(10)
        return self

    def partial_jobs(self) -> List[str]:
        partial = []
        for job in self.jobs:
            seq = [s[job] for s in self.samples]
            first_whole = next((i for i, n in enumerate(seq) if n >= self.gang), len(seq))
            before = seq[:first_whole]
            if any(0 < a < self.gang and 0 < b < self.gang for a, b in zip(before, before[1:])):
                partial.append(job)
        return partial


def create_queue(api, name: str, *, weight: int = 1, reclaimable: bool = False,
                 capability: Optional[Dict[str, str]] = None, deserved: Optional[Dict[str, str]] = None) -> None:
    """Create a Volcano Queue (the product's builder, ``ctr-volcano render-queue``'s) and wait until
    its controller reports it Open."""
    from ctr_volcano.training.volcano.queue import QueueSpec, build_queue

    co = _co(api)
    co.create_cluster_custom_object("scheduling.volcano.sh", "v1beta1", "queues", build_queue(QueueSpec(
        name, weight=weight, reclaimable=reclaimable, capability=capability or {}, deserved=deserved or {})))
    wait_for(f"queue {name} Open", lambda: (co.get_cluster_custom_object(
        "scheduling.volcano.sh", "v1beta1", "queues", name).get("status") or {}).get("state") == "Open",
        timeout=30)


def root_image(mountinfo: str) -> str:
    """The image tree a container's root is made of: the ``lowerdir`` of the overlay mounted at
    ``/`` in a ``/proc/<pid>/mountinfo`` text (``""`` when its root is no overlay: the host's tree)."""
    roots = [line.split(" - ", 1)[1].split() for line in mountinfo.splitlines()
             if " - " in line and line.split()[4] == "/"]
    if not roots or roots[-1][0] != "overlay":
        return ""
    options = dict(o.partition("=")[::2] for o in roots[-1][2].split(","))
    return options.get("lowerdir", "")
