"""The founding comparison on real processes: Kubernetes-native ReplicaSet + Job vs Volcano Job.

Why: the product exists because a parameter-server job deployed the native way (pservers as a
ReplicaSet, trainers as a batch Job, scheduled pod by pod by kube-scheduler) has no gang semantics.
When two such jobs compete for a cluster that fits one, each can start partially and hold its slots
while waiting for peers that cannot be placed. A Volcano Job is scheduled all-or-nothing, so the
second one queues and both finish. This script shows it on the mini cluster's process-backed nodes,
with real Paddle processes, using the product's own builders on both sides
(:func:`bench.native.build_native` and :func:`ctr_volcano.training.volcano.manifest.build_job`).

For each mode, two jobs of P pservers + T trainers are submitted together onto process nodes with
``--slots`` pod slots in total (1 cpu per pod), on the same planted data. Every ``--sample`` seconds
the pods are sampled; a pod holds a slot from the first sample that shows it bound to a node until
it is gone or finished. Reported per mode:

* jobs completed within ``--deadline``, and the makespan (submission -> last completion);
* stalled slot-seconds: slot time held by pods of a job that had some but not all of its pods placed
  (it cannot make progress: Paddle trainers wait for every pserver), before that job completed;
* pods and processes left behind after the mode's clean-up;
* an SVG of slot occupancy over time, one lane per job (``--svg``).

Usage: ``python bench/seed_comparison.py [--slots 6] [--rows 40000] [--deadline 420]``. Needs Go
(the cluster binaries) and root (process nodes use network namespaces). Last line:
``RESULT native_completed=N volcano_completed=N native_stalled_slot_s=X volcano_makespan_s=Y
native_makespan_s=Z makespan_ratio=Y/Z volcano_restarts=R unexplained_restarts=U``: every gang
restart is explained by the failed or evicted pod seen during that attempt (its exit code or
eviction reason and last log lines, logged as seen) and Volcano's event on the Job; a restart
without one is counted unexplained (:func:`ctr_volcano.training.volcano.diagnosis.explain_restarts`).
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools" / "minicluster"))
sys.path.insert(0, str(REPO))

import minicluster as mc  # noqa: E402

from ctr_volcano.images import trainer_image  # noqa: E402

#: The trainer image as the product names it: the process nodes run it from its build.
IMAGE = trainer_image()
LABEL_JOB = "ctr-volcano/job"


def log(msg: str) -> None:
    print(f"seed-comparison: {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------ timeline
@dataclass
class Timeline:
    """Samples of which pods of which job hold a slot, plus when each job completed."""

    t0: float
    gang_size: int
    samples: List[Tuple[float, Dict[str, int]]] = field(default_factory=list)
    completed: Dict[str, float] = field(default_factory=dict)

    def add(self, t: float, held: Dict[str, int]) -> None:
        self.samples.append((t - self.t0, dict(held)))

    def stalled_slot_seconds(self, job: str) -> float:
        """Slot-seconds held by ``job`` while it had 0 < pods placed < gang size, before completing."""
        total = 0.0
        done = self.completed.get(job)
        for (t, held), (t_next, _) in zip(self.samples, self.samples[1:]):
            if done is not None and t >= done:
                break
            n = held.get(job, 0)
            if 0 < n < self.gang_size:
                total += n * (t_next - t)
        return total

    def partial_for(self, job: str) -> float:
        """Longest continuous time ``job`` was partially placed (before completing)."""
        best = run = 0.0
        done = self.completed.get(job)
        for (t, held), (t_next, _) in zip(self.samples, self.samples[1:]):
            if done is not None and t >= done:
                break
            n = held.get(job, 0)
            run = run + (t_next - t) if 0 < n < self.gang_size else 0.0
            best = max(best, run)
        return best


def render_svg(panels: List[Tuple[str, Timeline, List[str]]], slots: int) -> str:
    """Slot occupancy over time: one panel per mode, one lane per job (bar height = slots held).

    Green: the job holds all its pods (it can progress); red: partially placed (it cannot);
    grey: after the job completed (pods being torn down).
    """
    width, lane_h, left, top = 900, 60, 150, 30
    t_max = max((p[1].samples[-1][0] for p in panels if p[1].samples), default=1.0) or 1.0
    rows = sum(len(jobs) for _, _, jobs in panels)
    height = top + rows * (lane_h + 10) + len(panels) * 30 + 40
    scale_x = (width - left - 20) / t_max
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="12">',
           f'<text x="10" y="18" font-size="14">Slot occupancy ({slots} slots; green: whole gang, '
           f'red: partially placed, grey: finishing)</text>']
    y = top
    for title, tl, jobs in panels:
        out.append(f'<text x="10" y="{y + 16}" font-weight="bold">{title}</text>')
        y += 24
        for job in jobs:
            out.append(f'<text x="10" y="{y + lane_h / 2 + 4}">{job}</text>')
            out.append(f'<rect x="{left}" y="{y}" width="{width - left - 20}" height="{lane_h}" '
                       f'fill="none" stroke="#ccc"/>')
            done = tl.completed.get(job)
            for (t, held), (t_next, _) in zip(tl.samples, tl.samples[1:]):
                n = held.get(job, 0)
                if not n:
                    continue
                color = ("#999" if done is not None and t >= done else
                         "#2a2" if n >= tl.gang_size else "#d33")
                h = lane_h * n / max(slots, 1)
                out.append(f'<rect x="{left + t * scale_x:.1f}" y="{y + lane_h - h:.1f}" '
                           f'width="{max((t_next - t) * scale_x, 0.5):.1f}" height="{h:.1f}" fill="{color}"/>')
            if done is not None:
                out.append(f'<line x1="{left + done * scale_x:.1f}" y1="{y}" x2="{left + done * scale_x:.1f}" '
                           f'y2="{y + lane_h}" stroke="#000" stroke-dasharray="3,2"/>')
            y += lane_h + 10
        y += 6
    out.append(f'<text x="{left}" y="{y + 14}">0 s</text>')
    out.append(f'<text x="{width - 80}" y="{y + 14}">{t_max:.0f} s</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------------------------ cluster work
def _cli(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "ctr_volcano.app.cli.main", *args], check=True, cwd=REPO,
                   stdout=subprocess.DEVNULL)


def _spec(name: str, namespace: str, claim: Path, prep: str, pool: Dict[str, str], args):
    from ctr_volcano.training.volcano.handoff import prepare_run_dir
    from ctr_volcano.training.volcano.spec import PvcVolume, Resources, TrainJobSpec

    res = Resources(cpu="1", memory="1Gi")
    dirs = prepare_run_dir(str(claim), name, prep)  # the product's hand-off, for both modes
    return TrainJobSpec(
        name=name, namespace=namespace, image=IMAGE, data_dir=dirs.data_dir,
        output_dir=dirs.output_dir, pservers=args.pservers, trainers=args.trainers,
        train_config={"epochs": args.epochs, "batch_size": 512, "learning_rate": 0.002},
        pserver_resources=res, trainer_resources=res, node_selector=pool, max_retry=2,
        ttl_seconds_after_finished=None, volumes=(PvcVolume("ctr-data", str(claim)),))


def _held(core, namespace: str) -> Dict[str, int]:
    held: Dict[str, int] = {}
    for pod in core.list_namespaced_pod(namespace).items:
        job = (pod.metadata.labels or {}).get(LABEL_JOB)
        if job and pod.spec.node_name and pod.status.phase not in ("Succeeded", "Failed"):
            held[job] = held.get(job, 0) + 1
    return held


def _native_done(batch, namespace: str, job: str) -> bool:
    from kubernetes import client

    from bench.native import trainer_job_name

    try:
        status = batch.read_namespaced_job(trainer_job_name(job), namespace).status
    except client.ApiException:
        return False
    return any(c.type == "Complete" and c.status == "True" for c in status.conditions or [])


def _volcano_done(co, namespace: str, job: str) -> bool:
    obj = co.get_namespaced_custom_object("batch.volcano.sh", "v1alpha1", namespace, "jobs", job)
    return ((obj.get("status") or {}).get("state") or {}).get("phase") == "Completed"


class FailureRecorder:
    """Every failed or evicted pod of the Volcano jobs, kept the moment it is seen (a gang restart
    deletes the pods and their logs), with its log tail: the causes of the restarts."""

    def __init__(self, core, namespace: str, jobs: List[str]):
        import threading

        self.core, self.namespace, self.jobs = core, namespace, jobs
        self.failures: Dict[str, list] = {j: [] for j in jobs}
        self._seen: set = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="failure-recorder")

    def __enter__(self) -> "FailureRecorder":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=40)

    def _run(self) -> None:
        from kubernetes import watch

        while not self._stop.is_set():
            try:
                for ev in watch.Watch().stream(self.core.list_namespaced_pod, self.namespace,
                                               timeout_seconds=5):
                    self.observe(self.core.api_client.sanitize_for_serialization(ev["object"]))
            except Exception as exc:  # a diagnostic must never stop the bench
                log(f"failure recorder: {exc}")
                self._stop.wait(0.5)

    def observe(self, pod: dict) -> None:
        from ctr_volcano.training.volcano.diagnosis import failure_of, is_failure

        meta = pod.get("metadata") or {}
        job = (meta.get("labels") or {}).get("volcano.sh/job-name")
        uid = meta.get("uid")
        if job not in self.failures or uid in self._seen or not is_failure(pod):
            return
        self._seen.add(uid)
        try:
            tail = self.core.read_namespaced_pod_log(meta["name"], self.namespace, tail_lines=20)
        except Exception as exc:
            tail = f"(log unreadable: {exc})"
        record = failure_of(job, pod, 0, tail or "")
        self.failures[job].append(record)
        lines = "\n    ".join((tail or "").splitlines()[-8:])
        log(f"volcano: {record.pod} failed: {record.reason}, exit code {record.exit_code}, "
            f"attempt {record.retry + 1}; last lines:\n    {lines}")

    def restarts(self, co, job: str) -> list:
        """The job's restart causes (read before the job is deleted)."""
        from ctr_volcano.training.volcano.diagnosis import explain_restarts

        obj = co.get_namespaced_custom_object("batch.volcano.sh", "v1alpha1", self.namespace, "jobs", job)
        retry = int((obj.get("status") or {}).get("retryCount") or 0)
        selector = f"involvedObject.name={job}"
        events = [self.core.api_client.sanitize_for_serialization(e)
                  for e in self.core.list_namespaced_event(self.namespace, field_selector=selector).items]
        return explain_restarts(retry, self.failures[job], events)


def _sample(tl: Timeline, mode: str, jobs: List[str], namespace: str, core, batch, apps, co,
            deadline: float, args) -> None:
    """Sample the slots until both jobs complete or the deadline passes; native pservers are
    deleted when their job completes (they serve on until someone does)."""
    from bench.native import pserver_set_name

    while time.monotonic() < deadline and len(tl.completed) < len(jobs):
        now = time.monotonic()
        tl.add(now, _held(core, namespace))
        for j in jobs:
            if j in tl.completed:
                continue
            done = _native_done(batch, namespace, j) if mode == "native" else _volcano_done(co, namespace, j)
            if done:
                tl.completed[j] = now - tl.t0
                log(f"{mode}: {j} completed after {tl.completed[j]:.0f}s")
                if mode == "native":  # the pservers serve on until someone deletes them
                    for i in range(args.pservers):
                        apps.delete_namespaced_replica_set(pserver_set_name(j, i), namespace,
                                                           propagation_policy="Foreground")
        time.sleep(args.sample)


def run_mode(cluster, mode: str, namespace: str, claim: Path, prep: str, pool: Dict[str, str],
             args) -> Tuple[Timeline, List[str], Dict[str, object]]:
    """Submit two jobs together in ``mode`` (native|volcano), sample until both complete or the
    deadline passes, clean up, and report."""
    from kubernetes import client, utils

    from bench.native import build_native
    from ctr_volcano.training.local.gang import processes_with_env
    from ctr_volcano.training.volcano.manifest import build_job

    api = cluster.api_client()
    core, batch, apps = client.CoreV1Api(api), client.BatchV1Api(api), client.AppsV1Api(api)
    co = client.CustomObjectsApi(api)
    jobs = [f"{mode[:3]}-a", f"{mode[:3]}-b"]
    specs = {j: _spec(j, namespace, claim, prep, pool, args) for j in jobs}
    tl = Timeline(t0=time.monotonic(), gang_size=args.pservers + args.trainers)
    # submitted together: every object of both jobs within one burst, A then B ("job" order); or,
    # native "role" order, as a pipeline that applies ReplicaSets before Jobs would: the pservers of
    # both jobs first (until placed), then both trainer Jobs
    if mode == "native" and args.native_order == "role":
        manifests = [o for j in jobs for o in build_native(specs[j]) if o["kind"] != "Job"]
        for obj in manifests:
            utils.create_from_dict(api, obj, namespace=namespace)
        want = len(jobs) * args.pservers
        while sum(_held(core, namespace).values()) < min(want, args.slots) \
                and time.monotonic() < tl.t0 + args.deadline:
            time.sleep(0.2)
        for j in jobs:
            utils.create_from_dict(api, build_native(specs[j])[-1], namespace=namespace)
    else:
        for j in jobs:
            if mode == "native":
                for obj in build_native(specs[j]):
                    utils.create_from_dict(api, obj, namespace=namespace)
            else:
                co.create_namespaced_custom_object("batch.volcano.sh", "v1alpha1", namespace, "jobs",
                                                   build_job(specs[j]))
    order = f", {args.native_order} order" if mode == "native" else ""
    log(f"{mode}: submitted {jobs} ({args.pservers} pservers + {args.trainers} trainers each) "
        f"onto {args.slots} slots{order}")
    deadline = tl.t0 + args.deadline
    recorder = FailureRecorder(core, namespace, jobs)
    with recorder:
        _sample(tl, mode, jobs, namespace, core, batch, apps, co, deadline, args)
        causes = {j: recorder.restarts(co, j) for j in jobs} if mode == "volcano" else {}
    for j, found in causes.items():
        for cause in found:
            log(f"volcano: {j}: {cause.describe()}")
    tl.add(time.monotonic(), _held(core, namespace))
    # clean-up as a user would: delete every object of both jobs, then look for leftovers
    for j in jobs:
        if mode == "native":
            for obj in build_native(specs[j]):
                kind, name = obj["kind"], obj["metadata"]["name"]
                try:
                    if kind == "Service":
                        core.delete_namespaced_service(name, namespace)
                    elif kind == "ReplicaSet":
                        apps.delete_namespaced_replica_set(name, namespace, propagation_policy="Foreground")
                    else:
                        batch.delete_namespaced_job(name, namespace, propagation_policy="Foreground")
                except client.ApiException as exc:
                    if exc.status != 404:
                        raise
        else:
            co.delete_namespaced_custom_object("batch.volcano.sh", "v1alpha1", namespace, "jobs", j,
                                               body={"propagationPolicy": "Foreground"})
    settle = time.monotonic() + 90
    left_pods: List[str] = []
    left_procs: List[int] = []
    while time.monotonic() < settle:
        left_pods = [p.metadata.name for p in core.list_namespaced_pod(namespace).items
                     if (p.metadata.labels or {}).get(LABEL_JOB) in jobs]
        left_procs = [pid for j in jobs for pid in processes_with_env(f"CTR_JOB_ID={j}")]
        if not left_pods and not left_procs:
            break
        time.sleep(1)
    report = {
        "completed": len(tl.completed),
        "makespan_s": round(max(tl.completed.values()), 1) if len(tl.completed) == len(jobs) else None,
        "completed_at_s": {j: round(t, 1) for j, t in tl.completed.items()},
        "stalled_slot_s": round(sum(tl.stalled_slot_seconds(j) for j in jobs), 1),
        "longest_partial_s": {j: round(tl.partial_for(j), 1) for j in jobs},
        "pods_left": len(left_pods), "processes_left": len(left_procs),
    }
    if mode == "volcano":
        report["restarts"] = {j: [c.describe() for c in found] for j, found in causes.items()}
        report["volcano_restarts"] = sum(len(found) for found in causes.values())
        report["unexplained_restarts"] = sum(not c.explained for found in causes.values() for c in found)
    log(f"{mode}: {json.dumps(report, sort_keys=True)}")
    return tl, jobs, report


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--slots", type=int, default=6, help="pod slots in the cluster (1 cpu per pod)")
    ap.add_argument("--nodes", type=int, default=3, help="process nodes sharing the slots")
    ap.add_argument("--pservers", type=int, default=2)
    ap.add_argument("--trainers", type=int, default=2)
    ap.add_argument("--rows", type=int, default=40000, help="planted rows (gen-data)")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--deadline", type=float, default=420.0, help="seconds per mode")
    ap.add_argument("--sample", type=float, default=0.5, help="seconds between samples")
    ap.add_argument("--modes", default="native,volcano")
    ap.add_argument("--native-order", choices=("job", "role"), default="job",
                    help="native submission order: job = A's objects then B's; role = both jobs' "
                         "pserver ReplicaSets first (until placed), then both trainer Jobs")
    ap.add_argument("--svg", default=str(REPO / "docs" / "seed-comparison.svg"))
    ap.add_argument("--json", default=None, help="also write the full report here")
    ap.add_argument("--keep-workdir", action="store_true",
                    help="keep the cluster's logs, the pods' logs and the claim (printed at the end)")
    args = ap.parse_args(argv)
    if args.slots % args.nodes:
        ap.error("--slots must be a multiple of --nodes")
    from kubernetes import client

    from ctr_volcano.training.volcano.handoff import build_pvc

    work = Path(tempfile.mkdtemp(prefix="seed-comparison-"))
    work.chmod(0o755)  # the pods run as a non-root UID and must reach the claim below it
    claim = work / "claim"
    cluster = mc.MiniCluster(mc.build_binaries(), work / "cluster", schedule_period="500ms",
                             process_nodes=True, kube_scheduler=True)
    reports: Dict[str, Dict[str, object]] = {}
    panels = []
    try:
        cluster.start(timeout=900)
        ns = cluster.create_namespace("seed")
        pool = {"seed-comparison/pool": "p"}
        cluster.add_process_nodes(args.nodes, mc.NodeShape(cpu=str(args.slots // args.nodes), memory="64Gi",
                                                           pods=110, labels=pool))
        cluster.create_host_volume("seed-claim", claim, ns, "ctr-data")
        client.CoreV1Api(cluster.api_client()).create_namespaced_persistent_volume_claim(
            ns, build_pvc("ctr-data", ns, size="1Gi"))
        _cli("gen-data", "--rows", str(args.rows), "--out", str(work / "raw"), "--seed", "3")
        _cli("prep", "--input", str(work / "raw"), "--out", str(work / "prep"), "--shards",
             str(args.trainers), "--hash-buckets", "100003")
        for mode in args.modes.split(","):
            tl, jobs, report = run_mode(cluster, mode, ns, claim, str(work / "prep"), pool, args)
            reports[mode] = report
            panels.append((f"{mode}: {report['completed']}/2 completed", tl, jobs))
    finally:
        cluster.stop()
        if args.keep_workdir:
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)  # data, claim and cluster state of this run
    Path(args.svg).write_text(render_svg(panels, args.slots))
    log(f"picture: {args.svg}")
    if args.json:
        Path(args.json).write_text(json.dumps(reports, indent=2, sort_keys=True))
    native, volcano = reports.get("native", {}), reports.get("volcano", {})
    print(json.dumps(reports, sort_keys=True))
    ratio = (round(volcano["makespan_s"] / native["makespan_s"], 2)  # type: ignore[operator]
             if volcano.get("makespan_s") and native.get("makespan_s") else None)
    print(f"RESULT native_completed={native.get('completed')} volcano_completed={volcano.get('completed')} "
          f"native_stalled_slot_s={native.get('stalled_slot_s')} volcano_makespan_s={volcano.get('makespan_s')} "
          f"native_makespan_s={native.get('makespan_s')} makespan_ratio={ratio} "
          f"volcano_restarts={volcano.get('volcano_restarts')} "
          f"unexplained_restarts={volcano.get('unexplained_restarts')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
