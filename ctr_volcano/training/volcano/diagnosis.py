"""Reading a gang's Kubernetes objects for people: why it is Pending, which pod failed and why.

A gang stuck Pending shows nothing on the Job; the reason is on the PodGroup (its newest true
condition), in events of the Job, the PodGroup and the pending pods, and in the pods' waiting states.
A failed pod must be told apart from the healthy members Volcano kills when it restarts the gang.
Pure functions over the API's dicts: the launcher fetches, these read.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

__all__ = ["PodFailure", "RestartCause", "Eviction", "SCHEDULER_EVICTION", "podgroup_summary", "recent_events",
           "pod_problems", "terminated", "killed_by_volcano", "evicted", "is_failure", "role_of", "failure_of",
           "explain_restarts"]

#: Volcano's annotation on each pod: the Job's retry count when the pod was created.
RETRY_ANNOTATION = "volcano.sh/job-retry-count"
#: The ``DisruptionTarget`` reason vc-scheduler writes on a pod it evicts to make room for another
#: gang (gangpreempt, gangreclaim and the older preempt, reclaim: ``defaultEvictor.Evict``).
SCHEDULER_EVICTION = "PreemptionByScheduler"

_WAITING_PROBLEMS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError",
                     "CreateContainerError", "CrashLoopBackOff", "RunContainerError")


@dataclass(frozen=True)
class PodFailure:
    """What is kept of a failed pod before Volcano deletes it.

    Attributes:
        pod: pod name (``<job>-<task>-<index>``).
        role: the task name (``pserver``/``trainer``).
        uid: the pod's uid (a restarted gang reuses names, not uids).
        reason: the container's termination reason (``Error``, ``OOMKilled`` ...) or the pod's.
        exit_code: the container's exit code, if it terminated.
        message: the termination/pod message.
        log_tail: the last lines of the container's log.
        retry: the job's retry count when the failure was seen.
        node: the node the pod ran on ("" if it was never placed).
        at: when it was evicted (the ``DisruptionTarget`` condition's time), "" if it was not.
    """

    pod: str
    role: str
    uid: str
    reason: str
    exit_code: Optional[int]
    message: str
    log_tail: str
    retry: int
    node: str = ""
    at: str = ""

    def as_dict(self) -> Dict[str, Any]:
        return {"pod": self.pod, "role": self.role, "uid": self.uid, "reason": self.reason,
                "exit_code": self.exit_code, "message": self.message, "log_tail": self.log_tail,
                "retry": self.retry, "node": self.node, "at": self.at}

    @property
    def by_scheduler(self) -> bool:
        """Evicted by vc-scheduler to make room for another gang (preempted or reclaimed)."""
        return self.reason == SCHEDULER_EVICTION


def podgroup_summary(pg: Mapping[str, Any], pg_name: str) -> Tuple[str, List[Mapping[str, Any]]]:
    """``("PodGroup NAME PHASE: TYPE (REASON): MESSAGE", true conditions oldest first)``."""
    pg_status = pg.get("status") or {}
    conds = [c for c in pg_status.get("conditions") or [] if str(c.get("status")) == "True"]
    conds.sort(key=lambda c: str(c.get("lastTransitionTime") or ""))
    text = f"PodGroup {pg_name} {pg_status.get('phase') or 'Pending'}"
    if conds:
        c = conds[-1]
        text += f": {c.get('type')} ({c.get('reason')}): {c.get('message') or ''}".rstrip(": ")
    return text, conds


def recent_events(events: Sequence[Mapping[str, Any]], limit: int = 5) -> str:
    """The newest ``limit`` distinct (reason, message) events, oldest first, as one line ("" if none)."""
    ordered = sorted(events, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))
    seen = set()
    lines: List[str] = []
    for ev in reversed(ordered):
        key = (ev.get("reason"), ev.get("message"))
        if key in seen:
            continue
        seen.add(key)
        involved = ev.get("involvedObject") or {}
        lines.append(f"{ev.get('type', '')} {ev.get('reason', '')} {involved.get('kind', '')}/"
                     f"{involved.get('name', '')}: {ev.get('message', '')}")
        if len(lines) == limit:
            break
    return " | ".join(reversed(lines))


def pod_problems(pod: Mapping[str, Any]) -> List[str]:
    """A pending pod's visible problems: image pulls, crash loops, not schedulable (and why)."""
    out = []
    name = (pod.get("metadata") or {}).get("name")
    status = pod.get("status") or {}
    for cs in status.get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in _WAITING_PROBLEMS:
            out.append(f"pod {name}: {waiting.get('reason')}: {waiting.get('message', '')}")
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and str(cond.get("status")) == "False" and cond.get("message"):
            out.append(f"pod {name} not scheduled: {cond.get('message')}")
    return out


def terminated(pod: Mapping[str, Any]) -> Optional[Mapping[str, Any]]:
    """The first terminated container state of ``pod``, if any."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        term = (cs.get("state") or {}).get("terminated")
        if term:
            return term
    return None


def killed_by_volcano(pod: Mapping[str, Any], term: Optional[Mapping[str, Any]]) -> bool:
    """A pod Volcano is deleting (RestartJob/CompleteJob kill the healthy members of the gang) that ended
    by SIGTERM/SIGKILL: a consequence, not a cause, so it is not reported as a failure."""
    deleting = bool((pod.get("metadata") or {}).get("deletionTimestamp"))
    return deleting and (term is None or term.get("exitCode") in (137, 143))


def evicted(pod: Mapping[str, Any]) -> Optional[Tuple[str, str]]:
    """``(reason, message)`` when the pod was evicted (status reason ``Evicted``, or a true
    ``DisruptionTarget`` condition: node lost, preempted, drained), else ``None``."""
    status = pod.get("status") or {}
    if status.get("reason") == "Evicted":
        return "Evicted", str(status.get("message") or "")
    for cond in status.get("conditions") or []:
        if cond.get("type") == "DisruptionTarget" and str(cond.get("status")) == "True":
            return str(cond.get("reason") or "DisruptionTarget"), str(cond.get("message") or "")
    return None


def is_failure(pod: Mapping[str, Any]) -> bool:
    """A cause of a gang restart: failed, exited non-zero or evicted, and not one of the healthy
    members Volcano itself killed."""
    if evicted(pod):
        return True
    term = terminated(pod)
    failed = (pod.get("status") or {}).get("phase") == "Failed" \
        or (term is not None and term.get("exitCode") not in (0, None))
    return failed and not killed_by_volcano(pod, term)


def role_of(job: str, pod: Mapping[str, Any]) -> str:
    """The pod's task (``pserver``/``trainer``): Volcano's task-spec label, else from its name."""
    meta = pod.get("metadata") or {}
    label = (meta.get("labels") or {}).get("volcano.sh/task-spec")
    if label:
        return str(label)
    name = str(meta.get("name") or "")
    rest = name[len(job) + 1:] if name.startswith(job + "-") else name
    return rest.rsplit("-", 1)[0]


def failure_of(job: str, pod: Mapping[str, Any], retry: int, log_tail: str) -> PodFailure:
    """The :class:`PodFailure` record of a failed ``pod`` of Job ``job``."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    term = terminated(pod) or {}
    eviction = evicted(pod)
    at = next((str(c.get("lastTransitionTime") or "") for c in status.get("conditions") or []
               if c.get("type") == "DisruptionTarget" and str(c.get("status")) == "True"), "")
    return PodFailure(
        pod=str(meta.get("name", "")), role=role_of(job, pod), uid=str(meta.get("uid") or meta.get("name")),
        reason=eviction[0] if eviction else term.get("reason") or status.get("reason") or "Failed",
        exit_code=term.get("exitCode"),
        message=(eviction[1] if eviction else "") or term.get("message") or status.get("message") or "",
        log_tail=log_tail, retry=_pod_retry(pod, retry),
        node=str((pod.get("spec") or {}).get("nodeName") or ""), at=at if eviction else "")


def _pod_retry(pod: Mapping[str, Any], seen: int) -> int:
    """The attempt a pod belongs to: Volcano stamps the Job's retry count on every pod it creates
    (``volcano.sh/job-retry-count``), which beats the count seen when the failure was noticed (a
    restart may already have bumped it)."""
    value = ((pod.get("metadata") or {}).get("annotations") or {}).get(RETRY_ANNOTATION)
    try:
        return int(value) if value is not None else seen
    except ValueError:
        return seen


@dataclass(frozen=True)
class Eviction:
    """A gang the scheduler evicted to make room for another one.

    Attributes:
        kind: ``Preempted`` (``gangpreempt``/``preempt``: a higher-priority gang of the same queue),
            ``Reclaimed`` (``gangreclaim``/``reclaim``: a queue below its deserved share took its
            room back), or ``Evicted`` when Volcano's event naming the action was not found.
        action: Volcano's action, from the pod's ``Evict`` event ("" if not read).
        by: the gangs placed in the room it left (``namespace/job (queue q)``); empty when none is
            visible to the launcher (its RBAC reads one namespace).
    """

    kind: str
    action: str = ""
    by: Tuple[str, ...] = ()

    def describe(self) -> str:
        who = " and ".join(self.by) if self.by else "a gang not seen in this namespace (another namespace's, or not placed yet)"
        how = f" (Volcano's {self.action})" if self.action else ""
        return f"{self.kind} by {who}{how}"


@dataclass(frozen=True)
class RestartCause:
    """Why Volcano restarted the gang's attempt ``attempt`` (1-based).

    Attributes:
        attempt: the attempt that was restarted.
        failure: the pod failure seen during that attempt (the first one), if any.
        event: Volcano's ``ExecuteAction`` event for the restart ("" if none was read).
        eviction: set when the scheduler evicted the gang to make room for another one (see
            :mod:`~ctr_volcano.training.volcano.preemption`).
    """

    attempt: int
    failure: Optional[PodFailure]
    event: str
    eviction: Optional[Eviction] = None

    @property
    def explained(self) -> bool:
        """A restart is explained when a pod of that attempt failed or was evicted."""
        return self.failure is not None

    @property
    def counts_against_max_retry(self) -> bool:
        """Crashes, lost nodes and unexplained restarts use up ``max_retry``; making room for another
        gang (preemption, reclaim) does not: the gang did nothing wrong and resumes from its checkpoint."""
        return self.eviction is None

    def describe(self) -> str:
        """One line: the pod, its exit code or eviction reason, and Volcano's event."""
        f = self.failure
        what = (f"pod {f.pod} ({f.role}) {f.reason}"
                + (f", exit code {f.exit_code}" if f.exit_code is not None else "")
                + (f": {f.message}" if f.message else "")) if f else "no failed or evicted pod was seen"
        if self.eviction is not None:
            what = f"{self.eviction.describe()}: {what}; not counted against max_retry"
        return f"attempt {self.attempt} restarted: {what}" + (f"; Volcano: {self.event}" if self.event else "")


def _restart_events(events: Sequence[Mapping[str, Any]]) -> List[str]:
    """Volcano's restart decisions on the Job, oldest first (``ExecuteAction`` ... ``RestartJob``)."""
    ordered = sorted(events, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))
    out: List[str] = []
    for ev in ordered:
        msg = str(ev.get("message") or "").strip()
        if ev.get("reason") == "ExecuteAction" and "Restart" in msg:
            out.extend([msg] * max(1, int(ev.get("count") or 1)))
    return out


def explain_restarts(retry_count: int, failures: Sequence[PodFailure],
                     events: Sequence[Mapping[str, Any]]) -> List[RestartCause]:
    """One :class:`RestartCause` per restart of a Job whose ``status.retryCount`` is ``retry_count``.

    Why the retry count is the key: Volcano bumps it on each restart, and every failure was recorded
    with the count seen at the time, so failures with ``retry == r`` are what ended attempt ``r + 1``
    (an eviction by the scheduler first: the gang's other pods may crash when it takes their peers
    away; then a real exit code over a kill by signal, often a consequence). The events give
    Volcano's side ("Start to execute action RestartJob"), in order.
    """
    decisions = _restart_events(events)
    causes = []
    for r in range(retry_count):
        mine = [f for f in failures if f.retry == r]
        first = next((f for f in mine if f.by_scheduler), None) \
            or next((f for f in mine if f.exit_code not in (137, 143)), mine[0] if mine else None)
        causes.append(RestartCause(attempt=r + 1, failure=first,
                                   event=decisions[r] if r < len(decisions) else ""))
    return causes
