"""Error families shared by every part of the product.

Three families, so callers can decide what to do without parsing messages:

* :class:`BadInput` -- the user's data or parameters are wrong; retrying will not help. The message
  names the field, the value and the fix.
* :class:`TransientError` -- infrastructure hiccup (API server timeout, connection reset); retried
  with a bound.
* :class:`TrainingJobFailed` -- a training gang reached a terminal bad state; carries the job name,
  phase, failed role/pod, exit code and log tail.
"""
from __future__ import annotations

import signal
from typing import Any, Dict, Optional

__all__ = ["CtrVolcanoError", "BadInput", "VolumeFull", "TransientError", "TrainingJobFailed", "Interrupted"]


class CtrVolcanoError(Exception):
    """Base class of every error this product raises on purpose."""


class BadInput(CtrVolcanoError, ValueError):
    """Invalid user input: names the field, the value and the fix."""

    def __init__(self, field: str, value: Any, fix: str):
        self.field = field
        self.value = value
        self.fix = fix
        super().__init__(f"{field}={value!r}: {fix}")


class VolumeFull(BadInput):
    """The volume a step writes is full (ENOSPC): a bad input, because a retry fills it again.

    Names the field whose path it is, the path, the bytes to write and the bytes free.
    """

    def __init__(self, field: str, path: str, needed: int, free: int, at_least: bool = False):
        self.needed, self.free = needed, free
        amount = f"more than {needed}" if at_least else f"{needed}"
        super().__init__(field, path, f"no space left on device: {amount} bytes to write, {free} "
                                      f"bytes free there; free space on that volume or give it more room")


class TransientError(CtrVolcanoError):
    """A temporary infrastructure failure that may succeed when retried."""


class TrainingJobFailed(CtrVolcanoError):
    """A training gang failed for good.

    Attributes:
        job: job name (Volcano Job name or local gang id).
        phase: terminal phase (``Failed``, ``Aborted``, ``Terminated``, ``Stalled``, ``Unschedulable`` ...).
        role: the failed role/pod name, if known.
        exit_code: the failed container's/process's exit code, if known.
        reason: a one-line reason.
        log_tail: the last lines of the failed role's log.
        details: anything else worth keeping (per-pod records, retry count).
    """

    def __init__(self, job: str, phase: str, reason: str, role: Optional[str] = None,
                 exit_code: Optional[int] = None, log_tail: str = "",
                 details: Optional[Dict[str, Any]] = None):
        self.job = job
        self.phase = phase
        self.reason = reason
        self.role = role
        self.exit_code = exit_code
        self.log_tail = log_tail
        self.details = dict(details or {})
        msg = f"training job {job!r} {phase}: {reason}"
        if role is not None:
            msg += f" (role {role}"
            if exit_code is not None:
                msg += f", exit code {exit_code}"
            msg += ")"
        if log_tail:
            msg += "\n--- log tail ---\n" + log_tail.rstrip()
        super().__init__(msg)


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM stopped the work after everything it started was reaped.

    A ``KeyboardInterrupt`` so code that already handles Ctrl-C handles it; it carries the signal so
    the CLI exits with the shell's convention, ``128 + signal`` (130 for SIGINT, 143 for SIGTERM).
    """

    def __init__(self, signum: int, what: str = ""):
        self.signum = signum
        name = signal.Signals(signum).name
        super().__init__(f"{name}: {what}" if what else name)

    @property
    def exit_code(self) -> int:
        return 128 + self.signum
