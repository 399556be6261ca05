"""The gang's ``pserver-0`` and ``trainer-0`` logs, followed into the step's log with role prefixes.

Why a follower and not one read at the end: Volcano's ``RestartJob`` deletes the pods, and their logs
with them, so the step streams as it polls. Each pod has a cursor (its uid and the newest timestamp
printed): a re-created pod (gang restart) starts over, and lines already shown are never repeated.
Reading is best effort, through the launcher's ``read_log``.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from ctr_volcano.training.volcano.names import pod_name

__all__ = ["LogFollower", "parse_timestamp"]


def parse_timestamp(text: str) -> Tuple[datetime, int]:
    """An RFC 3339 (nano) timestamp as a sortable (seconds, nanoseconds) pair."""
    main, _, frac = text.rstrip("Z").partition(".")
    return datetime.strptime(main, "%Y-%m-%dT%H:%M:%S"), int((frac + "000000000")[:9] or 0)


@dataclass
class _Cursor:
    uid: str = ""
    last: Optional[Tuple[datetime, int]] = None
    last_read: float = 0.0
    done: bool = False


class LogFollower:
    """Prints the new lines of a Job's ``pserver-0`` and ``trainer-0`` pods on each :meth:`follow`.

    Args:
        job_name: the Volcano Job (pod names derive from it).
        read_log: ``read_log(pod, tail_lines=, since_seconds=, timestamps=)`` -> text or ``None``.
        log: the step's log sink.
    """

    def __init__(self, job_name: str, read_log: Callable[..., Optional[str]], log: Callable[[str], None]):
        self.job_name = job_name
        self.read_log = read_log
        self.log = log
        self._cursors: Dict[str, _Cursor] = {}   # keyed by pod name

    def follow(self, pods: List[Mapping[str, Any]], final: bool) -> None:
        """Print what the followed pods logged since the last call; ``final``: the last call."""
        by_name = {(p.get("metadata") or {}).get("name"): p for p in pods}
        for role in ("pserver", "trainer"):
            name = pod_name(self.job_name, role, 0)
            pod = by_name.get(name)
            if pod is not None:
                self._follow_pod(role, name, pod, final)

    def _follow_pod(self, role: str, name: str, pod: Mapping[str, Any], final: bool) -> None:
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        status = pod.get("status") or {}
        cur = self._cursors.setdefault(name, _Cursor())
        if cur.uid != uid:
            if cur.uid:
                self.log(f"[{role}-0] --- pod re-created (gang restart) ---")
            cur.uid, cur.last, cur.done = uid, None, False
        if cur.done or status.get("phase") == "Pending":
            return
        since = None
        if cur.last is not None:
            since = max(1, int(time.time() - cur.last_read) + 2)
        wall = time.time()
        text = self.read_log(name, tail_lines=None if since else 1000, since_seconds=since, timestamps=True)
        if text is None:
            return
        cur.last_read = wall
        for line in text.splitlines():
            ts_text, _, msg = line.partition(" ")
            ts: Optional[Tuple[datetime, int]]
            try:
                ts = parse_timestamp(ts_text)
            except ValueError:
                ts, msg = None, line
            if ts is not None and cur.last is not None and ts <= cur.last:
                continue
            if ts is not None:
                cur.last = ts
            self.log(f"[{role}-0] {msg}")
        if status.get("phase") in ("Succeeded", "Failed") or final:
            cur.done = True
