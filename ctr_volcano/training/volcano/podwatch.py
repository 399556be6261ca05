"""The pod watch beside the launcher's poll: every update of the gang's pods, the moment it happens.

Why a watch at all: Volcano deletes a failed pod with the rest of the gang well within one poll
period, and once it is being deleted a SIGKILLed pod (137) looks like one Volcano killed; a poll can
miss a state that lasts less than its period, a watch sees each one.

Why it resumes: each watch ends after ``timeout_s``; the next one starts from the last pod version
seen, so a pod deleted in between (a lost node's pods, deleted by the pod GC) is still seen, also
across a connection lost while the API server restarts. A first watch, or one after the server
refused the resume point (:class:`~ctr_volcano.training.volcano.client.WatchExpired`, 410), starts
from now.

Errors are told apart where it matters, each logged and counted (:attr:`PodWatch.errors`, reported
in the step's log and in a failure's details): a transient one keeps the resume point and backs off;
an expired resume point restarts from now; a refusal (the Role lacks ``watch``, the namespace is
gone) ends the watch, since retrying cannot heal it and the poll still sees most failures; anything
else (a bug) is logged with its type and retried with backoff.
"""
from __future__ import annotations

import threading
from collections import Counter
from typing import Any, Callable, Dict, Mapping, Optional

from ctr_volcano.errors import BadInput
from ctr_volcano.training.volcano.api_calls import ApiCalls, Cancelled, backoff
from ctr_volcano.training.volcano.client import WatchExpired

__all__ = ["PodWatch"]


class PodWatch:
    """Watches the pods of one Job in a daemon thread and hands each update to ``on_pod``.

    Args:
        client: has ``watch_pods(namespace, selector, timeout_s=, resource_version=)``.
        namespace, selector: the pods to watch.
        on_pod: called (in the watch thread) with each pod as an API-shaped dict.
        calls: the launcher's :class:`ApiCalls` (its cancel stops the watch; a refusal right after
            an outage it saw is transient).
        log: the step's log sink.
        timeout_s: how long each watch request lasts.
        retry_s: the first wait after an error (it doubles, up to 30 s).
    """

    def __init__(self, client: Any, namespace: str, selector: str, on_pod: Callable[[Mapping[str, Any]], None],
                 calls: ApiCalls, log: Callable[[str], None], *, timeout_s: int = 30, retry_s: float = 1.0):
        self.client, self.namespace, self.selector = client, namespace, selector
        self.on_pod, self.calls, self.log = on_pod, calls, log
        self.timeout_s, self.retry_s = int(timeout_s), float(retry_s)
        #: errors seen so far, by kind (``transient``, ``expired``, ``refused``, ``unexpected``)
        self.errors: Counter = Counter()
        self.since: Optional[str] = None
        self._done = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def start(self, name: str) -> "PodWatch":
        self._thread = threading.Thread(target=self.run, daemon=True, name=name)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Ask the thread to end (it is a daemon: a request in flight never holds the step)."""
        self._done.set()

    def summary(self) -> str:
        """``"N error(s) (kind: n, ...)"`` or ``""`` when there were none."""
        total = sum(self.errors.values())
        return f"{total} error(s) ({', '.join(f'{k}: {n}' for k, n in sorted(self.errors.items()))})" \
            if total else ""

    def counts(self) -> Dict[str, int]:
        return dict(self.errors)

    def run(self) -> None:
        """Watch until :meth:`stop`, a cancel, or an error that retrying cannot heal."""
        failures = 0      # in a row: the backoff's exponent
        while not self._done.is_set() and not self.calls.cancelled:
            try:
                self._watch_once()
                failures = 0
                self._done.wait(0.5)
            except Cancelled:
                return
            except Exception as exc:
                if not self._on_error(exc):
                    return
                self._done.wait(backoff(self.retry_s, failures))
                failures += 1

    def _watch_once(self) -> None:
        for pod in self.client.watch_pods(self.namespace, self.selector, timeout_s=self.timeout_s,
                                          resource_version=self.since):
            if self._done.is_set():
                return
            self.since = (pod.get("metadata") or {}).get("resourceVersion") or self.since
            self.on_pod(pod)

    def _on_error(self, exc: Exception) -> bool:
        """Log and count ``exc``; ``False`` when the watch must end."""
        if isinstance(exc, WatchExpired):
            kind, keep_going = "expired", True
            self.since = None
            what = "the resume point expired (410); watching from now, a change in between may be missed"
        elif self.calls.as_transient(exc) is not None:
            kind, keep_going, what = "transient", True, "retrying from the last pod version seen"
        elif isinstance(exc, BadInput):
            kind, keep_going = "refused", False
            what = "stopping the watch: failed pods are seen by the poll only (a failure shorter than " \
                   "a poll period may be missed)"
        else:
            kind, keep_going, what = "unexpected", True, "retrying"
        self.errors[kind] += 1
        self.log(f"[volcano] pod watch error #{sum(self.errors.values())} ({kind}): "
                 f"{type(exc).__name__}: {exc}; {what}")
        return keep_going
