"""A trainer's data: its share of the training split, converted while Paddle starts, opened as a
Paddle dataset.

Shards are assigned whole (:func:`ctr_model.data.assign_shards`). With data in a store each trainer
downloads its own shards to its scratch directory first. The ``inmemory`` and ``queue`` readers read
slot text converted once, in a background thread that overlaps Paddle's start-up (Arrow's writer
releases the GIL); the ``stream`` reader pipes the Parquet shards through
:mod:`ctr_model.slot_stream` every epoch instead (:class:`Stream`).
"""
from __future__ import annotations

import os
import time
from concurrent.futures import Future
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ctr_model import store as s3
from ctr_model import workspace as wsp
from ctr_model.atomic import write_json
from ctr_model.config import TrainConfig
from ctr_model.contract import RoleSpec
from ctr_model.data import SplitInfo, assign_shards, check_enough_shards, convert_shards, resolve_split
from ctr_model.feature_spec import FeatureSpec
from ctr_model.train import say
from ctr_model.train.scratch import cache_dir

__all__ = ["train_split", "resolve_reader", "converter", "Stream", "load_dataset"]


def train_split(spec: RoleSpec, ws: wsp.Workspace) -> Tuple[SplitInfo, int, List[str], Callable[[], List[str]]]:
    """``(split, shards in it, this trainer's shards, fetch)``: with data in a store, ``fetch``
    streams this trainer's shards to its scratch (run it before converting them)."""
    if not s3.is_uri(spec.data_dir):
        split = resolve_split(spec.data_dir, "train")
        mine = assign_shards(split.files, spec.index, spec.trainers)
        return split, len(split.files), mine, lambda: mine

    def select(files: List[str]) -> List[str]:
        check_enough_shards(spec.data_dir, len(files), spec.trainers)
        return assign_shards(files, spec.index, spec.trainers)

    assert spec.store is not None   # the contract reads the store's settings for s3:// data
    client = ws.store if isinstance(ws, wsp.StoreWorkspace) else s3.Store(spec.store)
    split, total, download = wsp.stage_split(client, spec.data_dir, "train",
                                             os.path.join("data", "train"), select)

    def fetch() -> List[str]:
        t = time.time()
        files = download()
        say(spec, f"downloaded {len(files)} of {total} shard(s) of {split.path} in {time.time() - t:.1f}s")
        return files

    return split, total, list(split.files), fetch


def resolve_reader(spec: RoleSpec, config: TrainConfig, rows: int) -> TrainConfig:
    """``reader: auto`` made concrete for this trainer's share of ``rows`` (logged with the reason)."""
    if config.reader != "auto":
        return config
    from ctr_model.reader_choice import choose_reader, memory_limit

    reader, why = choose_reader(rows, memory_limit())
    say(spec, f"reader: {reader} ({why})")
    return config.replace(reader=reader)


def parquet_rows(path: str) -> int:
    import pyarrow.parquet as pq

    return pq.ParquetFile(path).metadata.num_rows


def converter(config: TrainConfig, fetch: Callable[[], List[str]], cache: str,
              features: Optional[FeatureSpec]) -> Callable[[], Tuple[List[Tuple[str, int]], float]]:
    """The background job that readies this trainer's shards: ``[(file, rows)]`` and its seconds
    (slot text in ``cache``; the Parquet shards themselves for the ``stream`` reader)."""
    t0 = time.time()

    def convert() -> Tuple[List[Tuple[str, int]], float]:
        if config.reader == "stream":   # no conversion: Paddle pipes each shard through slot_stream
            return [(f, parquet_rows(f)) for f in fetch()], time.time() - t0
        return convert_shards(fetch(), cache, config.hash_buckets, features), time.time() - t0

    return convert


class Stream:
    """The ``stream`` reader's per-epoch set-up (:mod:`ctr_model.slot_stream`): this epoch's shard
    order and pipe command before it, the pipe's errors and the example count after it."""

    def __init__(self, spec: RoleSpec, config: TrainConfig, files: Sequence[str], rows: int,
                 features: Optional[FeatureSpec]):
        self.config, self.files, self.rows = config, list(files), rows
        self.dir = os.path.join(cache_dir(spec), "stream")   # removed with the cache after training
        self.errors = os.path.join(self.dir, "errors")
        os.makedirs(self.errors, exist_ok=True)
        self.spec_file = None
        if features is not None and not features.is_criteo:
            self.spec_file = os.path.join(self.dir, "feature_spec.json")
            write_json(self.spec_file, features.to_dict())

    def before(self, dataset: Any, epoch: int) -> None:
        from ctr_model import slot_stream

        c = self.config
        dataset.set_filelist(slot_stream.epoch_order(self.files, c.seed, epoch, c.shuffle))
        dataset._set_pipe_command(slot_stream.pipe_command(c.hash_buckets, self.errors, spec_file=self.spec_file,
                                                           seed=c.seed, epoch=epoch, shuffle=c.shuffle))

    def after(self, examples: int, epoch: int) -> None:
        from ctr_model import slot_stream

        slot_stream.check_epoch(self.errors, examples, self.rows, epoch)


def load_dataset(spec: RoleSpec, config: TrainConfig, net: Any, conversion: "Future[Any]", n_shards: int,
                 features: Optional[FeatureSpec] = None) -> Tuple[Any, int, Dict[str, float], Optional[Stream]]:
    """Wait for this trainer's converted shards and open them as a Paddle dataset (loaded into memory
    with the ``inmemory`` reader; the Parquet shards themselves with ``stream``); returns
    ``(dataset, rows, timings, stream)``, timings in seconds: ``convert`` (the conversion),
    ``convert_wait`` (waited for it after start-up), ``load``; ``stream`` a :class:`Stream` or None."""
    import paddle

    t_wait = time.time()
    converted, convert_s = conversion.result()
    convert_wait = time.time() - t_wait
    files = [f for f, _ in converted]
    rows = sum(r for _, r in converted)
    stream = Stream(spec, config, files, rows, features) if config.reader == "stream" else None
    if stream is None:
        say(spec, f"{n_shards} shard(s), {rows} rows converted to slot text in {convert_s:.1f}s "
                  f"(waited {convert_wait:.1f}s for it after start-up)")
    else:
        say(spec, f"{n_shards} shard(s), {rows} rows streamed from Parquet (no slot-text copy)")
    dataset = paddle.distributed.InMemoryDataset() if config.reader == "inmemory" \
        else paddle.distributed.QueueDataset()
    dataset.init(use_var=net.feed_vars, pipe_command="cat", batch_size=config.batch_size,
                 thread_num=config.threads)
    dataset.set_filelist(files)
    load_s = 0.0
    if config.reader == "inmemory":
        t = time.time()
        dataset.load_into_memory()
        load_s = time.time() - t
        say(spec, f"loaded {rows} rows into memory in {load_s:.1f}s")
    return dataset, rows, {"convert": convert_s, "convert_wait": convert_wait, "load": load_s}, stream
