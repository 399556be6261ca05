"""Many runs at once (issue 25, scenario e): 8 training steps submitted together to a cluster that
fits 2 gangs, 4 in each of two queues weighted 3:1.

Real gangs on process nodes, one launcher per step as 8 pipeline steps would run them. Asserted:
every step completes, no gang is ever partially placed (the gang plugin binds all 4 pods or none),
both queues are served while both have work, and the share of gang-seconds each queue got is
printed against the 3:1 weights (which Volcano's proportion plugin does not reach with waiting
gangs: ``docs/reliability.md``).
"""
from __future__ import annotations

import threading
import time
from typing import Dict, List

import pytest

from tests.cluster.helpers import GangMonitor, create_queue, ctr_volcano_cli, job_phase, wait_for
from tests.cluster.test_process_nodes import _claim, _params

pytestmark = pytest.mark.cluster

GANG = 4            # 2 pservers + 2 trainers
WEIGHTS = {"heavy": 3, "light": 1}
PER_QUEUE = 4


def gang_seconds(times: List[float], samples: List[Dict[str, int]], queue_of: Dict[str, str],
                 until: float, gang: int = GANG) -> Dict[str, float]:
    """Seconds of whole gangs per queue, from the monitor's samples up to ``until`` (each sample
    counts until the next one)."""
    out = {q: 0.0 for q in set(queue_of.values())}
    for (t, counts), t_next in zip(zip(times, samples), times[1:] + [until]):
        dt = max(0.0, min(t_next, until) - t)
        for job, n in counts.items():
            if n >= gang:
                out[queue_of[job]] += dt
    return out


def test_gang_seconds_of_one_sample_count_until_the_next():
    """The share's arithmetic on a hand-made trace (the cluster test below prints the real one)."""
    times = [0.0, 1.0, 3.0]
    samples = [{"a": 4, "b": 0}, {"a": 4, "b": 4}, {"a": 0, "b": 2}]
    assert gang_seconds(times, samples, {"a": "heavy", "b": "light"}, until=4.0) == {
        "heavy": 3.0, "light": 2.0}


def _delete_queue(api, name: str) -> None:
    """Once the sandbox's Jobs are gone (Volcano refuses to delete a queue that still holds one)."""
    from kubernetes import client

    co = client.CustomObjectsApi(api)

    def gone() -> bool:
        try:
            co.delete_cluster_custom_object("scheduling.volcano.sh", "v1beta1", "queues", name)
        except client.ApiException as exc:
            return exc.status == 404
        return False

    wait_for(f"queue {name} deleted", gone, timeout=120, interval=1.0)


@pytest.fixture(scope="module")
def small_planted(tmp_path_factory) -> str:
    """40k planted rows in 2 train shards: a gang trains them in seconds, so 8 fit in the tier."""
    root = tmp_path_factory.mktemp("queues-planted")
    ctr_volcano_cli("gen-data", "--rows", "40000", "--out", str(root / "raw"), "--seed", "5")
    ctr_volcano_cli("prep", "--input", str(root / "raw"), "--out", str(root / "prep"), "--shards", "2",
                    "--hash-buckets", "100003")
    return str(root / "prep")


def test_eight_steps_in_two_weighted_queues_all_complete_whole(sandbox, tmp_path, small_planted):
    from ctr_volcano.training.step import run_training_step

    api = sandbox.api()
    queues = {kind: f"{kind}-{sandbox.pool}" for kind in WEIGHTS}
    for kind, name in queues.items():
        create_queue(api, name, weight=WEIGHTS[kind], reclaimable=True)
        sandbox.cleanup.append(lambda name=name: _delete_queue(api, name))
    sandbox.add_process_nodes(2, cpu="4")          # 8 pods of 1 CPU: exactly 2 gangs
    claim = _claim(sandbox, tmp_path)
    # submitted in turn (heavy, light, heavy, ...): first come, first served alone would give 0.50
    queue_of = {f"ctr-{kind}-{i}": kind for i in range(PER_QUEUE) for kind in WEIGHTS}
    results: Dict[str, object] = {}
    finished: Dict[str, float] = {}
    logs: Dict[str, List[str]] = {job: [] for job in queue_of}

    def step(job: str) -> None:
        try:
            results[job] = run_training_step(small_planted, str(tmp_path / job), _params(
                sandbox, claim, job, epochs=1, queue=queues[queue_of[job]], schedule_timeout_s=1800),
                log=logs[job].append)
        except BaseException as exc:
            results[job] = exc
        finished[job] = time.monotonic()

    monitor = GangMonitor(api, sandbox.namespace, list(queue_of), GANG, interval=0.5).start()
    t0 = time.monotonic()
    threads = [threading.Thread(target=step, args=(job,), daemon=True) for job in queue_of]
    for t in threads:
        t.start()
    for t in threads:
        t.join(1800)
    monitor.stop()
    assert not [t for t in threads if t.is_alive()], "a step did not finish"
    failed = {job: r for job, r in results.items() if isinstance(r, BaseException)}
    assert not failed, "\n".join(f"{job}: {err}\n" + "\n".join(logs[job][-20:]) for job, err in failed.items())
    for job in queue_of:
        assert job_phase(api, sandbox.namespace, job) == "Completed", job
        assert (tmp_path / job / "model_meta.json").is_file(), job
    assert monitor.partial_jobs() == [], "a gang was placed in part"
    assert max(sum(1 for n in s.values() if n >= GANG) for s in monitor.samples) <= 2

    done = {kind: max(finished[j] for j, k in queue_of.items() if k == kind) for kind in WEIGHTS}
    contended_until = min(done.values())          # both queues had work until one ran dry
    seconds = gang_seconds(monitor.times, monitor.samples, queue_of, contended_until)
    share = seconds["heavy"] / max(1e-9, sum(seconds.values()))
    order = sorted(queue_of, key=lambda j: finished[j])
    print(f"\n8 steps in queues 3:1 on 2 gang slots: makespan {max(finished.values()) - t0:.0f}s; "
          f"while both queues had work ({contended_until - t0:.0f}s) gang-seconds heavy "
          f"{seconds['heavy']:.0f}, light {seconds['light']:.0f}: heavy share {share:.2f} (weights 0.75); "
          f"finish order {' '.join(order)}; attempts "
          f"{sorted(getattr(r, 'attempts', 0) for r in results.values())}")
    # Both queues are served while both have work (neither starves). The 3:1 weights are not met:
    # Volcano's proportion caps a queue's deserved share at what its admitted gangs request, and a
    # gang waiting for room has no pods yet, so the waiting gangs are admitted in turn
    # (docs/reliability.md has the measured shares).
    assert seconds["heavy"] > 0 and seconds["light"] > 0, seconds
