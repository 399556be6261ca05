"""The training configuration: one frozen, validated dataclass.

Every role of a gang reads the same config (from ``--config FILE`` or ``CTR_TRAIN_CONFIG``), so it is
validated once, where it enters the process, and every error names the field, the bad value and the
fix. The defaults are tuned for asynchronous parameter-server training on small machines: a narrower
FC stack than PaddleRec's benchmark and PaddleRec's Adam learning rate reach the data's ceiling within
three epochs (measured on 1M generated rows: see docs/training.md). The defaults of ``epochs``,
``batch_size``, ``learning_rate`` and ``model`` are named in :mod:`ctr_model.defaults`, which the
training step's parameters (``ctr_volcano.training.params.StepParams``, and from it the CLI, the
component and the pipelines) read too.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Dict, Mapping, Optional, Tuple

from ctr_model.checks import is_int, is_positive, is_real
from ctr_model.defaults import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_EPOCHS,
    DEFAULT_HASH_BUCKETS,
    DEFAULT_LEARNING_RATE,
    DEFAULT_MODEL,
)
from ctr_model.errors import BadInput
from ctr_model.models import FAMILIES, validate_model_config

__all__ = ["ConfigError", "TrainConfig", "OPTIMIZERS", "READERS"]

OPTIMIZERS = ("adam",)
READERS = ("auto", "inmemory", "queue", "stream")


class ConfigError(BadInput):
    """A training config field is invalid (bad input): ``field`` is ``config.<name>`` (``config`` for
    the whole config), and the message names it, the value and the fix."""

    def __init__(self, name: str, value: Any, fix: str):
        super().__init__(f"config.{name}" if name else "config", value, fix)


@dataclass(frozen=True)
class TrainConfig:
    """Hyper-parameters and run settings of the CTR network.

    Attributes:
        model: the model family (:data:`ctr_model.models.FAMILIES`): ``dnn`` (the default),
            ``wide_deep``, ``deepfm`` or ``dcn_v2``.
        model_config: the family's own hyper-parameters (e.g. ``dcn_v2``'s ``cross_layers``,
            ``low_rank``), one JSON object; missing keys take the family's defaults, unknown ones
            are refused. ``embedding_dim`` and ``fc_sizes`` are every family's.
        embedding_dim: width of each sparse feature's embedding (held on the pservers).
        fc_sizes: hidden layer widths of the FC stack (ReLU after each).
        learning_rate: Adam step size for the dense layers and the pservers' sparse rule.
        optimizer: ``adam`` (the pservers' sparse Adam rule; the only layout the loader reads).
        batch_size: examples per batch and per trainer thread.
        epochs: passes over the training split.
        threads: Paddle dataset threads per trainer (Hogwild within the trainer).
        print_every: batches between Paddle's own progress lines.
        progress_secs: seconds between the trainer's examples/s progress lines.
        hash_buckets: id space of the categorical columns; must equal the prep output's.
        seed: seed of parameter initialisation and shuffling.
        reader: ``auto`` (the default: ``inmemory`` while the trainer's rows fit in half its memory
            limit, ``stream`` beyond; :mod:`ctr_model.reader_choice`), ``inmemory`` (load the shard
            once, shuffle per epoch), ``queue`` (stream the converted slot files) or ``stream``
            (stream the Parquet shards through a pipe: no slot-text copy, memory flat in rows;
            :mod:`ctr_model.slot_stream`).
        shuffle: shuffle the in-memory data before each epoch (``inmemory`` only).
        keep_checkpoints: how many epoch checkpoints to keep (the newest ones).
        checkpoint_secs: write a checkpoint after an epoch only when at least this many seconds have
            passed since the last one (or since training started); the last epoch is always
            checkpointed. 0 checkpoints every epoch. A checkpoint of 400k sparse keys takes ~4 s
            on 2 cores, a third of a 1M-row epoch there (docs/performance.md).
        sparse_shards: files per pserver for the sparse table when saving (Paddle's default, 1000,
            makes every checkpoint slow).
        base_rate: the click rate the output bias starts from (``logit(base_rate)``), so an
            untrained network predicts it instead of 0.5; ``None`` (the default): the training
            split's, which prep records in ``schema.json`` (0.5 for data prepped before it did).
    """

    embedding_dim: int = 10
    fc_sizes: Tuple[int, ...] = (256, 128, 64)
    learning_rate: float = DEFAULT_LEARNING_RATE
    optimizer: str = "adam"
    batch_size: int = DEFAULT_BATCH_SIZE
    epochs: int = DEFAULT_EPOCHS
    threads: int = 1
    print_every: int = 200
    progress_secs: float = 10.0
    hash_buckets: int = DEFAULT_HASH_BUCKETS
    seed: int = 2024
    reader: str = "auto"
    shuffle: bool = True
    keep_checkpoints: int = 2
    checkpoint_secs: float = 600.0
    sparse_shards: int = 16
    model: str = DEFAULT_MODEL
    model_config: Dict[str, Any] = field(default_factory=dict)
    base_rate: Optional[float] = None

    def __post_init__(self) -> None:
        def positive_int(name: str, upper: int = 1 << 31) -> None:
            value = getattr(self, name)
            if not is_int(value, 1, upper):
                raise ConfigError(name, value, f"use an integer in 1..{upper}")

        for name in ("embedding_dim", "batch_size", "threads", "print_every", "keep_checkpoints",
                     "sparse_shards"):
            positive_int(name)
        positive_int("epochs", 1000)
        positive_int("hash_buckets", 1 << 62)
        if not is_int(self.seed, 0):
            raise ConfigError("seed", self.seed, "use a non-negative integer")
        sizes = self.fc_sizes
        if isinstance(sizes, list):
            object.__setattr__(self, "fc_sizes", tuple(sizes))
            sizes = self.fc_sizes
        if (not isinstance(sizes, tuple) or not sizes
                or not all(is_int(s, 1) for s in sizes)):
            raise ConfigError("fc_sizes", sizes, "use a non-empty list of positive integers, e.g. [256, 128, 64]")
        for name in ("learning_rate", "progress_secs"):
            value = getattr(self, name)
            if not is_positive(value):
                raise ConfigError(name, value, "use a positive number")
            object.__setattr__(self, name, float(value))
        if not is_real(self.checkpoint_secs, 0.0, 7 * 86400.0):
            raise ConfigError("checkpoint_secs", self.checkpoint_secs,
                              "use seconds in 0..604800 (0: a checkpoint after every epoch)")
        object.__setattr__(self, "checkpoint_secs", float(self.checkpoint_secs))
        if self.optimizer not in OPTIMIZERS:
            raise ConfigError("optimizer", self.optimizer, f"use one of {', '.join(OPTIMIZERS)}")
        if self.reader not in READERS:
            raise ConfigError("reader", self.reader, f"use one of {', '.join(READERS)}")
        if not isinstance(self.shuffle, bool):
            raise ConfigError("shuffle", self.shuffle, "use true or false")
        if self.base_rate is not None:
            if not (is_real(self.base_rate, 0.0, 1.0) and 0.0 < float(self.base_rate) < 1.0):
                raise ConfigError("base_rate", self.base_rate, "use a click rate strictly between 0 and 1, "
                                                               "or null for the training split's")
            object.__setattr__(self, "base_rate", float(self.base_rate))
        self._check_model()

    def _check_model(self) -> None:
        if self.model not in FAMILIES:
            raise ConfigError("model", self.model, f"use one of {', '.join(FAMILIES)}")
        try:
            full = validate_model_config(self.model, self.model_config)
        except ValueError as exc:
            raise ConfigError(*exc.args) from None
        object.__setattr__(self, "model_config", full)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> "TrainConfig":
        """Build a config from a JSON-like mapping; unknown keys are refused, missing ones default."""
        if data is None:
            return cls()
        if isinstance(data, TrainConfig):
            return data
        if not isinstance(data, Mapping):
            raise ConfigError("", data, "pass a JSON object / dict of TrainConfig fields")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(unknown[0], data[unknown[0]],
                              f"unknown field; known fields are {', '.join(sorted(known))}")
        values = dict(data)
        if "fc_sizes" in values and isinstance(values["fc_sizes"], list):
            values["fc_sizes"] = tuple(values["fc_sizes"])
        return cls(**values)

    @classmethod
    def from_json(cls, text: str) -> "TrainConfig":
        """Parse a JSON object (as carried by ``CTR_TRAIN_CONFIG`` or a ``--config`` file)."""
        try:
            data = json.loads(text) if text.strip() else {}
        except json.JSONDecodeError as exc:
            raise ConfigError("", text[:80], f"not valid JSON ({exc})") from None
        return cls.from_dict(data)

    def to_dict(self) -> dict:
        """JSON-able dict; ``from_dict(to_dict())`` round-trips."""
        data = asdict(self)
        data["fc_sizes"] = list(self.fc_sizes)
        return data

    def replace(self, **changes: Any) -> "TrainConfig":
        """A validated copy with some fields changed."""
        data = self.to_dict()
        data.update(changes)
        return TrainConfig.from_dict(data)
