"""How a role ends: one line for its error, the exit code of the error's family, no Paddle teardown.

Both backends read a role's exit code the same way (:func:`ctr_model.errors.family_of_exit`): 2 is
bad input (a restart cannot help: the Volcano Job terminates, the local gang fails at once), 75 an
outage (the gang restarts), anything else a failure (the gang restarts up to ``max_retry``).
"""
from __future__ import annotations

import logging
import os
import sys
from typing import TYPE_CHECKING, NoReturn

from ctr_model.errors import CtrError, exit_code_of
from ctr_model.train import log

if TYPE_CHECKING:
    from ctr_model.contract import RoleSpec

__all__ = ["report", "exit_with", "fail_now"]


def report(name: str, exc: BaseException) -> int:
    """Log ``exc`` as role ``name``'s error and return the exit code of its family: one line
    (``trainer-0: error: FIELD=VALUE: FIX``) for an error of the product, the traceback too for
    anything else (a bug, or Paddle's own failure)."""
    if isinstance(exc, CtrError):
        log.error("%s: error: %s", name, exc)
    else:
        log.error("%s: error: %s: %s", name, type(exc).__name__, exc, exc_info=exc)
    return exit_code_of(exc)


def exit_with(code: int) -> NoReturn:
    """Exit with ``code``; a failure exits once the log is flushed, skipping the interpreter's
    teardown. A role that failed with Paddle's PS client still running crashed in that teardown
    (SIGSEGV in the client's sparse-push thread: exit 139 instead of 2, seen when a checkpoint hit a
    full claim on process nodes), and Volcano restarts on 139 the gang that exit 2 would have ended.
    Success keeps the normal exit: the roles stopped Paddle's client cleanly by then."""
    if code == 0:
        sys.exit(0)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def fail_now(spec: "RoleSpec", exc: BaseException) -> NoReturn:
    """End the role at once from any thread (the main one may be inside Paddle's C++ training loop):
    log ``exc``, exit with its family's code."""
    exit_with(report(spec.name, exc))
