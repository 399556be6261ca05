"""Remote runner for one Volcano training gang: create or re-attach, watch, explain, collect, cancel.

The recipe is the one Google Cloud Pipeline Components use for remote jobs (create, record the identity
at once, re-attach when the step is retried, poll with bounded retries on transient errors, cancel on
SIGTERM, fail on every terminal bad state), plus what Volcano users keep asking for:

* a gang stuck Pending shows nothing on the Job: :meth:`VolcanoLauncher.explain` reads the PodGroup's
  newest condition (``Unschedulable``: "N/M tasks in gang unschedulable ...") and the events of the
  Job, the PodGroup and the pending pods; it is printed periodically, and after the schedule timeout
  the Job is deleted and the step fails with that reason;
* the logs of ``trainer-0`` and ``pserver-0`` are streamed into the step's log with role prefixes;
* Volcano's ``RestartJob`` deletes failed pods and their logs, so the launcher captures every failed
  pod's reason, exit code and log tail as soon as it sees it, and a terminal failure raises
  :class:`~ctr_volcano.errors.TrainingJobFailed` carrying all of them;
* a gang the scheduler evicts to make room for another (preemption, reclaim) is restarted by Volcano
  and resumes from its checkpoint; the launcher names who took the room, does not count the
  restart against ``max_retry`` (it counts the others itself) and logs what is trained again
  (:mod:`~ctr_volcano.training.volcano.preemption`);
* SIGTERM/SIGINT delete the Job and the step exits non-zero;
* a Running gang whose trainer logs gain no line for ``stall_timeout_s`` (a hung trainer holds every
  slot of the gang while Volcano sees a healthy Running pod) fails the step naming the silent pods,
  and the Job is deleted (:mod:`~ctr_volcano.training.volcano.stall`).

Polling (not watch streams) keeps the state machine simple and restart-safe; every interval is a
constructor argument so tests run in milliseconds. Reading the objects for people (PodGroup
conditions, events, failed pods) is :mod:`~ctr_volcano.training.volcano.diagnosis`; following the pods' logs
is :mod:`~ctr_volcano.training.volcano.podlogs`.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional

from ctr_model.contract import EXIT_BAD_INPUT
from ctr_volcano.errors import BadInput, TrainingJobFailed, TransientError
from ctr_volcano.training.api import TrainResult
from ctr_volcano.training.volcano.client import JobExists
from ctr_volcano.training.volcano.diagnosis import (
    Eviction,
    PodFailure,
    RestartCause,
    explain_restarts,
    failure_of,
    is_failure,
    pod_problems,
    podgroup_summary,
    recent_events,
    role_of,
)
from ctr_volcano.training.volcano.manifest import ANNOTATION_RUN, build_job, check_job
from ctr_volcano.training.volcano.podlogs import LogFollower
from ctr_volcano.training.volcano.preemption import EvictionReader, WorkLedger, annotate, crash_restarts
from ctr_volcano.training.volcano.spec import TrainJobSpec
from ctr_volcano.training.volcano.stall import Silent, StallWatchdog

logger = logging.getLogger(__name__)

__all__ = ["VolcanoLauncher", "JobCancelled", "PodFailure", "FAILED_PHASES", "TERMINAL_PHASES"]

FAILED_PHASES = ("Failed", "Aborted", "Terminated")
TERMINAL_PHASES = FAILED_PHASES + ("Completed",)


class JobCancelled(TrainingJobFailed):
    """The launcher was cancelled (SIGTERM/SIGINT or :meth:`VolcanoLauncher.cancel`); the Job was deleted."""


def _phase(job: Mapping[str, Any]) -> str:
    return (((job.get("status") or {}).get("state") or {}).get("phase")) or "Pending"


@dataclass
class _WatchState:
    phase: str = ""
    retry: int = 0
    pending_since: Optional[float] = None
    last_explain: float = float("-inf")
    last_heartbeat_check: float = float("-inf")


class VolcanoLauncher:
    """Runs one :class:`TrainJobSpec` on a cluster and sees it through.

    Args:
        client: a :class:`~ctr_volcano.training.volcano.client.KubeClient` (or anything with its methods).
        spec: the gang to run.
        log: where progress and the pods' log lines go (one string per call).
        poll_s: seconds between status polls.
        explain_every_s: while Pending, how often the PodGroup reason and events are printed.
        tail_lines: log lines kept from each failed pod.
        max_api_retries: consecutive transient API failures tolerated before giving up (at least).
        api_outage_s: and for at least this long (seconds): an API server that restarts (an upgrade,
            a crashed control-plane pod) is unreachable for tens of seconds while the gang keeps
            training; the launcher keeps polling with backoff and re-attaches when it answers.
            Pod-log reads (diagnostics) never wait for it.
        on_identity: called once with the job's identity dict (name, namespace, uid, action) as soon as
            the Job is created or found; the KFP component writes it to an output.
        local_output_dir: where this process sees ``spec.output_dir`` (default: the same path, i.e.
            the shared PVC is mounted at the same path here and in the pods).
        stream_logs: stream ``trainer-0``/``pserver-0`` logs into ``log``.
        delete_wait_s: how long to wait for a failed Job of an earlier attempt to disappear before
            re-creating it.
        handle_signals: install SIGTERM/SIGINT handlers in :meth:`run` (main thread only).
    """

    def __init__(self, client: Any, spec: TrainJobSpec, *, log: Callable[[str], None] = logger.info,
                 poll_s: float = 5.0, explain_every_s: float = 30.0, tail_lines: int = 50,
                 max_api_retries: int = 5, api_outage_s: float = 120.0, on_identity: Optional[Callable[[Dict[str, Any]], None]] = None,
                 local_output_dir: Optional[str] = None, stream_logs: bool = True,
                 delete_wait_s: float = 120.0, handle_signals: bool = True):
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
        self.tail_lines = int(tail_lines)
        self.max_api_retries = int(max_api_retries)
        self.api_outage_s = float(api_outage_s)
        self.on_identity = on_identity
        self.local_output_dir = local_output_dir or spec.output_dir
        self.stream_logs = stream_logs
        self.delete_wait_s = float(delete_wait_s)
        self.handle_signals = handle_signals
        self.uid: Optional[str] = None
        self.identity: Optional[Dict[str, Any]] = None
        self.failures: Dict[str, PodFailure] = {}
        #: one cause per gang restart seen so far, in order (see :meth:`_explain_restarts`)
        self.restarts: List[RestartCause] = []
        #: what gangs evicted to make room for another train again (:mod:`.preemption`)
        self.ledger = WorkLedger(self.name, log)
        self._evictions = EvictionReader(client, self.namespace, self.name, self._api)
        self._failures_lock = threading.Lock()
        self._watched_phase = ""
        self._watched_retry = 0
        self.logs = LogFollower(self.name, self._read_log, self.ledger.tap(log))
        self._log_errors: set = set()
        self._cancel = threading.Event()
        self._cancel_signal: Optional[int] = None
        self.watchdog = StallWatchdog(spec.stall_timeout_s)
        # Reading one log line per trainer is cheap, but not every poll on a big gang.
        self.heartbeat_every_s = max(self.poll_s, min(30.0, spec.stall_timeout_s / 10))

    # ------------------------------------------------------------------ public API
    def run(self) -> TrainResult:
        """Create or re-attach, watch to the end, and return the outputs.

        Returns:
            A ``TrainResult`` (``model_dir``, ``metrics``, ``output_dir``, ``attempts``) read from
            ``local_output_dir``.

        Raises:
            TrainingJobFailed: the gang failed, stayed unschedulable past ``schedule_timeout_s``, or
                was deleted by someone else; carries phase, failed role/pod, exit code and log tail.
            JobCancelled: SIGTERM/SIGINT or :meth:`cancel`; the Job has been deleted.
            TransientError: the API server kept failing beyond ``max_api_retries``.
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
        action = "created"
        existing = self._api(self.client.get_job, self.namespace, self.name)
        if existing is not None:
            self._check_owner(existing)
            phase = _phase(existing)
            if phase in FAILED_PHASES:
                self.log(f"[volcano] job {self.namespace}/{self.name} of an earlier attempt is {phase}; "
                         "deleting it and starting again")
                self._api(self.client.delete_job, self.namespace, self.name)
                self._wait_gone()
                existing = None
                action = "recreated"
            else:
                action = "reattached"
        if existing is None:
            try:
                existing = self._api(self.client.create_job, self.job)
            except JobExists:  # lost a race with another attempt: watch that one
                existing = self._api(self.client.get_job, self.namespace, self.name)
                if existing is None:
                    raise TransientError(f"job {self.name} both exists and does not; try again") from None
                self._check_owner(existing)
                action = "reattached"
        self.uid = (existing.get("metadata") or {}).get("uid")
        self.identity = {"backend": "volcano", "kind": "batch.volcano.sh/v1alpha1/Job",
                         "name": self.name, "namespace": self.namespace, "uid": self.uid or "",
                         "action": action, "queue": self.spec.queue}
        self.log(f"[volcano] job {self.namespace}/{self.name} {action} (uid {self.uid}); "
                 f"gang of {self.spec.pservers} pserver(s) + {self.spec.trainers} trainer(s) "
                 f"in queue {self.spec.queue!r}")
        if self.on_identity:
            self.on_identity(dict(self.identity))
        if self._cancel.is_set():
            self._cancelled()
        return dict(self.identity)

    def watch(self) -> Dict[str, Any]:
        """Poll until the Job is Completed (returned) or fails (raises).

        Beside the poll, a pod watch captures failed pods the moment they fail: Volcano deletes a
        failed pod with the rest of the gang well within one poll period, and once it is being
        deleted a SIGKILLed pod (137) looks like one Volcano killed.
        """
        done = threading.Event()
        watcher = threading.Thread(target=self._watch_pods, args=(done,), daemon=True,
                                   name=f"pod-watch-{self.name}")
        watcher.start()
        try:
            return self._poll()
        finally:
            done.set()

    def _watch_pods(self, done: threading.Event) -> None:
        """Each watch ends after 30 s; the next resumes from the last pod version seen, so a pod
        deleted in between (a lost node's pods, deleted by the pod GC) is still seen, also across a
        connection lost while the API server restarts. A first watch, or one after the server
        refused it (410: the version is too old), starts from now."""
        since: Optional[str] = None
        while not done.is_set():
            try:
                for pod in self.client.watch_pods(self.namespace, f"volcano.sh/job-name={self.name}",
                                                  timeout_s=30, resource_version=since):
                    if done.is_set():
                        return
                    since = (pod.get("metadata") or {}).get("resourceVersion") or since
                    if self._watched_phase not in ("", "Completing", "Completed"):
                        self._capture_failures([pod], self._watched_retry)
                done.wait(0.5)
            except Exception as exc:
                if getattr(exc, "status", None) is not None:   # the server answered: not resumable
                    since = None
                done.wait(1.0)

    def _poll(self) -> Dict[str, Any]:
        st = _WatchState()
        while True:
            if self._cancel.is_set():
                self._cancelled()
            now = time.monotonic()
            job = self._api(self.client.get_job, self.namespace, self.name)
            if job is None:
                raise TrainingJobFailed(self.name, "Deleted", "the Job disappeared while being watched "
                                        "(deleted by someone else, or its TTL expired)")
            if self.uid and (job.get("metadata") or {}).get("uid") not in (None, self.uid):
                raise TrainingJobFailed(self.name, "Replaced", "the Job was deleted and re-created by "
                                        "someone else while being watched")
            phase = _phase(job)
            status = job.get("status") or {}
            retry = int(status.get("retryCount") or 0)
            if phase != st.phase or retry != st.retry:
                state = status.get("state") or {}
                extra = f" ({state.get('reason')}: {state.get('message')})" if state.get("reason") else ""
                self._explain_restarts(retry, job)
                self.log(f"[volcano] job {self.name}: {phase}, attempt {retry + 1}/"
                         f"{self._attempts_allowed()}, running {status.get('running', 0)}, "
                         f"succeeded {status.get('succeeded', 0)}, failed {status.get('failed', 0)}{extra}")
                st.phase, st.retry = phase, retry
                self._watched_phase, self._watched_retry = phase, retry
            pods = self._api(self.client.list_pods, self.namespace, f"volcano.sh/job-name={self.name}")
            if phase not in ("Completing", "Completed"):  # CompleteJob kills the pservers on purpose
                self._capture_failures(pods, retry)
            if self.stream_logs:
                self.logs.follow(pods, final=phase in TERMINAL_PHASES)
            if phase == "Completed":
                return job
            if phase in FAILED_PHASES:
                raise self._failure(job, phase)
            if phase == "Running":
                if now - st.last_heartbeat_check >= self.heartbeat_every_s:
                    st.last_heartbeat_check = now
                    silent = self._heartbeats(pods, now)
                    if silent:
                        raise self._stalled(silent)
            else:
                self.watchdog.reset()
                st.last_heartbeat_check = float("-inf")
            if phase == "Pending":
                if st.pending_since is None:
                    st.pending_since = now
                waited = now - st.pending_since
                if waited >= self.spec.schedule_timeout_s:
                    reason = self.explain(job, pods)
                    self.log(f"[volcano] job {self.name} still Pending after {waited:.0f}s "
                             f"(schedule_timeout_s={self.spec.schedule_timeout_s}); deleting it")
                    self._delete_quietly()
                    raise TrainingJobFailed(self.name, "Unschedulable", reason,
                                            details={"waited_s": round(waited, 1), "queue": self.spec.queue})
                if now - st.last_explain >= self.explain_every_s:
                    st.last_explain = now
                    self.log(f"[volcano] job {self.name} Pending for {waited:.0f}s: {self.explain(job, pods)}")
            else:
                st.pending_since = None
                st.last_explain = float("-inf")
            self._cancel.wait(self.poll_s)

    def explain(self, job: Optional[Mapping[str, Any]] = None,
                pods: Optional[List[Mapping[str, Any]]] = None) -> str:
        """Why the gang is not running: PodGroup phase + newest condition, recent events, pod problems."""
        parts: List[str] = []
        uid = ((job or {}).get("metadata") or {}).get("uid") or self.uid
        pg_name = f"{self.name}-{uid}" if uid else self.name
        pg = self._api(self.client.get_podgroup, self.namespace, pg_name)
        if pg is None and uid:
            pg = self._api(self.client.get_podgroup, self.namespace, self.name)
            pg_name = self.name if pg else pg_name
        conds: List[Mapping[str, Any]] = []
        if pg is None:
            parts.append("no PodGroup yet (is vc-controller-manager running?)")
        else:
            text, conds = podgroup_summary(pg, pg_name)
            parts.append(text)
        events: List[Mapping[str, Any]] = []
        for obj in dict.fromkeys([self.name, pg_name]):
            events.extend(self._api(self.client.list_events, self.namespace, f"involvedObject.name={obj}"))
        if pg is not None and not conds and not events \
                and ((pg.get("status") or {}).get("phase") or "Pending") == "Pending":
            # Nothing from Volcano at all: only then guess that the scheduler never looked at the gang.
            parts.append(f"the scheduler has not admitted the gang: is vc-scheduler running, and is queue "
                         f"{self.spec.queue!r} Open with room for {self.spec.gang_size} pods?")
        for pod in pods or []:
            if ((pod.get("status") or {}).get("phase")) == "Pending":
                pname = (pod.get("metadata") or {}).get("name")
                events.extend(e for e in self._api(self.client.list_events, self.namespace,
                                                   f"involvedObject.name={pname}")
                              if e.get("type") == "Warning")
                parts.extend(pod_problems(pod))
        recent = recent_events(events)
        if recent:
            parts.append("events: " + recent)
        return "; ".join(parts)

    def cancel(self, signum: Optional[int] = None) -> None:
        """Ask :meth:`run` to delete the Job and stop (thread- and signal-safe).

        If nothing is running, deletes the Job right away.
        """
        self._cancel_signal = signum
        self._cancel.set()

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

    # ------------------------------------------------------------------ internals
    def _api(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call ``fn``, retrying :class:`TransientError` with backoff until it has failed more than
        ``max_api_retries`` times and for ``api_outage_s`` (keyword ``outage_s`` overrides it)."""
        outage_s = kwargs.pop("outage_s", self.api_outage_s)
        started, attempt = time.monotonic(), 0
        while True:
            try:
                result = fn(*args, **kwargs)
            except BadInput as exc:
                # A restarted API server refuses (403) until its RBAC caches are filled (seen on
                # process nodes): after an outage, a refusal is part of it; never before one.
                if not (attempt and exc.field == "rbac" and time.monotonic() - started < outage_s):
                    raise
                delay = min(self.poll_s * (2 ** attempt), 30.0)
                self.log(f"[volcano] refused right after an outage, retrying in {delay:.1f}s: {exc}")
                time.sleep(delay)
                attempt += 1
                continue
            except TransientError as exc:
                down = time.monotonic() - started
                if attempt >= self.max_api_retries and down >= outage_s:
                    raise TransientError(f"{exc} (gave up after {attempt + 1} attempts in {down:.0f}s)") from None
                delay = min(self.poll_s * (2 ** attempt), 30.0)
                self.log(f"[volcano] API error, retrying in {delay:.1f}s: {exc}")
                time.sleep(delay)
                attempt += 1
                continue
            if attempt:
                self.log(f"[volcano] API server answers again after {time.monotonic() - started:.1f}s "
                         f"({attempt} retries)")
            return result

    def _read_log(self, pod: str, **kwargs: Any) -> Optional[str]:
        """A pod's log, best effort: logs are diagnostics, so failing to read one never fails the step."""
        try:
            return self._api(self.client.read_log, self.namespace, pod, outage_s=0.0, **kwargs)
        except (TransientError, BadInput) as exc:
            if pod not in self._log_errors:
                self._log_errors.add(pod)
                self.log(f"[volcano] cannot read the log of pod {pod}: {exc}")
            return None

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
            self._cancel.wait(self.poll_s)

    def _delete_quietly(self) -> None:
        try:
            if self.delete():
                self.log(f"[volcano] deleted job {self.namespace}/{self.name}")
        except Exception as exc:  # cleanup must not hide the real error
            self.log(f"[volcano] could not delete job {self.namespace}/{self.name}: {exc}")

    def _cancelled(self) -> None:
        signum = self._cancel_signal
        what = f"signal {signal.Signals(signum).name}" if signum else "cancel()"
        self.log(f"[volcano] cancelled by {what}; deleting job {self.namespace}/{self.name}")
        self._delete_quietly()
        raise JobCancelled(self.name, "Cancelled", f"cancelled by {what}; the Job was deleted",
                           details={"signal": signum})

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

    def _capture_failures(self, pods: List[Mapping[str, Any]], retry: int) -> None:
        with self._failures_lock:   # the poll and the pod watch both report
            self._capture_failures_locked(pods, retry)

    def _capture_failures_locked(self, pods: List[Mapping[str, Any]], retry: int) -> None:
        for pod in pods:
            meta = pod.get("metadata") or {}
            uid = meta.get("uid") or meta.get("name")
            if uid in self.failures:
                continue
            if not is_failure(pod):
                continue
            name = meta.get("name", "")
            tail = self._read_log(name, tail_lines=self.tail_lines) if name else None
            record = failure_of(self.name, pod, retry, tail or "")
            self.failures[str(uid)] = record
            self.log(f"[volcano] pod {name} ({record.role}) failed: {record.reason}, exit code {record.exit_code}"
                     + (f"; last log lines:\n{_indent(record.log_tail)}" if record.log_tail else ""))

    def _explain_restarts(self, retry: int, job: Optional[Mapping[str, Any]] = None) -> None:
        """Log the cause of every restart not explained yet: the failed or evicted pod (its exit
        code or eviction reason, its last log lines) and Volcano's event; kept in ``restarts``.
        Restarts after failures beyond ``max_retry`` end the Job (:meth:`_out_of_retries`)."""
        if retry <= len(self.restarts):
            return
        try:
            events = self._api(self.client.list_events, self.namespace, f"involvedObject.name={self.name}")
        except TransientError:
            events = []
        with self._failures_lock:
            failures = list(self.failures.values())
        new = explain_restarts(retry, failures, events)[len(self.restarts):]
        for cause in annotate(new, {c.failure.uid: self._eviction(c.failure) for c in new
                                    if c.failure is not None and c.failure.by_scheduler}):
            self.restarts.append(cause)
            self.ledger.restarted(cause, next((f.log_tail for f in failures if f.retry == cause.attempt - 1
                                               and f.pod.endswith("-trainer-0")), ""))
            tail = cause.failure.log_tail if cause.failure else ""
            self.log(f"[volcano] job {self.name}: {cause.describe()}"
                     + (f"; last log lines:\n{_indent(tail)}" if tail else ""))
        if job is not None and _phase(job) not in FAILED_PHASES and crash_restarts(self.restarts) > self.spec.max_retry:
            raise self._out_of_retries(job)

    def _attempts_allowed(self) -> int:
        """``max_retry + 1``, plus the restarts after evictions by the scheduler (not counted)."""
        return self.spec.max_retry + 1 + len(self.restarts) - crash_restarts(self.restarts)

    def _eviction(self, failure: PodFailure) -> Eviction:
        """Who evicted ``failure``'s gang and for whom (best effort: the cause stays an eviction)."""
        try:
            return self._evictions.read(failure)
        except (TransientError, BadInput) as exc:
            self.log(f"[volcano] cannot read who evicted pod {failure.pod}: {exc}")
            return Eviction(kind="Evicted")

    def _out_of_retries(self, job: Mapping[str, Any]) -> TrainingJobFailed:
        """More restarts after failures than ``max_retry`` (Volcano's own ``maxRetry`` leaves room for
        evictions by the scheduler): delete the Job and fail as Volcano would have."""
        crashes = crash_restarts(self.restarts)
        self.log(f"[volcano] job {self.name}: {crashes} restarts after failures, more than "
                 f"max_retry={self.spec.max_retry}; deleting the job")
        error = self._failure(job, "Failed")
        self._delete_quietly()
        return error

    def _heartbeats(self, pods: List[Mapping[str, Any]], now: float) -> List[Silent]:
        """Feed the newest log line of every Running trainer to the watchdog; return the silent ones."""
        watched = []
        for pod in pods:
            meta = pod.get("metadata") or {}
            name = meta.get("name") or ""
            if role_of(self.name, pod) != "trainer" or meta.get("deletionTimestamp") \
                    or (pod.get("status") or {}).get("phase") != "Running":
                continue
            watched.append(name)
            line = self._read_log(name, tail_lines=1, timestamps=True)
            self.watchdog.observe(name, str(meta.get("uid") or name),
                                  None if line is None else line.strip(), now)
        self.watchdog.keep_only(watched)
        return self.watchdog.silent(now)

    def _stalled(self, silent: List[Silent]) -> TrainingJobFailed:
        """Keep the silent pods' log tails, delete the Job, and describe the stall."""
        timeout = self.spec.stall_timeout_s
        records: List[Dict[str, Any]] = []
        for item in silent:
            tail = self._read_log(item.pod, tail_lines=self.tail_lines) or ""
            records.append({"pod": item.pod, "silent_s": item.silent_s, "last_line": item.last_line,
                            "log_tail": tail})
        names = ", ".join(f"{r['pod']} (silent {r['silent_s']:.1f}s)" for r in records)
        self.log(f"[volcano] job {self.name}: no progress from {names}: no new log line for "
                 f"stall_timeout_s={timeout:g}; deleting the job")
        self._delete_quietly()
        first = records[0]
        return TrainingJobFailed(
            self.name, "Stalled",
            f"trainer pod(s) {names} made no progress (no new log line) for stall_timeout_s={timeout:g}; "
            "the Job was deleted. A hung trainer or an unresponsive pserver; raise stall_timeout_s if "
            "the trainers legitimately stay quiet longer",
            role=first["pod"], log_tail=first["log_tail"],
            details={"silent_pods": records, "stall_timeout_s": timeout})

    def _failure(self, job: Mapping[str, Any], phase: str) -> TrainingJobFailed:
        pods = self._api(self.client.list_pods, self.namespace, f"volcano.sh/job-name={self.name}")
        status = job.get("status") or {}
        self._capture_failures(pods, int(status.get("retryCount") or 0))
        state = status.get("state") or {}
        records = list(self.failures.values())
        own = [r for r in records if not r.by_scheduler] or records   # evictions for others are not the cause
        first = next((r for r in own if r.exit_code == EXIT_BAD_INPUT), None) \
            or next((r for r in own if r.role == "trainer"), own[0] if own else None)
        reason = " ".join(x for x in (state.get("reason"), state.get("message")) if x) or f"job {phase}"
        tail = first.log_tail if first else ""
        if first and first.exit_code == EXIT_BAD_INPUT:
            # one line: the role's own error line; the tail stays in details (restarts cannot help)
            reason = f"pod {first.pod} exited {EXIT_BAD_INPUT}: {_error_line(first.log_tail)}"
            tail = ""
        elif first:
            reason += f"; pod {first.pod} {first.reason}"
        details = {"retry_count": status.get("retryCount", 0), "failed_pods": [r.as_dict() for r in records],
                   "state": state}
        return TrainingJobFailed(self.name, phase, reason, role=first.role if first else None,
                                 exit_code=first.exit_code if first else None, log_tail=tail, details=details)


def _error_line(log_tail: str) -> str:
    """The last ``error:`` line of a role's log (its one-line reason), else its last line."""
    lines = [line.strip() for line in log_tail.splitlines() if line.strip()]
    errors = [line for line in lines if "error:" in line]
    return (errors or lines or ["(no log)"])[-1]


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.rstrip().splitlines())
