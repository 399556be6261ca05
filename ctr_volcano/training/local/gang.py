"""The local gang backend: a supervised PS gang of real processes on 127.0.0.1.

It emulates what a Volcano Job with the ``svc`` and ``env`` plugins gives each pod (host files, the
``VC_*`` variables, :func:`ctr_model.contract.role_env`), so a local run exercises exactly the
production entrypoint, and it adds the supervision Paddle lacks (a pserver that cannot bind exits 0;
pservers never exit by themselves; trainers hang forever when a pserver dies):

* all roles start together, each in its own process group (its own session);
* any role failing (a trainer exiting non-zero, a pserver exiting at all before the trainers are done,
  or a trainer making no progress for ``stall_timeout_s``) tears the whole gang down and restarts it,
  up to ``max_retry`` times, like ``PodFailed -> RestartJob``; then :class:`TrainingJobFailed` names
  the role, its exit code and its log tail. A role's exit code is read as on Volcano, with
  :func:`~ctr_volcano.errors.family_of_exit`: 2 (the role refused its input) fails at once, without a
  restart (``TerminateJob``); 75 (an outage outlived the role's retries) and any other code restart
  the gang, and the final error keeps the last role's exit code, so it reports an outage as one;
* all trainers succeeded -> pservers stopped -> success (``TaskCompleted -> CompleteJob``);
* SIGINT/SIGTERM and every error path reap every child process group; if the supervisor itself is
  SIGKILLed, a small reaper process kills every process carrying the gang's marker variable.

Progress, for the watchdog, is any growth of a trainer's log (the trainers print progress lines
every few seconds while their examples count moves).
"""
from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Dict, List, Mapping, Optional, Tuple

from ctr_model.checks import is_int, is_positive
from ctr_model.contract import (
    ENV_CACHE_DIR,
    ENV_SCRATCH_DIR,
    ENV_VOLCANO_DIR,
    PSERVER,
    TRAINER,
    GangContract,
    host_file_contents,
    role_env,
    volcano_plugin_env,
)
from ctr_volcano.errors import (
    BadInput,
    Interrupted,
    JobFailed,
    TrainingJobFailed,
    TransientError,
    family_of,
    family_of_exit,
)

if TYPE_CHECKING:
    from ctr_model.workspace import Workspace

__all__ = ["GANG_MARKER_ENV", "GangSpec", "GangResult", "LocalGang", "find_free_ports",
           "gang_processes", "processes_with_env"]

#: Every process of a local gang carries this variable (value = the gang's run id), so tests and
#: operators can find the gang's processes by scanning ``/proc``.
GANG_MARKER_ENV = "CTR_LOCAL_GANG_ID"

_LOCALHOST = "127.0.0.1"
#: How the pod entrypoint's log lines name their logger (``ctr_model.logs.LOG_FORMAT``): such lines
#: of the trainers are forwarded to the supervisor's log, so the step log shows training progress.
_ENTRYPOINT_LOGGER = " ctr_model.train: "

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class GangSpec:
    """What to run.

    Attributes:
        job_id: gang name (shown in errors; passed as ``CTR_JOB_ID``).
        pservers: number of pserver processes.
        trainers: number of trainer processes.
        data_dir: prep output (or split dir).
        output_dir: shared output dir (checkpoints, model, metrics).
        workdir: logs and host files go to ``workdir/attempt-N/``.
        train_config: the ``TrainConfig`` dict every role receives.
        max_retry: restarts after the first attempt before failing for good.
        stall_timeout_s: a trainer whose log does not grow for this long fails the attempt.
        finish_timeout_s: how long pservers may take to exit after the trainers succeeded.
        command: the pod command (defaults to ``python -m ctr_model.train``).
        extra_env: added to every role's environment.
        init_model: exported model the gang warm-starts from (``CTR_INIT_MODEL``); ``None``: scratch.
    """

    job_id: str
    pservers: int
    trainers: int
    data_dir: str
    output_dir: str
    workdir: str
    train_config: Mapping[str, object] = field(default_factory=dict)
    max_retry: int = 2
    stall_timeout_s: float = 300.0
    finish_timeout_s: float = 30.0
    command: Tuple[str, ...] = ()
    extra_env: Mapping[str, str] = field(default_factory=dict)
    init_model: Optional[str] = None

    def __post_init__(self) -> None:
        from ctr_volcano.errors import BadInput

        for name in ("pservers", "trainers"):
            value = getattr(self, name)
            if not is_int(value, 1, 64):
                raise BadInput(name, value, "use an integer in 1..64")
        if not is_int(self.max_retry, 0):
            raise BadInput("max_retry", self.max_retry, "use an integer >= 0")
        if not is_positive(self.stall_timeout_s):
            raise BadInput("stall_timeout_s", self.stall_timeout_s, "use a positive number of seconds")


@dataclass(frozen=True)
class GangResult:
    """A successful gang run."""

    attempts: int
    seconds: float
    logs: Dict[str, str]


@dataclass
class _Proc:
    name: str
    role: str
    popen: subprocess.Popen
    log_path: str
    last_size: int = 0
    last_change: float = 0.0
    forwarded: int = 0          # bytes of the log already forwarded to the supervisor's log


class _Interrupted(BaseException):
    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def find_free_ports(count: int, consecutive: int = 1) -> List[int]:
    """``count`` free TCP ports on 127.0.0.1; the first ``consecutive`` of them form a block."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind((_LOCALHOST, 0))
            base = s.getsockname()[1]
        if base + consecutive > 65000:
            continue
        block = list(range(base, base + consecutive))
        if all(_free(p) for p in block):
            rest: List[int] = []
            while len(rest) < count - consecutive:
                with socket.socket() as s:
                    s.bind((_LOCALHOST, 0))
                    p = s.getsockname()[1]
                if p not in block and p not in rest:
                    rest.append(p)
            return block + rest
    raise RuntimeError("no block of free ports found on 127.0.0.1")


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((_LOCALHOST, port))
        except OSError:
            return False
    return True


def _live_processes(match: Callable[[List[bytes]], bool]) -> List[int]:
    """PIDs of live (non-zombie) processes whose environment (``NAME=value`` items) satisfies ``match``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                env = fh.read().split(b"\0")
            with open(f"/proc/{entry}/stat", "rb") as fh:
                state = fh.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if state != b"Z" and match(env):
            found.append(int(entry))
    return found


def processes_with_env(*items: str) -> List[int]:
    """PIDs of live processes whose environment holds every ``NAME=value`` item given."""
    wanted = [item.encode() for item in items]
    return _live_processes(lambda env: all(w in env for w in wanted))


def gang_processes(gang_id: Optional[str] = None) -> List[int]:
    """PIDs of live processes carrying :data:`GANG_MARKER_ENV` (for one gang id, or any)."""
    if gang_id is not None:
        return processes_with_env(f"{GANG_MARKER_ENV}={gang_id}")
    prefix = f"{GANG_MARKER_ENV}=".encode()
    return _live_processes(lambda env: any(item.startswith(prefix) for item in env))


def _tail(path: str, lines: int = 40) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 16384))
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _error_line(path: str) -> str:
    """The last ``error:`` line of a role's log (the entrypoint prints one before a failing exit)."""
    lines = [line for line in _tail(path, 200).splitlines() if "error:" in line]
    return lines[-1].split("error:", 1)[1].strip() if lines else "see its log"


_REAPER = """
import os, signal, sys, time
from ctr_volcano.training.local.gang import gang_processes
parent, gang = int(sys.argv[1]), sys.argv[2]
while True:
    time.sleep(0.5)
    if os.getppid() != parent:
        break
for _ in range(3):
    for pid in gang_processes(gang):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    time.sleep(0.3)
"""


class LocalGang:
    """Runs one :class:`GangSpec` to completion (see the module docstring for the semantics)."""

    def __init__(self, spec: GangSpec, log: Optional[Callable[[str], None]] = None):
        self.spec = spec
        self.log = log or logger.info
        self.gang_id = f"{spec.job_id}-{uuid.uuid4().hex[:8]}"
        self._procs: List[_Proc] = []
        self._t_attempt = 0.0
        self._caches: List[str] = []
        self._workspace: Optional["Workspace"] = None   # of spec.output_dir, opened on use

    # -- public -----------------------------------------------------------------------------------
    def run(self) -> GangResult:
        """Run attempts until success or ``max_retry`` is exhausted.

        Raises:
            TrainingJobFailed: the last attempt failed (role, exit code, log tail attached).
            Interrupted: on SIGINT/SIGTERM, after every child was reaped (a ``KeyboardInterrupt``).
        """
        t_start = time.time()
        handlers = self._install_signal_handlers()
        # If this process is SIGKILLed nothing here runs: a tiny reaper (its own session, so a
        # Ctrl-C of the terminal does not hit it) then kills every process carrying the gang marker.
        reaper = subprocess.Popen([sys.executable, "-c", _REAPER, str(os.getpid()), self.gang_id],
                                  stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            failure: Optional[TrainingJobFailed] = None
            for attempt in range(1, self.spec.max_retry + 2):
                try:
                    logs = self._attempt(attempt)
                    return GangResult(attempts=attempt, seconds=time.time() - t_start, logs=logs)
                except TrainingJobFailed as exc:
                    failure = exc
                    if family_of(exc) is BadInput:   # deterministic: another attempt fails the same way
                        raise
                    more = attempt <= self.spec.max_retry
                    self.log(f"gang {self.gang_id}: attempt {attempt} failed: {exc.reason} "
                             f"(role {exc.role}, exit code {exc.exit_code})"
                             + ("; restarting the whole gang" if more else ""))
                finally:
                    self._teardown()
            assert failure is not None
            raise TrainingJobFailed(
                self.spec.job_id, failure.phase,
                f"{failure.reason}; gave up after {self.spec.max_retry + 1} attempt(s)",
                role=failure.role, exit_code=failure.exit_code, log_tail=failure.log_tail,
                details={**failure.details, "attempts": self.spec.max_retry + 1})
        except _Interrupted as exc:
            self._teardown()
            raise Interrupted(exc.signum, f"gang {self.gang_id} torn down") from None
        finally:
            self._teardown()
            self._restore_signal_handlers(handlers)
            reaper.kill()
            reaper.wait()

    # -- one attempt ----------------------------------------------------------------------------
    def _attempt(self, attempt: int) -> Dict[str, str]:
        spec = self.spec
        adir = os.path.join(spec.workdir, f"attempt-{attempt}")
        vdir = os.path.join(adir, "volcano")
        os.makedirs(vdir, exist_ok=True)
        ports = find_free_ports(spec.pservers + 1, consecutive=spec.pservers)
        hosts = {PSERVER: [_LOCALHOST] * spec.pservers, TRAINER: [_LOCALHOST] * spec.trainers}
        for task, task_hosts in hosts.items():
            with open(os.path.join(vdir, f"{task}.host"), "w", encoding="utf-8") as fh:
                fh.write(host_file_contents(task_hosts))
        contract = GangContract(job_id=spec.job_id, pservers=spec.pservers, trainers=spec.trainers,
                                data_dir=spec.data_dir, output_dir=spec.output_dir,
                                ps_port=ports[0], ps_port_stride=1, gloo_port=ports[-1],
                                train_config=dict(spec.train_config), volcano_dir=vdir,
                                init_model=spec.init_model)
        command = list(spec.command) or [sys.executable, "-m", "ctr_model.train"]
        base_env = {k: v for k, v in os.environ.items()
                    if not (k.startswith(("VC_", "VK_", "CTR_", "PADDLE_")) or k in (
                        "TRAINING_ROLE", "POD_IP"))}
        base_env.update(spec.extra_env)
        base_env["PYTHONUNBUFFERED"] = "1"
        # trainers' slot-text cache: inside the attempt dir, so a killed trainer's cache is removed
        base_env[ENV_CACHE_DIR] = os.path.join(adir, "cache")
        self._caches.append(base_env[ENV_CACHE_DIR])
        # object-store runs: each role's scratch (its working copy of the outputs), removed likewise
        if ENV_SCRATCH_DIR not in base_env:
            base_env[ENV_SCRATCH_DIR] = os.path.join(adir, "scratch")
            self._caches.append(base_env[ENV_SCRATCH_DIR])
        self.log(f"gang {self.gang_id}: attempt {attempt}: {spec.pservers} pserver(s) on ports "
                 f"{ports[:-1]}, {spec.trainers} trainer(s); logs in {adir}")
        now = time.time()
        self._t_attempt = now - 1.0
        for role, count in ((PSERVER, spec.pservers), (TRAINER, spec.trainers)):
            for index in range(count):
                env = dict(base_env)
                env.update(volcano_plugin_env(role, index, hosts))
                env.update(role_env(contract, role))
                env[ENV_VOLCANO_DIR] = vdir
                env[GANG_MARKER_ENV] = self.gang_id
                name = f"{role}-{index}"
                log_path = os.path.join(adir, f"{name}.log")
                with open(log_path, "wb") as out:
                    popen = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL, start_new_session=True,
                                             cwd=adir)
                self._procs.append(_Proc(name, role, popen, log_path, 0, now))
        self._supervise(attempt)
        return {p.name: p.log_path for p in self._procs}

    def _forward(self, proc: _Proc) -> None:
        """Log the entrypoint's new complete lines from ``proc``'s log (Paddle's own output stays there)."""
        try:
            with open(proc.log_path, "rb") as fh:
                fh.seek(proc.forwarded)
                chunk = fh.read(1 << 20)
        except OSError:
            return
        end = chunk.rfind(b"\n")
        if end < 0:
            return
        proc.forwarded += end + 1
        for line in chunk[:end].decode("utf-8", "replace").splitlines():
            if _ENTRYPOINT_LOGGER in line:
                self.log(f"gang {self.gang_id}: {line.split(_ENTRYPOINT_LOGGER, 1)[1]}")

    def _stopped_by_trainer0(self) -> bool:
        from ctr_model.workspace import open_workspace, stop_written_since

        if self._workspace is None:
            try:
                self._workspace = open_workspace(self.spec.output_dir,
                                                 {**os.environ, **self.spec.extra_env})
            except TransientError:   # the store is down: the pserver's exit counts as a failure
                return False
        return stop_written_since(self._workspace, self._t_attempt)

    def _fail(self, phase: str, proc: _Proc, reason: str, code: Optional[int]) -> TrainingJobFailed:
        return TrainingJobFailed(self.spec.job_id, phase, reason, role=proc.name, exit_code=code,
                                 log_tail=_tail(proc.log_path),
                                 details={"gang_id": self.gang_id, "log": proc.log_path})

    def _exited(self, proc: _Proc, code: int) -> TrainingJobFailed:
        """The failure of a role that exited with ``code`` (not 0), by the code's family."""
        family = family_of_exit(code)
        if family is BadInput:
            return self._fail("BadInput", proc, f"{proc.name} refused its input: {_error_line(proc.log_path)}", code)
        if family is JobFailed:
            return self._fail("Failed", proc, f"{proc.name} exited with code {code}", code)
        return self._fail("Failed", proc, f"{proc.name} gave up on an outage (exit code {code}): "
                                          f"{_error_line(proc.log_path)}", code)

    def _supervise(self, attempt: int) -> None:
        spec = self.spec
        trainers = [p for p in self._procs if p.role == TRAINER]
        pservers = [p for p in self._procs if p.role == PSERVER]
        while True:
            time.sleep(0.2)
            now = time.time()
            for p in trainers + pservers:   # a role's own error exit (2, 75), or a trainer's failure
                code = p.popen.poll()
                if code and (family_of_exit(code) is not JobFailed or p.role == TRAINER):
                    raise self._exited(p, code)
            trainers_done = all(p.popen.poll() == 0 for p in trainers)
            if trainers_done:
                for p in trainers:
                    self._forward(p)
            for p in pservers:
                code = p.popen.poll()
                if code == 0 and self._stopped_by_trainer0():
                    continue          # the clean shutdown: trainer 0 stopped the pservers
                if code is not None and not (trainers_done and code == 0):
                    why = ("exited with code 0 before the trainers finished (port taken? see its log)"
                           if code == 0 else f"exited with code {code}")
                    raise self._fail("Failed", p, f"{p.name} {why}", code)
            if trainers_done:
                break
            for p in trainers:
                if p.popen.poll() is not None:
                    continue
                try:
                    size = os.path.getsize(p.log_path)
                except OSError:
                    size = p.last_size
                if size != p.last_size:
                    p.last_size, p.last_change = size, now
                    self._forward(p)
                elif now - p.last_change > spec.stall_timeout_s:
                    raise self._fail("Stalled", p, f"{p.name} made no progress for "
                                     f"{spec.stall_timeout_s:.0f}s (a pserver or peer may be hung)",
                                     None)
        deadline = time.time() + spec.finish_timeout_s
        while time.time() < deadline:
            if all(p.popen.poll() is not None for p in pservers):
                break
            time.sleep(0.2)
        for p in pservers:
            code = p.popen.poll()
            if code not in (0, None):
                raise self._fail("Failed", p, f"{p.name} exited with code {code} at shutdown", code)
        # pservers still running after the trainers succeeded are stopped (CompleteJob semantics)

    # -- cleanup --------------------------------------------------------------------------------
    def _teardown(self) -> None:
        procs = list(self._procs)   # cleared only at the end: an interrupted teardown is redone whole
        for sig, wait_s in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 5.0)):
            for p in procs:
                try:
                    os.killpg(p.popen.pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
            deadline = time.time() + wait_s
            while time.time() < deadline:
                if all(p.popen.poll() is not None for p in procs) and not gang_processes(self.gang_id):
                    break
                time.sleep(0.1)
        for p in procs:
            try:
                p.popen.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        # grandchildren that left the process group (none expected) are killed by marker
        for pid in gang_processes(self.gang_id):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        import shutil

        for cache in self._caches:
            shutil.rmtree(cache, ignore_errors=True)
        self._procs = []

    def _install_signal_handlers(self):
        import threading

        if threading.current_thread() is not threading.main_thread():
            return None

        def handler(signum, _frame):
            # one interruption is enough: a second signal must not cut the teardown short
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, signal.SIG_IGN)
            raise _Interrupted(signum)

        return {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}

    @staticmethod
    def _restore_signal_handlers(handlers) -> None:
        if handlers:
            for sig, old in handlers.items():
                signal.signal(sig, old)
