"""Benchmark: prep throughput vs the I/O floor, the peers a user would pick instead, and naive.

Generates (once, cached in ``--workdir``) a single Criteo-format TSV of at least ``--gb`` GB with
``ctr-volcano gen-data``, then measures, in fresh subprocesses so each gets its own peak RSS:

* (a) ours: :func:`ctr_volcano.data.prep.prep` on the whole file (default config: 8 + 2 shards) at each
  of ``--workers`` (default 1, 2 and the cores available, capped as prep caps its default); the
  ratios use the largest, which is what prep does by default;
* (a0) ours without the data profile (``PrepConfig(profile=False)``) at the same worker counts,
  interleaved with (a): what the profile costs (``--no-profile-runs`` skips it);
* (b) the I/O floor: pyarrow reading the same file with the same column types and writing it to
  one Parquet file with no validation, transform, split or hashing, done two ways: (b1) pyarrow's
  streaming CSV reader, (b2) prep's 32 MiB block reader, multithreaded ``read_csv`` and overlapped
  writes. The faster of the two is the floor;
* (p) the peers (``bench/prep_peers.py``): the same transform, hash, buckets and split written as
  one polars streaming query and as one duckdb ``COPY``; after the timed runs each peer's output is
  checked row for row against ours on a sample (``--check-sample``: rows whose XOR of the 26 ids is
  0 modulo it), same ids and same float32 bits, per split;
* (c) naive: a line-by-line Python prep (split, ``int()``, ``log1p``, per-value hash, write TSV) on
  the first ``--naive-mb`` MB;
* (s) a feature spec's own layout (``--spec-mb`` MB of ``gen-data --feature-spec`` CSV in
  :data:`prep_spec_peer.BENCH_SPEC`: a header, string ids, a multi-valued column, a ``standardize``
  feature): ours (the generic path) against the polars peer of ``bench/prep_spec_peer.py``, then
  checked row for row on a sample like the others.

Each runs ``--repeat`` times, interleaved, best kept (the machine is shared). MB/s is input
megabytes (10^6 bytes of TSV) per second of the work itself, timed inside each child (interpreter
start-up and imports excluded, alike for all). The last line is ``RESULT ratio_floor=a/b
ratio_polars=a/polars ratio_duckdb=a/duckdb ratio_naive=a/c peak_rss_mb=M cpu_ratio_floor=...
cpu_ratio_polars=... cpu_ratio_duckdb=... mb_s_w1=... mb_s_w2=... ratio_polars_spec=s/polars
cpu_ratio_polars_spec=... mb_s_spec=... agreement=pass|fail``. M is the
peak memory of the worst run of (a), whatever its worker count: the larger of the child's own peak
RSS and the peak, sampled every 50 ms, of the PSS summed over its whole process tree (the forked
workers share pages with their parent, which a sum of RSS would count once per process).
``cpu_ratio_X`` is X's CPU seconds over ours (the child and its workers, least of the runs; steadier
than wall time on a shared machine; above 1 means we use less); ``mb_s_wN`` is ours at N workers;
``profile_cost_wN`` is how much slower (wall, best of the runs) prep is at N workers with the profile
than without (0.05: 5% slower), ``profile_cpu_cost`` the same in CPU seconds at the largest N. Both
compare separate runs, so the machine's swings between runs show in them (on the shared 2-core
machine: 0.05-0.12 for the same code); ``profile_cpu_share_w1``, from one more run with one worker
that times the profile's own code inside prep (each thread's CPU time), is its CPU seconds over the
rest of prep's, both from the same run (six runs there: 0.106-0.109; it misses what the profile
costs prep's other code, e.g. in caches).
The exit code is 1 if a peer disagrees with ours.

Usage: ``python bench/prep.py [--gb 1.0] [--spec-mb 300] [--workdir /tmp/ctr_bench] [--repeat 2]
[--workers 1,2] [--no-profile-runs]`` (``--spec-mb 0`` skips (s))
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time

from gang_probe import sample_tree_memory  # sibling modules: the script's own directory is on sys.path
from prep_peers import compare_outputs
from prep_spec_peer import BENCH_SPEC, compare_spec_outputs

ROWS_PER_GB = 4_150_000  # ~241 bytes per generated line

FLOOR_CODE = r"""
import sys, time, pyarrow.csv as pacsv, pyarrow.parquet as pq
from ctr_model.features import RAW_COLUMNS
from ctr_volcano.data.prep import parse
start = time.monotonic()
read_opts, parse_opts, convert_opts = parse._csv_options()
reader = pacsv.open_csv(sys.argv[1], read_options=pacsv.ReadOptions(
    column_names=list(RAW_COLUMNS), use_threads=True, block_size=16 << 20),
    parse_options=parse_opts, convert_options=convert_opts)
writer = pq.ParquetWriter(sys.argv[2], reader.schema, compression="snappy")
rows = 0
for batch in reader:
    writer.write_batch(batch)
    rows += batch.num_rows
writer.close()
print(rows, time.monotonic() - start)
"""

FLOOR_BLOCKS_CODE = r"""
import sys, time, pyarrow as pa, pyarrow.csv as pacsv, pyarrow.parquet as pq
from concurrent.futures import ThreadPoolExecutor
from ctr_volcano.data.prep import inputs, parse
start = time.monotonic()
read_opts, parse_opts, convert_opts = parse._csv_options()
writer, pending, rows = None, None, 0
with ThreadPoolExecutor(1) as pool:  # same block reading and write overlap as prep, no transform
    for _, text, _ in inputs._blocks(sys.argv[1], 32 << 20):
        table = pacsv.read_csv(pa.py_buffer(text), read_options=read_opts,
                               parse_options=parse_opts, convert_options=convert_opts)
        if writer is None:
            writer = pq.ParquetWriter(sys.argv[2], table.schema, compression="snappy")
        if pending is not None:
            pending.result()
        pending = pool.submit(writer.write_table, table)
        rows += table.num_rows
    if pending is not None:
        pending.result()
writer.close()
print(rows, time.monotonic() - start)
"""

OURS_CODE = r"""
import sys, json, time
from ctr_volcano.data.prep import PrepConfig, prep
start = time.monotonic()
stats = prep([sys.argv[1]], sys.argv[2], PrepConfig(workers=int(sys.argv[3]), profile=sys.argv[4] == "1"))
seconds = time.monotonic() - start
counts = {k: stats[k] for k in ("rows_in", "rows_train", "rows_test", "rows_rejected")}
print(json.dumps(counts), seconds, sep="\n")
"""

PROFILE_SHARE_CODE = r"""
import collections, os, sys, time
from ctr_volcano.data.prep import PrepConfig, lanes, prep, stats
from ctr_volcano.data.profile import profile, sketches
spent = collections.Counter()

def timed(f, part):
    def run(*args, **kwargs):
        start = time.thread_time()
        try:
            return f(*args, **kwargs)
        finally:
            spent[part] += time.thread_time() - start
    return run

lanes.criteo_piece = timed(lanes.criteo_piece, "ids")
sketches.DenseSketch.of_integers = classmethod(timed(sketches.DenseSketch.of_integers.__func__, "dense"))
sketches.DenseSketch.add_bins = timed(sketches.DenseSketch.add_bins, "dense")
profile.DataProfile.merged = classmethod(timed(profile.DataProfile.merged.__func__, "merges"))
stats.write_profile = timed(stats.write_profile, "write")
before = os.times()
prep([sys.argv[1]], sys.argv[2], PrepConfig(workers=1))
after = os.times()
total = (after.user + after.system) - (before.user + before.system)
print(total - sum(spent.values()), " ".join(f"{k}={v:.3f}" for k, v in sorted(spent.items())))
"""

OURS_SPEC_CODE = r"""
import sys, json, time
from ctr_model.feature_spec import load_spec
from ctr_volcano.data.prep import PrepConfig, prep
spec = load_spec(sys.argv[1])
start = time.monotonic()
stats = prep(sys.argv[3:], sys.argv[2], PrepConfig(), spec=spec)
seconds = time.monotonic() - start
counts = {k: stats[k] for k in ("rows_in", "rows_train", "rows_test", "rows_rejected")}
print(json.dumps(counts), seconds, sep="\n")
"""

NAIVE_CODE = r"""
import math, sys, time
from ctr_model.features import hash_value
limit = int(sys.argv[3])
done = 0
start = time.monotonic()
with open(sys.argv[1], "rb") as src, open(sys.argv[2], "w") as out:
    for raw in src:
        done += len(raw)
        if done > limit:
            break
        f = raw.decode().rstrip("\n").split("\t")
        label = int(f[0])
        dense = [math.log1p(max(int(x), 0)) if x else 0.0 for x in f[1:14]]
        sparse = [hash_value(v, j + 1) for j, v in enumerate(f[14:])]
        out.write("\t".join([str(label)] + ["%.6g" % d for d in dense] + [str(s) for s in sparse]))
        out.write("\n")
print(done, time.monotonic() - start)
"""


def _profile_share(path: str, out_dir: str) -> str:
    """`` profile_cpu_share_w1=...``: the profile code's CPU seconds over the rest of prep's, timed
    inside one prep at one worker (printed with its parts)."""
    shutil.rmtree(out_dir, ignore_errors=True)
    _, out, _ = _run_rss(PROFILE_SHARE_CODE, path, out_dir)
    rest, *parts = out.split()
    spent = sum(float(p.split("=")[1]) for p in parts)
    print(f"(a0) the profile's own CPU inside prep at one worker: {spent:.2f} s ({', '.join(parts)}) "
          f"against {float(rest):.2f} s for the rest", flush=True)
    return f" profile_cpu_share_w1={spent / float(rest):.3f}"


def _run_rss(code: str, *args: str):
    """Run ``code`` in a fresh interpreter; return (seconds, stdout, peak memory in MB)."""
    return _run_argv_rss([sys.executable, "-c", code, *args])


def _run_argv_rss(argv):
    """Run ``argv``; return (seconds, stdout, peak memory in MB) and set ``_run_rss.last_cpu``.

    Peak memory is the larger of the child's own peak RSS and the sampled peak of its process
    tree's summed PSS (workers included). CPU seconds are the child's and its reaped children's.
    """
    import tempfile

    with tempfile.TemporaryFile() as err:
        start = time.monotonic()
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err)
        stop, peak = threading.Event(), [0]
        sampler = threading.Thread(target=sample_tree_memory, args=(proc.pid, stop, peak),
                                   daemon=True)
        sampler.start()
        out = proc.stdout.read()
        proc.stdout.close()
        _, status, usage = os.wait4(proc.pid, 0)  # reaps the child; rusage covers its children
        stop.set()
        sampler.join()
        proc.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.monotonic() - start
        if proc.returncode != 0:
            err.seek(0)
            raise SystemExit(f"benchmark step failed:\n{err.read().decode()[-3000:]}")
    _run_rss.last_cpu = usage.ru_utime + usage.ru_stime  # type: ignore[attr-defined]
    return seconds, out.decode().strip(), max(usage.ru_maxrss, peak[0]) / 1024.0


def _ensure_input(workdir: str, gb: float) -> str:
    raw_dir = os.path.join(workdir, "raw")
    path = os.path.join(raw_dir, "part-00000.tsv")
    want = int(gb * 1e9)
    if os.path.exists(path) and os.path.getsize(path) >= want:
        return path
    shutil.rmtree(raw_dir, ignore_errors=True)
    rows = int(ROWS_PER_GB * gb * 1.02) + 1000
    while True:
        print(f"generating {rows} rows into {raw_dir} ...", flush=True)
        subprocess.run([sys.executable, "-m", "ctr_volcano.app.cli.main", "gen-data", "--rows", str(rows),
                        "--out", raw_dir, "--seed", "1", "--oracle-rows", "20000"], check=True)
        if os.path.getsize(path) >= want:
            return path
        rows = int(rows * want / os.path.getsize(path) * 1.01) + 1000


SPEC_BYTES_PER_ROW = 59  # a generated BENCH_SPEC row, header aside


def _ensure_spec_input(workdir: str, mb: float):
    """(spec path, input files) of the cached ``gen-data --feature-spec`` CSV of >= ``mb`` MB."""
    spec_path = os.path.join(workdir, "spec.json")
    raw_dir = os.path.join(workdir, "raw_spec")
    want = int(mb * 1e6)
    with open(spec_path, "w", encoding="utf-8") as fh:
        json.dump(BENCH_SPEC, fh)

    def files():
        return sorted(os.path.join(raw_dir, f) for f in os.listdir(raw_dir) if f.endswith(".csv"))

    if os.path.isdir(raw_dir) and sum(map(os.path.getsize, files())) >= want \
            and _same_spec(raw_dir):
        return spec_path, files()
    shutil.rmtree(raw_dir, ignore_errors=True)
    rows = int(want / SPEC_BYTES_PER_ROW * 1.02) + 1000
    print(f"generating {rows} rows of the spec's layout into {raw_dir} ...", flush=True)
    subprocess.run([sys.executable, "-m", "ctr_volcano.app.cli.main", "gen-data", "--feature-spec",
                    spec_path, "--rows", str(rows), "--files", "2", "--out", raw_dir, "--seed", "1",
                    "--oracle-rows", "20000"], check=True)
    return spec_path, files()


def _same_spec(raw_dir: str) -> bool:
    from ctr_model.feature_spec import spec_from_dict

    try:
        with open(os.path.join(raw_dir, "oracle.json"), encoding="utf-8") as fh:
            made = json.load(fh)["feature_spec"]
    except (OSError, KeyError, ValueError):
        return False
    return made == spec_from_dict(BENCH_SPEC).to_dict()


def _spec_runs(args, peer_dir: str) -> dict:
    """(s): ours and the polars peer on the spec's CSV, interleaved, and the agreement check."""
    from ctr_model.feature_spec import spec_from_dict

    spec_path, files = _ensure_spec_input(args.workdir, args.spec_mb)
    size_mb = sum(map(os.path.getsize, files)) / 1e6
    print(f"spec input: {len(files)} CSV files ({size_mb:.0f} MB)", flush=True)
    times = {"ours": [], "polars": []}
    cpu = {"ours": [], "polars": []}
    ours_dir, theirs_dir = os.path.join(args.workdir, "ours_spec"), os.path.join(args.workdir, "polars_spec")
    for i in range(args.repeat):
        shutil.rmtree(ours_dir, ignore_errors=True)
        _, out, peak = _run_rss(OURS_SPEC_CODE, spec_path, ours_dir, *files)
        counts_line, t = out.splitlines()
        times["ours"].append(float(t))
        cpu["ours"].append(_run_rss.last_cpu)
        print(f"  run {i + 1}: ours spec   {size_mb / float(t):7.1f} MB/s ({float(t):.1f} s, "
              f"{_run_rss.last_cpu:.1f} CPU s, peak memory {peak:.0f} MB, {counts_line})", flush=True)
        _, out, ppeak = _run_argv_rss([sys.executable, os.path.join(peer_dir, "prep_spec_peer.py"),
                                       spec_path, theirs_dir, *files])
        t = float(out.split()[-1])
        times["polars"].append(t)
        cpu["polars"].append(_run_rss.last_cpu)
        print(f"  run {i + 1}: polars spec {size_mb / t:7.1f} MB/s ({t:.1f} s, "
              f"{_run_rss.last_cpu:.1f} CPU s, peak RSS {ppeak:.0f} MB)", flush=True)
    check = compare_spec_outputs(spec_from_dict(BENCH_SPEC), ours_dir, theirs_dir, args.check_sample)
    verdict = (f"agree on {check['rows_checked']} sampled rows" if check["ok"]
               else "DISAGREE: " + "; ".join(check["problems"]))
    ours_mb_s, polars_mb_s = size_mb / min(times["ours"]), size_mb / min(times["polars"])
    print(f"(s) spec: ours {ours_mb_s:.1f} MB/s, polars {polars_mb_s:.1f} MB/s ({verdict})")
    return {"ok": check["ok"], "result": f" ratio_polars_spec={ours_mb_s / polars_mb_s:.3f}"
            f" cpu_ratio_polars_spec={min(cpu['polars']) / min(cpu['ours']):.3f} mb_s_spec={ours_mb_s:.1f}"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gb", type=float, default=1.0, help="input size in GB (default 1.0)")
    ap.add_argument("--workdir", default="/tmp/ctr_bench", help="scratch dir (input is cached)")
    ap.add_argument("--repeat", type=int, default=2, help="runs of each, best kept")
    ap.add_argument("--naive-mb", type=float, default=10.0, help="slice for the naive prep (MB)")
    ap.add_argument("--check-sample", type=int, default=64,
                    help="agreement check: compare the rows whose id XOR is 0 mod this power of "
                         "two (1: every row; default 64)")
    ap.add_argument("--peers", default="polars,duckdb", help="peers to run (default both)")
    ap.add_argument("--spec-mb", type=float, default=300.0,
                    help="size in MB of the feature-spec CSV for (s) (default 300; 0 skips it)")
    ap.add_argument("--no-profile-runs", dest="profile_runs", action="store_false",
                    help="skip (a0): ours without the data profile")
    ap.add_argument("--workers", default=None,
                    help="comma-separated worker counts to run ours at (default: 1, 2 and the "
                         "cores available); the ratios use the largest, prep's default")
    args = ap.parse_args(argv)
    from ctr_volcano.data.prep import AUTO_WORKERS_MAX, available_cores

    auto = min(available_cores(), AUTO_WORKERS_MAX)
    try:
        worker_counts = sorted({int(w) for w in args.workers.split(",")} if args.workers
                               else {1, 2, auto})
    except ValueError:
        worker_counts = []
    if not worker_counts or worker_counts[0] < 1:
        ap.error(f"--workers {args.workers!r}: use comma-separated positive integers, e.g. 1,2")
    peers = [p for p in args.peers.split(",") if p]
    if any(p not in ("polars", "duckdb") for p in peers):
        ap.error(f"--peers {args.peers!r}: use a comma-separated subset of polars,duckdb")

    os.makedirs(args.workdir, exist_ok=True)
    path = _ensure_input(args.workdir, args.gb)
    size_mb = os.path.getsize(path) / 1e6
    print(f"input: {path} ({size_mb:.0f} MB)", flush=True)

    floor_stream, floor_blocks, rss, naive = [], [], [], []
    ours_by_workers = {w: [] for w in worker_counts}
    ours = ours_by_workers[worker_counts[-1]]
    peer_times = {p: [] for p in peers}
    cpu = {name: [] for name in ["ours", "floor"] + peers}  # CPU seconds of each child
    peer_script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "prep_peers.py")
    bare_by_workers = {w: [] for w in worker_counts}
    cpu["bare"] = []
    for i in range(args.repeat):
        out_dir = os.path.join(args.workdir, "ours")
        for workers in worker_counts:
            for profile in ("0", "1") if args.profile_runs else ("1",):   # the last run's output is checked
                shutil.rmtree(out_dir, ignore_errors=True)
                _, out, peak = _run_rss(OURS_CODE, path, out_dir, str(workers), profile)
                counts_line, t = out.splitlines()
                counts, t = json.loads(counts_line), float(t)
                assert counts["rows_in"] == counts["rows_train"] + counts["rows_test"] + \
                    counts["rows_rejected"]
                (ours_by_workers if profile == "1" else bare_by_workers)[workers].append(t)
                if workers == worker_counts[-1]:
                    cpu["ours" if profile == "1" else "bare"].append(_run_rss.last_cpu)
                rss.append(peak)
                print(f"  run {i + 1}: ours w={workers:<2d}{'' if profile == '1' else ' no profile'} "
                      f"{size_mb / t:7.1f} MB/s ({t:.1f} s, {_run_rss.last_cpu:.1f} CPU s, peak memory "
                      f"{peak:.0f} MB, {counts})", flush=True)
        for name, code, times in (("floor b1", FLOOR_CODE, floor_stream),
                                  ("floor b2", FLOOR_BLOCKS_CODE, floor_blocks)):
            _, out, fpeak = _run_rss(code, path, os.path.join(args.workdir, "floor.parquet"))
            out, t = out.split()[0], float(out.split()[1])
            times.append(t)
            cpu["floor"].append(_run_rss.last_cpu)
            print(f"  run {i + 1}: {name} {size_mb / t:7.1f} MB/s ({t:.1f} s, "
                  f"{_run_rss.last_cpu:.1f} CPU s, peak RSS {fpeak:.0f} MB, {out} rows)",
                  flush=True)
        for peer in peers:
            _, out, ppeak = _run_argv_rss([sys.executable, peer_script, peer,
                                           os.path.join(args.workdir, peer), path])
            t = float(out.split()[-1])
            peer_times[peer].append(t)
            cpu[peer].append(_run_rss.last_cpu)
            print(f"  run {i + 1}: {peer:8s} {size_mb / t:7.1f} MB/s ({t:.1f} s, "
                  f"{_run_rss.last_cpu:.1f} CPU s, peak RSS {ppeak:.0f} MB)", flush=True)
        t, out, _ = _run_rss(NAIVE_CODE, path, os.path.join(args.workdir, "naive.tsv"),
                             str(int(args.naive_mb * 1e6)))
        naive_bytes, t = out.split()  # the loop's own time: interpreter start-up excluded
        naive_mb, t = int(naive_bytes) / 1e6, float(t)
        naive.append(naive_mb / t)
        print(f"  run {i + 1}: naive    {naive_mb / t:7.2f} MB/s ({t:.1f} s on {naive_mb:.0f} MB)",
              flush=True)

    a = size_mb / min(ours)
    b1, b2 = size_mb / min(floor_stream), size_mb / min(floor_blocks)
    b = max(b1, b2)
    print(f"(a) ours:  {a:8.1f} MB/s  (best of {args.repeat}, {worker_counts[-1]} workers; "
          + ", ".join(f"{w} workers {size_mb / min(ts):.1f}" for w, ts in ours_by_workers.items())
          + f"; peak memory {max(rss):.0f} MB)")
    print(f"(b) floor: {b:8.1f} MB/s  (pyarrow CSV -> Parquet, no transform; streaming reader "
          f"{b1:.1f}, prep's block reader {b2:.1f})")
    peer_mb_s, agree = {}, True
    for peer in peers:
        peer_mb_s[peer] = size_mb / min(peer_times[peer])
        check = compare_outputs(os.path.join(args.workdir, "ours"),
                                os.path.join(args.workdir, peer), args.check_sample)
        agree &= check["ok"]
        verdict = (f"agree on {check['rows_checked']} sampled rows" if check["ok"]
                   else "DISAGREE: " + "; ".join(check["problems"]))
        print(f"(p) {peer}: {peer_mb_s[peer]:7.1f} MB/s  ({verdict})")
    c = max(naive)
    print(f"(c) naive: {c:8.2f} MB/s  (line-by-line Python on the first {args.naive_mb:.0f} MB)")
    ratios = "".join(f" ratio_{p}={a / v:.3f}" for p, v in peer_mb_s.items())
    # On a shared machine wall time swings with the load; CPU seconds (least of the runs, the
    # whole child including start-up) are steadier. cpu_ratio_X = X's CPU s / ours (>1: ours
    # uses less).
    cpu_ratios = "".join(f" cpu_ratio_{k}={min(cpu[k]) / min(cpu['ours']):.3f}"
                         for k in ["floor"] + peers)
    print(f"CPU seconds (least of {args.repeat}): "
          + ", ".join(f"{k} {min(v):.2f}" for k, v in cpu.items() if v))
    if args.profile_runs:
        print("(a0) without the profile: " + ", ".join(f"{w} workers {size_mb / min(ts):.1f} MB/s"
                                                        for w, ts in bare_by_workers.items()))
    per_workers = "".join(f" mb_s_w{w}={size_mb / min(ts):.1f}" for w, ts in ours_by_workers.items())
    if args.profile_runs:
        per_workers += "".join(f" profile_cost_w{w}={min(ts) / min(bare_by_workers[w]) - 1:.3f}"
                               for w, ts in ours_by_workers.items())
        per_workers += f" profile_cpu_cost={min(cpu['ours']) / min(cpu['bare']) - 1:.3f}"
        per_workers += _profile_share(path, os.path.join(args.workdir, "ours"))
    spec = {"ok": True, "result": ""}
    if args.spec_mb > 0:
        spec = _spec_runs(args, os.path.dirname(peer_script))
    agree &= spec["ok"]
    print(f"RESULT ratio_floor={a / b:.3f}{ratios} ratio_naive={a / c:.1f} "
          f"peak_rss_mb={max(rss):.0f}{cpu_ratios}{per_workers}{spec['result']} "
          f"agreement={'pass' if agree else 'fail'}")
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
