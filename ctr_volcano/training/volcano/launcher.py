"""Remote runner for one Volcano training gang: create or re-attach, watch, explain, collect, cancel.

The recipe is the one Google Cloud Pipeline Components use for remote jobs (create, record the identity
at once, re-attach when the step is retried, poll with bounded retries on transient errors, cancel on
SIGTERM, fail on every terminal bad state), plus what Volcano users keep asking for:

* a gang stuck Pending shows nothing on the Job: :meth:`VolcanoLauncher.explain` reads the PodGroup's
  newest condition (``Unschedulable``: "N/M tasks in gang unschedulable ...") and the events of the
  Job, the PodGroup and the pending pods; it is printed periodically, and after the schedule timeout
  the Job is deleted and the step fails with that reason;
* the logs of ``trainer-0`` and ``pserver-0`` are streamed into the step's log with role prefixes;
* Volcano's ``RestartJob`` deletes failed pods and their logs, so every failed pod's reason, exit
  code and log tail is kept as soon as the poll or the pod watch sees it, and a terminal failure
  raises the error of the failed role's exit-code family, carrying all of them
  (:mod:`~ctr_volcano.training.volcano.failures`);
* a gang the scheduler evicts to make room for another (preemption, reclaim) is restarted by Volcano
  and resumes from its checkpoint; the launcher names who took the room, does not count the
  restart against ``max_retry`` (it counts the others itself) and logs what is trained again
  (:mod:`~ctr_volcano.training.volcano.preemption`);
* SIGTERM/SIGINT wake every wait at once, delete the Job, and the step exits non-zero;
* a Running gang whose trainer logs gain no line for ``stall_timeout_s`` (a hung trainer holds every
  slot of the gang while Volcano sees a healthy Running pod) fails the step naming the silent pods,
  and the Job is deleted (:mod:`~ctr_volcano.training.volcano.stall`).

How it watches: the Job is **polled** (one GET per ``poll_s``; a re-attach after a restart of this
process or of the API server is the same poll), which keeps the state machine simple and
restart-safe; beside the poll, a **pod watch** thread (:mod:`~ctr_volcano.training.volcano.podwatch`)
sees each pod update the moment it happens, so a pod that fails and is deleted within one poll
period is still kept. Every API call is retried by error family and every wait ends at once on a
cancel (:mod:`~ctr_volcano.training.volcano.api_calls`); every interval is a constructor argument so
tests run in milliseconds. Reading the objects for people is
:mod:`~ctr_volcano.training.volcano.diagnosis`; following the pods' logs is
:mod:`~ctr_volcano.training.volcano.podlogs`.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, NoReturn, Optional, Sequence

from ctr_volcano.errors import BadInput, TrainingJobFailed, TransientError
from ctr_volcano.training.api import TrainResult
from ctr_volcano.training.volcano.api_calls import ApiCalls, Cancelled
from ctr_volcano.training.volcano.client import JobExists
from ctr_volcano.training.volcano.diagnosis import Eviction, PodFailure
from ctr_volcano.training.volcano.failures import FailureLog
from ctr_volcano.training.volcano.manifest import ANNOTATION_RUN, build_job, check_job
from ctr_volcano.training.volcano.pending import explain_pending
from ctr_volcano.training.volcano.podlogs import LogFollower
from ctr_volcano.training.volcano.podwatch import PodWatch
from ctr_volcano.training.volcano.preemption import EvictionReader, WorkLedger, crash_restarts
from ctr_volcano.training.volcano.spec import TrainJobSpec
from ctr_volcano.training.volcano.stall import StallWatchdog, feed_heartbeats, stall_error

logger = logging.getLogger(__name__)

__all__ = ["VolcanoLauncher", "JobCancelled", "PodFailure", "FAILED_PHASES", "TERMINAL_PHASES"]

FAILED_PHASES = ("Failed", "Aborted", "Terminated")
TERMINAL_PHASES = FAILED_PHASES + ("Completed",)
_INF = float("inf")


class JobCancelled(TrainingJobFailed):
    """The launcher was cancelled (SIGTERM/SIGINT or :meth:`VolcanoLauncher.cancel`); the Job was deleted."""


def _phase(job: Mapping[str, Any]) -> str:
    return (((job.get("status") or {}).get("state") or {}).get("phase")) or "Pending"


@dataclass
class _Watched:
    """What the launcher has seen of its Job: the poll writes it, the pod watch reads phase and retry."""

    phase: str = ""
    retry: int = 0
    pending_since: Optional[float] = None
    last_explain: float = -_INF
    last_heartbeat_check: float = -_INF

    @property
    def counts_failures(self) -> bool:
        """Whether a pod failing now is a failure (``CompleteJob`` kills the pservers on purpose)."""
        return self.phase not in ("", "Completing", "Completed")


class VolcanoLauncher:
    """Runs one :class:`TrainJobSpec` on a cluster and sees it through.

    Args:
        client: a :class:`~ctr_volcano.training.volcano.client.KubeClient` (or anything with its methods).
        spec: the gang to run.
        log: where progress and the pods' log lines go (one string per call).
        poll_s: seconds between status polls (and the first retry's wait).
        explain_every_s: while Pending, how often the PodGroup reason and events are printed.
        tail_lines: log lines kept from each failed pod.
        max_api_retries: consecutive transient API failures tolerated before giving up (at least).
        api_outage_s: and for at least this long (seconds): an API server that restarts (an upgrade,
            a crashed control-plane pod) is unreachable for tens of seconds while the gang keeps
            training; the launcher keeps polling with backoff and re-attaches when it answers.
            Pod-log reads (diagnostics) never wait for it (one retry at most).
        on_identity: called once with the job's identity dict (name, namespace, uid, action) as soon as
            the Job is created or found; the KFP component writes it to an output.
        local_output_dir: where this process sees ``spec.output_dir`` (default: the same path, i.e.
            the shared PVC is mounted at the same path here and in the pods).
        stream_logs: stream ``trainer-0``/``pserver-0`` logs into ``log``.
        delete_wait_s: how long to wait for a failed Job of an earlier attempt to disappear before
            re-creating it.
        handle_signals: install SIGTERM/SIGINT handlers in :meth:`run` (main thread only).
        cleanup_s: after a cancel, how long deleting the Job may wait out an API outage (KFP kills a
            step's pod 30 s after its SIGTERM).
    """

    def __init__(self, client: Any, spec: TrainJobSpec, *, log: Callable[[str], None] = logger.info,
                 poll_s: float = 5.0, explain_every_s: float = 30.0, tail_lines: int = 50,
                 max_api_retries: int = 5, api_outage_s: float = 120.0, on_identity: Optional[Callable[[Dict[str, Any]], None]] = None,
                 local_output_dir: Optional[str] = None, stream_logs: bool = True,
                 delete_wait_s: float = 120.0, handle_signals: bool = True, cleanup_s: float = 15.0):
        if poll_s <= 0:
            raise BadInput("poll_s", poll_s, "use a positive number of seconds")
        if max_api_retries < 0:
            raise BadInput("max_api_retries", max_api_retries, "use 0 or more")
        if api_outage_s < 0:
            raise BadInput("api_outage_s", api_outage_s, "use 0 or more seconds")
        self.client = client
        self.spec = spec
        self.job = build_job(spec)
        check_job(self.job)
        self.name = spec.name
        self.namespace = spec.namespace
        self.log = log
        self.poll_s = float(poll_s)
        self.explain_every_s = float(explain_every_s)
        self.on_identity = on_identity
        self.local_output_dir = local_output_dir or spec.output_dir
        self.stream_logs = stream_logs
        self.delete_wait_s = float(delete_wait_s)
        self.handle_signals = handle_signals
        self.cleanup_s = float(cleanup_s)
        self.uid: Optional[str] = None
        self.identity: Optional[Dict[str, Any]] = None
        self.calls = ApiCalls(log, base_delay_s=self.poll_s, max_retries=max_api_retries, outage_s=api_outage_s)
        self.failures = FailureLog(self.name, self._read_log, log, tail_lines)
        self.watched = _Watched()
        self.pod_watch = PodWatch(client, self.namespace, self._selector, self._on_pod, self.calls, log)
        #: what gangs evicted to make room for another train again (:mod:`.preemption`)
        self.ledger = WorkLedger(self.name, log)
        self._evictions = EvictionReader(client, self.namespace, self.name, self._api, self.calls.sleep)
        self.logs = LogFollower(self.name, self._read_log, self.ledger.tap(log))
        self._log_errors: set = set()
        self.watchdog = StallWatchdog(spec.stall_timeout_s)
        # Reading one log line per trainer is cheap, but not every poll on a big gang.
        self.heartbeat_every_s = max(self.poll_s, min(30.0, spec.stall_timeout_s / 10))

    @property
    def _selector(self) -> str:
        return f"volcano.sh/job-name={self.name}"

    # ------------------------------------------------------------------ public API
    def run(self) -> TrainResult:
        """Create or re-attach, watch to the end, and return the outputs.

        Returns:
            A ``TrainResult`` (``model_dir``, ``metrics``, ``output_dir``, ``attempts``) read from
            ``local_output_dir``.

        Raises:
            TrainingJobFailed: the gang failed, stayed unschedulable past ``schedule_timeout_s``, or
                was deleted by someone else; carries phase, failed role/pod, exit code and log tail.
            BadInput: a role refused its input (exited 2: :class:`~ctr_volcano.training.api.RoleRefused`),
                or the Job cannot be submitted as asked (RBAC, a name taken by another run).
            JobCancelled: SIGTERM/SIGINT or :meth:`cancel`; the Job has been deleted.
            TransientError: the API server kept failing beyond ``max_api_retries`` and
                ``api_outage_s``, or a role gave up on an outage (exited 75) on every attempt.
        """
        restore = self._install_signal_handlers()
        try:
            self.submit()
            job = self.watch()
            return self.collect(job)
        finally:
            restore()

    def submit(self) -> Dict[str, Any]:
        """Create the Job, or re-attach to the one of this run and task.

        A Job of an earlier attempt that already failed is deleted and created again (a retried step
        should retry, not report the old failure). Returns the identity dict.
        """
        try:
            existing, action = self._create_or_find()
            self.calls.check()
        except Cancelled as exc:
            self._cancelled(exc.signum)
        self.uid = (existing.get("metadata") or {}).get("uid")
        self.identity = {"backend": "volcano", "kind": "batch.volcano.sh/v1alpha1/Job",
                         "name": self.name, "namespace": self.namespace, "uid": self.uid or "",
                         "action": action, "queue": self.spec.queue}
        self.log(f"[volcano] job {self.namespace}/{self.name} {action} (uid {self.uid}); "
                 f"gang of {self.spec.pservers} pserver(s) + {self.spec.trainers} trainer(s) "
                 f"in queue {self.spec.queue!r}")
        if self.on_identity:
            self.on_identity(dict(self.identity))
        if self.calls.cancelled:
            self._cancelled(self.calls.signum)
        return dict(self.identity)

    def watch(self) -> Dict[str, Any]:
        """Poll until the Job is Completed (returned) or fails (raises), with the pod watch beside
        the poll (see the module docstring)."""
        self.pod_watch.start(f"pod-watch-{self.name}")
        try:
            while True:
                job = self._poll_once(time.monotonic())
                if job is not None:
                    return job
                self.calls.sleep(self.poll_s)
        except Cancelled as exc:
            self._cancelled(exc.signum)
        finally:
            self.pod_watch.stop()
            if self.pod_watch.errors:
                self.log(f"[volcano] pod watch of job {self.name}: {self.pod_watch.summary()}")

    def explain(self, job: Optional[Mapping[str, Any]] = None,
                pods: Optional[List[Mapping[str, Any]]] = None) -> str:
        """Why the gang is not running (:func:`~ctr_volcano.training.volcano.pending.explain_pending`)."""
        uid = ((job or {}).get("metadata") or {}).get("uid") or self.uid
        return explain_pending(self._api, self.client, self.namespace, self.name, uid, self.spec.queue,
                               self.spec.gang_size, pods)

    def cancel(self, signum: Optional[int] = None) -> None:
        """Ask :meth:`run` to delete the Job and stop (thread- and signal-safe): every wait, an API
        retry's included, ends at once."""
        self.calls.cancel(signum)

    def delete(self) -> bool:
        """Delete the Job now (its pods go with it). Returns False if it did not exist."""
        return bool(self._api(self.client.delete_job, self.namespace, self.name))

    def collect(self, job: Optional[Mapping[str, Any]] = None) -> TrainResult:
        """Read the outputs the gang wrote and return a :class:`~ctr_volcano.training.api.TrainResult`."""
        out = self.local_output_dir
        retry = int(((job or {}).get("status") or {}).get("retryCount") or 0)
        if self.spec.object_store is not None:
            # the outputs are in the store; the step reads them (ctr_volcano.training.volcano.objectstore)
            self.log(f"[volcano] job {self.name} Completed after {retry + 1} attempt(s); outputs in {out}")
            return TrainResult(model_dir=f"{out.rstrip('/')}/model", metrics={}, output_dir=out,
                               attempts=retry + 1)
        model_dir = os.path.join(out, "model")
        metrics_path = os.path.join(out, "metrics.json")
        if not os.path.isfile(metrics_path) or not os.path.isdir(model_dir):
            raise TrainingJobFailed(
                self.name, "Completed",
                f"the job completed but {metrics_path} or {model_dir}/ is missing here; mount the same "
                f"PVC at the same path in this pod as in the gang (pvc_mount_path), or check the "
                f"trainer-0 log", details={"output_dir": out})
        with open(metrics_path, encoding="utf-8") as fh:
            metrics = json.load(fh)
        self.log(f"[volcano] job {self.name} Completed after {retry + 1} attempt(s); model in {model_dir}")
        return TrainResult(model_dir=model_dir, metrics=metrics, output_dir=out, attempts=retry + 1)

    # ------------------------------------------------------------------ submit
    def _create_or_find(self) -> tuple:
        """``(the Job, "created" | "reattached" | "recreated")``."""
        existing = self._api(self.client.get_job, self.namespace, self.name)
        if existing is not None:
            self._check_owner(existing)
            phase = _phase(existing)
            if phase not in FAILED_PHASES:
                return existing, "reattached"
            self.log(f"[volcano] job {self.namespace}/{self.name} of an earlier attempt is {phase}; "
                     "deleting it and starting again")
            self._api(self.client.delete_job, self.namespace, self.name)
            self._wait_gone()
        try:
            return self._api(self.client.create_job, self.job), "created" if existing is None else "recreated"
        except JobExists:  # lost a race with another attempt: watch that one
            found = self._api(self.client.get_job, self.namespace, self.name)
            if found is None:
                raise TransientError(f"job {self.name} both exists and does not; try again") from None
            self._check_owner(found)
            return found, "reattached"

    def _check_owner(self, existing: Mapping[str, Any]) -> None:
        theirs = ((existing.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_RUN)
        if self.spec.run_id and theirs and theirs != self.spec.run_id:
            raise BadInput("name", self.name, f"a Job with this name belongs to KFP run {theirs!r}, not "
                                              f"{self.spec.run_id!r}; delete it or use another name")

    def _wait_gone(self) -> None:
        deadline = time.monotonic() + self.delete_wait_s
        while self._api(self.client.get_job, self.namespace, self.name) is not None:
            if time.monotonic() > deadline:
                raise TransientError(f"job {self.name} was deleted but still exists after "
                                     f"{self.delete_wait_s:.0f}s (finalizers?)")
            self.calls.sleep(self.poll_s)

    # ------------------------------------------------------------------ watch
    def _poll_once(self, now: float) -> Optional[Dict[str, Any]]:
        """One look at the Job and its pods: the Job when it completed, ``None`` to poll again;
        raises when it failed, stalled, stayed unschedulable or disappeared."""
        self.calls.check()
        job = self._watched_job()
        phase, status = _phase(job), job.get("status") or {}
        retry = int(status.get("retryCount") or 0)
        if (phase, retry) != (self.watched.phase, self.watched.retry):
            self._phase_changed(phase, retry, job)
        pods = self._api(self.client.list_pods, self.namespace, self._selector)
        if self.watched.counts_failures:
            self.failures.capture(pods, retry)
        if self.stream_logs:
            self.logs.follow(pods, final=phase in TERMINAL_PHASES)
        if phase == "Completed":
            return job
        if phase in FAILED_PHASES:
            raise self._failure(job, phase)
        self._check_progress(phase, pods, now)
        self._check_pending(phase, job, pods, now)
        return None

    def _watched_job(self) -> Dict[str, Any]:
        job = self._api(self.client.get_job, self.namespace, self.name)
        if job is None:
            raise TrainingJobFailed(self.name, "Deleted", "the Job disappeared while being watched "
                                    "(deleted by someone else, or its TTL expired)")
        if self.uid and (job.get("metadata") or {}).get("uid") not in (None, self.uid):
            raise TrainingJobFailed(self.name, "Replaced", "the Job was deleted and re-created by "
                                    "someone else while being watched")
        return job

    def _phase_changed(self, phase: str, retry: int, job: Mapping[str, Any]) -> None:
        status = job.get("status") or {}
        state = status.get("state") or {}
        extra = f" ({state.get('reason')}: {state.get('message')})" if state.get("reason") else ""
        if retry > len(self.failures.restarts):
            for cause in self.failures.explain_restarts(retry, self._job_events(), self._eviction):
                self.ledger.restarted(cause, self.failures.trainer0_tail(cause.attempt))
        self.log(f"[volcano] job {self.name}: {phase}, attempt {retry + 1}/"
                 f"{self._attempts_allowed()}, running {status.get('running', 0)}, "
                 f"succeeded {status.get('succeeded', 0)}, failed {status.get('failed', 0)}{extra}")
        self.watched.phase, self.watched.retry = phase, retry
        if phase not in FAILED_PHASES and crash_restarts(self.failures.restarts) > self.spec.max_retry:
            raise self._out_of_retries(job)

    def _attempts_allowed(self) -> int:
        """``max_retry + 1``, plus the restarts after evictions by the scheduler (not counted)."""
        restarts = self.failures.restarts
        return self.spec.max_retry + 1 + len(restarts) - crash_restarts(restarts)

    def _eviction(self, failure: PodFailure, nodes: Sequence[str] = ()) -> Eviction:
        """Who evicted ``failure``'s gang and for whom (best effort: the cause stays an eviction);
        ``nodes``: those of its other pods evicted with it."""
        try:
            return self._evictions.read(failure, nodes)
        except (TransientError, BadInput) as exc:
            self.log(f"[volcano] cannot read who evicted pod {failure.pod}: {exc}")
            return Eviction(kind="Evicted")

    def _out_of_retries(self, job: Mapping[str, Any]) -> Exception:
        """More restarts after failures than ``max_retry`` (Volcano's own ``maxRetry`` leaves room for
        evictions by the scheduler): delete the Job and fail as Volcano would have."""
        self.log(f"[volcano] job {self.name}: {crash_restarts(self.failures.restarts)} restarts after "
                 f"failures, more than max_retry={self.spec.max_retry}; deleting the job")
        error = self._failure(job, "Failed")
        self._delete_quietly()
        return error

    def _on_pod(self, pod: Mapping[str, Any]) -> None:
        """The pod watch's callback (its own thread)."""
        if self.watched.counts_failures:
            self.failures.capture([pod], self.watched.retry)

    def _check_progress(self, phase: str, pods: List[Mapping[str, Any]], now: float) -> None:
        """While Running, feed the stall watchdog now and then; a silent trainer fails the step."""
        if phase != "Running":
            self.watchdog.reset()
            self.watched.last_heartbeat_check = -_INF
            return
        if now - self.watched.last_heartbeat_check < self.heartbeat_every_s:
            return
        self.watched.last_heartbeat_check = now
        silent = feed_heartbeats(self.watchdog, self.name, pods, self._read_log, now)
        if silent:
            error = stall_error(self.name, silent, self.spec.stall_timeout_s, self._read_log,
                                self.failures.tail_lines, self.log)
            self._delete_quietly()
            raise error

    def _check_pending(self, phase: str, job: Mapping[str, Any], pods: List[Mapping[str, Any]],
                       now: float) -> None:
        """While Pending, explain why now and then; past ``schedule_timeout_s``, delete the Job and fail."""
        w = self.watched
        if phase != "Pending":
            w.pending_since, w.last_explain = None, -_INF
            return
        w.pending_since = now if w.pending_since is None else w.pending_since
        waited = now - w.pending_since
        if waited >= self.spec.schedule_timeout_s:
            reason = self.explain(job, pods)
            self.log(f"[volcano] job {self.name} still Pending after {waited:.0f}s "
                     f"(schedule_timeout_s={self.spec.schedule_timeout_s}); deleting it")
            self._delete_quietly()
            raise TrainingJobFailed(self.name, "Unschedulable", reason,
                                    details={"waited_s": round(waited, 1), "queue": self.spec.queue})
        if now - w.last_explain >= self.explain_every_s:
            w.last_explain = now
            self.log(f"[volcano] job {self.name} Pending for {waited:.0f}s: {self.explain(job, pods)}")

    # ------------------------------------------------------------------ endings
    def _failure(self, job: Mapping[str, Any], phase: str) -> Exception:
        """The error of a Job that ended ``phase``, by the failed role's exit-code family."""
        pods = self._api(self.client.list_pods, self.namespace, self._selector)
        self.failures.capture(pods, int((job.get("status") or {}).get("retryCount") or 0))
        return self.failures.terminal_error(job, phase, {"pod_watch_errors": self.pod_watch.counts()})

    def _cancelled(self, signum: Optional[int]) -> NoReturn:
        what = f"signal {signal.Signals(signum).name}" if signum else "cancel()"
        self.log(f"[volcano] cancelled by {what}; deleting job {self.namespace}/{self.name}")
        self._delete_quietly(interruptible=False)
        raise JobCancelled(self.name, "Cancelled", f"cancelled by {what}; the Job was deleted",
                           details={"signal": signum})

    def _delete_quietly(self, interruptible: bool = True) -> None:
        """Delete the Job, logging instead of raising (cleanup must not hide the real error); after a
        cancel, waiting out an outage for at most ``cleanup_s``."""
        try:
            if interruptible:
                gone = self.delete()
            else:
                gone = self.calls.call(self.client.delete_job, self.namespace, self.name, interruptible=False,
                                       outage_s=self.cleanup_s, max_retries=0)
            if gone:
                self.log(f"[volcano] deleted job {self.namespace}/{self.name}")
        except Cancelled:
            raise
        except Exception as exc:
            self.log(f"[volcano] could not delete job {self.namespace}/{self.name}: {exc}")

    # ------------------------------------------------------------------ API access
    def _api(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args)`` through :class:`~ctr_volcano.training.volcano.api_calls.ApiCalls`: retried by
        error family, its waits ended by a cancel (keyword ``outage_s`` overrides ``api_outage_s``)."""
        return self.calls.call(fn, *args, **kwargs)

    def _read_log(self, pod: str, **kwargs: Any) -> Optional[str]:
        """A pod's log, best effort: logs are diagnostics, so failing to read one never fails the step,
        and an outage costs a read one retry at most."""
        try:
            return self._api(self.client.read_log, self.namespace, pod, outage_s=0.0,
                             max_retries=min(1, self.calls.max_retries), **kwargs)
        except (TransientError, BadInput) as exc:
            if pod not in self._log_errors:
                self._log_errors.add(pod)
                self.log(f"[volcano] cannot read the log of pod {pod}: {exc}")
            return None

    def _job_events(self) -> List[Mapping[str, Any]]:
        """The Job's events (best effort: explaining a restart never fails the step)."""
        try:
            return self._api(self.client.list_events, self.namespace, f"involvedObject.name={self.name}")
        except TransientError:
            return []

    def _install_signal_handlers(self) -> Callable[[], None]:
        if not self.handle_signals or threading.current_thread() is not threading.main_thread():
            return lambda: None
        previous = {}

        def handler(signum: int, _frame: Any) -> None:
            self.cancel(signum)

        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, handler)

        def restore() -> None:
            for sig, old in previous.items():
                signal.signal(sig, old)

        return restore
