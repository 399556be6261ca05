"""Training backends: one interface, two implementations, chosen by the step's ``backend`` parameter.

* :class:`~ctr_volcano.backends.local.LocalBackend` -- a pserver/trainer gang of local processes
  (:func:`~ctr_volcano.backends.local.train_local`), the embedded default;
* :class:`~ctr_volcano.volcano.step.VolcanoBackend` -- a Volcano Job on Kubernetes.

:func:`ctr_volcano.volcano.step.run_training_step` picks one; both return a :class:`TrainResult`, so
the component, the CLI and the pipeline runner read the outcome the same way. This module imports
nothing heavy: the Volcano spec and the step import it on a laptop.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, Protocol

from ctr_volcano.errors import BadInput

if TYPE_CHECKING:
    from ctr_volcano.volcano.step import StepParams

__all__ = ["TrainResult", "TrainingBackend", "TrainData", "check_train_data", "DEFAULT_STALL_TIMEOUT_S"]

#: A trainer printing nothing for this long is considered hung (a dead pserver hangs trainers).
DEFAULT_STALL_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class TrainResult:
    """Outcome of a training run, whichever backend ran it.

    Attributes:
        model_dir: the exported model (``ctr_model.infer.load_model`` reads it).
        metrics: the contents of ``metrics.json`` (per-epoch loss/AUC/examples per second, test metrics).
        output_dir: the gang's shared output (checkpoints, model, metrics).
        attempts: how many times the gang was started (1 = no restart).
    """

    model_dir: str
    metrics: Dict[str, Any]
    output_dir: str
    attempts: int


class TrainingBackend(Protocol):
    """Runs one training gang and leaves the exported model in ``model_dir``."""

    def train(self, data_path: str, model_dir: str, params: "StepParams", *,
              on_identity: Optional[Callable[[Dict[str, Any]], None]] = None,
              log: Callable[[str], None], init_model: Optional[str] = None) -> TrainResult:
        """Train with ``params`` on ``data_path`` (a prep output) and export to ``model_dir``.

        Args:
            data_path: the prep output directory (or ``s3://`` prefix) as this process sees it.
            model_dir: where the exported model must end up.
            params: the step's parameters (:class:`~ctr_volcano.volcano.step.StepParams`).
            on_identity: called once with the gang's identity (the ``job_info`` output).
            log: progress sink.
            init_model: an exported model to warm-start from.

        Raises:
            BadInput: an input the gang cannot use, found before it starts.
            TrainingJobFailed: the gang failed for good.
        """
        ...


@dataclass(frozen=True)
class TrainData:
    """The training split as the boundary checks found it.

    Attributes:
        where: the split's path or ``s3://`` URI.
        shards: how many Parquet shards it has.
        hash_buckets: the buckets prep hashed it into (0 for data in a store: the trainers read it).
    """

    where: str
    shards: int
    hash_buckets: int


def check_train_data(data_path: str, trainers: int, *, field: str, client: Any = None) -> TrainData:
    """Both backends' checks of the training data, made before any gang starts (seconds, not hours).

    The ``train`` split must exist with this code's schema and at least ``trainers`` shards; a local
    ``test`` split (scored after training) must match it.

    Args:
        data_path: a prep output (or its train split); an ``s3://`` URI needs ``client``.
        trainers: the gang's trainers (each takes whole shards).
        field: the parameter that named ``data_path`` (for the error).
        client: a :class:`ctr_model.store.Store` when ``data_path`` is in the object store.

    Raises:
        BadInput: naming ``field`` (missing, unreadable or mismatched data) or ``trainers``.
    """
    from ctr_model.data import DataError, check_enough_shards, resolve_split
    from ctr_model.features import SchemaMismatch
    from ctr_model.store import StoreError
    from ctr_model.train import check_test_split

    try:
        if client is not None:
            from ctr_model.workspace import remote_split

            where, shards, _schema = remote_split(client, data_path, "train")
            found = TrainData(where=where, shards=len(shards), hash_buckets=0)
        else:
            split = resolve_split(data_path, "train")
            check_test_split(data_path, split)   # scored after training: a bad one must fail before it
            found = TrainData(where=split.path, shards=len(split.files), hash_buckets=split.hash_buckets)
    except (DataError, SchemaMismatch, StoreError) as exc:
        raise BadInput(field, data_path, str(exc)) from None
    try:
        check_enough_shards(found.where, found.shards, trainers)
    except DataError as exc:
        raise BadInput("trainers", trainers, str(exc)) from None
    return found
