"""Training backends: one interface, two implementations, chosen by the step's ``backend`` parameter.

* :class:`~ctr_volcano.training.local.backend.LocalBackend` -- a pserver/trainer gang of local processes
  (:func:`~ctr_volcano.training.local.backend.train_local`), the embedded default;
* :class:`~ctr_volcano.training.volcano.backend.VolcanoBackend` -- a Volcano Job on Kubernetes.

:func:`ctr_volcano.training.step.run_training_step` picks one; both return a :class:`TrainResult`, so
the component, the CLI and the pipeline runner read the outcome the same way, and both map a failed
role's exit code to the step's error family the same way (:func:`role_error`). This module imports
nothing heavy: the Volcano spec and the step import it on a laptop.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Protocol, Union

from ctr_volcano.errors import BadInput, JobFailed, TrainingJobFailed, TransientError, family_of_exit
from ctr_volcano.training.params import StepParams

__all__ = ["TrainResult", "TrainingBackend", "RoleRefused", "RoleOutage", "role_error"]


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


class _RoleFailure:
    """What a :class:`~ctr_volcano.errors.TrainingJobFailed` carries, for the other two families."""

    failure: TrainingJobFailed

    def _keep(self, failure: TrainingJobFailed) -> None:
        self.failure = failure
        self.job, self.phase, self.role = failure.job, failure.phase, failure.role
        self.exit_code, self.log_tail, self.details = failure.exit_code, failure.log_tail, failure.details
        self.reason = failure.reason
        self.args = (str(failure),)     # the message stays the failure's one line


class RoleRefused(_RoleFailure, BadInput):
    """A role of the gang exited 2: it refused its input (its own error line names the field, the
    value and the fix). Restarting the gang cannot help, so neither backend does."""

    def __init__(self, failure: TrainingJobFailed):
        BadInput.__init__(self, f"role {failure.role}", failure.job, failure.reason)
        self._keep(failure)


class RoleOutage(_RoleFailure, TransientError):
    """A role of the gang exited 75: it gave up on an outage (the object store, the network) after its
    own retries; the gang was restarted up to ``max_retry`` and the outage outlasted it."""

    def __init__(self, failure: TrainingJobFailed):
        TransientError.__init__(self, str(failure))
        self._keep(failure)


def role_error(failure: TrainingJobFailed) -> Union[RoleRefused, RoleOutage, TrainingJobFailed]:
    """The step's error for a gang that ended with ``failure``, by the family of the failed role's
    exit code (:func:`~ctr_volcano.errors.family_of_exit`), the same on both backends: exit 2 is
    :class:`RoleRefused` (a :class:`~ctr_volcano.errors.BadInput`, exit 2), 75 :class:`RoleOutage`
    (a :class:`~ctr_volcano.errors.TransientError`, exit 75), anything else ``failure`` itself."""
    family = family_of_exit(failure.exit_code)
    if family is BadInput:
        return RoleRefused(failure)
    if family is TransientError:
        return RoleOutage(failure)
    assert issubclass(family, JobFailed)
    return failure
