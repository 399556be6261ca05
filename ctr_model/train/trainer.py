"""The trainer role: check its inputs, ready its data while Paddle starts, train, export, stop.

Before any long work a trainer refuses what would fail later (the pservers' names, the data's
buckets, too few shards, a bad test split, an init model it cannot continue), then converts its shards
in the background (:mod:`.dataset`) while Paddle builds the program and meets the pservers
(:mod:`.program`), resumes or warm-starts (:mod:`.checkpoints`), trains (:mod:`.epochs`), and trainer
0 exports (:mod:`.export`), writes ``metrics.json`` (:mod:`.metrics`) and, after a barrier, stops the
pservers.
"""
from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional, Sequence

from ctr_model import store as s3
from ctr_model import workspace as wsp
from ctr_model.config import ConfigError, TrainConfig
from ctr_model.contract import PSERVER, RoleSpec
from ctr_model.data import SplitInfo, check_enough_shards, check_test_split, with_base_rate
from ctr_model.feature_spec import FeatureSpec
from ctr_model.train import say
from ctr_model.train.checkpoints import restore
from ctr_model.train.dataset import converter, load_dataset, resolve_reader, train_split
from ctr_model.train.epochs import Session, run_epochs
from ctr_model.train.export import export
from ctr_model.train.metrics import write_metrics
from ctr_model.train.peers import check_pserver_hosts
from ctr_model.train.program import build, with_features
from ctr_model.train.scratch import cache_dir
from ctr_model.warm_start import WarmStart, check_compatible, read_init_model

__all__ = ["run_trainer"]


def run_trainer(spec: RoleSpec, config: TrainConfig, ws: wsp.Workspace, explicit_buckets: bool = True) -> None:
    """Train this trainer's shards for ``config.epochs`` epochs (trainer 0 also exports and stops the
    pservers).

    Args:
        explicit_buckets: the config names ``hash_buckets``; without it they follow the data.

    Raises:
        BadInput: a pserver name that does not resolve, or data, a config or an init model this run
            cannot train (``ConfigError``, ``DataError``, ``SchemaMismatch``, ``WarmStartError``).
        TransientError: the object store stayed unreachable.
        JobFailed: the pservers never served, or the export had nothing to export.
    """
    check_pserver_hosts(spec)
    split, n_files, mine, fetch = train_split(spec, ws)
    config = _checked_config(spec, config, split, explicit_buckets)
    check_enough_shards(split.path, n_files, spec.trainers)
    config = resolve_reader(spec, config, split.rows * len(mine) // max(1, n_files))
    if not s3.is_uri(spec.data_dir):
        check_test_split(spec.data_dir, split)   # trainer 0 scores it after training: fail before
    init = _checked_init_model(spec, config, split)
    cache = cache_dir(spec)
    # Convert in the background while Paddle starts up (imports, program, rendezvous)
    pool = ThreadPoolExecutor(max_workers=1)
    future = pool.submit(converter(config, fetch, cache, split.features))
    try:
        _train(spec, config, ws, future, len(mine), split.files, init, split.features)
    finally:
        pool.shutdown(wait=True)
        shutil.rmtree(cache, ignore_errors=True)


def _checked_config(spec: RoleSpec, config: TrainConfig, split: SplitInfo, explicit_buckets: bool) -> TrainConfig:
    """The config for this data: its embedding width, and its hash buckets unless the config names
    them (then they must be the data's)."""
    config = with_base_rate(with_features(config, split.features), split)
    if split.hash_buckets and not explicit_buckets:
        config = config.replace(hash_buckets=split.hash_buckets)   # follow the data by default
    if split.hash_buckets and split.hash_buckets != config.hash_buckets:
        raise ConfigError("hash_buckets", config.hash_buckets,
                          f"the data in {split.path} was hashed into {split.hash_buckets} buckets; "
                          f"set hash_buckets to {split.hash_buckets}")
    return config


def _checked_init_model(spec: RoleSpec, config: TrainConfig, split: SplitInfo) -> Optional[WarmStart]:
    """The init model to warm-start from, refused before any long work if this run cannot continue it."""
    if not spec.init_model:
        return None
    from ctr_model.features import SCHEMA_VERSION

    init = read_init_model(spec.init_model)
    check_compatible(init, config.to_dict(), spec.pservers, SCHEMA_VERSION,
                     split.features.to_dict() if split.features is not None else None)
    return init


def _train(spec: RoleSpec, config: TrainConfig, ws: wsp.Workspace, conversion: Any, n_shards: int,
           train_files: Sequence[str], init: Optional[WarmStart] = None,
           features: Optional[FeatureSpec] = None) -> None:
    """``train_files``: local training shards for the export's calibration (all of them with data on
    a volume; this trainer's own downloaded shards with data in a store)."""
    import paddle

    fleet, net = build(config, spec, features)
    program = paddle.static.default_main_program()   # after minimize: fleet swapped it
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(paddle.static.default_startup_program())
    fleet.init_worker()
    start_epoch = restore(spec, ws, fleet, init, config)
    dataset, rows, timings, stream = load_dataset(spec, config, net, conversion, n_shards, features)
    run_epochs(spec, config, ws, Session(fleet, exe, program, net, dataset, rows, timings, stream), start_epoch)
    if config.reader == "inmemory":
        dataset.release_memory()
    export(spec, config, ws, fleet, train_files, features)
    fleet.barrier_worker()
    if spec.index == 0:
        write_metrics(spec, config, ws, start_epoch)
        _stop_pservers(spec, ws, fleet)
    fleet.stop_worker()
    say(spec, "done")


def _stop_pservers(spec: RoleSpec, ws: wsp.Workspace, fleet: Any) -> None:
    """Trainer 0: record which pservers it stops (so each knows it was stopped on purpose), stop them."""
    nonces = [ws.read_text(f"{wsp.GANG_DIR}/{PSERVER}-{i}.nonce") for i in range(spec.pservers)]
    wsp.write_stop(ws, nonces)
    fleet.fleet._runtime_handle._worker.stop_server()
    say(spec, "pservers stopped")
