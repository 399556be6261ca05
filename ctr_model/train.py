"""The one entrypoint of every training pod: ``python -m ctr_model.train [--config FILE]``.

The pod's role, index and peers come only from Volcano's contract (``VC_TASK_INDEX`` and the svc
plugin's host lists) plus the product's ``CTR_*`` variables; :func:`ctr_model.contract.parse_role_env`
validates them and :func:`ctr_model.contract.paddle_env` derives Paddle's variables, so Paddle never
silently falls back to a local single worker.

Lifecycle (measured facts about Paddle 2.6 and 3.0 PS mode behind each step are in the project notes):

* pserver: checks its port is free (Paddle would exit 0 silently), serves until trainer 0 stops it,
  and exits non-zero if it was stopped any other way.
* trainer: converts its whole Parquet shards to Paddle's slot text, trains through the C++ dataset
  (the only path that refreshes dense weights in async mode), checkpoints every epoch (collective),
  exports the inference model (collective), and trainer 0 stops the pservers after a barrier.

Outputs go through a :mod:`ctr_model.workspace`: a shared directory, or with ``s3://`` locations
(:mod:`ctr_model.store`) each role's own scratch directory (``CTR_SCRATCH_DIR``), from which trainers
download their own shards and every role uploads what it wrote; pservers fetch the checkpoint to
resume from before serving and upload their tables when trainer 0 asks.

Exit codes: 0 success, 2 bad contract/config/data, 3 pserver stopped unexpectedly, 1 anything else.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import sys
import threading
import time
import uuid
from typing import Any, Dict, List, Optional, Sequence

from ctr_model import checkpoint as ckpt
from ctr_model import store as s3
from ctr_model import workspace as wsp
from ctr_model.atomic import write_json
from ctr_model.config import ConfigError, TrainConfig
from ctr_model.contract import EXIT_BAD_INPUT, PSERVER, ContractError, RoleSpec, paddle_env, parse_role_env
from ctr_model.data import (
    DataError,
    SplitInfo,
    assign_shards,
    check_enough_shards,
    convert_shards,
    resolve_split,
    with_base_rate,
)
from ctr_model.feature_spec import FeatureSpec
from ctr_model.logs import human_seconds, setup_logging
from ctr_model.pid1 import supervise_if_pid1
from ctr_model.rendezvous import serve_rendezvous, wait_for_endpoints
from ctr_model.space import NoSpace, free_bytes, is_enospc, one_line_if_full
from ctr_model.tablegzip import use_fast_gzip
from ctr_model.warm_start import WarmStart, WarmStartError, check_compatible, export_checkpoint, read_init_model

__all__ = ["main", "auc_from_stats", "check_test_split", "resolve_own_host", "MODEL_DIR",
           "METRICS_FILE", "ENV_SCRATCH_DIR"]

MODEL_DIR = "model"
METRICS_FILE = "metrics.json"
MODEL_META = "model_meta.json"
DENSE_FILE = "dense.npz"
#: Local scratch for object-store runs (an emptyDir on a cluster); default: the temp dir.
ENV_SCRATCH_DIR = "CTR_SCRATCH_DIR"


log = logging.getLogger("ctr_model.train")


def _log(spec: RoleSpec, msg: str) -> None:
    log.info("%s: %s", spec.name, msg)


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

def _build(config: TrainConfig, spec: Optional[RoleSpec] = None, features: Optional[FeatureSpec] = None):
    """Fleet, network and optimizer. A trainer (``spec``) first waits for the pservers' endpoints
    itself (:func:`wait_for_endpoints`) where Paddle would poll them every 3 s: pserver 0's Gloo
    rendezvous server before ``fleet.init``, the pservers before ``minimize``."""
    import paddle
    import paddle.distributed.fleet as fleet

    from ctr_model.net import build_net, make_optimizer, net_tables

    paddle.enable_static()
    paddle.seed(config.seed)
    paddle.static.default_main_program().random_seed = config.seed
    paddle.static.default_startup_program().random_seed = config.seed
    if spec is not None:
        _wait_logged("pserver 0's rendezvous server", [f"{spec.pserver_hosts[0]}:{spec.gloo_port}"],
                     spec.pserver_wait_s)
    fleet.init(is_collective=False)
    net = build_net(config, ps_mode=True, features=features)
    # persistable accumulator of the summed loss, read by the progress thread
    loss_sum = paddle.static.create_global_var(shape=[1], value=0.0, dtype="float32",
                                               persistable=True, name="ctr_loss_sum")
    paddle.assign(loss_sum + paddle.sum(net.example_loss), output=loss_sum)
    strategy = fleet.DistributedStrategy()
    strategy.a_sync = True
    # fewer, larger sparse-table files per pserver (Paddle's default of 1000 makes saving slow)
    for sparse_table in net_tables(config, features):
        table = strategy.sparse_table_configs.add()
        table.table_name = sparse_table.name
        table.shard_num = config.sparse_shards
    optimizer = fleet.distributed_optimizer(make_optimizer(config), strategy)
    if spec is not None:
        _wait_logged("the pservers", spec.ps_endpoints(), spec.pserver_wait_s)
    optimizer.minimize(net.loss)
    return fleet, net


class PeersUnreachable(RuntimeError):
    """The pservers (or pserver 0's rendezvous server) never accepted a connection.

    Paddle's own check (``wait_server_ready``) polls every 3 s without a bound, so a gang whose
    pservers died before serving would hang until the stall watchdog. The trainer fails instead,
    after ``CTR_PSERVER_WAIT_S``: exit 1, which the Job's policies treat as a failure of the gang.
    """


def _wait_logged(what: str, endpoints: Sequence[str], timeout_s: float) -> None:
    t = time.time()
    ready = wait_for_endpoints(endpoints, timeout_s)
    waited = time.time() - t
    if not ready:
        raise PeersUnreachable(f"{what} did not accept connections within {waited:.0f}s "
                               f"({', '.join(endpoints)}, CTR_PSERVER_WAIT_S): see the pservers' logs for why they are not serving")
    log.info(f"{what} ready after {waited:.2f}s of waiting ({', '.join(endpoints)})")


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


def resolve_own_host(host: str, timeout_s: float, interval_s: float = 1.0) -> Optional[str]:
    """The IP address of ``host``, retrying until ``timeout_s``; ``None`` if it never resolves.

    On Volcano the svc plugin's headless Service publishes a pod's name a little after the pod starts;
    Paddle's server, given a name that does not resolve yet, logs an error and returns as if it had
    finished (exit 0), so every role waits a bounded time first (``RoleSpec.dns_wait_s``).
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return socket.gethostbyname(host)
        except OSError:
            if time.monotonic() >= deadline:
                return None
            time.sleep(min(interval_s, max(0.0, deadline - time.monotonic())))


def run_pserver(spec: RoleSpec, config: TrainConfig, ws: wsp.Workspace) -> int:
    host, port = spec.ps_endpoints()[spec.index].rsplit(":", 1)
    address = resolve_own_host(host, spec.dns_wait_s)
    if address is None:
        log.error(f"{spec.name}: error: host name {host!r} (from VC_PSERVER_HOSTS) did not resolve within "
                  f"{spec.dns_wait_s:.0f}s (CTR_DNS_WAIT_S): check cluster DNS and that the Job's svc plugin "
                  f"publishes not-ready addresses")
        return EXIT_BAD_INPUT
    free = _port_is_free(address, int(port))
    if not free:
        log.error(f"{spec.name}: error: port {port} on {host} is already in use (CTR_PS_PORT): stop the "
                  f"process holding it or choose another port")
        return EXIT_BAD_INPUT
    stop_rendezvous = None
    if spec.index == 0:
        try:
            stop_rendezvous = serve_rendezvous(spec.gloo_port)
        except OSError as exc:
            log.error(f"{spec.name}: error: cannot serve the trainers' rendezvous on port {spec.gloo_port} "
                      f"({exc.strerror or exc}; CTR_GLOO_PORT): stop the process holding it or choose another port")
            return EXIT_BAD_INPUT
    import shutil

    bin_dir = _cache_dir(spec) + "-bin"
    use_fast_gzip(bin_dir)
    try:
        return _serve(spec, config, ws, f"{host}:{port}")
    finally:
        if stop_rendezvous is not None:
            stop_rendezvous()
        shutil.rmtree(bin_dir, ignore_errors=True)


def _serve(spec: RoleSpec, config: TrainConfig, ws: wsp.Workspace, endpoint: str) -> int:
    nonce = uuid.uuid4().hex
    ws.write_text(f"{wsp.GANG_DIR}/{spec.name}.nonce", nonce)
    responder = None
    if isinstance(ws, wsp.StoreWorkspace):
        # trainer 0 loads the checkpoint by path: it must be on this pserver's disk before serving
        resume = _sync_checkpoints(ws)
        if resume is not None:
            t = time.time()
            ws.fetch(os.path.relpath(resume.path, ws.root))
            _log(spec, f"fetched {ws.uri(os.path.relpath(resume.path, ws.root))} in {time.time() - t:.1f}s")
        responder = wsp.PublishResponder(ws, spec.name)
        responder.start()
    features = _data_features(spec)
    fleet, _net = _build(_with_features(config, features), features=features)
    _log(spec, f"serving on {endpoint}")
    try:
        fleet.init_server()
        fleet.run_server()
    finally:
        if responder is not None:
            responder.stop()
    if not wsp.stopped_by_trainer0(ws, nonce):
        log.error(f"{spec.name}: the parameter server returned without being stopped by trainer 0 "
                  f"(look for 'Fail to listen' above: port taken or host name not resolvable)")
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
        self.rows_per_epoch = 0     # this trainer's rows: with last_epoch, drives the ETA
        self.last_epoch = 0

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
            eta = ""
            if self.rows_per_epoch:
                left = (self.last_epoch - self.epoch) * self.rows_per_epoch + max(self.rows_per_epoch - n, 0)
                eta = f", ETA {human_seconds(left / (n / dt))}"
            _log(self.spec, f"epoch {self.epoch}/{self.last_epoch}: {int(n)} of {self.rows_per_epoch} examples, "
                            f"{n / dt:.0f} ex/s, loss {loss / n:.4f}, auc {auc_from_stats(pos, neg):.4f}{eta}")


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


def _data_features(spec: RoleSpec) -> Optional[FeatureSpec]:
    """A pserver's view of the data's feature spec, which shapes the program it serves (the dense
    layers' widths): read from the training split's ``schema.json``, on a volume or in the store
    (only that file is read there)."""
    if s3.is_uri(spec.data_dir):
        from ctr_model.data import trainable_features

        src, _, schema = wsp.remote_split(s3.Store(s3.StoreConfig.from_env()), spec.data_dir, "train")
        return trainable_features(schema, src)
    return resolve_split(spec.data_dir, "train").features


def _with_features(config: TrainConfig, features: Optional[FeatureSpec]) -> TrainConfig:
    """The config with the spec's first embedding width (that of the first sparse table, the only one
    when every feature has the same), on pservers and trainers alike.

    Raises:
        ConfigError: the model family cannot mix the spec's widths (``deepfm``), naming a feature.
    """
    if features is None or not features.categorical:
        return config
    from ctr_model.sparse_tables import mixed_dims_refusal, sparse_tables

    refusal = mixed_dims_refusal(config.model, sparse_tables(features, config.embedding_dim))
    if refusal:
        raise ConfigError("model", config.model, refusal)
    return config.replace(embedding_dim=features.categorical[0].embedding_dim)


def check_test_split(data_dir: str, train: SplitInfo) -> Optional[SplitInfo]:
    """The prep dir's ``test/`` split, validated against ``train`` (``None`` if there is none).

    Raises:
        DataError: the test split is unreadable, of another schema version, or hashed differently.
    """
    test = resolve_split(data_dir, "test")
    if test is not None and test.hash_buckets != train.hash_buckets:
        raise DataError(f"{test.path} was hashed into {test.hash_buckets} buckets but {train.path} into "
                        f"{train.hash_buckets}: re-run `ctr-volcano prep` to write both splits")
    return test


def _sync_checkpoints(ws: wsp.Workspace) -> Optional[ckpt.Checkpoint]:
    """The newest complete checkpoint; from a store, its markers are fetched first."""
    if isinstance(ws, wsp.StoreWorkspace):
        root = os.path.relpath(ckpt.checkpoint_root(ws.root), ws.root)
        for name in ws.list(root):
            for leaf in ("meta.json", ckpt.COMPLETE_MARKER):
                ws.fetch(f"{root}/{name}/{leaf}")
    return ckpt.latest_complete(ws.root)


def _cache_dir(spec: RoleSpec) -> str:
    base = os.environ.get("CTR_CACHE_DIR") or os.path.join(
        os.environ.get("TMPDIR", "/tmp"), f"ctr-slots-{os.getuid()}")
    return os.path.join(base, f"{spec.job_id}-{spec.name}-{os.getpid()}")


def _train_split(spec: RoleSpec, ws: wsp.Workspace):
    """``(split, shards in it, this trainer's shards, download)``: with data in a store, ``download``
    streams this trainer's shards to its scratch (run it before converting them)."""
    if not s3.is_uri(spec.data_dir):
        split = resolve_split(spec.data_dir, "train")
        mine = assign_shards(split.files, spec.index, spec.trainers)
        return split, len(split.files), mine, lambda: mine

    def select(files: List[str]) -> List[str]:
        check_enough_shards(spec.data_dir, len(files), spec.trainers)
        return assign_shards(files, spec.index, spec.trainers)

    client = ws.store if isinstance(ws, wsp.StoreWorkspace) else s3.Store(s3.StoreConfig.from_env())
    split, total, download = wsp.stage_split(client, spec.data_dir, "train",
                                             os.path.join("data", "train"), select)

    def fetch():
        t = time.time()
        files = download()
        _log(spec, f"downloaded {len(files)} of {total} shard(s) of {split.path} in {time.time() - t:.1f}s")
        return files

    return split, total, list(split.files), fetch


def _resolve_reader(spec: RoleSpec, config: TrainConfig, rows: int) -> TrainConfig:
    """``reader: auto`` made concrete for this trainer's share of ``rows`` (logged with the reason)."""
    if config.reader != "auto":
        return config
    from ctr_model.reader_choice import choose_reader, memory_limit

    reader, why = choose_reader(rows, memory_limit())
    _log(spec, f"reader: {reader} ({why})")
    return config.replace(reader=reader)


def run_trainer(spec: RoleSpec, config: TrainConfig, ws: wsp.Workspace,
                explicit_buckets: bool = True) -> int:
    import shutil

    # Paddle's Gloo rendezvous dials pserver 0 by name once and dies on a name that does not resolve
    # yet (the headless Service publishes it a little after the pod starts): wait a bounded time.
    for host in dict.fromkeys(spec.pserver_hosts):
        if resolve_own_host(host, spec.dns_wait_s) is None:
            log.error(f"{spec.name}: error: pserver host name {host!r} (from VC_PSERVER_HOSTS) did not "
                      f"resolve within {spec.dns_wait_s:.0f}s (CTR_DNS_WAIT_S): check cluster DNS and that the "
                      f"Job's svc plugin publishes not-ready addresses")
            return EXIT_BAD_INPUT
    split, n_files, mine, fetch = _train_split(spec, ws)
    config = with_base_rate(_with_features(config, split.features), split)
    if split.hash_buckets and not explicit_buckets:
        config = config.replace(hash_buckets=split.hash_buckets)   # follow the data by default
    if split.hash_buckets and split.hash_buckets != config.hash_buckets:
        raise ConfigError("hash_buckets", config.hash_buckets,
                          f"the data in {split.path} was hashed into {split.hash_buckets} buckets; "
                          f"set hash_buckets to {split.hash_buckets}")
    check_enough_shards(split.path, n_files, spec.trainers)
    config = _resolve_reader(spec, config, split.rows * len(mine) // max(1, n_files))
    if not s3.is_uri(spec.data_dir):
        check_test_split(spec.data_dir, split)   # trainer 0 scores it after training: fail before
    init = None
    if spec.init_model:   # refuse a mismatched init model before any long work
        from ctr_model.features import SCHEMA_VERSION

        init = read_init_model(spec.init_model)
        check_compatible(init, config.to_dict(), spec.pservers, SCHEMA_VERSION,
                         split.features.to_dict() if split.features is not None else None)
    cache = _cache_dir(spec)
    # Convert in the background while Paddle starts up (imports, program, rendezvous): Arrow's
    # writer releases the GIL, so most of the conversion hides behind the start-up.
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(max_workers=1)
    t0 = time.time()

    def convert():
        if config.reader == "stream":   # no conversion: Paddle pipes each shard through slot_stream
            return [(f, _parquet_rows(f)) for f in fetch()], time.time() - t0
        result = convert_shards(fetch(), cache, config.hash_buckets, split.features)
        return result, time.time() - t0

    future = pool.submit(convert)
    try:
        return _train(spec, config, ws, future, len(mine), split.files, init, split.features)
    finally:
        pool.shutdown(wait=True)
        shutil.rmtree(cache, ignore_errors=True)


def _train(spec: RoleSpec, config: TrainConfig, ws: wsp.Workspace, conversion, n_shards: int,
           train_files: Sequence[str], init: Optional[WarmStart] = None,
           features: Optional[FeatureSpec] = None) -> int:
    """``train_files``: local training shards for the export's calibration (all of them with data on
    a volume; this trainer's own downloaded shards with data in a store)."""
    import paddle

    fleet, net = _build(config, spec, features)
    main_program = paddle.static.default_main_program()   # after minimize: fleet swapped it
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(paddle.static.default_startup_program())
    fleet.init_worker()
    start_epoch = _restore(spec, ws, fleet, init)
    dataset, rows, timings, stream = _load_dataset(spec, config, net, conversion, n_shards, features)
    _run_epochs(spec, config, ws, fleet, exe, main_program, net, dataset, rows, start_epoch, timings, stream)
    if config.reader == "inmemory":
        dataset.release_memory()
    pserver_names = [f"{PSERVER}-{i}" for i in range(spec.pservers)]
    _export(spec, config, ws, fleet, train_files, features)
    fleet.barrier_worker()
    if spec.index == 0:
        _write_metrics(spec, config, ws, start_epoch)
        nonces = [ws.read_text(f"{wsp.GANG_DIR}/{name}.nonce") for name in pserver_names]
        wsp.write_stop(ws, nonces)
        fleet.fleet._runtime_handle._worker.stop_server()
        _log(spec, "pservers stopped")
    fleet.stop_worker()
    _log(spec, "done")
    return 0


def _restore(spec: RoleSpec, ws: wsp.Workspace, fleet, init: Optional[WarmStart]) -> int:
    """Load the newest complete checkpoint (resume) or else the init model (warm start) into the
    pservers; returns the epoch training continues after (0 for a fresh run)."""
    resume = _sync_checkpoints(ws)
    if resume is not None:
        if resume.meta.get("pservers") != spec.pservers:
            raise ConfigError("pservers", spec.pservers,
                              f"checkpoint {resume.path} was written by {resume.meta.get('pservers')} "
                              f"pservers; use that many or a fresh output dir")
        fleet.load_model(resume.path, mode=0)
        _pull_dense(fleet)
        _log(spec, f"resumed from {resume.path} (epoch {resume.epoch})")
        return resume.epoch
    if init is not None:
        # Paddle's PS load path: trainer 0 asks every pserver to load its shards of both tables
        fleet.load_model(init.checkpoint, mode=0)
        _pull_dense(fleet)
        _log(spec, f"warm start from {init.model_dir} (job {init.meta.get('job_id')}, "
                   f"checkpoint {init.checkpoint})")
    return 0


def _parquet_rows(path: str) -> int:
    import pyarrow.parquet as pq

    return pq.ParquetFile(path).metadata.num_rows


class _Stream:
    """The ``stream`` reader's per-epoch set-up (:mod:`ctr_model.slot_stream`): this epoch's shard
    order and pipe command before it, the pipe's errors and the example count after it."""

    def __init__(self, spec: RoleSpec, config: TrainConfig, files: Sequence[str], rows: int,
                 features: Optional[FeatureSpec]):
        self.config, self.files, self.rows = config, list(files), rows
        self.dir = os.path.join(_cache_dir(spec), "stream")   # removed with the cache after training
        self.errors = os.path.join(self.dir, "errors")
        os.makedirs(self.errors, exist_ok=True)
        self.spec_file = None
        if features is not None and not features.is_criteo:
            self.spec_file = os.path.join(self.dir, "feature_spec.json")
            write_json(self.spec_file, features.to_dict())

    def before(self, dataset, epoch: int) -> None:
        from ctr_model import slot_stream

        c = self.config
        dataset.set_filelist(slot_stream.epoch_order(self.files, c.seed, epoch, c.shuffle))
        dataset._set_pipe_command(slot_stream.pipe_command(c.hash_buckets, self.errors, spec_file=self.spec_file,
                                                           seed=c.seed, epoch=epoch, shuffle=c.shuffle))

    def after(self, examples: int, epoch: int) -> None:
        from ctr_model import slot_stream

        slot_stream.check_epoch(self.errors, examples, self.rows, epoch)


def _load_dataset(spec: RoleSpec, config: TrainConfig, net, conversion, n_shards: int,
                  features: Optional[FeatureSpec] = None):
    """Wait for this trainer's converted shards and open them as a Paddle dataset (loaded into memory
    with the ``inmemory`` reader; the Parquet shards themselves with ``stream``); returns
    ``(dataset, rows, timings, stream)``, timings in seconds: ``convert`` (the conversion),
    ``convert_wait`` (waited for it after start-up), ``load``; ``stream`` a :class:`_Stream` or None."""
    import paddle

    t_wait = time.time()
    converted, convert_s = conversion.result()
    convert_wait = time.time() - t_wait
    files = [f for f, _ in converted]
    rows = sum(r for _, r in converted)
    stream = _Stream(spec, config, files, rows, features) if config.reader == "stream" else None
    if stream is None:
        _log(spec, f"{n_shards} shard(s), {rows} rows converted to slot text in {convert_s:.1f}s "
                   f"(waited {convert_wait:.1f}s for it after start-up)")
    else:
        _log(spec, f"{n_shards} shard(s), {rows} rows streamed from Parquet (no slot-text copy)")
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
    return dataset, rows, {"convert": convert_s, "convert_wait": convert_wait, "load": load_s}, stream


def _run_epochs(spec: RoleSpec, config: TrainConfig, ws: wsp.Workspace, fleet, exe, main_program, net,
                dataset, rows: int, start_epoch: int, timings: Dict[str, float],
                stream: Optional[_Stream] = None) -> None:
    """Epochs ``start_epoch + 1 .. config.epochs``: train, record the epoch's metrics in this
    trainer's progress file, checkpoint."""
    import paddle

    scope = paddle.static.global_scope()
    names = {"pos": net.auc_states[2].name, "neg": net.auc_states[3].name, "loss": "ctr_loss_sum"}
    stat_names = [v.name for v in net.auc_states] + ["ctr_loss_sum"]
    progress = _Progress(spec, scope, names, config.progress_secs)
    progress.rows_per_epoch, progress.last_epoch = rows, config.epochs
    progress.start()
    progress_file = f"{wsp.GANG_DIR}/{spec.name}.json"
    history = _load_history(ws, progress_file, start_epoch)
    last_checkpoint = time.time()
    try:
        for epoch in range(start_epoch + 1, config.epochs + 1):
            if config.reader == "inmemory" and config.shuffle:
                dataset.local_shuffle()
            if stream is not None:
                stream.before(dataset, epoch)
            _reset_stats(scope, stat_names)
            progress.epoch, progress.t0 = epoch, time.time()
            t = time.time()
            exe.train_from_dataset(program=main_program, dataset=dataset, thread=config.threads,
                                   debug=False, fetch_list=[net.loss, net.auc],
                                   fetch_info=["loss", "auc"], print_period=config.print_every)
            seconds = time.time() - t
            n, loss, pos, neg = progress.read()
            if stream is not None:
                stream.after(int(n), epoch)
            first_epoch = epoch == start_epoch + 1   # the start-up costs are reported once
            record = {"epoch": epoch, "examples": int(n), "seconds": round(seconds, 3),
                      "start_time": round(t, 3), "end_time": round(t + seconds, 3),
                      "examples_per_sec": round(n / max(seconds, 1e-9), 1),
                      "loss": loss / n if n else None, "auc": auc_from_stats(pos, neg),
                      "convert_seconds": round(timings["convert"], 3) if first_epoch else 0.0,
                      "convert_wait_seconds": round(timings["convert_wait"], 3) if first_epoch else 0.0,
                      "load_seconds": round(timings["load"], 3) if first_epoch else 0.0}
            history.append(record)
            ws.write_text(progress_file, json.dumps(history, indent=1, sort_keys=True))
            _log(spec, f"epoch {epoch} done: {int(n)} examples in {seconds:.1f}s "
                       f"({record['examples_per_sec']:.0f} ex/s), loss {record['loss'] or float('nan'):.4f}, "
                       f"auc {record['auc']:.4f}")
            # the save is collective: every trainer follows trainer 0's decision (_checkpoint_due)
            if _checkpoint_due(spec, config, ws, epoch, last_checkpoint):
                _save_checkpoint(spec, config, ws, fleet, exe, epoch)
                last_checkpoint = time.time()
    finally:
        progress.stop_event.set()


def _export(spec: RoleSpec, config: TrainConfig, ws: wsp.Workspace, fleet,
            train_files: Sequence[str], features: Optional[FeatureSpec] = None) -> None:
    """Trainer 0 exports the model from the final checkpoint: the dense arrays pulled from the
    pservers, the sparse table parsed from the checkpoint's shards (every trainer has just written it
    together, so the pservers need not write the table a second time, as ``save_inference_model`` made
    them: 8-11 s for 400k keys, docs/performance.md), the checkpoint itself for warm starts, and the
    calibrated model meta; then it publishes the model."""
    import shutil

    if spec.index != 0:
        return
    last = ckpt.latest_complete(ws.root)
    if last is None:
        raise RuntimeError(f"no complete checkpoint under {ws.location} to export from")
    ws.fetch(os.path.relpath(last.path, ws.root))    # with a store: the pservers' shards of it
    model_dir = ws.local(MODEL_DIR)
    shutil.rmtree(model_dir, ignore_errors=True)
    if isinstance(ws, wsp.StoreWorkspace):
        ws.remove(MODEL_DIR)
    # a full volume: one line naming the model directory, and no half model left to collect
    with one_line_if_full(model_dir, cleanup=lambda: shutil.rmtree(model_dir, ignore_errors=True)):
        os.makedirs(model_dir)
        _write_export(spec, config, fleet, last, model_dir, train_files, features)
    ws.publish(MODEL_DIR)


def _write_export(spec: RoleSpec, config: TrainConfig, fleet, last: ckpt.Checkpoint, model_dir: str,
                  train_files: Sequence[str], features: Optional[FeatureSpec]) -> None:
    import numpy as np
    import paddle

    _pull_dense(fleet)
    from ctr_model.net import dense_param_names
    scope = paddle.static.global_scope()
    arrays: Dict[str, Any] = {name: np.array(scope.find_var(name).get_tensor())
                              for name in dense_param_names(config, features)}
    np.savez(os.path.join(model_dir, DENSE_FILE), **arrays)
    keys, tables = _export_sparse(config, features, fleet, model_dir, last.path)
    export_checkpoint(last.path, model_dir)   # what a later run warm-starts from
    _log(spec, f"exported {model_dir} ({keys} sparse keys in {len(tables)} table(s), from "
               f"{os.path.basename(last.path)})")
    meta = _model_meta(spec, config)
    meta["sparse_tables"] = tables
    if features is not None:
        meta["feature_spec"] = features.to_dict()   # the scorer's and warm start's layout
    _write_json(os.path.join(model_dir, MODEL_META), meta)
    from ctr_model.calibrate import calibrate_export

    meta["calibration"] = calibrate_export(model_dir, train_files)
    _write_json(os.path.join(model_dir, MODEL_META), meta)
    _log(spec, f"calibrated the output bias on the training split: {meta['calibration']}")
    from ctr_model.onnx_export import NotServable, export_onnx

    try:
        served = export_onnx(model_dir)      # model.onnx + serving/ctr/1: what a serving stack loads
        _log(spec, f"wrote {model_dir}/model.onnx ({served['sparse_keys']} keys) and the Triton repository")
    except NotServable as exc:
        _log(spec, f"no ONNX export: {exc}")


def _export_sparse(config: TrainConfig, features: Optional[FeatureSpec], fleet, model_dir: str,
                   checkpoint: str) -> tuple:
    """Write ``sparse.npz`` from the checkpoint's shards of every sparse table; returns ``(keys,
    the tables as model_meta.json records them)``, each with Paddle's ``table_id`` (its directory)."""
    from paddle.distributed.ps.utils.public import get_the_one_send_context

    from ctr_model.infer import write_sparse_npz
    from ctr_model.models import family
    from ctr_model.net import net_tables

    rt = fleet.fleet._runtime_handle
    send_ctx = get_the_one_send_context(rt.context, split_dense_table=rt.is_heter_ps_mode, ep_list=rt.endpoints)
    param_of = rt.context["grad_name_to_param_name"]
    ids = {param_of[c.origin_varnames()[0]]: c.table_id() for c in send_ctx.values() if c.is_sparse()}
    tables = net_tables(config, features)
    fam = family(config.model)
    keys = write_sparse_npz(model_dir, [fam.table_width(t.dim) for t in tables], table_dir=checkpoint,
                            table_ids=[ids[t.name] for t in tables])
    return keys, [dict(t.to_dict(), table_id=ids[t.name]) for t in tables]


def _checkpoint_due(spec: RoleSpec, config: TrainConfig, ws: wsp.Workspace, epoch: int,
                    since: float, poll_s: float = 0.1) -> bool:
    """Whether the gang checkpoints after ``epoch``: always after the last epoch or with
    ``checkpoint_secs`` 0, else when trainer 0 has trained ``checkpoint_secs`` since the last one.
    The save is collective, so trainer 0 decides and writes the decision where the others wait for
    it, under this attempt's pserver-0 nonce (a previous attempt's decisions are never read)."""
    if epoch >= config.epochs or config.checkpoint_secs == 0:
        return True
    nonce = ws.read_text(f"{wsp.GANG_DIR}/{PSERVER}-0.nonce") or "none"
    rel = f"{wsp.GANG_DIR}/checkpoint-{nonce}-epoch-{epoch}"
    if spec.index == 0:
        due = time.time() - since >= config.checkpoint_secs
        ws.write_text(rel, "yes" if due else "no")
        if not due:
            _log(spec, f"no checkpoint after epoch {epoch}: the last was {time.time() - since:.0f}s ago "
                       f"(checkpoint_secs {config.checkpoint_secs:g})")
        return due
    while True:
        decision = ws.read_text(rel)
        if decision in ("yes", "no"):
            return decision == "yes"
        time.sleep(poll_s)


def _save_checkpoint(spec: RoleSpec, config: TrainConfig, ws: wsp.Workspace, fleet, exe,
                     epoch: int) -> None:
    import shutil

    path = ckpt.epoch_dir(ws.root, epoch)
    rel = os.path.relpath(path, ws.root)
    if spec.index == 0:
        shutil.rmtree(path, ignore_errors=True)   # an incomplete one from a failed attempt
        if isinstance(ws, wsp.StoreWorkspace):
            ws.remove(rel)
        os.makedirs(path, exist_ok=True)
    t = time.time()
    fleet.save_persistables(exe, path)            # collective: barrier, pservers write, barrier
    if spec.index == 0:
        ws.request_publish(rel, [f"{PSERVER}-{i}" for i in range(spec.pservers)], spec.publish_timeout_s)
        with one_line_if_full(path):   # the pservers' tables fitted; the markers may not
            ckpt.mark_complete(path, {"epoch": epoch, "pservers": spec.pservers,
                                      "trainers": spec.trainers, "config": config.to_dict(),
                                      "job_id": spec.job_id, "time": time.time()})
        ws.publish(f"{rel}/meta.json")
        ws.publish(f"{rel}/{ckpt.COMPLETE_MARKER}")   # last: the checkpoint is complete
        for name in ckpt.prune(ws.root, config.keep_checkpoints):
            ws.remove(os.path.relpath(os.path.join(ckpt.checkpoint_root(ws.root), name), ws.root))
        _log(spec, f"checkpoint {ws.location}/{rel} written in {time.time() - t:.1f}s")


def _load_history(ws: wsp.Workspace, rel: str, start_epoch: int) -> list:
    try:
        data = json.loads(ws.read_text(rel) or "[]")
    except ValueError:
        return []
    return [r for r in data if r.get("epoch", 0) <= start_epoch]


def _write_json(path: str, data) -> None:
    write_json(path, data, indent=1, sort_keys=True)


def _model_meta(spec: RoleSpec, config: TrainConfig) -> dict:
    from ctr_model.features import SCHEMA_VERSION

    return {"schema_version": SCHEMA_VERSION, "hash_buckets": config.hash_buckets,
            "config": config.to_dict(), "format": "ctr-dnn-ps-v1", "pservers": spec.pservers,
            "trainers": spec.trainers, "job_id": spec.job_id}


def _write_metrics(spec: RoleSpec, config: TrainConfig, ws: wsp.Workspace, start_epoch: int) -> None:
    per_trainer = {}
    for i in range(spec.trainers):
        try:
            per_trainer[i] = json.loads(ws.read_text(f"{wsp.GANG_DIR}/trainer-{i}.json") or "[]")
        except ValueError:
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
    metrics: Dict[str, Any] = {"epochs": epochs, "pservers": spec.pservers, "trainers": spec.trainers,
               "resumed_from_epoch": start_epoch, "config": config.to_dict(),
               "init_model": spec.init_model or None,
               "per_trainer": {str(k): v for k, v in per_trainer.items()}}
    if not spec.data_dir:
        test = None
    elif s3.is_uri(spec.data_dir):
        client = ws.store if isinstance(ws, wsp.StoreWorkspace) else s3.Store(s3.StoreConfig.from_env())
        staged = wsp.stage_split(client, spec.data_dir, "test", os.path.join("data", "test"),
                                 lambda files: files)
        test = None
        if staged:
            test = staged[0]
            staged[2]()
    else:
        test = resolve_split(spec.data_dir, "test")
    if test is not None:
        from ctr_model.infer import evaluate_files, load_model

        t = time.time()
        scorer = load_model(ws.local(MODEL_DIR))
        metrics["test"] = evaluate_files(scorer, list(test.files))
        metrics["test"]["seconds"] = round(time.time() - t, 2)
        _log(spec, f"test: {metrics['test']}")
    ws.write_text(METRICS_FILE, json.dumps(metrics, indent=1, sort_keys=True))


# ------------------------------------------------------------------------------------------------

def _check_reachable(output_dir: str) -> None:
    """Fail at once, naming the directory, when this role's user cannot reach the shared output
    directory (a mount under a directory it cannot traverse): a restart cannot fix that."""
    from ctr_model.reach import blocker_of_process

    blocker = blocker_of_process(output_dir)
    if blocker is not None:
        raise PermissionError(f"output directory {output_dir} (CTR_OUTPUT_DIR) is unreachable: "
                              f"{blocker.describe(os.getuid())}; mount the shared volume where this "
                              f"user can reach it, or fix that directory's permissions")


def _full_elsewhere(exc: OSError, output_dir: str) -> str:
    """One line for an ENOSPC outside the guarded writes (a log, Paddle's own files)."""
    where = f" writing {exc.filename}" if exc.filename else ""
    room = "" if s3.is_uri(output_dir) else f"; {free_bytes(output_dir)} bytes free in {output_dir}"
    return (f"no space left on device{where} ({exc}){room}: free space on that volume or give it "
            f"more room")


def _enter_scratch(spec: RoleSpec) -> Optional[str]:
    """With data or outputs in the store, a scratch directory of the role's own as its working
    directory (returned, for removal): the relative paths Paddle passes between roles then land on
    each role's own disk (see ctr_model.workspace). ``None`` with a shared volume."""
    if not (s3.is_uri(spec.output_dir) or s3.is_uri(spec.data_dir)):
        return None
    import tempfile

    base = os.environ.get(ENV_SCRATCH_DIR) or tempfile.gettempdir()
    os.makedirs(base, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix=f"{spec.job_id}-{spec.name}-", dir=base)
    os.chdir(scratch)
    return scratch


def main(argv: Optional[List[str]] = None) -> int:
    setup_logging()
    supervised = supervise_if_pid1("ctr_model.train", sys.argv[1:] if argv is None else argv)
    if supervised is not None:
        return supervised
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
        log.error(f"error: {exc}")
        return EXIT_BAD_INPUT
    scratch = None
    try:
        scratch = _enter_scratch(spec)
        ws = wsp.open_workspace(spec.output_dir)
        if not s3.is_uri(spec.output_dir):
            _check_reachable(spec.output_dir)
    except (s3.StoreError, OSError) as exc:
        log.error(f"{spec.name}: error: {exc}")
        return EXIT_BAD_INPUT
    os.environ.update(paddle_env(spec))
    from ctr_model.net import prepare_paddle

    prepare_paddle()
    try:
        if spec.role == PSERVER:
            return run_pserver(spec, config, ws)
        return run_trainer(spec, config, ws, explicit_buckets)
    except (ConfigError, DataError, WarmStartError, s3.StoreError, NoSpace) as exc:
        # a full volume stays full when the gang restarts: exit 2 ends the Job with this line
        log.error(f"{spec.name}: error: {exc}")
        return EXIT_BAD_INPUT
    except PeersUnreachable as exc:
        log.error(f"{spec.name}: error: {exc}")
        return 1
    except OSError as exc:
        if not is_enospc(exc):
            raise
        log.error(f"{spec.name}: error: {_full_elsewhere(exc, spec.output_dir)}")   # a restart fills it again
        return EXIT_BAD_INPUT
    finally:
        if scratch is not None:
            import shutil

            os.chdir("/")
            shutil.rmtree(scratch, ignore_errors=True)


def exit_with(code: int) -> None:
    """Exit with ``code``; a failure exits once the log is flushed, skipping the interpreter's
    teardown. A role that failed with Paddle's PS client still running crashed in that teardown
    (SIGSEGV in the client's sparse-push thread: exit 139 instead of 2, seen when a checkpoint hit a
    full claim on process nodes), and Volcano restarts on 139 the gang that exit 2 would have ended.
    Success keeps the normal exit: the roles stopped Paddle's client cleanly by then."""
    if code == 0:
        sys.exit(0)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_with(main())
