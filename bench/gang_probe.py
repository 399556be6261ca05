"""Shared steps of the end-to-end benchmarks: make prepped data, run a probed local gang.

The gang is the product's own (:func:`ctr_volcano.training.local.backend.train_local`, the production entrypoint
in every role); the only addition is ``bench/probe/sitecustomize.py`` on the roles' ``PYTHONPATH``,
which records each process's spawn/exit time and peak RSS (and, if asked, a cProfile of its main
thread). Nothing in ``ctr_model`` or ``ctr_volcano`` is changed or patched.
"""
from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Dict, List, Optional

__all__ = ["PROBE_DIR", "run_child", "make_raw", "prep_child", "run_probed_gang", "dir_mb"]

PROBE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "probe")

_PREP_CODE = r"""
import json, sys, time
from ctr_volcano.data.prep import PrepConfig, prep
start = time.monotonic()
stats = prep([sys.argv[1]], sys.argv[2], PrepConfig(hash_buckets=int(sys.argv[3]), shards=int(sys.argv[4])))
print(json.dumps({"seconds": time.monotonic() - start, "rows_train": stats["rows_train"],
                  "rows_test": stats["rows_test"]}))
"""


def _tree(pid: int):
    """``pid`` and its descendants (from /proc), parents first."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            with open(f"/proc/{p}/task/{p}/children") as fh:
                todo.extend(int(c) for c in fh.read().split())
        except OSError:
            pass
    return out


def _memory_kb(pid: int) -> int:
    """Proportional set size of one process (shared pages split among their users), else RSS."""
    for path, key in ((f"/proc/{pid}/smaps_rollup", "Pss:"), (f"/proc/{pid}/status", "VmRSS:")):
        try:
            with open(path) as fh:
                for line in fh:
                    if line.startswith(key):
                        return int(line.split()[1])
        except OSError:
            continue
    return 0


def sample_tree_memory(pid: int, stop: threading.Event, peak: list) -> None:
    """Every 50 ms: the memory of the whole process tree under ``pid`` (PSS summed: forked workers
    share pages with their parent, which a sum of RSS would count once per process)."""
    while not stop.wait(0.05):
        peak[0] = max(peak[0], sum(_memory_kb(p) for p in _tree(pid)))


def run_child(argv: List[str]) -> Dict[str, Any]:
    """Run ``argv`` to completion; its stdout, wall seconds and peak memory (MB): the sampled peak of
    its process tree's summed PSS. Not ``ru_maxrss``: a child started from this process (fork or
    vfork, then exec) inherits this process's own peak there, so once an earlier point's evaluation
    had grown this process, every later child reported that figure."""
    with tempfile.TemporaryFile() as err:
        start = time.monotonic()
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err)
        stop, peak = threading.Event(), [0]
        sampler = threading.Thread(target=sample_tree_memory, args=(proc.pid, stop, peak), daemon=True)
        sampler.start()
        out = proc.stdout.read()
        proc.stdout.close()
        _, status, usage = os.wait4(proc.pid, 0)
        stop.set()
        sampler.join()
        seconds = time.monotonic() - start
        if os.waitstatus_to_exitcode(status) != 0:
            err.seek(0)
            raise SystemExit(f"{argv[:3]} failed:\n{err.read().decode()[-3000:]}")
    return {"stdout": out.decode(), "seconds": seconds, "peak_rss_mb": peak[0] / 1024.0,
            "cpu_s": usage.ru_utime + usage.ru_stime}


def make_raw(workdir: str, rows: int, seed: int = 1, vocab_scale: int = 1) -> str:
    """A cached single-file ``gen-data`` TSV of ``rows`` lines; returns its path.

    ``vocab_scale`` is ``gen-data --vocab-scale`` (vocabularies that many times larger, so the
    distinct ids keep growing with the rows); the cache directory names it when it is not 1.
    """
    suffix = f"-vocab{vocab_scale}" if vocab_scale != 1 else ""
    raw_dir = os.path.join(workdir, f"raw-{rows}{suffix}")
    path = os.path.join(raw_dir, "part-00000.tsv")
    if not os.path.exists(os.path.join(raw_dir, "oracle.json")):
        shutil.rmtree(raw_dir, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "ctr_volcano.app.cli.main", "gen-data", "--rows", str(rows),
                        "--out", raw_dir, "--seed", str(seed), "--oracle-rows", "20000",
                        "--vocab-scale", str(vocab_scale)],
                       check=True, stdout=subprocess.DEVNULL)
    return path


def prep_child(raw: str, out_dir: str, hash_buckets: int, shards: int = 8) -> Dict[str, Any]:
    """Prep ``raw`` into ``shards`` train shards in a fresh interpreter; MB/s of its own work and the
    child's peak RSS."""
    shutil.rmtree(out_dir, ignore_errors=True)
    r = run_child([sys.executable, "-c", _PREP_CODE, raw, out_dir, str(hash_buckets), str(shards)])
    info = json.loads(r["stdout"].strip().splitlines()[-1])
    info["mb_per_s"] = os.path.getsize(raw) / 1e6 / info["seconds"]
    info["peak_rss_mb"] = r["peak_rss_mb"]
    return info


def dir_mb(path: str) -> float:
    """Size of the files under ``path`` in MB (10^6 bytes)."""
    return sum(os.path.getsize(p) for p in glob.glob(os.path.join(path, "**"), recursive=True)
               if os.path.isfile(p)) / 1e6


def run_probed_gang(data: str, workdir: str, config: Dict[str, Any], pservers: int = 2,
                    trainers: int = 2, profile: bool = False) -> Dict[str, Any]:
    """Train with ``train_local`` on ``data``; returns wall seconds, metrics and per-process probes.

    Args:
        profile: also cProfile each role's main thread (``<probe dir>/<pid>.prof``).

    Returns:
        ``{"wall_s", "t_call", "t_return", "metrics", "probes": [...], "probe_dir", "output_dir",
        "model_dir"}``; the probes are sorted trainers first, by index.
    """
    from ctr_volcano.training.local.backend import train_local

    probe_out = os.path.join(workdir, "probes")
    for old in (probe_out, os.path.join(workdir, "run"), os.path.join(workdir, "model")):
        shutil.rmtree(old, ignore_errors=True)  # an earlier run's checkpoints would be resumed
    os.makedirs(probe_out)
    saved = {k: os.environ.get(k) for k in ("PYTHONPATH", "BENCH_PROBE_DIR", "BENCH_PROBE_PROFILE")}
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [PROBE_DIR] + [p for p in (saved["PYTHONPATH"] or "").split(os.pathsep) if p])
    os.environ["BENCH_PROBE_DIR"] = probe_out
    os.environ["BENCH_PROBE_PROFILE"] = "1" if profile else "0"
    try:
        t_call = time.time()
        result = train_local(data, os.path.join(workdir, "model"), config, pservers=pservers,
                             trainers=trainers, max_retry=0, workdir=os.path.join(workdir, "run"),
                             log=lambda m: None, job_id="bench-probe")
        t_return = time.time()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    probes = []
    for path in glob.glob(os.path.join(probe_out, "*.json")):
        with open(path) as fh:
            probes.append(json.load(fh))
    probes.sort(key=lambda p: (p["role"] != "TRAINER", int(p.get("trainer_id") or 0),
                               p.get("port") or ""))
    return {"wall_s": t_return - t_call, "t_call": t_call, "t_return": t_return,
            "metrics": result.metrics, "probes": probes, "probe_dir": probe_out,
            "output_dir": result.output_dir, "model_dir": result.model_dir}


def trainer_probe(run: Dict[str, Any], index: int = 0) -> Optional[Dict[str, Any]]:
    """The probe record of trainer ``index`` (``None`` if it wrote none)."""
    for p in run["probes"]:
        if p["role"] == "TRAINER" and int(p.get("trainer_id") or 0) == index:
            return p
    return None

def throughput(run: Dict[str, Any]) -> Dict[str, float]:
    """Training-phase ex/s (as ``bench/train.py`` defines it) and end-to-end ex/s."""
    starts, ends, n = [], [], 0
    for hist in run["metrics"]["per_trainer"].values():
        first = min(hist, key=lambda r: r["epoch"])
        starts.append(first["start_time"] - first.get("convert_wait_seconds", 0.0)
                      - first.get("load_seconds", 0.0))
        ends.append(max(r["end_time"] for r in hist))
        n += sum(r["examples"] for r in hist)
    return {"train_ex_per_s": n / (max(ends) - min(starts)), "e2e_ex_per_s": n / run["wall_s"],
            "examples": n}
