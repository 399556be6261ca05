"""Benchmark: gang latency and all-or-nothing placement on the mini cluster (real Volcano, kwok nodes).

Why: the product's Volcano Jobs must reach "every pod Running" quickly when there is room, and must
never end up half-placed when there is not. Two measurements, in one fresh cluster:

1. *Latency*: 20 gangs of 2 pservers + 2 trainers (the product's ``build_job`` output, created with its
   ``KubeClient``), one after another on idle nodes; the time from the create call until all 4 pods are
   Running. Baseline measured in the same run: 20 single-pod Volcano Jobs (gang of 1), the fixed cost
   of Job -> PodGroup -> enqueue -> pod creation -> bind -> kwok Running. The ratio shows what the gang
   adds on top.
2. *Contention*: 50 gangs of 2 pservers + 4 trainers (1 cpu each, 300 cpu in total) submitted at once
   onto 100 kwok nodes of 2 cpu (200 cpu): at most 33 gangs fit. While they settle, every 0.5 s all
   pods are sampled; a gang is partial if it shows ``0 < bound < 6`` in two consecutive samples
   before it was ever whole, or at the end. The expected number is zero.

Usage: ``python bench/cluster.py [--latency-jobs 20] [--jobs 50] [--nodes 100]``. Builds the binaries on
first use (tools/minicluster/build.sh). The last line is ``RESULT p50_ready_s=... partial_gangs=...``.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Dict, List

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools" / "minicluster"))
sys.path.insert(0, str(REPO))

import minicluster as mc  # noqa: E402


def _spec(name: str, namespace: str, pservers: int, trainers: int, pool: Dict[str, str]):
    from ctr_volcano.training.volcano.spec import Resources, TrainJobSpec

    res = Resources(cpu="1", memory="1Gi")
    return TrainJobSpec(name=name, namespace=namespace, image="example.invalid/ctr-trainer:kwok",
                        data_dir="/mnt/ctr/data", output_dir="/mnt/ctr/out", pservers=pservers,
                        trainers=trainers, pserver_resources=res, trainer_resources=res,
                        node_selector=pool, ttl_seconds_after_finished=None, max_retry=1)


def _single_pod_job(name: str, namespace: str, pool: Dict[str, str]) -> dict:
    """Baseline: the smallest Volcano Job, one pod (no gang to assemble)."""
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"schedulerName": "volcano", "queue": "default", "minAvailable": 1, "maxRetry": 1,
                     "tasks": [{"name": "solo", "replicas": 1, "minAvailable": 1, "template": {
                         "spec": {"restartPolicy": "Never", "nodeSelector": pool,
                                  "containers": [{"name": "solo", "image": "example.invalid/none:0",
                                                  "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}}}]}}


def _running(core, namespace: str, job: str) -> int:
    pods = core.list_namespaced_pod(namespace, label_selector=f"volcano.sh/job-name={job}").items
    return sum(1 for p in pods if p.status.phase == "Running" and p.metadata.deletion_timestamp is None)


def _ready_latency(client, core, job: dict, pods: int, timeout: float = 120.0) -> float:
    ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
    t0 = time.monotonic()
    client.create_job(job)
    while _running(core, ns, name) < pods:
        if time.monotonic() - t0 > timeout:
            raise RuntimeError(f"{name}: not all {pods} pods Running after {timeout:.0f}s")
        time.sleep(0.05)
    return time.monotonic() - t0


def _delete_and_wait(client, core, namespace: str, names: List[str], timeout: float = 120.0) -> None:
    for n in names:
        client.delete_job(namespace, n)
    t0 = time.monotonic()
    while core.list_namespaced_pod(namespace).items:
        if time.monotonic() - t0 > timeout:
            raise RuntimeError("pods of deleted jobs still present")
        time.sleep(0.2)


def _pct(values: List[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--latency-jobs", type=int, default=20)
    ap.add_argument("--jobs", type=int, default=50)
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--settle-s", type=float, default=20.0,
                    help="how long the bound counts must stay unchanged to call the contention run settled")
    args = ap.parse_args(argv)

    from kubernetes import client as k8s

    from ctr_volcano.training.volcano.client import KubeClient
    from ctr_volcano.training.volcano.manifest import build_job

    bin_dir = mc.build_binaries()
    cluster = mc.MiniCluster(bin_dir)
    try:
        cluster.start()
        print(f"cluster up in {cluster.timings['start_s']:.1f}s", flush=True)
        api = cluster.api_client()
        core = k8s.CoreV1Api(api)
        client = KubeClient(api)

        # ---------------------------------------------------------------- 1. latency
        ns = cluster.create_namespace("bench-latency")
        pool = {"bench/pool": "latency"}
        cluster.add_nodes(4, mc.NodeShape(cpu="4", labels=pool), prefix="lat")
        base, gang = [], []
        for i in range(args.latency_jobs):
            base.append(_ready_latency(client, core, _single_pod_job(f"solo-{i}", ns, pool), 1))
            _delete_and_wait(client, core, ns, [f"solo-{i}"])
            gang.append(_ready_latency(client, core, build_job(_spec(f"gang-{i}", ns, 2, 2, pool)), 4))
            _delete_and_wait(client, core, ns, [f"gang-{i}"])
        p50_base, p50_gang = statistics.median(base), statistics.median(gang)
        print(f"latency, single-pod Job (baseline): p50 {p50_base:.2f}s  p90 {_pct(base, .9):.2f}s  "
              f"max {max(base):.2f}s  (n={len(base)})")
        print(f"latency, 2x2 gang (product Job):    p50 {p50_gang:.2f}s  p90 {_pct(gang, .9):.2f}s  "
              f"max {max(gang):.2f}s  (n={len(gang)})")
        print(f"ratio gang/baseline p50: {p50_gang / p50_base:.2f}x", flush=True)

        # ---------------------------------------------------------------- 2. contention
        ns2 = cluster.create_namespace("bench-contention")
        pool2 = {"bench/pool": "contention"}
        cluster.delete_nodes([f"lat-{i}" for i in range(4)])
        t0 = time.monotonic()
        cluster.add_nodes(args.nodes, mc.NodeShape(cpu="2", memory="8Gi", labels=pool2), prefix="big",
                          timeout=300)
        print(f"{args.nodes} kwok nodes Ready in {time.monotonic() - t0:.1f}s", flush=True)
        gang_size = 6
        names = [f"c-{i:02d}" for i in range(args.jobs)]
        t0 = time.monotonic()
        for n in names:
            client.create_job(build_job(_spec(n, ns2, 2, 4, pool2)))
        print(f"{args.jobs} gangs submitted in {time.monotonic() - t0:.1f}s", flush=True)
        samples: List[Dict[str, int]] = []
        last_change = time.monotonic()
        prev = None
        while True:
            counts = {n: 0 for n in names}
            for p in core.list_namespaced_pod(ns2).items:
                job = (p.metadata.labels or {}).get("volcano.sh/job-name")
                if job in counts and p.spec.node_name and p.metadata.deletion_timestamp is None:
                    counts[job] += 1
            samples.append(counts)
            if counts != prev:
                prev, last_change = counts, time.monotonic()
            if time.monotonic() - last_change > args.settle_s or time.monotonic() - t0 > 300:
                break
            time.sleep(0.5)
        partial = set()
        for n in names:
            seq = [s[n] for s in samples]
            first_whole = next((i for i, c in enumerate(seq) if c >= gang_size), len(seq))
            before = seq[:first_whole]
            if any(0 < a < gang_size and 0 < b < gang_size for a, b in zip(before, before[1:])):
                partial.add(n)
            if 0 < seq[-1] < gang_size:
                partial.add(n)
        final = samples[-1]
        whole = sum(1 for n in names if final[n] == gang_size)
        unbound = sum(1 for n in names if final[n] == 0)
        cpu_used = sum(final.values())
        print(f"contention: {whole} gangs whole, {unbound} waiting with no pod bound, {len(partial)} partial; "
              f"{cpu_used}/{2 * args.nodes} cpu bound; {len(samples)} samples over "
              f"{time.monotonic() - t0:.0f}s", flush=True)
        print(f"RESULT p50_ready_s={p50_gang:.2f} baseline_p50_ready_s={p50_base:.2f} "
              f"ratio={p50_gang / p50_base:.2f} gangs_whole={whole} gangs_waiting={unbound} "
              f"partial_gangs={len(partial)}")
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
