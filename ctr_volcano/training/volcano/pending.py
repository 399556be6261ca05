"""Why a gang is not running yet, in one line: what the launcher prints while the Job is Pending and
the reason the step fails with after ``schedule_timeout_s``.

A gang stuck Pending shows nothing on the Job: the reason is on the PodGroup (its newest true
condition: ``Unschedulable``, "N/M tasks in gang unschedulable ..."), in the events of the Job, the
PodGroup and the pending pods, and in the pods' waiting states (image pulls, crash loops). This
module fetches those through the launcher's retried calls; :mod:`.diagnosis` words them.
"""
from __future__ import annotations

from typing import Any, Callable, List, Mapping, Optional

from ctr_volcano.training.volcano.diagnosis import pod_problems, podgroup_summary, recent_events

__all__ = ["explain_pending"]


def explain_pending(api: Callable[..., Any], client: Any, namespace: str, name: str, uid: Optional[str],
                    queue: str, gang_size: int, pods: Optional[List[Mapping[str, Any]]] = None) -> str:
    """PodGroup phase + newest condition, recent events, pending pods' problems, ``"; "``-joined.

    Args:
        api: ``api(fn, *args)`` calls ``fn`` with the caller's retries.
        client: has ``get_podgroup`` and ``list_events``.
        namespace, name, uid: the Job (Volcano >= 1.9 names its PodGroup ``<name>-<uid>``).
        queue, gang_size: named when the scheduler never looked at the gang.
        pods: the Job's pods as last listed.
    """
    parts: List[str] = []
    pg_name = f"{name}-{uid}" if uid else name
    pg = api(client.get_podgroup, namespace, pg_name)
    if pg is None and uid:
        pg = api(client.get_podgroup, namespace, name)
        pg_name = name if pg else pg_name
    conds: List[Mapping[str, Any]] = []
    if pg is None:
        parts.append("no PodGroup yet (is vc-controller-manager running?)")
    else:
        text, conds = podgroup_summary(pg, pg_name)
        parts.append(text)
    events: List[Mapping[str, Any]] = []
    for obj in dict.fromkeys([name, pg_name]):
        events.extend(api(client.list_events, namespace, f"involvedObject.name={obj}"))
    if pg is not None and not conds and not events \
            and ((pg.get("status") or {}).get("phase") or "Pending") == "Pending":
        # Nothing from Volcano at all: only then guess that the scheduler never looked at the gang.
        parts.append(f"the scheduler has not admitted the gang: is vc-scheduler running, and is queue "
                     f"{queue!r} Open with room for {gang_size} pods?")
    for pod in pods or []:
        if ((pod.get("status") or {}).get("phase")) == "Pending":
            pname = (pod.get("metadata") or {}).get("name")
            events.extend(e for e in api(client.list_events, namespace, f"involvedObject.name={pname}")
                          if e.get("type") == "Warning")
            parts.extend(pod_problems(pod))
    recent = recent_events(events)
    if recent:
        parts.append("events: " + recent)
    return "; ".join(parts)
