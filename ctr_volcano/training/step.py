"""One training step, either backend: what the ``train_ctr`` component and ``ctr-volcano train`` call.

This is the only module that imports both backends; everything above it (the component, the CLI, the
pipeline runner) goes through :func:`run_training_step` with a :class:`~ctr_volcano.training.params.
StepParams`, so a local run and a Volcano run are the same call with a different ``backend``.
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Dict, Optional

from ctr_volcano.training.api import TrainingBackend, TrainResult
from ctr_volcano.training.local.backend import LocalBackend
from ctr_volcano.training.params import StepParams
from ctr_volcano.training.volcano.backend import VolcanoBackend

logger = logging.getLogger(__name__)

__all__ = ["run_training_step", "backend_for", "StepParams"]


def backend_for(params: StepParams, client: Any = None) -> TrainingBackend:
    """The backend ``params.backend`` names (``client``: Volcano only, a ready KubeClient)."""
    if params.backend == "volcano":
        return VolcanoBackend(client)
    return LocalBackend()


def run_training_step(data_path: str, model_dir: str, params: StepParams, *,
                      on_identity: Optional[Callable[[Dict[str, Any]], None]] = None,
                      log: Optional[Callable[[str], None]] = None, client: Any = None,
                      init_model: Optional[str] = None) -> TrainResult:
    """Train with the backend ``params.backend`` names and leave the exported model in ``model_dir``.

    Args:
        data_path: the prep output directory as this process sees it.
        model_dir: where the exported model must end up (the KFP Model output path).
        params: the step's parameters.
        on_identity: called once with the gang's identity (written to the ``job_info`` output).
        log: progress sink (default: this module's logger).
        client: Volcano only: a ready :class:`~ctr_volcano.training.volcano.client.KubeClient` (tests, the
            cluster harness); default: built from ``params.kubeconfig``/in-cluster config.
        init_model: an exported model to warm-start from (both backends); on Volcano it is copied
            onto the shared claim next to the data, because the pservers load it.

    Returns:
        A :class:`~ctr_volcano.training.api.TrainResult`. The exported model keeps the training data's
        profile (``data_profile.json``, named in ``model_meta.json``) when ``data_path`` is a local
        directory that has one (prep writes it into the train split): each backend attaches it.
    """
    return backend_for(params, client).train(data_path, model_dir, params, on_identity=on_identity,
                                             log=log or logger.info, init_model=init_model)
