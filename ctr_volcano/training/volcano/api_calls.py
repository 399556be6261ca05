"""API calls retried by error family, and waits that end the moment the work is cancelled.

Why one place: the launcher and the prep fan-out's runner both watch a Volcano Job through an API
server that may restart under them (an upgrade, a crashed control-plane pod: tens of seconds), and
both must stop at once on SIGTERM (KFP gives a step's pod 30 s before SIGKILL) and still delete what
they created. So every wait goes through :meth:`ApiCalls.sleep`, an ``Event.wait`` that a
:meth:`~ApiCalls.cancel` (from a signal handler or another thread) wakes at once, and every call
through :meth:`ApiCalls.call`, which decides by family (:mod:`ctr_volcano.errors`), never by field:

* :class:`~ctr_volcano.errors.TransientError` is retried with backoff until it has failed more
  than ``max_retries`` times *and* for ``outage_s`` seconds, then raised (an outage, reported as one);
* :class:`~ctr_volcano.errors.BadInput` is raised at once, except one transient case:
  a :class:`~ctr_volcano.training.volcano.client.Forbidden` within ``outage_s`` of the last transient
  error is part of the outage (a restarted API server refuses until its RBAC caches are filled,
  seen on process nodes), so it becomes a :class:`TransientError` and is retried as one;
* anything else is raised as it is.

A wait that the cancel wakes raises :class:`Cancelled`; the owner of the work catches it, cleans up
with ``interruptible=False`` calls (bounded by their own ``outage_s``) and raises its own error.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, Optional

from ctr_volcano.errors import TransientError
from ctr_volcano.training.volcano.client import Forbidden

__all__ = ["ApiCalls", "Cancelled", "backoff"]

#: The longest wait between two retries of one call.
MAX_DELAY_S = 30.0


class Cancelled(Exception):
    """A wait was cut short by :meth:`ApiCalls.cancel` (internal: the owner turns it into its error).

    Attributes:
        signum: the signal that cancelled, ``None`` for a call of ``cancel()``.
    """

    def __init__(self, signum: Optional[int]):
        self.signum = signum
        super().__init__(f"cancelled (signal {signum})" if signum else "cancelled")


def backoff(base_s: float, attempt: int) -> float:
    """The wait before retry ``attempt`` (0-based): doubling from ``base_s``, at most 30 s."""
    return min(base_s * (2 ** attempt), MAX_DELAY_S)


class ApiCalls:
    """Calls with retries by family and interruptible waits (thread-safe).

    Args:
        log: where retries and recoveries are reported (one line per call).
        base_delay_s: the first retry's wait (it doubles, up to 30 s).
        max_retries: transient failures of one call tolerated before giving up (at least) ...
        outage_s: ... and for at least this long (seconds).
        clock: a monotonic clock (tests pass their own).
    """

    def __init__(self, log: Callable[[str], None], *, base_delay_s: float, max_retries: int,
                 outage_s: float, clock: Callable[[], float] = time.monotonic):
        self.log = log
        self.base_delay_s = float(base_delay_s)
        self.max_retries = int(max_retries)
        self.outage_s = float(outage_s)
        self.clock = clock
        self._cancel = threading.Event()
        self.signum: Optional[int] = None
        #: when the last transient error was seen (``None``: never); a refusal soon after is transient
        self.last_outage: Optional[float] = None

    # ------------------------------------------------------------------ cancellation
    def cancel(self, signum: Optional[int] = None) -> None:
        """Wake every wait now and make the next ones raise :class:`Cancelled` (signal-safe)."""
        self.signum = signum
        self._cancel.set()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def check(self) -> None:
        """Raise :class:`Cancelled` if :meth:`cancel` was called."""
        if self._cancel.is_set():
            raise Cancelled(self.signum)

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds``, or raise :class:`Cancelled` the moment :meth:`cancel` is called."""
        if self._cancel.wait(max(0.0, seconds)):
            raise Cancelled(self.signum)

    # ------------------------------------------------------------------ calls
    def call(self, fn: Callable[..., Any], *args: Any, outage_s: Optional[float] = None,
             max_retries: Optional[int] = None, interruptible: bool = True, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)``, retrying what is transient (see the module docstring).

        Args:
            outage_s: this call's time bound instead of the default (``0``: retries only).
            max_retries: this call's retry count instead of the default.
            interruptible: ``False`` for clean-up after a cancel: its waits do not raise
                :class:`Cancelled` (they are bounded by ``outage_s`` and ``max_retries``).
        """
        bound = self.outage_s if outage_s is None else float(outage_s)
        retries = self.max_retries if max_retries is None else int(max_retries)
        started, attempt = self.clock(), 0
        while True:
            try:
                result = fn(*args, **kwargs)
            except Exception as exc:
                transient = self.as_transient(exc)
                if transient is None:
                    raise
                down = self.clock() - started
                if attempt >= retries and down >= bound:
                    raise TransientError(f"{transient} (gave up after {attempt + 1} attempts in "
                                         f"{down:.0f}s)") from None
                delay = backoff(self.base_delay_s, attempt)
                if attempt >= retries:      # only the time bound is left: do not wait past it
                    delay = min(delay, max(bound - down, 0.01))
                self.log(f"[volcano] API error, retrying in {delay:.1f}s: {transient}")
                if interruptible:
                    self.sleep(delay)
                else:
                    time.sleep(delay)
                attempt += 1
                continue
            if attempt:
                self.log(f"[volcano] API server answers again after {self.clock() - started:.1f}s "
                         f"({attempt} retries)")
            return result

    def as_transient(self, exc: Exception) -> Optional[TransientError]:
        """``exc`` as the transient error it is, or ``None`` when it must not be retried."""
        now = self.clock()
        if isinstance(exc, TransientError):
            self.last_outage = now
            return exc
        if isinstance(exc, Forbidden) and self.last_outage is not None \
                and now - self.last_outage < self.outage_s:
            return TransientError(f"{exc} (refused right after an outage: the restarted API server's "
                                  "RBAC caches are still filling)")
        return None
