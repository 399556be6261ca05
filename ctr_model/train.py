"""The one entrypoint of every training pod: ``python -m ctr_model.train [--config FILE]``.

The pod's role, index and peers come only from Volcano's contract (``VC_TASK_INDEX`` and the svc
plugin's host lists) plus the product's ``CTR_*`` variables; :func:`ctr_model.contract.parse_role_env`
validates them and :func:`ctr_model.contract.paddle_env` derives Paddle's variables, so Paddle never
silently falls back to a local single worker.

Lifecycle (measured facts about Paddle 2.6 PS mode behind each step are in the project notes):

* pserver: checks its port is free (Paddle would exit 0 silently), serves until trainer 0 stops it,
  and exits non-zero if it was stopped any other way.
* trainer: converts its whole Parquet shards to Paddle's slot text, trains through the C++ dataset
  (the only path that refreshes dense weights in async mode), checkpoints every epoch (collective),
  exports the inference model (collective), and trainer 0 stops the pservers after a barrier.

Exit codes: 0 success, 2 bad contract/config/data, 3 pserver stopped unexpectedly, 1 anything else.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import threading
import time
import uuid
from typing import List, Optional

from ctr_model import checkpoint as ckpt
from ctr_model.config import ConfigError, TrainConfig
from ctr_model.contract import PSERVER, ContractError, RoleSpec, paddle_env, parse_role_env
from ctr_model.data import DataError, assign_shards, convert_shards, resolve_split

__all__ = ["main", "auc_from_stats", "resolve_own_host", "GANG_DIR", "MODEL_DIR", "METRICS_FILE"]

GANG_DIR = "_gang"          # per-run coordination files inside the output dir
MODEL_DIR = "model"
METRICS_FILE = "metrics.json"
MODEL_META = "model_meta.json"
DENSE_FILE = "dense.npz"


def _log(spec: RoleSpec, msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {spec.name}: {msg}", flush=True)


def auc_from_stats(stat_pos, stat_neg) -> float:
    """AUC from Paddle's ``auc`` op histograms (positives/negatives per score bucket)."""
    import numpy as np

    pos = np.asarray(stat_pos, dtype=np.float64).reshape(-1)
    neg = np.asarray(stat_neg, dtype=np.float64).reshape(-1)
    tot_pos, tot_neg = pos.sum(), neg.sum()
    if tot_pos == 0 or tot_neg == 0:
        return float("nan")
    # walk from the highest bucket down; trapezoids under the ROC curve
    pos_c = np.cumsum(pos[::-1])
    neg_c = np.cumsum(neg[::-1])
    prev_pos = np.concatenate([[0.0], pos_c[:-1]])
    prev_neg = np.concatenate([[0.0], neg_c[:-1]])
    area = ((neg_c - prev_neg) * (pos_c + prev_pos) / 2.0).sum()
    return float(area / (tot_pos * tot_neg))


# ------------------------------------------------------------------------------------------------
# shared program construction
# ------------------------------------------------------------------------------------------------

def _build(config: TrainConfig):
    import paddle
    import paddle.distributed.fleet as fleet

    from ctr_model.net import EMBEDDING_NAME, build_net, make_optimizer

    paddle.enable_static()
    paddle.seed(config.seed)
    paddle.static.default_main_program().random_seed = config.seed
    paddle.static.default_startup_program().random_seed = config.seed
    fleet.init(is_collective=False)
    net = build_net(config, ps_mode=True)
    # persistable accumulator of the summed loss, read by the progress thread
    loss_sum = paddle.static.create_global_var(shape=[1], value=0.0, dtype="float32",
                                               persistable=True, name="ctr_loss_sum")
    paddle.assign(loss_sum + paddle.sum(net.example_loss), output=loss_sum)
    strategy = fleet.DistributedStrategy()
    strategy.a_sync = True
    # fewer, larger sparse-table files per pserver (Paddle's default of 1000 makes saving slow)
    table = strategy.sparse_table_configs.add()
    table.table_name = EMBEDDING_NAME
    table.shard_num = config.sparse_shards
    optimizer = fleet.distributed_optimizer(make_optimizer(config), strategy)
    optimizer.minimize(net.loss)
    return fleet, net


# ------------------------------------------------------------------------------------------------
# pserver
# ------------------------------------------------------------------------------------------------

def _port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host if host not in ("localhost",) else "127.0.0.1", port))
        except OSError:
            return False
        except socket.gaierror:
            return True   # name not resolvable here; Paddle reports it
    return True


#: How long a pserver waits for its own host name to resolve. On Volcano the svc plugin's headless
#: Service publishes the name a little after the pod starts; Paddle's server, given a name that does
#: not resolve yet, logs an error and returns as if it had finished (exit 0).
DNS_WAIT_S = float(os.environ.get("CTR_DNS_WAIT_S", "120"))


def resolve_own_host(host: str, timeout_s: float = DNS_WAIT_S, interval_s: float = 1.0) -> Optional[str]:
    """The IP address of ``host``, retrying until ``timeout_s``; ``None`` if it never resolves."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return socket.gethostbyname(host)
        except OSError:
            if time.monotonic() >= deadline:
                return None
            time.sleep(min(interval_s, max(0.0, deadline - time.monotonic())))


def run_pserver(spec: RoleSpec, config: TrainConfig) -> int:
    host, port = spec.ps_endpoints()[spec.index].rsplit(":", 1)
    address = resolve_own_host(host)
    if address is None:
        print(f"{spec.name}: host name {host!r} (from VC_PSERVER_HOSTS) did not resolve within "
              f"{DNS_WAIT_S:.0f}s (CTR_DNS_WAIT_S): check cluster DNS and that the Job's svc plugin "
              f"publishes not-ready addresses", file=sys.stderr, flush=True)
        return 2
    free = _port_is_free(address, int(port))
    if not free:
        print(f"{spec.name}: port {port} on {host} is already in use (CTR_PS_PORT): stop the process "
              f"holding it or choose another port", file=sys.stderr, flush=True)
        return 2
    nonce = uuid.uuid4().hex
    gang_dir = os.path.join(spec.output_dir, GANG_DIR)
    os.makedirs(gang_dir, exist_ok=True)
    with open(os.path.join(gang_dir, f"{spec.name}.nonce"), "w", encoding="utf-8") as fh:
        fh.write(nonce)
    fleet, _net = _build(config)
    _log(spec, f"serving on {host}:{port}")
    fleet.init_server()
    fleet.run_server()
    try:
        with open(os.path.join(gang_dir, "stop"), encoding="utf-8") as fh:
            stopped = nonce in fh.read().split()
    except OSError:
        stopped = False
    if not stopped:
        print(f"{spec.name}: the parameter server returned without being stopped by trainer 0 "
              f"(look for 'Fail to listen' above: port taken or host name not resolvable)",
              file=sys.stderr, flush=True)
        return 3
    _log(spec, "stopped by trainer 0")
    return 0


# ------------------------------------------------------------------------------------------------
# trainer
# ------------------------------------------------------------------------------------------------

class _Progress(threading.Thread):
    """Prints examples/s, loss and AUC every ``secs`` while the examples count moves."""

    def __init__(self, spec: RoleSpec, scope, names: dict, secs: float):
        super().__init__(daemon=True)
        self.spec, self.scope, self.names, self.secs = spec, scope, names, secs
        self.stop_event = threading.Event()
        self.epoch = 0
        self.t0 = time.time()

    def read(self):
        import numpy as np

        pos = np.array(self.scope.find_var(self.names["pos"]).get_tensor())
        neg = np.array(self.scope.find_var(self.names["neg"]).get_tensor())
        loss = float(np.array(self.scope.find_var(self.names["loss"]).get_tensor()).sum())
        n = float(pos.sum() + neg.sum())
        return n, loss, pos, neg

    def run(self) -> None:
        last = -1.0
        while not self.stop_event.wait(self.secs):
            try:
                n, loss, pos, neg = self.read()
            except Exception:  # scope being rebuilt between epochs
                continue
            if n == last or n == 0:
                continue
            last = n
            dt = max(time.time() - self.t0, 1e-9)
            _log(self.spec, f"epoch {self.epoch}: {int(n)} examples, {n / dt:.0f} ex/s, "
                            f"loss {loss / n:.4f}, auc {auc_from_stats(pos, neg):.4f}")


def _reset_stats(scope, names: List[str]) -> None:
    import numpy as np
    import paddle

    for name in names:
        tensor = scope.find_var(name).get_tensor()
        tensor.set(np.zeros_like(np.array(tensor)), paddle.CPUPlace())


def _pull_dense(fleet) -> None:
    """Copy the pservers' current dense parameters into this trainer (after loading a checkpoint)."""
    from paddle.distributed.ps.utils.public import get_the_one_recv_context, get_the_one_send_context

    rt = fleet.fleet._runtime_handle
    dense_map = get_the_one_recv_context(rt.context, split_dense_table=rt.is_heter_ps_mode)
    send_ctx = get_the_one_send_context(rt.context, split_dense_table=rt.is_heter_ps_mode,
                                        ep_list=rt.endpoints)
    rt._pull_all_dense(rt.scopes, send_ctx, dense_map)


def _cache_dir(spec: RoleSpec) -> str:
    base = os.environ.get("CTR_CACHE_DIR") or os.path.join(
        os.environ.get("TMPDIR", "/tmp"), f"ctr-slots-{os.getuid()}")
    return os.path.join(base, f"{spec.job_id}-{spec.name}-{os.getpid()}")


def run_trainer(spec: RoleSpec, config: TrainConfig, explicit_buckets: bool = True) -> int:
    import shutil

    # Paddle's Gloo rendezvous dials pserver 0 by name once and dies on a name that does not resolve
    # yet (the headless Service publishes it a little after the pod starts): wait a bounded time.
    for host in dict.fromkeys(spec.pserver_hosts):
        if resolve_own_host(host, DNS_WAIT_S) is None:
            print(f"{spec.name}: pserver host name {host!r} (from VC_PSERVER_HOSTS) did not resolve "
                  f"within {DNS_WAIT_S:.0f}s (CTR_DNS_WAIT_S): check cluster DNS and that the Job's svc "
                  f"plugin publishes not-ready addresses", file=sys.stderr, flush=True)
            return 2
    split = resolve_split(spec.data_dir, "train")
    if split.hash_buckets and not explicit_buckets:
        config = config.replace(hash_buckets=split.hash_buckets)   # follow the data by default
    if split.hash_buckets and split.hash_buckets != config.hash_buckets:
        raise ConfigError("hash_buckets", config.hash_buckets,
                          f"the data in {split.path} was hashed into {split.hash_buckets} buckets; "
                          f"set hash_buckets to {split.hash_buckets}")
    if len(split.files) < spec.trainers:
        raise DataError(f"{split.path} has {len(split.files)} shards for {spec.trainers} trainers: "
                        f"re-run prep with at least {spec.trainers} shards or use fewer trainers")
    mine = assign_shards(split.files, spec.index, spec.trainers)
    cache = _cache_dir(spec)
    # Convert in the background while Paddle starts up (imports, program, rendezvous): Arrow's
    # writer releases the GIL, so most of the conversion hides behind the start-up.
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(max_workers=1)
    t0 = time.time()

    def convert():
        result = convert_shards(mine, cache, config.hash_buckets)
        return result, time.time() - t0

    future = pool.submit(convert)
    try:
        return _train(spec, config, future, len(mine))
    finally:
        pool.shutdown(wait=True)
        shutil.rmtree(cache, ignore_errors=True)


def _train(spec: RoleSpec, config: TrainConfig, conversion, n_shards: int) -> int:
    import numpy as np
    import paddle

    fleet, net = _build(config)
    main_program = paddle.static.default_main_program()   # after minimize: fleet swapped it
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(paddle.static.default_startup_program())
    fleet.init_worker()
    scope = paddle.static.global_scope()
    first = spec.index == 0

    resume = ckpt.latest_complete(spec.output_dir)
    start_epoch = 0
    if resume is not None:
        if resume.meta.get("pservers") != spec.pservers:
            raise ConfigError("pservers", spec.pservers,
                              f"checkpoint {resume.path} was written by {resume.meta.get('pservers')} "
                              f"pservers; use that many or a fresh output dir")
        fleet.load_model(resume.path, mode=0)
        _pull_dense(fleet)
        start_epoch = resume.epoch
        _log(spec, f"resumed from {resume.path} (epoch {resume.epoch})")

    t_wait = time.time()
    converted, convert_s = conversion.result()
    convert_wait = time.time() - t_wait
    files = [f for f, _ in converted]
    rows = sum(r for _, r in converted)
    _log(spec, f"{n_shards} shard(s), {rows} rows converted to slot text in {convert_s:.1f}s "
               f"(waited {convert_wait:.1f}s for it after start-up)")
    if config.reader == "inmemory":
        dataset = paddle.distributed.InMemoryDataset()
    else:
        dataset = paddle.distributed.QueueDataset()
    dataset.init(use_var=net.feed_vars, pipe_command="cat", batch_size=config.batch_size,
                 thread_num=config.threads)
    dataset.set_filelist(files)
    load_s = 0.0
    if config.reader == "inmemory":
        t = time.time()
        dataset.load_into_memory()
        load_s = time.time() - t
        _log(spec, f"loaded {rows} rows into memory in {load_s:.1f}s")

    names = {"pos": net.auc_states[2].name, "neg": net.auc_states[3].name, "loss": "ctr_loss_sum"}
    stat_names = [v.name for v in net.auc_states] + ["ctr_loss_sum"]
    progress = _Progress(spec, scope, names, config.progress_secs)
    progress.start()
    progress_file = os.path.join(spec.output_dir, GANG_DIR, f"{spec.name}.json")
    history = _load_history(progress_file, start_epoch)
    try:
        for epoch in range(start_epoch + 1, config.epochs + 1):
            if config.reader == "inmemory" and config.shuffle:
                dataset.local_shuffle()
            _reset_stats(scope, stat_names)
            progress.epoch, progress.t0 = epoch, time.time()
            t = time.time()
            exe.train_from_dataset(program=main_program, dataset=dataset, thread=config.threads,
                                   debug=False, fetch_list=[net.loss, net.auc],
                                   fetch_info=["loss", "auc"], print_period=config.print_every)
            seconds = time.time() - t
            n, loss, pos, neg = progress.read()
            record = {"epoch": epoch, "examples": int(n), "seconds": round(seconds, 3),
                      "start_time": round(t, 3), "end_time": round(t + seconds, 3),
                      "examples_per_sec": round(n / max(seconds, 1e-9), 1),
                      "loss": loss / n if n else None, "auc": auc_from_stats(pos, neg),
                      "convert_seconds": round(convert_s, 3) if epoch == start_epoch + 1 else 0.0,
                      "convert_wait_seconds": (round(convert_wait, 3) if epoch == start_epoch + 1
                                               else 0.0),
                      "load_seconds": round(load_s, 3) if epoch == start_epoch + 1 else 0.0}
            history.append(record)
            _save_history(progress_file, history)
            _log(spec, f"epoch {epoch} done: {int(n)} examples in {seconds:.1f}s "
                       f"({record['examples_per_sec']:.0f} ex/s), loss {record['loss'] or float('nan'):.4f}, "
                       f"auc {record['auc']:.4f}")
            _save_checkpoint(spec, config, fleet, exe, epoch)
    finally:
        progress.stop_event.set()
    if config.reader == "inmemory":
        dataset.release_memory()

    model_dir = os.path.join(spec.output_dir, MODEL_DIR)
    if first:
        import shutil
        shutil.rmtree(model_dir, ignore_errors=True)
    feed_names = [v.name for v in net.feed_vars[1:]]
    fleet.save_inference_model(exe, model_dir, feed_names, [net.predict])  # collective
    if first:
        from ctr_model.net import dense_param_names
        arrays = {name: np.array(scope.find_var(name).get_tensor())
                  for name in dense_param_names(config)}
        np.savez(os.path.join(model_dir, DENSE_FILE), **arrays)
        from ctr_model.infer import write_sparse_npz
        keys = write_sparse_npz(model_dir, config.embedding_dim)
        _log(spec, f"exported {model_dir} ({keys} sparse keys)")
        _write_json(os.path.join(model_dir, MODEL_META), _model_meta(spec, config))
    fleet.barrier_worker()
    if first:
        _write_metrics(spec, config, start_epoch)
        gang_dir = os.path.join(spec.output_dir, GANG_DIR)
        nonces = []
        for i in range(spec.pservers):
            try:
                with open(os.path.join(gang_dir, f"{PSERVER}-{i}.nonce"), encoding="utf-8") as fh:
                    nonces.append(fh.read().strip())
            except OSError:
                pass
        with open(os.path.join(gang_dir, "stop"), "w", encoding="utf-8") as fh:
            fh.write("\n".join(nonces) + "\n")
        fleet.fleet._runtime_handle._worker.stop_server()
        _log(spec, "pservers stopped")
    fleet.stop_worker()
    _log(spec, "done")
    return 0


def _save_checkpoint(spec: RoleSpec, config: TrainConfig, fleet, exe, epoch: int) -> None:
    import shutil

    path = ckpt.epoch_dir(spec.output_dir, epoch)
    if spec.index == 0:
        shutil.rmtree(path, ignore_errors=True)   # an incomplete one from a failed attempt
        os.makedirs(path, exist_ok=True)
    t = time.time()
    fleet.save_persistables(exe, path)            # collective: barrier, pservers write, barrier
    if spec.index == 0:
        ckpt.mark_complete(path, {"epoch": epoch, "pservers": spec.pservers,
                                  "trainers": spec.trainers, "config": config.to_dict(),
                                  "job_id": spec.job_id, "time": time.time()})
        ckpt.prune(spec.output_dir, config.keep_checkpoints)
        _log(spec, f"checkpoint {path} written in {time.time() - t:.1f}s")


def _load_history(path: str, start_epoch: int) -> list:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return []
    return [r for r in data if r.get("epoch", 0) <= start_epoch]


def _save_history(path: str, history: list) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    _write_json(path, history)


def _write_json(path: str, data) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=1, sort_keys=True)
    os.replace(tmp, path)


def _model_meta(spec: RoleSpec, config: TrainConfig) -> dict:
    from ctr_model.features import SCHEMA_VERSION

    return {"schema_version": SCHEMA_VERSION, "hash_buckets": config.hash_buckets,
            "config": config.to_dict(), "format": "ctr-dnn-ps-v1", "pservers": spec.pservers,
            "trainers": spec.trainers, "job_id": spec.job_id}


def _write_metrics(spec: RoleSpec, config: TrainConfig, start_epoch: int) -> None:
    gang_dir = os.path.join(spec.output_dir, GANG_DIR)
    per_trainer = {}
    for i in range(spec.trainers):
        try:
            with open(os.path.join(gang_dir, f"trainer-{i}.json"), encoding="utf-8") as fh:
                per_trainer[i] = json.load(fh)
        except (OSError, ValueError):
            per_trainer[i] = []
    epochs = []
    for e in range(1, config.epochs + 1):
        recs = [r for hist in per_trainer.values() for r in hist if r.get("epoch") == e]
        if not recs:
            continue
        n = sum(r["examples"] for r in recs)
        seconds = max(r["seconds"] for r in recs)
        epochs.append({
            "epoch": e, "examples": n, "seconds": seconds,
            "examples_per_sec": round(sum(r["examples_per_sec"] for r in recs), 1),
            "loss": sum(r["loss"] * r["examples"] for r in recs if r["loss"] is not None) / max(n, 1),
            "auc_trainer0": next((r["auc"] for r in per_trainer.get(0, []) if r.get("epoch") == e), None),
            "convert_seconds": max(r.get("convert_seconds", 0.0) for r in recs),
            "convert_wait_seconds": max(r.get("convert_wait_seconds", 0.0) for r in recs),
        })
    metrics = {"epochs": epochs, "pservers": spec.pservers, "trainers": spec.trainers,
               "resumed_from_epoch": start_epoch, "config": config.to_dict(),
               "per_trainer": {str(k): v for k, v in per_trainer.items()}}
    test = resolve_split(spec.data_dir, "test") if spec.data_dir else None
    if test is not None:
        from ctr_model.infer import evaluate_files, load_model

        t = time.time()
        scorer = load_model(os.path.join(spec.output_dir, MODEL_DIR))
        metrics["test"] = evaluate_files(scorer, list(test.files))
        metrics["test"]["seconds"] = round(time.time() - t, 2)
        _log(spec, f"test: {metrics['test']}")
    _write_json(os.path.join(spec.output_dir, METRICS_FILE), metrics)


# ------------------------------------------------------------------------------------------------

def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ctr_model.train",
                                     description="CTR DNN parameter-server role (pserver or trainer).")
    parser.add_argument("--config", help="TrainConfig JSON file (default: $CTR_TRAIN_CONFIG)")
    args = parser.parse_args(argv)
    try:
        spec = parse_role_env()
        text = spec.train_config_json
        if args.config:
            with open(args.config, encoding="utf-8") as fh:
                text = fh.read()
        config = TrainConfig.from_json(text)
        explicit_buckets = '"hash_buckets"' in text
    except (ContractError, ConfigError, OSError) as exc:
        print(f"ctr_model.train: error: {exc}", file=sys.stderr, flush=True)
        return 2
    os.environ.update(paddle_env(spec))
    from ctr_model.net import fix_proto_shadowing

    fix_proto_shadowing()
    try:
        if spec.role == PSERVER:
            return run_pserver(spec, config)
        return run_trainer(spec, config, explicit_buckets)
    except (ConfigError, DataError) as exc:
        print(f"ctr_model.train: {spec.name}: error: {exc}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
