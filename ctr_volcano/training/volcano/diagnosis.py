"""Reading a gang's Kubernetes objects for people: why it is Pending, which pod failed and why.

A gang stuck Pending shows nothing on the Job; the reason is on the PodGroup (its newest true
condition), in events of the Job, the PodGroup and the pending pods, and in the pods' waiting states.
A failed pod must be told apart from the healthy members Volcano kills when it restarts the gang.
Pure functions over the API's dicts: the launcher fetches, these read.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

__all__ = ["PodFailure", "podgroup_summary", "recent_events", "pod_problems", "terminated",
           "killed_by_volcano", "role_of", "failure_of"]

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
    """

    pod: str
    role: str
    uid: str
    reason: str
    exit_code: Optional[int]
    message: str
    log_tail: str
    retry: int

    def as_dict(self) -> Dict[str, Any]:
        return {"pod": self.pod, "role": self.role, "uid": self.uid, "reason": self.reason,
                "exit_code": self.exit_code, "message": self.message, "log_tail": self.log_tail,
                "retry": self.retry}


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
    return PodFailure(
        pod=str(meta.get("name", "")), role=role_of(job, pod), uid=str(meta.get("uid") or meta.get("name")),
        reason=term.get("reason") or status.get("reason") or "Failed",
        exit_code=term.get("exitCode"),
        message=term.get("message") or status.get("message") or "",
        log_tail=log_tail, retry=retry)
