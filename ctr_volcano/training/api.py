"""Training backends: one interface, two implementations, chosen by the step's ``backend`` parameter.

* :class:`~ctr_volcano.training.local.backend.LocalBackend` -- a pserver/trainer gang of local processes
  (:func:`~ctr_volcano.training.local.backend.train_local`), the embedded default;
* :class:`~ctr_volcano.training.volcano.backend.VolcanoBackend` -- a Volcano Job on Kubernetes.

:func:`ctr_volcano.training.step.run_training_step` picks one; both return a :class:`TrainResult`, so
the component, the CLI and the pipeline runner read the outcome the same way. This module imports
nothing heavy: the Volcano spec and the step import it on a laptop.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Protocol

from ctr_volcano.training.params import StepParams

__all__ = ["TrainResult", "TrainingBackend"]


@dataclass(frozen=True)
class TrainResult:
    """Outcome of a training run, whichever backend ran it.

    Attributes:
        model_dir: the exported model (``ctr_model.infer.load_model`` reads it).
        metrics: the contents of ``metrics.json`` (per-epoch loss/AUC/examples per second, test metrics).
        output_dir: the gang's shared output (checkpoints, model, metrics); ``None`` when it was a
            temporary directory, removed after the success.
        attempts: how many times the gang was started (1 = no restart).
    """

    model_dir: str
    metrics: Dict[str, Any]
    output_dir: Optional[str]
    attempts: int


class TrainingBackend(Protocol):
    """Runs one training gang and leaves the exported model in ``model_dir``."""

    def train(self, data_path: str, model_dir: str, params: StepParams, *,
              on_identity: Optional[Callable[[Dict[str, Any]], None]] = None,
              log: Callable[[str], None], init_model: Optional[str] = None) -> TrainResult:
        """Train with ``params`` on ``data_path`` (a prep output) and export to ``model_dir``.

        Args:
            data_path: the prep output directory (or ``s3://`` prefix) as this process sees it.
            model_dir: where the exported model must end up.
            params: the step's parameters (:class:`~ctr_volcano.training.params.StepParams`).
            on_identity: called once with the gang's identity (the ``job_info`` output).
            log: progress sink.
            init_model: an exported model to warm-start from.

        Raises:
            BadInput: an input the gang cannot use, found before it starts.
            TrainingJobFailed: the gang failed for good.
        """
        ...
