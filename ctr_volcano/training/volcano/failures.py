"""The gang's failed pods, kept the moment they are seen, and the step's error when the gang fails.

Why kept at once: Volcano's ``RestartJob`` deletes failed pods and their logs, so the poll and the
pod watch both hand every pod they see to :meth:`FailureLog.capture`, which keeps each failed pod's
reason, exit code and log tail (once per pod incarnation). From those records it explains each gang
restart in the step's log (:meth:`FailureLog.explain_restarts`) and, when the Job ends in a failed
phase, builds the step's error (:meth:`FailureLog.terminal_error`) by the family of the failed
role's exit code (:func:`~ctr_volcano.training.api.role_error`, as the local backend does): a role
that exited 2 refused its input (bad input: the Job's exit-code policy terminated it without a
restart), 75 gave up on an outage (transient), anything else is a failed job.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from ctr_volcano.errors import EXIT_BAD_INPUT, TrainingJobFailed
from ctr_volcano.training.api import role_error
from ctr_volcano.training.volcano.diagnosis import (
    Eviction,
    PodFailure,
    RestartCause,
    explain_restarts,
    failure_of,
    is_failure,
)
from ctr_volcano.training.volcano.preemption import annotate

__all__ = ["FailureLog", "error_line", "indent"]


class FailureLog:
    """The failed pods of one Job, captured by the poll and the pod watch (thread-safe).

    Args:
        job: the Job's name.
        read_log: ``read_log(pod, tail_lines=)`` -> text or ``None`` (best effort).
        log: the step's log sink.
        tail_lines: log lines kept from each failed pod.
    """

    def __init__(self, job: str, read_log: Callable[..., Optional[str]], log: Callable[[str], None],
                 tail_lines: int):
        self.job, self.read_log, self.log, self.tail_lines = job, read_log, log, int(tail_lines)
        #: pod uid -> what was kept of it
        self.records: Dict[str, PodFailure] = {}
        #: one cause per gang restart seen so far, in order
        self.restarts: List[RestartCause] = []
        self._lock = threading.Lock()

    def capture(self, pods: List[Mapping[str, Any]], retry: int) -> None:
        """Keep every failed pod of ``pods`` not kept yet (``retry``: the Job's retry count now)."""
        with self._lock:
            for pod in pods:
                meta = pod.get("metadata") or {}
                uid = str(meta.get("uid") or meta.get("name"))
                if uid in self.records or not is_failure(pod):
                    continue
                name = meta.get("name", "")
                tail = self.read_log(name, tail_lines=self.tail_lines) if name else None
                record = failure_of(self.job, pod, retry, tail or "")
                self.records[uid] = record
                self.log(f"[volcano] pod {name} ({record.role}) failed: {record.reason}, exit code "
                         f"{record.exit_code}"
                         + (f"; last log lines:\n{indent(record.log_tail)}" if record.log_tail else ""))

    def all(self) -> List[PodFailure]:
        with self._lock:
            return list(self.records.values())

    def explain_restarts(self, retry: int, events: List[Mapping[str, Any]],
                         eviction_of: Callable[[PodFailure, Sequence[str]], Eviction]) -> List[RestartCause]:
        """Log the cause of every restart not explained yet (the failed or evicted pod, its exit
        code or eviction reason, its last log lines, Volcano's event; for a gang the scheduler
        evicted, ``eviction_of`` says who took its room, given the nodes of every pod of that attempt
        the scheduler evicted); kept in :attr:`restarts`, and returned."""
        new = explain_restarts(retry, self.all(), events)[len(self.restarts):]
        evicted = {c.failure.uid: eviction_of(c.failure, self._evicted_nodes(c.failure.retry)) for c in new
                   if c.failure is not None and c.failure.by_scheduler}
        causes = annotate(new, evicted)
        for cause in causes:
            self.restarts.append(cause)
            tail = cause.failure.log_tail if cause.failure else ""
            self.log(f"[volcano] job {self.job}: {cause.describe()}"
                     + (f"; last log lines:\n{indent(tail)}" if tail else ""))
        return causes

    def _evicted_nodes(self, retry: int) -> List[str]:
        """The nodes of the pods the scheduler evicted while the retry count was ``retry``."""
        return sorted({f.node for f in self.all() if f.retry == retry and f.by_scheduler and f.node})

    def trainer0_tail(self, attempt: int) -> str:
        """The captured log tail of trainer 0 in ``attempt`` (1-based), or ``""``."""
        return next((f.log_tail for f in self.all() if f.retry == attempt - 1
                     and f.pod.endswith("-trainer-0")), "")

    def terminal_error(self, job: Mapping[str, Any], phase: str,
                       extra: Optional[Dict[str, Any]] = None) -> Exception:
        """The step's error for a Job that ended in the failed ``phase`` (see the module docstring).

        The failure reported is a role that refused its input if any did, else a trainer of the last
        attempt, else any pod of it; every record is in ``details["failed_pods"]``.
        """
        status = job.get("status") or {}
        state = status.get("state") or {}
        records = self.all()
        first = _cause(records)
        reason = " ".join(x for x in (state.get("reason"), state.get("message")) if x) or f"job {phase}"
        tail = first.log_tail if first else ""
        if first and first.exit_code == EXIT_BAD_INPUT:
            # one line: the role's own error line; the tail stays in details (restarts cannot help)
            reason = f"pod {first.pod} exited {EXIT_BAD_INPUT}: {error_line(first.log_tail)}"
            tail = ""
        elif first:
            reason += f"; pod {first.pod} {first.reason}"
        details = {"retry_count": status.get("retryCount", 0), "failed_pods": [r.as_dict() for r in records],
                   "state": state, **(extra or {})}
        return role_error(TrainingJobFailed(self.job, phase, reason, role=first.role if first else None,
                                            exit_code=first.exit_code if first else None, log_tail=tail,
                                            details=details))


def _cause(records: List[PodFailure]) -> Optional[PodFailure]:
    """The failure that ended the Job: a refused input, else the last attempt's trainer, else any;
    a pod the scheduler evicted for another gang only when no other failed."""
    records = [r for r in records if not r.by_scheduler] or records
    refused = [r for r in records if r.exit_code == EXIT_BAD_INPUT]
    if refused:
        return refused[0]
    if not records:
        return None
    last = [r for r in records if r.retry == max(r.retry for r in records)]
    return next((r for r in last if r.role == "trainer"), last[0])


def error_line(log_tail: str) -> str:
    """The last ``error:`` line of a role's log (its one-line reason), else its last line."""
    lines = [line.strip() for line in log_tail.splitlines() if line.strip()]
    errors = [line for line in lines if "error:" in line]
    return (errors or lines or ["(no log)"])[-1]


def indent(text: str) -> str:
    return "\n".join("    " + line for line in text.rstrip().splitlines())
