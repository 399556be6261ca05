"""The Volcano backend's stall watchdog: which Running trainer pods have been silent too long.

Volcano acts on pod phases only. A trainer that hangs (a deadlocked collective, a stopped process, a
pserver that stopped answering) stays ``Running`` forever and holds the whole gang's slots, so the
launcher watches for progress itself.

Heartbeat: **log recency**. A trainer prints a progress line every ``progress_secs`` (10 s by default)
while its example count moves, plus a line for every start-up step, epoch and checkpoint. The launcher
reads the newest line of each Running trainer through the API (``pods/log`` with ``tailLines=1`` and
``timestamps=true``, which the launcher's Role already allows) and a pod whose newest line has not
changed for ``stall_timeout_s`` is silent. Chosen over a progress file on the shared volume because
it needs no volume mounted in the launcher's pod, is not fooled by attribute caching of network file
systems, and is the signal the local backend uses too (a trainer's log that stops growing).

Only the launcher's own monotonic clock is used: a line counts as new when its text (timestamp
included) differs from the one seen before, so node clocks are never compared with this one. A pod
whose log cannot be read gets the benefit of the doubt (its silence restarts), so a missing
``pods/log`` right never fails a healthy gang; the launcher reports that read error once.

:class:`StallWatchdog` is pure logic with no I/O: the launcher feeds observations in, tests feed them
with a fake clock. :func:`feed_heartbeats` and :func:`stall_error` read logs only through the
``read_log`` callable they are given (the launcher's best-effort reader).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple

from ctr_model.checks import is_positive
from ctr_volcano.errors import BadInput, TrainingJobFailed
from ctr_volcano.training.volcano.diagnosis import role_of

__all__ = ["StallWatchdog", "Silent", "feed_heartbeats", "stall_error"]


@dataclass(frozen=True)
class Silent:
    """A pod the watchdog considers hung.

    Attributes:
        pod: the pod's name.
        silent_s: seconds since its newest log line last changed (or since it was first seen).
        last_line: that newest line (with the kubelet's timestamp), ``""`` if it never logged.
    """

    pod: str
    silent_s: float
    last_line: str


@dataclass
class _Beat:
    uid: str
    line: str
    changed_at: float


class StallWatchdog:
    """Tracks the newest log line of each watched pod and when it last changed.

    Args:
        timeout_s: a pod is silent once its newest line is unchanged for this many seconds.
    """

    def __init__(self, timeout_s: float):
        if not is_positive(timeout_s):
            raise BadInput("stall_timeout_s", timeout_s, "use a positive number of seconds")
        self.timeout_s = float(timeout_s)
        self._beats: Dict[str, _Beat] = {}

    def observe(self, pod: str, uid: str, last_line: Optional[str], now: float) -> None:
        """Record what ``pod`` (incarnation ``uid``) shows at ``now``.

        Args:
            pod: the pod's name.
            uid: the pod's uid; a re-created pod (gang restart) starts a fresh heartbeat.
            last_line: the newest log line, ``""`` for an empty log, ``None`` if it could not be read
                (counts as progress: the watchdog only fails what it has seen to be silent).
            now: the caller's monotonic clock.
        """
        beat = self._beats.get(pod)
        if beat is None or beat.uid != uid or last_line is None:
            self._beats[pod] = _Beat(uid, last_line or "", now)
        elif last_line != beat.line:
            beat.line, beat.changed_at = last_line, now

    def keep_only(self, pods: Iterable[str]) -> None:
        """Forget every pod not in ``pods`` (it finished, was deleted or is no longer Running)."""
        keep = set(pods)
        for pod in [p for p in self._beats if p not in keep]:
            del self._beats[pod]

    def reset(self) -> None:
        """Forget everything (the gang left the Running phase)."""
        self._beats.clear()

    def silent(self, now: float) -> List[Silent]:
        """Pods silent for at least ``timeout_s`` at ``now``, longest silence first."""
        out: List[Tuple[float, str, str]] = [(now - b.changed_at, pod, b.line) for pod, b in self._beats.items()
                                             if now - b.changed_at >= self.timeout_s]
        out.sort(key=lambda item: (-item[0], item[1]))
        return [Silent(pod=pod, silent_s=round(age, 1), last_line=line) for age, pod, line in out]

    def quiet_for(self, pod: str, now: float) -> Optional[float]:
        """Seconds since ``pod``'s newest line changed, ``None`` if it is not watched."""
        beat = self._beats.get(pod)
        return None if beat is None else now - beat.changed_at


def feed_heartbeats(watchdog: StallWatchdog, job: str, pods: List[Mapping[str, Any]],
                    read_log: Callable[..., Optional[str]], now: float) -> List[Silent]:
    """Feed the newest log line of every Running trainer of Job ``job`` to ``watchdog``; return the
    silent ones."""
    watched = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        name = meta.get("name") or ""
        if role_of(job, pod) != "trainer" or meta.get("deletionTimestamp") \
                or (pod.get("status") or {}).get("phase") != "Running":
            continue
        watched.append(name)
        line = read_log(name, tail_lines=1, timestamps=True)
        watchdog.observe(name, str(meta.get("uid") or name), None if line is None else line.strip(), now)
    watchdog.keep_only(watched)
    return watchdog.silent(now)


def stall_error(job: str, silent: List[Silent], timeout_s: float, read_log: Callable[..., Optional[str]],
                tail_lines: int, log: Callable[[str], None]) -> TrainingJobFailed:
    """Keep the silent pods' log tails (before the Job and its logs go) and describe the stall."""
    records: List[Dict[str, Any]] = []
    for item in silent:
        tail = read_log(item.pod, tail_lines=tail_lines) or ""
        records.append({"pod": item.pod, "silent_s": item.silent_s, "last_line": item.last_line,
                        "log_tail": tail})
    names = ", ".join(f"{r['pod']} (silent {r['silent_s']:.1f}s)" for r in records)
    log(f"[volcano] job {job}: no progress from {names}: no new log line for "
        f"stall_timeout_s={timeout_s:g}; deleting the job")
    return TrainingJobFailed(
        job, "Stalled",
        f"trainer pod(s) {names} made no progress (no new log line) for stall_timeout_s={timeout_s:g}; "
        "the Job was deleted. A hung trainer or an unresponsive pserver; raise stall_timeout_s if "
        "the trainers legitimately stay quiet longer",
        role=records[0]["pod"], log_tail=records[0]["log_tail"],
        details={"silent_pods": records, "stall_timeout_s": timeout_s})
