"""Gangs the scheduler evicts to make room for another: who took the room, what is redone, and why
it does not use up ``max_retry``.

With the recommended scheduler configuration (``deploy/volcano-scheduler.conf``) Volcano evicts whole
gangs: ``gangpreempt`` for a higher-priority gang of the same queue, ``gangreclaim`` for a queue below
its deserved share. The Job's ``PodEvicted -> RestartJob`` policy restarts the gang, which resumes
from its last checkpoint when it is placed again. Volcano counts that restart like a crash
(``retryCount`` against ``maxRetry``) and records neither the action on the Job nor the gang that took
the room, so:

* the Job's ``maxRetry`` leaves room for ``spec.PREEMPTION_RESTARTS`` such restarts beyond the
  step's ``max_retry``, and the launcher enforces ``max_retry`` on the other restarts itself
  (:func:`crash_restarts`);
* :func:`eviction_of` reads the action from the evicted pod's ``Evict`` event ("Pod is evicted,
  because of gangreclaim") and finds the gangs placed in the room it left: pods of another job
  nominated to its node, told by the scheduler they "can possibly be assigned to <node>, once
  resource is released" around the eviction, or bound there since;
* :class:`WorkLedger` reads the trainer-0 lines the launcher streams and, when the next attempt
  starts, says which checkpoint it resumed from and how much training since that checkpoint is
  trained again.

Pure functions over the API's dicts, plus :class:`EvictionReader`, which fetches them.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ctr_volcano.training.volcano.diagnosis import Eviction, PodFailure, RestartCause

__all__ = ["eviction_action", "preemptors", "eviction_of", "annotate",
           "crash_restarts", "Position", "position_of", "WorkLedger", "EvictionReader"]

_KIND_OF_ACTION = {"gangpreempt": "Preempted", "preempt": "Preempted",
                   "gangreclaim": "Reclaimed", "reclaim": "Reclaimed"}
_EVICT = re.compile(r"because of (\S+)")
_ASSIGNABLE = re.compile(r"can possibly be assigned to ([^,\s]+),? once resource is released")
#: The pods' own label naming their Volcano Job and queue.
_JOB_LABEL, _QUEUE_LABEL = "volcano.sh/job-name", "volcano.sh/queue-name"


def _ts(text: Any) -> Optional[float]:
    """An RFC 3339 time as seconds since the epoch (None when absent or unreadable): ``...Z`` as the
    API server writes it, and ``...+00:00`` as the Kubernetes client's objects turned into dicts
    write it (both came here: reading only the first left every time unreadable, so a preemptor
    was found only while its pods still had a nominated node)."""
    if not text:
        return None
    try:
        parsed = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)).timestamp()


def _event_time(ev: Mapping[str, Any]) -> Optional[float]:
    return _ts(ev.get("lastTimestamp") or ev.get("eventTime") or (ev.get("metadata") or {}).get("creationTimestamp"))


def eviction_action(pod_events: Sequence[Mapping[str, Any]]) -> str:
    """Volcano's action in the newest ``Evict`` event of a pod ("gangreclaim"), or ""."""
    evicts = sorted((e for e in pod_events if e.get("reason") == "Evict"), key=lambda e: _event_time(e) or 0.0)
    for ev in reversed(evicts):
        match = _EVICT.search(str(ev.get("message") or ""))
        if match:
            return match.group(1)
    return ""


def _job_of(pod: Mapping[str, Any]) -> Tuple[str, str]:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return str(labels.get(_JOB_LABEL) or ""), str(labels.get(_QUEUE_LABEL) or "")


def _scheduled_at(pod: Mapping[str, Any]) -> Optional[float]:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and str(cond.get("status")) == "True":
            return _ts(cond.get("lastTransitionTime"))
    return None


def preemptors(failure: PodFailure, job: str, namespace: str, pods: Sequence[Mapping[str, Any]],
               events: Sequence[Mapping[str, Any]], slack_s: float = 10.0,
               nodes: Sequence[str] = ()) -> Tuple[str, ...]:
    """The other gangs placed in the room ``failure``'s pod left, as ``namespace/job (queue q)``.

    Volcano puts the gang it makes room for on the evicted pods' node ("pipelined"): its pods get
    ``status.nominatedNodeName`` and a ``FailedScheduling`` event "can possibly be assigned to <node>,
    once resource is released" in the scheduling cycle of the eviction, then are bound there.
    The room is ``failure``'s node and ``nodes`` (those of the gang's other evicted pods): the gang
    placed may fit on some of them only. When no gang is found there (the other pods' nodes were not
    known yet), the gangs bound anywhere within ``slack_s`` of the eviction are taken.
    """
    room = {n for n in (failure.node, *nodes) if n}
    at = _ts(failure.at)
    found: Dict[str, str] = {}
    by_name = {str((p.get("metadata") or {}).get("name")): p for p in pods}
    for pod in pods:
        other, queue = _job_of(pod)
        if not other or other == job or not room:
            continue
        status, spec = pod.get("status") or {}, pod.get("spec") or {}
        scheduled = _scheduled_at(pod)
        if status.get("nominatedNodeName") in room or (
                spec.get("nodeName") in room and at is not None and scheduled is not None
                and scheduled >= at - slack_s):
            found[other] = queue
    for ev in events:
        match = _ASSIGNABLE.search(str(ev.get("message") or ""))
        when = _event_time(ev)
        if not match or match.group(1) not in room or at is None or when is None or abs(when - at) > slack_s:
            continue
        pod_name = str((ev.get("involvedObject") or {}).get("name") or "")
        other, queue = _job_of(by_name.get(pod_name, {}))
        other = other or pod_name.rsplit("-", 2)[0]      # <job>-<task>-<index>, the pod gone since
        if other and other != job:
            found.setdefault(other, queue)
    if not found and at is not None:     # the room's other nodes unknown: gangs bound as it was made
        found = {o: q for pod in pods for o, q in [_job_of(pod)] if o and o != job
                 and abs((_scheduled_at(pod) or float("-inf")) - at) <= slack_s}
    return tuple(f"{namespace}/{j}" + (f" (queue {q})" if q else "") for j, q in sorted(found.items()))


def eviction_of(failure: PodFailure, job: str, namespace: str, pod_events: Sequence[Mapping[str, Any]],
                pods: Sequence[Mapping[str, Any]], events: Sequence[Mapping[str, Any]],
                nodes: Sequence[str] = ()) -> Eviction:
    """What is known of a pod the scheduler evicted: Volcano's action and the gangs that took its room."""
    action = eviction_action(pod_events)
    return Eviction(kind=_KIND_OF_ACTION.get(action, "Evicted"), action=action,
                    by=preemptors(failure, job, namespace, pods, events, nodes=nodes))


def annotate(causes: Sequence[RestartCause], evictions: Mapping[str, Eviction]) -> List[RestartCause]:
    """``causes`` with the eviction of the pod that ended each attempt (``evictions`` by pod uid)."""
    return [replace(c, eviction=evictions.get(c.failure.uid)) if c.failure is not None and c.failure.by_scheduler
            else c for c in causes]


def crash_restarts(causes: Sequence[RestartCause]) -> int:
    """Restarts that use up ``max_retry``: every one but the scheduler's evictions (an unexplained
    restart counts, as a crash would)."""
    return sum(1 for c in causes if c.counts_against_max_retry)


# ---------------------------------------------------------------------------------- work redone
_PROGRESS = re.compile(r"trainer-0: epoch (\d+)/(\d+): (\d+) of (\d+) examples, ([0-9.]+) ex/s")
_DONE = re.compile(r"trainer-0: epoch (\d+) done: (\d+) examples in ([0-9.]+)s")
_RESUMED = re.compile(r"trainer-0: resumed from (\S+) \(epoch (\d+)\)")
#: The line :class:`~ctr_volcano.training.volcano.podlogs.LogFollower` prints when a pod is re-created.
_RECREATED = "--- pod re-created (gang restart) ---"


@dataclass
class Position:
    """How far trainer-0 got, from its log lines: epochs finished (and their seconds), and the
    examples and seconds of the epoch in progress at its last progress line (a lower bound: progress
    lines come every ``progress_secs``)."""

    done: int = 0
    epoch_seconds: Dict[int, float] = field(default_factory=dict)
    examples: int = 0
    seconds: float = 0.0
    rows: int = 0

    def feed(self, line: str) -> Optional[int]:
        """Read one line; returns the epoch a ``resumed from`` line names, else None."""
        resumed = _RESUMED.search(line)
        if resumed:
            self.done, self.examples, self.seconds = int(resumed.group(2)), 0, 0.0
            return int(resumed.group(2))
        done = _DONE.search(line)
        if done:
            epoch = int(done.group(1))
            self.done, self.examples, self.seconds = epoch, 0, 0.0
            self.epoch_seconds[epoch] = float(done.group(3))
            self.rows = self.rows or int(done.group(2))
            return None
        progress = _PROGRESS.search(line)
        if progress and int(progress.group(1)) == self.done + 1:
            self.examples, self.rows = int(progress.group(3)), int(progress.group(4))
            self.seconds = self.examples / max(float(progress.group(5)), 1e-9)
        return None

    def since(self, epoch: int) -> Tuple[int, float]:
        """Examples and seconds trained after the checkpoint of ``epoch``."""
        whole = range(epoch + 1, self.done + 1)
        examples = len(whole) * self.rows + self.examples
        seconds = sum(self.epoch_seconds.get(e, 0.0) for e in whole) + self.seconds
        return examples, seconds


def position_of(lines: Sequence[str]) -> Position:
    """The :class:`Position` after reading ``lines`` in order."""
    pos = Position()
    for line in lines:
        pos.feed(line)
    return pos


class WorkLedger:
    """Follows trainer-0's streamed lines; after a restart caused by an eviction, says, when the
    next attempt starts training, which checkpoint it resumed from and what it trains again.

    Args:
        job: the Volcano Job's name (for the log lines).
        log: the step's log sink.
    """

    def __init__(self, job: str, log: Callable[[str], None]):
        self.job, self.log = job, log
        self.position = Position()
        #: one dict per resumed eviction: attempt, cause, resumed_epoch, examples, seconds
        self.redone: List[Dict[str, Any]] = []
        self._pending: Optional[Tuple[RestartCause, Position]] = None
        self._new_attempt = False

    def tap(self, sink: Callable[[str], None]) -> Callable[[str], None]:
        """``sink``, reading every line on the way."""
        def tapped(line: str) -> None:
            sink(line)
            self.observe(line)
        return tapped

    def restarted(self, cause: RestartCause, trainer_tail: str = "") -> None:
        """Attempt ``cause.attempt`` ended; for an eviction, keep how far it got (the streamed lines
        and trainer-0's captured log tail, whichever went further)."""
        if cause.eviction is None:
            return
        tail = position_of(trainer_tail.splitlines())
        here = self.position
        further = tail if (tail.done, tail.examples) > (here.done, here.examples) else here
        self._pending = (cause, further)
        self.position, self._new_attempt = Position(rows=further.rows), False

    def observe(self, line: str) -> None:
        if not line.startswith("[trainer-0]"):
            return
        if _RECREATED in line:
            self._new_attempt = True
            return
        resumed = self.position.feed(line)
        if self._pending is None or not self._new_attempt:
            return
        if resumed is not None:
            self._settle(resumed)
        elif _PROGRESS.search(line) or _DONE.search(line):
            self._settle(0)      # training started without a "resumed from" line: from scratch

    def _settle(self, resumed: int) -> None:
        cause, before = self._pending  # type: ignore[misc]
        self._pending = None
        examples, seconds = before.since(resumed)
        start = f"the checkpoint of epoch {resumed}" if resumed else "the start (no checkpoint was complete)"
        last = before.done + 1 if before.examples else before.done
        epochs = f"epoch {last}" if last == resumed + 1 else f"epochs {resumed + 1}-{last}"
        lost = (f"{examples} examples (at least: {epochs}, up to trainer-0's last progress line), "
                f"about {seconds:.0f}s of training" if examples else "nothing")
        self.log(f"[volcano] job {self.job}: attempt {cause.attempt + 1} resumed from {start} after it was "
                 f"{cause.eviction.kind.lower() if cause.eviction else 'evicted'}; trained again: {lost}")
        self.redone.append({"attempt": cause.attempt + 1, "resumed_epoch": resumed, "examples": examples,
                            "seconds": round(seconds, 1),
                            "cause": cause.eviction.describe() if cause.eviction else ""})


class EvictionReader:
    """Fetches what :func:`eviction_of` reads, through the launcher's retrying API wrapper.

    The gang the room was made for is nominated to the freed node in the scheduling cycle of the
    eviction, which can come a little after the launcher notices the evicted pod (seen once in CI):
    while no such gang is found, the read is repeated ``reads`` times, ``interval_s`` apart.

    Args:
        client: the launcher's Kubernetes client (``list_events``, ``list_pods``).
        namespace: the Job's namespace (the launcher's RBAC reads this one only).
        job: the Job's name.
        api: ``api(fn, *args)``: the launcher's call-with-retries.
        sleep: the launcher's interruptible wait.
        reads: reads at most while no gang is found in the room.
        interval_s: the wait between them.
    """

    def __init__(self, client: Any, namespace: str, job: str, api: Callable[..., Any],
                 sleep: Callable[[float], None], reads: int = 6, interval_s: float = 2.0):
        self.client, self.namespace, self.job, self.api = client, namespace, job, api
        self.sleep, self.reads, self.interval_s = sleep, max(1, reads), interval_s

    def read(self, failure: PodFailure, nodes: Sequence[str] = ()) -> Eviction:
        """``failure``'s eviction; ``nodes``: those of the gang's other pods evicted with it."""
        for attempt in range(self.reads):
            if attempt:
                self.sleep(self.interval_s)
            eviction = self._read_once(failure, nodes)
            if eviction.by:
                break
        return eviction

    def _read_once(self, failure: PodFailure, nodes: Sequence[str]) -> Eviction:
        pod_events = [e for e in self.api(self.client.list_events, self.namespace, f"involvedObject.name={failure.pod}")
                      if (e.get("involvedObject") or {}).get("uid") in (None, "", failure.uid)]
        pods = self.api(self.client.list_pods, self.namespace, _JOB_LABEL)
        events = self.api(self.client.list_events, self.namespace, "reason=FailedScheduling")
        return eviction_of(failure, self.job, self.namespace, pod_events, pods, events, nodes)
