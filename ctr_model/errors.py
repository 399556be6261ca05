"""The product's error families: one module, no dependencies, shared by the pods and the SDK.

``ctr_model`` runs in the trainer image and ``ctr_volcano`` (which re-exports this module as
``ctr_volcano.errors``) everywhere else, so an error raised in a pod and one raised by the launcher
belong to the same three families, and callers decide what to do by family, never by message:

* :class:`BadInput` -- the user's data or parameters are wrong; retrying will not help. The message
  names the field, the value and the fix.
* :class:`TransientError` -- an infrastructure outage (API server, object store, network): retried
  with a bound, then reported as an outage, not as the user's fault.
* :class:`JobFailed` -- work reached a terminal bad state that is neither (a crashed role, a gang
  that never got room); carries the job, phase, failed role, exit code and log tail.

Each family has one process exit code (:data:`EXIT_CODES`), used both by a pod's entrypoint and by
the ``ctr-volcano`` CLI, and :func:`family_of_exit` maps a role's exit code back to its family the
same way on both backends. :func:`family_of` says which family any exception belongs to: a
:class:`JobFailed` whose role exited 2 or 75 belongs to the family that role reported, so a gang
that ended because a pod refused its input is bad input to whoever launched it.

``ctr_model``'s own errors are members of these families (``ConfigError``, ``DataError``,
``SpecError``, ``StoreError`` ... are :class:`BadInput`; ``StoreUnreachable`` a
:class:`TransientError`; ``NoSpace`` a :class:`VolumeFull`; ``PeersUnreachable`` a
:class:`JobFailed`), so they cross into ``ctr_volcano`` as they are, without re-wrapping. Every
error here pickles with its attributes (they cross process pools and subprocess boundaries).
"""
from __future__ import annotations

import signal
from typing import Any, Dict, Optional, Type

__all__ = ["CtrError", "BadInput", "VolumeFull", "TransientError", "JobFailed", "TrainingJobFailed",
           "Interrupted",
           "EXIT_BAD_INPUT", "EXIT_TRANSIENT", "EXIT_FAILED", "EXIT_CODES", "exit_code_of",
           "family_of_exit", "family_of"]

#: A process that refuses its input exits 2 (the usage-error convention of shells and argparse).
EXIT_BAD_INPUT = 2
#: A process that gave up on an outage exits 75 (``EX_TEMPFAIL`` of sysexits.h: try again later).
EXIT_TRANSIENT = 75
#: Any other failure exits 1.
EXIT_FAILED = 1


class CtrError(Exception):
    """Base class of every error this product raises on purpose."""

    def __reduce__(self) -> Any:
        # subclasses take other arguments than their message: rebuild from the state, not the args
        state = dict(self.__dict__)
        if isinstance(self, OSError):
            state.update(errno=self.errno, strerror=self.strerror, filename=self.filename)
        return _rebuild, (type(self), self.args, state)


def _rebuild(cls: Type[CtrError], args: tuple, state: Dict[str, Any]) -> CtrError:
    exc = (OSError if issubclass(cls, OSError) else Exception).__new__(cls)
    exc.args = args
    for name, value in state.items():    # setattr: OSError's errno & co. are fields, not __dict__ keys
        setattr(exc, name, value)
    return exc


class BadInput(CtrError, ValueError):
    """Invalid user input: names the field, the value and the fix. Not retried."""

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


class TransientError(CtrError):
    """A temporary infrastructure failure: retried with a bound, then reported as an outage."""


class JobFailed(CtrError):
    """Work (a training gang, a fan-out of pods, a pipeline step) failed for good.

    Attributes:
        job: job name (Volcano Job name, local gang id, step name).
        phase: terminal phase (``Failed``, ``Aborted``, ``Stalled``, ``Unschedulable`` ...).
        role: the failed role/pod name, if known.
        exit_code: the failed container's/process's exit code, if known (not this process's: see
            :func:`exit_code_of`).
        reason: a one-line reason.
        log_tail: the last lines of the failed role's log.
        details: anything else worth keeping (per-pod records, retry count).
    """

    #: what the job is, in the message
    what = "job"

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
        msg = f"{self.what} {job!r} {phase}: {reason}"
        if role is not None:
            msg += f" (role {role}"
            if exit_code is not None:
                msg += f", exit code {exit_code}"
            msg += ")"
        if log_tail:
            msg += "\n--- log tail ---\n" + log_tail.rstrip()
        super().__init__(msg)


class TrainingJobFailed(JobFailed):
    """A training gang failed for good (the Volcano Job or the local gang)."""

    what = "training job"


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


#: The exit code of each family, for a pod's entrypoint and for the CLI.
EXIT_CODES: Dict[Type[BaseException], int] = {
    BadInput: EXIT_BAD_INPUT, TransientError: EXIT_TRANSIENT, JobFailed: EXIT_FAILED}


def exit_code_of(exc: BaseException) -> int:
    """The process exit code for ``exc``: its family's (:func:`family_of`), 128 + signal for
    :class:`Interrupted`, else 1."""
    if isinstance(exc, Interrupted):
        return exc.exit_code
    return EXIT_CODES[family_of(exc)]


def family_of(exc: BaseException) -> Type[CtrError]:
    """The family of ``exc``: :class:`BadInput`, :class:`TransientError` or :class:`JobFailed`.

    A :class:`JobFailed` that carries its failed role's exit code takes the family that code reports
    (:func:`family_of_exit`): a gang ended by a role that refused its input is bad input, one ended
    by a role that gave up on an outage is an outage. Anything that is neither is a failure.
    """
    if isinstance(exc, BadInput):
        return BadInput
    if isinstance(exc, TransientError):
        return TransientError
    if isinstance(exc, JobFailed):
        return family_of_exit(exc.exit_code)
    return JobFailed


def family_of_exit(code: Optional[int]) -> Type[CtrError]:
    """The family a role's exit code reports, the same on both backends: 2 is :class:`BadInput` (the
    role refused its input: a restart cannot help), 75 :class:`TransientError` (an outage: retried),
    anything else :class:`JobFailed` (retried up to the step's ``max_retry``)."""
    if code == EXIT_BAD_INPUT:
        return BadInput
    if code == EXIT_TRANSIENT:
        return TransientError
    return JobFailed
