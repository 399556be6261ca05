"""Training throughput: our 2x2 local gang vs a bare Paddle PS loop vs one process.

(a) ours: ``ctr_volcano.training.local.backend.train_local`` (2 pservers x 2 trainers, the production entrypoint)
    on prepped Parquet. Throughput = all trainers' examples / the gang's training-phase wall time,
    from the first trainer starting to wait for its Parquet->slot conversion (which runs while
    Paddle starts up) or to load its data into memory, to the last trainer finishing its last
    epoch. Start-up, the final checkpoint and the export are not in it (the bare loop has none of
    them; with ``--epochs`` > 1 the checkpoints between epochs are); they are reported separately
    as end-to-end examples/s.
(b) bare: the same network (``ctr_model.net.build_net``), config and sparse-table layout, 2x2,
    each trainer a minimal ``QueueDataset`` + ``train_from_dataset`` loop over the same rows
    pre-converted to slot text
    (conversion not timed): Paddle's own cost. Throughput = examples / (last trainer's end - first
    trainer's start).
(c) single: one process, local embedding, ``QueueDataset`` over all slot files.

All three run in this invocation, one after the other, ``--repeat`` times; the best run of each
counts (the box is shared, so the best run is the least disturbed one). Last line:
``RESULT ratio_bare=a/b ratio_single=a/c ex_per_s=a e2e_ratio=... e2e_ex_per_s=...``, where
``e2e_ratio`` is, within the run of (a) with the best end-to-end examples/s, end-to-end examples/s
(``train_local`` called to returned: start-up, the final checkpoint, export, calibration and the test
evaluation included) over that run's training-phase examples/s.

``--store s3`` instead compares (a) on a shared local directory with (a) through the object store
(a SeaweedFS ``weed`` on loopback, ``tools/s3server``): the same data uploaded to a bucket, each
trainer downloading its own shards, checkpoints and model uploaded, alternating runs. The ratio is
of end-to-end examples/s (start-up, downloads, checkpoints, export and uploads included: what the
store costs). Last line: ``RESULT ratio_s3_vs_local=s3/local e2e_local=... e2e_s3=...``.

Usage: python bench/train.py [--data PREP_DIR] [--rows 200000] [--epochs 1] [--repeat 2] [--store s3]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

BENCH_CONFIG = {"progress_secs": 10.0}


def _train_queue_dataset(paddle, exe, net, config, files):
    """The framework's own loop: ``QueueDataset`` over slot files + ``train_from_dataset``.

    Returns the (start, end) wall times of the training epochs.
    """
    ds = paddle.distributed.QueueDataset()
    ds.init(use_var=net.feed_vars, pipe_command="cat", batch_size=config.batch_size,
            thread_num=config.threads)
    ds.set_filelist(files)
    start = time.time()
    for _ in range(config.epochs):
        exe.train_from_dataset(program=paddle.static.default_main_program(), dataset=ds,
                               thread=config.threads, debug=False)
    return start, time.time()


def _bare_role() -> int:
    """One role of the bare PS loop; everything comes from Paddle's own variables + BENCH_* ."""
    from ctr_model.net import prepare_paddle

    prepare_paddle()
    import paddle
    import paddle.distributed.fleet as fleet

    from ctr_model.config import TrainConfig
    from ctr_model.net import EMBEDDING_NAME, build_net, make_optimizer

    config = TrainConfig.from_json(os.environ["BENCH_CONFIG"])
    paddle.enable_static()
    fleet.init(is_collective=False)
    net = build_net(config, ps_mode=True)
    strategy = fleet.DistributedStrategy()
    strategy.a_sync = True
    table = strategy.sparse_table_configs.add()      # the same sparse-table layout as ours
    table.table_name = EMBEDDING_NAME
    table.shard_num = config.sparse_shards
    fleet.distributed_optimizer(make_optimizer(config), strategy).minimize(net.loss)
    if fleet.is_server():
        fleet.init_server()
        fleet.run_server()
        return 0
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(paddle.static.default_startup_program())
    # Paddle 3.0.0 no longer waits for the pservers here (init_worker failed with "push dense param
    # failed" 4 s before they served): wait as our trainer does, outside the timed loop
    from ctr_model.rendezvous import wait_for_endpoints

    wait_for_endpoints(os.environ["PADDLE_PSERVERS_IP_PORT_LIST"].split(","), 600)
    fleet.init_worker()
    files = json.loads(os.environ["BENCH_FILES"])
    rows = int(os.environ["BENCH_ROWS"])
    t, end = _train_queue_dataset(paddle, exe, net, config, files)
    print("BARE", json.dumps({"examples": rows * config.epochs, "start": t, "end": end}), flush=True)
    fleet.barrier_worker()
    if fleet.worker_index() == 0:
        fleet.fleet._runtime_handle._worker.stop_server()
    fleet.stop_worker()
    return 0


def _single_role() -> int:
    from ctr_model.net import prepare_paddle

    prepare_paddle()
    import paddle

    from ctr_model.config import TrainConfig
    from ctr_model.net import build_net, make_optimizer

    config = TrainConfig.from_json(os.environ["BENCH_CONFIG"])
    paddle.enable_static()
    net = build_net(config, ps_mode=False)
    make_optimizer(config).minimize(net.loss)
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(paddle.static.default_startup_program())
    files = json.loads(os.environ["BENCH_FILES"])
    t, end = _train_queue_dataset(paddle, exe, net, config, files)
    seconds = end - t
    print("SINGLE", json.dumps({"examples": int(os.environ["BENCH_ROWS"]) * config.epochs,
                                "seconds": seconds}), flush=True)
    return 0


def run_ours(data: str, config: dict, workdir: str, output_dir=None, store_env=None) -> dict:
    from ctr_volcano.training.local.backend import train_local

    t = time.time()
    result = train_local(data, os.path.join(workdir, "model"), config, pservers=2, trainers=2,
                         max_retry=0, workdir=workdir, log=lambda m: None, job_id="bench-ours",
                         output_dir=output_dir, store_env=store_env)
    wall = time.time() - t
    starts, ends, n = [], [], 0
    for hist in result.metrics["per_trainer"].values():
        first = min(hist, key=lambda r: r["epoch"])
        starts.append(first["start_time"] - first.get("convert_wait_seconds", 0.0)
                      - first.get("load_seconds", 0.0))
        ends.append(max(r["end_time"] for r in hist))
        n += sum(r["examples"] for r in hist)
    total = n / (max(ends) - min(starts))
    examples = sum(e["examples"] for e in result.metrics["epochs"])
    return {"ex_per_s": total, "wall_s": wall, "examples": examples, "e2e_ex_per_s": examples / wall,
            "e2e_ratio": examples / wall / total, "test_auc": result.metrics.get("test", {}).get("auc")}


def run_bare(slot_files, rows_per_file, config: dict, workdir: str) -> dict:
    from ctr_model.contract import RoleSpec, paddle_env
    from ctr_model.data import assign_shards
    from ctr_volcano.training.local.gang import find_free_ports

    ports = find_free_ports(3, consecutive=2)
    procs, outs = [], []
    t = time.time()
    for role, count in (("pserver", 2), ("trainer", 2)):
        for i in range(count):
            spec = RoleSpec(role=role, index=i, job_id="bench-bare",
                            pserver_hosts=("127.0.0.1",) * 2, trainer_hosts=("127.0.0.1",) * 2,
                            ps_port=ports[0], ps_port_stride=1, gloo_port=ports[2], data_dir="",
                            output_dir=workdir)
            env = {k: v for k, v in os.environ.items() if not k.startswith(("PADDLE_", "CTR_"))}
            env.update(paddle_env(spec))
            env["PADDLE_WITH_GLOO"] = "1"    # bare Paddle: its own rendezvous server in pserver 0
            mine = assign_shards(slot_files, i, 2) if role == "trainer" else []
            env.update(BENCH_CONFIG=json.dumps(config), BENCH_FILES=json.dumps(mine),
                       BENCH_ROWS=str(sum(rows_per_file[f] for f in mine)))
            log = open(os.path.join(workdir, f"bare-{role}-{i}.log"), "w+")
            procs.append(subprocess.Popen([sys.executable, __file__, "--bare-role"], env=env,
                                          stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                          cwd=workdir))
            outs.append(log)
    try:
        for p in procs[2:]:            # the trainers; trainer 0 stops the pservers when both are done
            p.wait(timeout=1800)
        for p in procs[:2]:
            p.wait(timeout=120 if all(t.returncode == 0 for t in procs[2:]) else 1)
    except subprocess.TimeoutExpired:
        pass
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()
    wall = time.time() - t
    starts, ends, n = [], [], 0
    for log in outs:
        log.seek(0)
        for line in log:
            if line.startswith("BARE "):
                r = json.loads(line[5:])
                starts.append(r["start"])
                ends.append(r["end"])
                n += r["examples"]
    total = n / (max(ends) - min(starts)) if starts else 0.0
    if any(p.returncode != 0 for p in procs[2:]) or any(p.returncode not in (0, -9) for p in procs[:2]):
        raise RuntimeError(f"bare gang failed: exit codes {[p.returncode for p in procs]} (logs in {workdir})")
    return {"ex_per_s": total, "wall_s": wall}


def run_single(slot_files, rows: int, config: dict, workdir: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PADDLE_", "CTR_"))}
    env.update(BENCH_CONFIG=json.dumps(config), BENCH_FILES=json.dumps(list(slot_files)),
               BENCH_ROWS=str(rows))
    out = subprocess.run([sys.executable, __file__, "--single-role"], env=env, capture_output=True,
                         text=True, timeout=1800, cwd=workdir)
    for line in out.stdout.splitlines():
        if line.startswith("SINGLE "):
            r = json.loads(line[7:])
            return {"ex_per_s": r["examples"] / r["seconds"]}
    raise RuntimeError(f"single-process run failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")


def main() -> int:
    if "--bare-role" in sys.argv:
        return _bare_role()
    if "--single-role" in sys.argv:
        return _single_role()
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", help="prep output dir (default: planted synthetic data)")
    parser.add_argument("--rows", type=int, default=200_000, help="synthetic train rows")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--config", default="{}", help="TrainConfig overrides as JSON")
    parser.add_argument("--only", choices=("ours",), default=None,
                        help="run only our gang (no baselines; prints ours' figures, no RESULT line)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs, models)")
    parser.add_argument("--store", choices=("s3",), default=None,
                        help="compare the shared-directory run with the object-store run instead")
    args = parser.parse_args()

    from ctr_model.config import TrainConfig
    from ctr_model.data import convert_shards, resolve_split

    work = tempfile.mkdtemp(prefix="ctr-bench-train-")
    data = args.data
    if not data:
        from tools.planted_prep import write_planted_prep

        data = os.path.join(work, "data")
        write_planted_prep(data, train_rows=args.rows, test_rows=10_000, shards=4,
                           hash_buckets=1_000_001, cardinality=20_000)
    split = resolve_split(data)
    config = {**BENCH_CONFIG, **json.loads(args.config), "epochs": args.epochs,
              "hash_buckets": split.hash_buckets}
    full = TrainConfig.from_dict(config).to_dict()
    converted = convert_shards(split.files, os.path.join(work, "slots"), split.hash_buckets)
    slot_files = [f for f, _ in converted]
    rows_per_file = dict(converted)
    rows = sum(rows_per_file.values())
    print(f"data {split.path}: {rows} rows in {len(slot_files)} shards; config {json.dumps(full)}")
    if args.store == "s3":
        return _compare_store(data, config, work, args)
    best = {"ours": None, "bare": None, "single": None}
    best_e2e = None
    for rep in range(args.repeat):
        for name in ("ours",) if args.only else ("ours", "bare", "single"):
            wd = os.path.join(work, f"{name}-{rep}")
            os.makedirs(wd)
            if name == "ours":
                r = run_ours(data, config, wd)
            elif name == "bare":
                r = run_bare(slot_files, rows_per_file, full, wd)
            else:
                r = run_single(slot_files, rows, full, wd)
            print(f"run {rep + 1} {name}: " + ", ".join(
                f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()), flush=True)
            if best[name] is None or r["ex_per_s"] > best[name]["ex_per_s"]:
                best[name] = r
            if name == "ours" and (best_e2e is None or r["e2e_ex_per_s"] > best_e2e["e2e_ex_per_s"]):
                best_e2e = r
    if args.only:
        print(f"ours: {best['ours']['ex_per_s']:.0f} ex/s in the training phase; end to end "
              f"{best_e2e['e2e_ex_per_s']:.0f} ex/s, e2e_ratio {best_e2e['e2e_ratio']:.3f} (no baselines run)")
        _cleanup(work, args.keep)
        return 0
    a, b, c = (best[k]["ex_per_s"] for k in ("ours", "bare", "single"))
    print(f"ours: {a:.0f} ex/s in the gang's training phase (conversion wait and in-memory load included); end to end with start-up, "
          f"checkpoints, export, calibration and test evaluation: {best_e2e['e2e_ex_per_s']:.0f} ex/s "
          f"({best_e2e['e2e_ratio']:.3f} of that run's training phase); test AUC {best['ours']['test_auc']}")
    print(f"bare Paddle QueueDataset PS loop: {b:.0f} ex/s; single process: {c:.0f} ex/s")
    _cleanup(work, args.keep)
    print(f"RESULT ratio_bare={a / b:.3f} ratio_single={a / c:.3f} ex_per_s={a:.0f} "
          f"e2e_ratio={best_e2e['e2e_ratio']:.3f} e2e_ex_per_s={best_e2e['e2e_ex_per_s']:.0f}")
    return 0


def _cleanup(work: str, keep: bool) -> None:
    if keep:
        print(f"work directory kept: {work}")
    else:
        import shutil

        shutil.rmtree(work, ignore_errors=True)


def _compare_store(data: str, config: dict, work: str, args) -> int:
    """(a) on a local shared directory vs (a) reading and writing a real S3 server on loopback."""
    import shutil

    sys.path.insert(0, os.path.join(REPO, "tools", "s3server"))
    import s3server

    from ctr_model import store as s3

    server = s3server.S3Server.start(s3server.build_weed())
    try:
        env = {**os.environ, "CTR_S3_ENDPOINT": server.endpoint, "CTR_S3_REGION": server.region,
               "AWS_ACCESS_KEY_ID": server.access_key, "AWS_SECRET_ACCESS_KEY": server.secret_key}
        client = s3.Store(s3.StoreConfig.from_env(env))
        bucket = server.create_bucket("bench")
        t = time.time()
        client.upload(data, s3.join(bucket, "prep"))
        print(f"uploaded the prep output in {time.time() - t:.1f}s (not timed below)")
        best = {"local": None, "s3": None}
        for rep in range(args.repeat):
            for name in ("local", "s3"):
                wd = os.path.join(work, f"{name}-{rep}")
                os.makedirs(wd)
                if name == "local":
                    r = run_ours(data, config, wd)
                else:
                    r = run_ours(s3.join(bucket, "prep"), config, wd,
                                 output_dir=s3.join(bucket, f"run-{rep}"), store_env=env)
                print(f"run {rep + 1} {name}: " + ", ".join(
                    f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()),
                    flush=True)
                if best[name] is None or r["e2e_ex_per_s"] > best[name]["e2e_ex_per_s"]:
                    best[name] = r
    finally:
        server.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    a, b = best["local"]["e2e_ex_per_s"], best["s3"]["e2e_ex_per_s"]
    print(f"local shared dir: {a:.0f} ex/s end to end ({best['local']['ex_per_s']:.0f} in training); "
          f"object store: {b:.0f} ex/s end to end ({best['s3']['ex_per_s']:.0f} in training)")
    print(f"RESULT ratio_s3_vs_local={b / a:.3f} e2e_local={a:.0f} e2e_s3={b:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
