"""Prep's settings, validated once (:class:`PrepConfig`)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ctr_model.checks import is_int
from ctr_model.features import DEFAULT_HASH_BUCKETS, NUM_SPARSE, validate_hash_buckets
from ctr_volcano.errors import BadInput

__all__ = ["PrepConfig", "AUTO_WORKERS_MAX", "STATS_FILE"]

#: Where prep writes its counts, rejects and per-column statistics, next to the splits.
STATS_FILE = "stats.json"

#: Cap of ``workers=0``: this process splits and writes every block itself (about a quarter of
#: the single-core work), so beyond ~4 workers it is the bottleneck and more only cost memory.
AUTO_WORKERS_MAX = 8


@dataclass(frozen=True)
class PrepConfig:
    """How to prep. Validated once on construction (raises :class:`BadInput`).

    Attributes:
        hash_buckets: ids per categorical column space; 1,000,001 matches PaddleRec's CTR-DNN.
        test_fraction: share of lines sent to the test split, in (0, 1).
        shards: train shards; trainers take whole files, so use a multiple of the trainer count.
        test_shards: test shards (evaluation reads them all).
        max_bad_fraction: prep fails if rejected lines exceed this share of all lines.
        seed: selects the train/test split.
        block_bytes: text split and written at a time (each block's train rows go to the shards
            as contiguous slices, so the shard layout depends on it; the lanes parse it in pieces
            of up to 4 MiB); memory use is a few times this.
        max_examples: rejected lines kept verbatim (truncated) in ``stats.json``.
        compression: Parquet codec.
        workers: processes parsing and transforming pieces of the blocks in parallel; 0 means the
            cores available to this process (its CPU affinity, capped by a cgroup CPU quota), at
            most :data:`AUTO_WORKERS_MAX`. The output does not depend on it; memory grows by about
            60 MB per worker (measured: 282 MB at 1, 759 MB at 8). Plain input of at most two
            pieces (8 MiB by default) runs in one lane whatever this says.
        profile: compute the data profile (``profile.json``: per-feature sketches that validation
            compares day with day) in the same pass; off only to measure what it costs.
    """

    hash_buckets: int = DEFAULT_HASH_BUCKETS
    test_fraction: float = 0.1
    shards: int = 8
    test_shards: int = 2
    max_bad_fraction: float = 0.001
    seed: int = 42
    block_bytes: int = 32 << 20
    max_examples: int = 10
    compression: str = "snappy"
    workers: int = 0
    profile: bool = True

    def __post_init__(self) -> None:
        try:
            validate_hash_buckets(self.hash_buckets)
        except ValueError:
            raise BadInput("hash_buckets", self.hash_buckets,
                           f"use an integer >= {NUM_SPARSE + 1} (ids 0..{NUM_SPARSE - 1} are the "
                           f"per-column empty ids); the default is {DEFAULT_HASH_BUCKETS}") from None
        if not _is_number(self.test_fraction) or not 0.0 < float(self.test_fraction) < 1.0:
            raise BadInput("test_fraction", self.test_fraction, "use a number between 0 and 1, "
                           "e.g. 0.1")
        if not _is_number(self.max_bad_fraction) or not 0.0 <= float(self.max_bad_fraction) <= 1.0:
            raise BadInput("max_bad_fraction", self.max_bad_fraction,
                           "use a number between 0 and 1, e.g. 0.001")
        for name, lo, hi in (("shards", 1, 4096), ("test_shards", 1, 4096), ("seed", 0, 2 ** 63),
                             ("block_bytes", 1 << 16, 1 << 31), ("max_examples", 0, 10000),
                             ("workers", 0, 1024)):
            value = getattr(self, name)
            if not is_int(value, lo, hi):
                raise BadInput(name, value, f"use an integer in [{lo}, {hi}]")
        if not isinstance(self.profile, bool):
            raise BadInput("profile", self.profile, "use true or false")
        if self.compression not in ("snappy", "zstd", "gzip", "lz4", "none"):
            raise BadInput("compression", self.compression, "use snappy, zstd, gzip, lz4 or none")


def _is_number(x: Any) -> bool:
    return not isinstance(x, bool) and isinstance(x, (int, float, np.integer, np.floating)) \
        and math.isfinite(float(x))
