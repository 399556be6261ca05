"""Trainer input: find the prep shards, split them across trainers, convert them to Paddle's slots.

Paddle's C++ dataset (the only path that trains correctly in async PS mode) reads MultiSlot text:
per example, for every slot in feed order, ``<count> v1 .. v_count``. Each trainer converts its own
Parquet shards once, before the first epoch, with Arrow's C++ CSV writer (no Python per row), and
then every epoch reads them with ``pipe_command="cat"``. Shards are assigned whole: sorted list,
shard ``i`` goes to trainer ``i mod T``, so trainers never overlap and no row is dropped.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import List, Literal, Optional, Sequence, overload

from ctr_model.config import TrainConfig
from ctr_model.errors import BadInput
from ctr_model.feature_spec import FeatureSpec, split_spec
from ctr_model.features import (
    DENSE_COLUMNS,
    LABEL,
    NUM_DENSE,
    RAW_COLUMNS,
    SCHEMA_FILE,
    SPARSE_COLUMNS,
    check_split_schema,
    shard_files,
)

__all__ = ["DataError", "SplitInfo", "split_dir_of", "resolve_split", "check_enough_shards", "check_test_split",
           "assign_shards",
           "parquet_to_slots", "spec_to_slots", "slot_columns", "slot_tables", "write_slots", "convert_shards",
           "trainable_features", "positive_rate", "with_base_rate"]


class DataError(BadInput):
    """The training data is missing or does not match the schema (bad input): ``field`` is ``data``
    (or ``trainers``, ``hash_buckets``), ``value`` the path (or the count), and the fix."""


@dataclass(frozen=True)
class SplitInfo:
    """A validated split directory."""

    path: str
    hash_buckets: int
    rows: int
    files: tuple
    features: Optional[FeatureSpec] = None   # the data's feature spec; None: the Criteo layout
    positive_rate: Optional[float] = None    # the split's click rate (prep's schema.json), if recorded


def positive_rate(schema: dict) -> Optional[float]:
    """The click rate a split's ``schema.json`` records (prep writes it), or ``None`` (an older prep,
    or a single-class split, where no output bias could start from it)."""
    rate = schema.get("positive_rate")
    if isinstance(rate, (int, float)) and not isinstance(rate, bool) and 0.0 < float(rate) < 1.0:
        return float(rate)
    return None


def with_base_rate(config: TrainConfig, split: "SplitInfo") -> TrainConfig:
    """``config`` with its ``base_rate`` (the output bias's start) set to the split's click rate,
    unless the config names one or the split records none."""
    if config.base_rate is not None or split.positive_rate is None:
        return config
    return config.replace(base_rate=round(split.positive_rate, 6))


def trainable_features(schema: dict, where: str) -> Optional[FeatureSpec]:
    """The feature spec a split's ``schema.json`` carries (``None`` for the Criteo layout). Every
    family trains any spec: without dense features the network has no dense input, without
    categorical features no sparse slot.

    Raises:
        DataError: an invalid embedded spec.
    """
    try:
        spec = split_spec(schema)
    except ValueError as exc:
        raise DataError("data", where, f"{exc}; re-run `ctr-volcano prep` with the spec") from None
    return None if spec.is_criteo else spec


def split_dir_of(data_dir: str, split: str, *, accept_self: bool) -> Optional[str]:
    """Where ``split`` of a prep output is: ``data_dir/split`` if that is a directory, else (with
    ``accept_self``) ``data_dir`` itself when it is a split (holds ``schema.json``); else ``None``.

    The one order of checks for every reader of a prep output (training, evaluation); the store's
    twin is :func:`ctr_model.workspace.remote_split`.
    """
    candidate = os.path.join(data_dir, split)
    if os.path.isdir(candidate):
        return candidate
    if accept_self and os.path.exists(os.path.join(data_dir, SCHEMA_FILE)):
        return data_dir
    return None


@overload
def resolve_split(data_dir: str, split: Literal["train"] = "train") -> SplitInfo: ...
@overload
def resolve_split(data_dir: str, split: str) -> Optional[SplitInfo]: ...


def resolve_split(data_dir: str, split: str = "train") -> Optional[SplitInfo]:
    """Find and validate ``split`` of a prep dir; a split dir itself is accepted for ``train``.

    Returns ``None`` when the prep dir has no such split (e.g. no ``test``).
    """
    path = split_dir_of(data_dir, split, accept_self=split == "train")
    if path is None and split == "train":
        raise DataError("data", data_dir, f"has neither train/ nor {SCHEMA_FILE}: pass the output "
                                          f"directory of `ctr-volcano prep`")
    if path is None:
        return None
    schema = check_split_schema(path, any_spec=True)
    files = shard_files(path)
    if not files:
        raise DataError("data", path, "no part-*.parquet shards: re-run `ctr-volcano prep`")
    return SplitInfo(path=path, hash_buckets=int(schema.get("hash_buckets", 0)),
                     rows=int(schema.get("rows", -1)), files=tuple(files),
                     features=trainable_features(schema, path), positive_rate=positive_rate(schema))


def check_enough_shards(where: str, n_shards: int, trainers: int) -> None:
    """Refuse a split with fewer shards than trainers (shards are assigned whole, none is split).

    Raises:
        DataError: names the split, both counts and the two fixes.
    """
    if n_shards < trainers:
        raise DataError("trainers", trainers, f"{where} has only {n_shards} shard(s) for {trainers} trainers; "
                                              f"use at most {n_shards} trainers or re-run prep with at "
                                              f"least {trainers} shards")


def check_test_split(data_dir: str, train: SplitInfo) -> Optional[SplitInfo]:
    """The prep dir's ``test/`` split, validated against ``train`` (``None`` if there is none).

    Trainer 0 scores it after training, so a bad one must fail before training starts: both the SDK's
    boundary checks and the trainers call this.

    Raises:
        DataError, SchemaMismatch: the test split is unreadable, of another schema version, or hashed
            differently.
    """
    test = resolve_split(data_dir, "test")
    if test is not None and test.hash_buckets != train.hash_buckets:
        raise DataError("data", test.path, f"hashed into {test.hash_buckets} buckets but {train.path} into "
                                           f"{train.hash_buckets}: re-run `ctr-volcano prep` to write both splits")
    return test


def assign_shards(files: Sequence[str], trainer: int, trainers: int) -> List[str]:
    """Whole shards for one trainer: sorted list, shard ``i`` -> trainer ``i mod trainers``."""
    ordered = sorted(files)
    return [f for i, f in enumerate(ordered) if i % trainers == trainer]


def parquet_to_slots(src: str, dst: str, hash_buckets: int, chunk_rows: int = 262_144) -> int:
    """Convert one Parquet shard to MultiSlot text; returns the number of rows written.

    Slot order: label, C1..C26, the 13 dense values as one slot (the network's feed order).

    Raises:
        DataError: on missing columns, nulls, NaN, or ids outside ``[0, hash_buckets)``; a bad row
            is never dropped silently.
    """
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(src)
    columns = slot_columns(src, pf.schema_arrow.names, None)
    return _write_slot_file(dst, slot_tables(pf.iter_batches(batch_size=chunk_rows, columns=columns),
                                             src, hash_buckets, None))


def spec_to_slots(src: str, dst: str, spec: FeatureSpec, hash_buckets: int,
                  chunk_rows: int = 262_144) -> int:
    """:func:`parquet_to_slots` for data prepped with a feature spec: label, then one slot per
    categorical feature (``<count> id..``, several ids for a multi-valued one), then the dense values
    as one slot (none without dense features). Each line is joined by Arrow's string kernels (no Python per row).

    Raises:
        DataError: on missing columns, nulls, or ids outside ``[0, hash_buckets)``.
    """
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(src)
    columns = slot_columns(src, pf.schema_arrow.names, spec)
    return _write_slot_file(dst, slot_tables(pf.iter_batches(batch_size=chunk_rows, columns=columns),
                                             src, hash_buckets, spec))


def slot_columns(where: str, names: Sequence[str], spec: Optional[FeatureSpec]) -> List[str]:
    """The shard's columns the slots are made of; :class:`DataError` naming any that is missing."""
    if spec is None or spec.is_criteo:
        missing = [c for c in RAW_COLUMNS if c not in names]
        if missing:
            raise DataError("data", where, f"columns {missing[:5]} missing: re-run `ctr-volcano prep`")
        return list(RAW_COLUMNS)
    missing = [c for c in spec.prepped_columns if c not in names]
    if missing:
        raise DataError("data", where, f"columns {missing[:5]} missing: re-run `ctr-volcano prep` with the spec")
    return list(spec.prepped_columns)


def slot_tables(batches, where: str, hash_buckets: int, spec: Optional[FeatureSpec]):
    """Arrow tables whose CSV lines (space-separated, no header) are the MultiSlot text of
    ``batches``, checked as they go (:class:`DataError` names ``where``)."""
    if spec is None or spec.is_criteo:
        return (_criteo_slot_table(b, where, hash_buckets) for b in batches)
    return (_spec_slot_table(b, where, hash_buckets, spec) for b in batches)


def write_slots(sink, tables) -> int:
    """Write :func:`slot_tables` to ``sink`` (a path or a writable binary file); returns the rows."""
    import pyarrow.csv as pacsv

    rows, writer = 0, None
    for table in tables:
        if writer is None:
            # several columns are joined by spaces; one column holds whole lines (spaces inside)
            opts = pacsv.WriteOptions(include_header=False, quoting_style="none",
                                      delimiter=" " if table.num_columns > 1 else ",")
            writer = pacsv.CSVWriter(sink, table.schema, write_options=opts)
        writer.write_table(table)
        rows += table.num_rows
    if writer is not None:
        writer.close()
    return rows


def _write_slot_file(dst: str, tables) -> int:
    import pyarrow as pa

    tmp = dst + ".tmp"
    with pa.OSFile(tmp, "wb") as sink:
        rows = write_slots(sink, tables)
    os.replace(tmp, dst)
    return rows


def _criteo_slot_table(batch, src: str, hash_buckets: int):
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    out_names = []
    for name in (LABEL,) + SPARSE_COLUMNS:
        out_names += [f"n_{name}", name]
    out_names += ["n_dense"] + list(DENSE_COLUMNS)
    n = batch.num_rows
    one = pa.array(np.ones(n, dtype=np.int8))
    arrays = []
    for name in (LABEL,) + SPARSE_COLUMNS:
        col = batch.column(name)
        if col.null_count:
            raise DataError("data", src, f"column {name} has {col.null_count} nulls: prep must fill them")
        lo, hi = pc.min_max(col).values()
        if name == LABEL:
            if lo.as_py() < 0 or hi.as_py() > 1:
                raise DataError("data", src, f"label outside 0/1 ({lo}..{hi}): fix the input data")
        elif lo.as_py() < 0 or hi.as_py() >= hash_buckets:
            raise DataError("data", src, f"{name} ids {lo}..{hi} outside [0, {hash_buckets}): "
                                         f"hash_buckets of the config and of prep differ")
        arrays += [one, col]
    arrays.append(pa.array(np.full(n, NUM_DENSE, dtype=np.int8)))
    for name in DENSE_COLUMNS:
        col = batch.column(name)
        if col.null_count or pc.any(pc.is_nan(col)).as_py():
            raise DataError("data", src, f"dense column {name} has nulls/NaN: prep must transform them")
        arrays.append(col)
    return pa.Table.from_arrays(arrays, names=out_names)


def _spec_slot_table(batch, src: str, hash_buckets: int, spec: FeatureSpec):
    import pyarrow as pa
    import pyarrow.compute as pc

    parts = []
    for name in spec.task_labels:     # one label slot per task, in task order (the net's feeds)
        parts += [pa.array(["1"] * batch.num_rows), pc.cast(batch.column(name), pa.string())]
    for c in spec.slot_features:      # the categorical features, then the crosses
        col = batch.column(c.name)
        flat = col.values if c.multivalued else col
        if col.null_count or (len(flat) and (pc.min(flat).as_py() < 0
                                             or pc.max(flat).as_py() >= hash_buckets)):
            raise DataError("data", src, f"{c.name} has nulls or ids outside [0, {hash_buckets}): "
                                         f"re-run `ctr-volcano prep` with the spec")
        if c.multivalued:
            parts += [pc.cast(pc.list_value_length(col), pa.string()),
                      pc.binary_join(pc.cast(col, pa.list_(pa.string())), " ")]
        else:
            parts += [pa.array(["1"] * batch.num_rows), pc.cast(col, pa.string())]
    if spec.dense:                    # no dense feature: no dense slot (the network has no dense input)
        parts.append(pa.array([str(len(spec.dense))] * batch.num_rows))
        parts += [pc.cast(batch.column(d.name), pa.string()) for d in spec.dense]
    return pa.table({"line": pc.binary_join_element_wise(*parts, " ")})


def convert_shards(files: Sequence[str], out_dir: str, hash_buckets: int,
                   spec: Optional[FeatureSpec] = None) -> List[tuple]:
    """Convert shards into ``out_dir``; returns ``[(slot_file, rows), ...]`` in input order.
    ``spec``: the data's feature spec (``None`` or Criteo: the Criteo layout)."""
    os.makedirs(out_dir, exist_ok=True)
    result = []
    for i, src in enumerate(files):
        dst = os.path.join(out_dir, f"{i:05d}-{os.path.basename(src)}.slots")
        if spec is None or spec.is_criteo:
            result.append((dst, parquet_to_slots(src, dst, hash_buckets)))
        else:
            result.append((dst, spec_to_slots(src, dst, spec, hash_buckets)))
    return result
