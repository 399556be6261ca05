"""The log of a ``kfp.local`` run: every line kept in a file, the terminal told only what a user needs.

Why: a pipeline run prints hundreds of lines (kfp's executor inputs, its UserWarnings, the training
gang's progress), and a failed step's own one-line error used to sit a hundred lines above the end
of a traceback. :class:`RunLog` copies the run's output to ``RUN_DIR/run.log`` (echoing it with
``-v``), reports each step as it finishes, and :func:`step_error` reads the failed step's error
back from that file as an error of the step's own family (``BadInput`` stays a bad input, exit 2),
in one line that names the file for the detail.
"""
from __future__ import annotations

import importlib
import logging
import re
import sys
import threading
import time
from pathlib import Path
from typing import IO, Callable, Dict, List, Optional, Tuple

from ctr_volcano.errors import BadInput, CtrError, JobFailed, TransientError

__all__ = ["RunLog", "LOG_FILE", "StepBadInput", "StepOutage", "LocalRunFailed", "step_error",
           "failed_step_exception"]

logger = logging.getLogger(__name__)

LOG_FILE = "run.log"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_STARTED = re.compile(r"Executing task '([^']+)'")
_FINISHED = re.compile(r"Task '([^']+)' finished with status (\w+)")
_EXCEPTION = re.compile(r"([A-Za-z_][\w.]*)(?::\s?(.*))?$")


class LocalRunFailed(JobFailed):
    """A ``kfp.local`` run failed other than by a step's bad input or outage: names the step (or the
    run) and the log file."""

    what = "local pipeline run"


class StepBadInput(BadInput):
    """A step refused its input: the step's own ``BadInput`` line, as its log reported it."""

    def __init__(self, task: str, message: str, log: str):
        self.task, self.log = task, log
        field, _, rest = message.partition("=")
        self.field, self.value, self.fix = field, None, rest
        ValueError.__init__(self, f"step {task}: {message} (detail: {log})")


class StepOutage(TransientError):
    """A step gave up on an infrastructure outage (its ``TransientError``)."""

    def __init__(self, task: str, message: str, log: str):
        self.task, self.log = task, log
        super().__init__(f"step {task}: {message} (detail: {log})")


class RunLog:
    """Copy a child's output, line by line, to ``path`` (ANSI colours stripped); echo it to ``echo``
    when given; log each finished step. Use as ``RunLog(path).follow(stream)``, then :meth:`join`."""

    def __init__(self, path: Path, echo: Optional[IO[str]] = None,
                 on_step: Optional[Callable[[str, str, float], None]] = None):
        self.path = path
        self.echo = echo
        self.on_step = on_step or _log_step
        self._started: Dict[str, float] = {}
        self._thread: Optional[threading.Thread] = None

    def follow(self, stream: IO[str]) -> "RunLog":
        self._thread = threading.Thread(target=self._copy, args=(stream,), name="run-log", daemon=True)
        self._thread.start()
        return self

    def join(self, timeout: Optional[float] = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def _copy(self, stream: IO[str]) -> None:
        with open(self.path, "a", encoding="utf-8") as out:
            for line in iter(stream.readline, ""):
                clean = _ANSI.sub("", line)
                out.write(clean)
                out.flush()
                if self.echo is not None:
                    self.echo.write(line)
                    self.echo.flush()
                self._event(clean)

    def _event(self, line: str) -> None:
        started = _STARTED.search(line)
        if started:
            self._started[started.group(1)] = time.monotonic()
            return
        finished = _FINISHED.search(line)
        if finished:
            task, status = finished.groups()
            self.on_step(task, status, time.monotonic() - self._started.get(task, time.monotonic()))


def _log_step(task: str, status: str, seconds: float) -> None:
    if task != "importer":
        logger.info("step %s: %s in %.0f s", task, status.lower(), seconds)


def _task_lines(lines: List[str], task: Optional[str]) -> List[str]:
    """The lines of ``task``'s section of the log (from its start to its end), else all of them."""
    if task is None:
        return lines
    start = max((i for i, ln in enumerate(lines) if f"Executing task '{task}'" in ln), default=0)
    end = next((i for i in range(start, len(lines)) if f"Task '{task}' finished" in lines[i]), len(lines))
    return lines[start:end + 1]


def failed_step_exception(text: str, task: Optional[str] = None) -> Optional[Tuple[str, str]]:
    """``(exception class, first line of its message)`` of the last traceback in ``task``'s part of
    the log ``text`` (the whole log when ``task`` is ``None``); ``None`` when there is none."""
    lines = _task_lines(text.splitlines(), task)
    starts = [i for i, ln in enumerate(lines) if ln.strip() == "Traceback (most recent call last):"]
    if not starts:
        return None
    indent = len(lines[starts[-1]]) - len(lines[starts[-1]].lstrip())
    for line in lines[starts[-1] + 1:]:
        if line.strip() and len(line) - len(line.lstrip()) == indent:
            found = _EXCEPTION.match(line.strip())
            if found:
                return found.group(1), (found.group(2) or "").strip()
    return None


def _family(class_path: str) -> type:
    """The error family of the exception class named ``class_path`` (our own modules only)."""
    module, _, name = class_path.rpartition(".")
    if not module.startswith(("ctr_model", "ctr_volcano", "components")):
        return JobFailed
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return JobFailed
    return next((f for f in (BadInput, TransientError) if isinstance(cls, type) and issubclass(cls, f)), JobFailed)


def step_error(log: Path, task: Optional[str], fallback: str) -> CtrError:
    """The error to raise for a run whose step ``task`` failed (``None``: the run itself), read from
    the log file ``log``: the step's own exception, in its family, in one line naming ``log``."""
    text = log.read_text(encoding="utf-8", errors="replace") if log.is_file() else ""
    found = failed_step_exception(text, task)
    where = task or "the run"
    if found is None:
        return LocalRunFailed(where, "Failed", f"{fallback} (detail: {log})")
    class_path, message = found
    family = _family(class_path)
    if family is BadInput:
        return StepBadInput(where, message, str(log))
    if family is TransientError:
        return StepOutage(where, message, str(log))
    return LocalRunFailed(where, "Failed", f"{class_path.rpartition('.')[2]}: {message} (detail: {log})")


def echo_stream(verbose: bool) -> Optional[IO[str]]:
    """Where a run's output is echoed: stderr with ``-v``, nowhere without."""
    return sys.stderr if verbose else None
