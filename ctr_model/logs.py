"""One log format for every process of the product, and progress lines for long work.

The CLI, the KFP components and the training pods all call :func:`setup_logging`, so a step log that
interleaves them (a kfp executor and the gang it supervises, or a launcher streaming pod logs) reads as
one stream: ``2026-11-30T21:00:00 INFO    ctr_volcano.data.prep: ...``. It lives in ``ctr_model`` because
the trainer image holds only this package.
"""
from __future__ import annotations

import logging
import sys
import time
from typing import Optional

__all__ = ["LOG_FORMAT", "DATE_FORMAT", "PRODUCT_LOGGERS", "setup_logging", "Progress", "human_seconds"]

LOG_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
DATE_FORMAT = "%Y-%m-%dT%H:%M:%S"


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at the time (test runners and notebooks replace it)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass


#: The product's logger namespaces; their level is set here because Paddle's import resets the root
#: logger's level to WARNING inside the training pods.
PRODUCT_LOGGERS = ("ctr_model", "ctr_volcano", "components")


def setup_logging(level: int = logging.INFO) -> None:
    """Send log records of ``level`` and above to stderr in :data:`LOG_FORMAT` (idempotent).

    Where a plain stream handler is installed already (``kfp``'s executor calls ``basicConfig``), it
    gets this format instead of a second handler, so no line is written twice.
    """
    root = logging.getLogger()
    formatter = logging.Formatter(LOG_FORMAT, DATE_FORMAT)
    plain = [h for h in root.handlers if type(h) is logging.StreamHandler]
    for handler in plain:
        handler.setFormatter(formatter)
    if not plain and not any(isinstance(h, _StderrHandler) for h in root.handlers):
        handler = _StderrHandler()
        handler.setFormatter(formatter)
        root.addHandler(handler)
    root.setLevel(level)
    for name in PRODUCT_LOGGERS:
        logging.getLogger(name).setLevel(level)


def human_seconds(seconds: float) -> str:
    """``95 -> '1m35s'``, ``4000 -> '1h06m'``."""
    s = int(round(max(0.0, seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


class Progress:
    """Progress lines for long work, at most one every ``every_s`` seconds, plus a final one.

    Each line gives what is done (of the total when known), rows/s, MB/s and the ETA when a total is
    known: ``prep: 2,000,000 rows, 512.0 of 2048.0 MB (25%), 410,000 rows/s, 105.0 MB/s, ETA 15s``.

    Args:
        log: the logger to write to.
        what: the work's name, first on every line.
        total_rows: rows expected, if known (drives the percentage and ETA when bytes are unknown).
        total_bytes: bytes expected, if known (drives the percentage and ETA).
        every_s: seconds between lines.
    """

    def __init__(self, log: logging.Logger, what: str, *, total_rows: Optional[int] = None,
                 total_bytes: Optional[int] = None, every_s: float = 10.0):
        self.log, self.what, self.every_s = log, what, every_s
        self.total_rows, self.total_bytes = total_rows, total_bytes
        self.rows = 0
        self.bytes = 0
        self.t0 = self._last = time.monotonic()

    def update(self, rows: int = 0, nbytes: int = 0) -> None:
        """Count ``rows`` and ``nbytes`` more; log a line if ``every_s`` passed since the last one."""
        self.rows += rows
        self.bytes += nbytes
        now = time.monotonic()
        if now - self._last >= self.every_s:
            self._last = now
            self.log.info("%s", self.line(now))

    def done(self) -> None:
        """Log the closing line (totals and average rates)."""
        self.log.info("%s done", self.line(time.monotonic(), final=True))

    def line(self, now: float, final: bool = False) -> str:
        elapsed = max(now - self.t0, 1e-9)
        parts = [f"{self.rows:,} rows" + (f" of {self.total_rows:,}" if self.total_rows and not self.total_bytes
                                          else "")]
        if self.bytes or self.total_bytes:
            mb = self.bytes / 1e6
            parts.append(f"{mb:.1f} of {self.total_bytes / 1e6:.1f} MB" if self.total_bytes else f"{mb:.1f} MB")
        fraction = (self.bytes / self.total_bytes if self.total_bytes
                    else self.rows / self.total_rows if self.total_rows else None)
        if fraction is not None and not final:
            parts[-1] += f" ({min(fraction, 1.0):.0%})"
        parts.append(f"{self.rows / elapsed:,.0f} rows/s")
        if self.bytes:
            parts.append(f"{self.bytes / 1e6 / elapsed:.1f} MB/s")
        if final:
            parts.append(f"in {human_seconds(elapsed)}")
        elif fraction:
            parts.append(f"ETA {human_seconds(elapsed * (1 - min(fraction, 1.0)) / fraction)}")
        return f"{self.what}: " + ", ".join(parts)
