"""The prep fan-out's workers (:mod:`ctr_volcano.data.prep.fanout`) as the pods of a Volcano Job, one
Job per phase (:class:`VolcanoRunner`).

Why here: every Volcano Job the product creates is built, checked and watched in this package, through
its one thin client (:mod:`.client`), with the webhook's checks done client-side (:func:`.manifest.check_job`).

Why a Volcano Job and not KFP's ``ParallelFor``: the phases need a barrier between them (every block
parsed before the merge places one), which a Job gives as "all its pods succeeded"; a ``ParallelFor``
would compile N tasks into the pipeline's graph, fixed at compile time and hidden from a caller of
``prepare_ctr_data`` outside KFP, while a Job's N is a parameter and runs the same way from the CLI.

Why a gang (``minAvailable`` = N): a worker's share is fixed by N, so a phase ends only when all N
have run; a half-placed phase would hold its nodes while the rest waited, and a gang that cannot be
placed says why on its PodGroup. Why ``RestartPod`` on a failure: each worker's phase is idempotent (it
rewrites its own files whole), so only the failed pod runs again, up to ``max_retry``; exit 2 (the
input was refused: the worker left its :class:`~ctr_volcano.errors.BadInput` in the work directory)
ends the Job at once.

Watching a phase follows the training launcher's pattern (:mod:`.api_calls`): every API call is
retried by error family (an API server restarting is waited out for ``api_outage_s``, then reported
as an outage), every wait ends at once on SIGTERM/SIGINT, and the phase's Job is deleted on every
way out, a signal included (then :class:`~ctr_volcano.errors.Interrupted` is raised).
"""
from __future__ import annotations

import hashlib
import logging
import os
import shutil
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from ctr_model.contract import EXIT_BAD_INPUT
from ctr_model.feature_spec import FeatureSpec
from ctr_model.space import copy_tree
from ctr_volcano.data.prep.config import PrepConfig
from ctr_volcano.data.prep.fanout import FanoutFailed, prep_fanout, raise_worker_error
from ctr_volcano.errors import BadInput, Interrupted, TransientError
from ctr_volcano.training.params import DEFAULT_SCHEDULE_TIMEOUT_S
from ctr_volcano.training.volcano.api_calls import ApiCalls, Cancelled
from ctr_volcano.training.volcano.api_types import JOBS
from ctr_volcano.training.volcano.diagnosis import pod_problems, podgroup_summary
from ctr_volcano.training.volcano.handoff import RUNS_DIR, put_on_claim
from ctr_volcano.training.volcano.manifest import LABEL_JOB, check_job
from ctr_volcano.util.outputs import room_for

__all__ = ["PrepPods", "build_prep_job", "VolcanoRunner", "claim_root", "prep_on_volcano", "prep_step_pods"]

logger = logging.getLogger(__name__)

#: The pods' command (argv, never a shell string); the phase, work directory and N follow.
ENTRYPOINT = ("python", "-m", "ctr_volcano.data.prep.fanout")
_DONE = {"Completed"}
_FAILED = {"Failed", "Terminated", "Aborted"}


@dataclass(frozen=True)
class PrepPods:
    """Where and how the prep pods run. The claim holds the input, the work directory and the output,
    mounted at ``mount_path`` in the pods and in the process that coordinates them."""

    namespace: str
    image: str
    claim_name: str
    mount_path: str
    job_name: str = "ctr-prep"
    queue: str = "default"
    cpu: str = "1"
    memory: str = "2Gi"
    max_retry: int = 2
    run_as_user: int = 1000
    node_selector: Tuple[Tuple[str, str], ...] = ()
    service_account: str = ""
    schedule_timeout_s: float = DEFAULT_SCHEDULE_TIMEOUT_S
    timeout_s: float = 24 * 3600.0
    poll_s: float = 2.0
    api_outage_s: float = 120.0
    cleanup_s: float = 15.0
    owner_references: Tuple[Mapping[str, Any], ...] = field(default=())
    #: The pods' module (argv before the phase): prep's fan-out, or another fan-out over the same
    #: units (batch scoring's, :mod:`ctr_volcano.scoring.volcano`).
    entrypoint: Tuple[str, ...] = ENTRYPOINT


def build_prep_job(pods: PrepPods, phase: str, work: str, count: int) -> Dict[str, Any]:
    """The Volcano Job of one phase: ``count`` pods of task ``prep``, worker ``i`` told its index by
    the env plugin (``VC_TASK_INDEX``). Pure; passes :func:`~.manifest.check_job`."""
    name = f"{pods.job_name}-{phase}"
    resources = {"cpu": pods.cpu, "memory": pods.memory}
    container = {
        "name": "prep", "image": pods.image,
        "command": [*pods.entrypoint, phase, "--work", work, "--count", str(count)],
        "env": [{"name": "PYTHONUNBUFFERED", "value": "1"}],
        "resources": {"requests": resources, "limits": resources},
        "volumeMounts": [{"name": "data", "mountPath": pods.mount_path}],
        "securityContext": {"allowPrivilegeEscalation": False, "runAsNonRoot": True,
                            "capabilities": {"drop": ["ALL"]}},
    }
    pod_spec: Dict[str, Any] = {
        "schedulerName": "volcano", "restartPolicy": "Never", "containers": [container],
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": pods.claim_name}}],
        "securityContext": {"runAsNonRoot": True, "runAsUser": pods.run_as_user, "runAsGroup": pods.run_as_user,
                            "fsGroup": pods.run_as_user, "seccompProfile": {"type": "RuntimeDefault"}},
    }
    if pods.node_selector:
        pod_spec["nodeSelector"] = dict(pods.node_selector)
    if pods.service_account:
        pod_spec["serviceAccountName"] = pods.service_account
    labels = {LABEL_JOB: name}
    metadata: Dict[str, Any] = {"name": name, "namespace": pods.namespace, "labels": labels}
    if pods.owner_references:
        metadata["ownerReferences"] = [dict(r, controller=False, blockOwnerDeletion=False)
                                       for r in pods.owner_references]
    job = {"apiVersion": JOBS.api_version, "kind": "Job", "metadata": metadata, "spec": {
        "schedulerName": "volcano", "minAvailable": count, "queue": pods.queue, "maxRetry": pods.max_retry,
        "plugins": {"env": []},
        "policies": [{"exitCode": EXIT_BAD_INPUT, "action": "TerminateJob"},
                     {"event": "PodEvicted", "action": "RestartPod"},
                     {"event": "PodFailed", "action": "RestartPod"}],
        "tasks": [{"name": "prep", "replicas": count, "minAvailable": count, "maxRetry": pods.max_retry,
                   "template": {"metadata": {"labels": labels}, "spec": pod_spec}}],
    }}
    check_job(job)
    return job


def prep_step_pods(raw: str, train_out: str, test_out: str, config: PrepConfig, workers: int, *,
                   spec: Optional[FeatureSpec], pvc_name: str, pvc_mount_path: str, namespace: str = "",
                   image: str = "", queue: str = "default", cpu: str = "1", memory: str = "2Gi") -> Dict[str, Any]:
    """The ``prepare_ctr_data`` step with ``fanout`` > 0 and a claim: its parameters turned into
    :class:`PrepPods` (the Job named after the step's output, so one per run and task; the step's
    namespace and image by default), then :func:`prep_on_volcano` through the in-cluster client."""
    from ctr_volcano.images import component_image
    from ctr_volcano.training.volcano.client import KubeClient, in_cluster_namespace

    name = "ctr-prep-" + hashlib.sha256(os.path.abspath(train_out).encode()).hexdigest()[:10]
    pods = PrepPods(namespace=namespace or in_cluster_namespace(), image=image or component_image(),
                    claim_name=pvc_name, mount_path=pvc_mount_path, job_name=name, queue=queue, cpu=cpu,
                    memory=memory)
    return prep_on_volcano(raw, train_out, test_out, config, workers, pods, KubeClient.auto(), spec=spec)


def claim_root(pods: PrepPods) -> str:
    """``<mount>/ctr-runs/<job>``, made and world-writable (the pods run as their own UID).

    Raises:
        BadInput: the claim is not mounted at ``pods.mount_path``.
    """
    if not os.path.isdir(pods.mount_path):
        raise BadInput("pvc_mount_path", pods.mount_path,
                       "mount the shared ReadWriteMany PVC in this step at this path "
                       "(kfp.kubernetes.mount_pvc(task, pvc_name=..., mount_path=...))")
    root = os.path.join(pods.mount_path, RUNS_DIR, pods.job_name)
    os.makedirs(root, exist_ok=True)
    for d in (os.path.dirname(root), root):
        os.chmod(d, 0o777)
    return root


def prep_on_volcano(raw: str, train_out: str, test_out: str, config: PrepConfig, workers: int,
                    pods: PrepPods, client: Any, log: Callable[[str], None] = logger.info,
                    spec: Optional[FeatureSpec] = None) -> Dict[str, Any]:
    """Prep ``raw`` with ``workers`` prep pods per phase into ``train_out`` and ``test_out``.

    The input is read where it is if it is on the claim, else copied to
    ``<mount>/ctr-runs/<job>/raw``; the pods write ``<mount>/ctr-runs/<job>/prep``, which is copied
    to the two outputs and removed. Returns prep's stats.
    """
    root = claim_root(pods)
    raw_on_claim, copied = put_on_claim(raw, pods.mount_path, os.path.join(root, "raw"))
    if copied:
        log(f"prep: copied the input to the claim ({raw_on_claim})")
    out = os.path.join(root, "prep")
    stats = prep_fanout([raw_on_claim], out, config, workers=workers, runner=VolcanoRunner(client, pods, log=log),
                        spec=spec)
    for split, dst in (("train", train_out), ("test", test_out)):
        with room_for(f"{split}_data", dst):
            copy_tree(os.path.join(out, split), dst, dirs_exist_ok=True)
    shutil.rmtree(out, ignore_errors=True)
    return stats


class VolcanoRunner:
    """Runs each fan-out phase as a Volcano Job and waits for all its pods (a
    :class:`~ctr_volcano.data.prep.fanout.Runner`).

    Args:
        client: a :class:`~ctr_volcano.training.volcano.client.KubeClient` (or anything with its methods).
        pods: where and how the pods run (``poll_s``, ``api_outage_s``, ``cleanup_s`` included).
        log: progress sink.
        clock: a monotonic clock (tests pass their own).
        sleep: the wait between polls; default: one that :meth:`cancel` ends at once.
        handle_signals: turn SIGTERM/SIGINT into :meth:`cancel` while a phase runs (main thread only).
    """

    shared_dirs = True     # the pods run as their own UID

    def __init__(self, client: Any, pods: PrepPods, *, log: Callable[[str], None] = logger.info,
                 clock: Callable[[], float] = time.monotonic, sleep: Optional[Callable[[float], None]] = None,
                 handle_signals: bool = True):
        if not os.path.isabs(pods.mount_path):
            raise BadInput("pvc_mount_path", pods.mount_path, "give an absolute path, e.g. /mnt/ctr")
        self.client, self.pods, self.log, self.clock = client, pods, log, clock
        self.calls = ApiCalls(log, base_delay_s=pods.poll_s, max_retries=5, outage_s=pods.api_outage_s,
                              clock=clock)
        self.sleep = sleep or self.calls.sleep
        self.handle_signals = handle_signals

    def cancel(self, signum: int = signal.SIGTERM) -> None:
        """Stop the phase now (thread- and signal-safe): its Job is deleted, :class:`Interrupted` raised."""
        self.calls.cancel(signum)

    def run(self, phase: str, work: str, count: int) -> None:
        if not os.path.abspath(work).startswith(self.pods.mount_path.rstrip("/") + "/"):
            raise BadInput("pvc_mount_path", self.pods.mount_path,
                           f"the prep work directory {work} must be on the claim the pods mount there")
        job = build_prep_job(self.pods, phase, work, count)
        name = job["metadata"]["name"]
        restore = self._install_signal_handlers()
        try:
            self._run_job(job, phase, work, count)
        except Cancelled as exc:
            raise Interrupted(exc.signum or signal.SIGTERM,
                              f"prep {phase}: Volcano Job {self.pods.namespace}/{name} deleted") from None
        finally:
            restore()

    def _run_job(self, job: Dict[str, Any], phase: str, work: str, count: int) -> None:
        name = job["metadata"]["name"]
        self._delete(name)      # a Job of an earlier, interrupted run of this step
        self.calls.call(self.client.create_job, job)
        self.log(f"prep {phase}: Volcano Job {self.pods.namespace}/{name} of {count} pods created")
        try:
            phase_now = self._wait(name)
            if phase_now not in _DONE:
                self._raise_failure(name, phase, work, phase_now)
            self.log(f"prep {phase}: all {count} pods succeeded")
        except Cancelled:
            self._delete_now(name)
            raise
        except BaseException:
            self._delete(name)
            raise
        self._delete(name)

    def _wait(self, name: str) -> str:
        started = self.clock()
        while True:
            self.calls.check()
            job = self.calls.call(self.client.get_job, self.pods.namespace, name)
            state = ((job or {}).get("status") or {}).get("state") or {}
            phase = str(state.get("phase") or "Pending")
            if phase in _DONE or phase in _FAILED:
                return phase
            waited = self.clock() - started
            if phase == "Pending" and waited > self.pods.schedule_timeout_s:
                raise BadInput("prep pods", name, f"not scheduled within {self.pods.schedule_timeout_s:.0f} s "
                                                  f"({self._podgroup_reason(name, job)}); give the queue room "
                                                  "for the gang or fewer workers")
            if waited > self.pods.timeout_s:
                raise FanoutFailed(f"prep Job {name} still {phase} after {self.pods.timeout_s:.0f} s")
            self.sleep(self.pods.poll_s)

    def _podgroup_reason(self, name: str, job: Optional[Mapping[str, Any]]) -> str:
        uid = ((job or {}).get("metadata") or {}).get("uid")
        pg_name = f"{name}-{uid}" if uid else name      # Volcano >= 1.9 names it so
        pg = self.calls.call(self.client.get_podgroup, self.pods.namespace, pg_name)
        return podgroup_summary(pg or {}, pg_name)[0]

    def _raise_failure(self, name: str, phase: str, work: str, job_phase: str) -> None:
        failed = self._failed_pods(name)
        for index, code, tail in failed:
            if code == EXIT_BAD_INPUT:
                raise_worker_error(work, phase, index, code, tail)
        index, code, tail = failed[0] if failed else (-1, -1, "")
        raise_worker_error(work, phase, index, code, tail or self._no_failed_pod(name, job_phase))

    def _no_failed_pod(self, name: str, job_phase: str) -> str:
        """Why a Job ended without a pod that exited non-zero: its pods' visible problems (an image
        that cannot be pulled, a pod never scheduled) or, when none is left to read, only that."""
        pods = self.calls.call(self.client.list_pods, self.pods.namespace, f"{LABEL_JOB}={name}")
        problems = [line for pod in pods for line in pod_problems(pod)]
        seen = f"; {' | '.join(problems[:3])}" if problems else "; no pod of it is left to say why"
        return f"the Job ended {job_phase} with no pod that exited non-zero{seen}"

    def _failed_pods(self, name: str) -> List[Tuple[int, int, str]]:
        out = []
        for pod in self.calls.call(self.client.list_pods, self.pods.namespace, f"{LABEL_JOB}={name}"):
            for status in (pod.get("status") or {}).get("containerStatuses") or []:
                term = (status.get("state") or {}).get("terminated") or {}
                if term and term.get("exitCode"):
                    log = self._last_line(pod["metadata"]["name"])
                    index = int(pod["metadata"]["name"].rsplit("-", 1)[1])     # <job>-prep-<index>
                    out.append((index, int(term["exitCode"]), log))
        return sorted(out, key=lambda f: f[1] != EXIT_BAD_INPUT)

    def _last_line(self, pod: str) -> str:
        """A failed pod's last log line, best effort (an unreadable log never hides the failure)."""
        try:
            text = self.calls.call(self.client.read_log, self.pods.namespace, pod, tail_lines=5,
                                   outage_s=0.0) or ""
        except (TransientError, BadInput) as exc:
            return f"(log unreadable: {exc})"
        return text.strip().splitlines()[-1] if text.strip() else ""

    def _delete(self, name: str) -> None:
        """Delete the phase's Job and wait until it is gone (60 s at most)."""
        if self.calls.call(self.client.delete_job, self.pods.namespace, name):
            deadline = self.clock() + 60
            while self.calls.call(self.client.get_job, self.pods.namespace, name) is not None \
                    and self.clock() < deadline:
                self.sleep(self.pods.poll_s)

    def _delete_now(self, name: str) -> None:
        """After a cancel: delete the Job, waiting out an outage for ``cleanup_s`` at most, never raising."""
        try:
            self.calls.call(self.client.delete_job, self.pods.namespace, name, interruptible=False,
                            outage_s=self.pods.cleanup_s, max_retries=0)
            self.log(f"prep: cancelled; deleted Volcano Job {self.pods.namespace}/{name}")
        except Exception as exc:  # cleanup must not hide the cancel
            self.log(f"prep: cancelled; could not delete Volcano Job {self.pods.namespace}/{name}: {exc}")

    def _install_signal_handlers(self) -> Callable[[], None]:
        if not self.handle_signals or threading.current_thread() is not threading.main_thread():
            return lambda: None
        previous = {sig: signal.signal(sig, lambda signum, _frame: self.cancel(signum))
                    for sig in (signal.SIGTERM, signal.SIGINT)}

        def restore() -> None:
            for sig, old in previous.items():
                signal.signal(sig, old)

        return restore
