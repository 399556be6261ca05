"""The error families, re-exported from :mod:`ctr_model.errors` (the one module that defines them, so
an error raised in a pod and one raised by the SDK are the same classes).

``CtrVolcanoError`` is the 0.1 name of :class:`~ctr_model.errors.CtrError`.
"""
from __future__ import annotations

from ctr_model.errors import (
                              EXIT_BAD_INPUT,
                              EXIT_CODES,
                              EXIT_FAILED,
                              EXIT_TRANSIENT,
                              BadInput,
                              CtrError,
                              Interrupted,
                              JobFailed,
                              TrainingJobFailed,
                              TransientError,
                              VolumeFull,
                              exit_code_of,
                              family_of,
                              family_of_exit,
)

CtrVolcanoError = CtrError

__all__ = ["CtrError", "CtrVolcanoError", "BadInput", "VolumeFull", "TransientError", "JobFailed",
           "TrainingJobFailed", "Interrupted", "EXIT_BAD_INPUT", "EXIT_TRANSIENT", "EXIT_FAILED",
           "EXIT_CODES", "exit_code_of", "family_of", "family_of_exit"]
