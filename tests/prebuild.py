"""Build the Go-built test servers in the background while the tests that need none of them run.

The S3 server, the cluster tier (its binaries and the project's images) and the KFP API server take
minutes to tens of minutes each to build on a new machine. Their plugins queue a build in
``pytest_collection_finish`` when a selected test needs it. After collection one builder process,
forked from the session before any test runs (so no test's environment variables, working directory
or patches reach the builds), runs the queued builds one after another (:attr:`Prebuild.rank`
order) :data:`NICE` nicer than the tests, and the tests are reordered: those needing no build first,
then those needing the S3 server, then the cluster tier's, then the KFP server's
(:meth:`Builds.order`). Before a test that needs a build starts, and before its timeout starts
counting, :meth:`Builds.wait_for` waits for the build and prints its log. The fixtures then skip (no
Go), fail (the build failed) or use what was built (:meth:`Prebuild.result`).

Why: built first and in the foreground, the builds held every test back for ~30 minutes of a cold
CI run, while the default tier's tests (one at a time, many of them waiting) left a core idle.
"""
from __future__ import annotations

import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any, Callable, List, Optional, Tuple, Type

import pytest

__all__ = ["Prebuild", "Builds", "BUILDS", "NICE"]

#: How much nicer than the session the builds run: a test's processes (a Paddle gang, the cluster's
#: servers) get the CPU first.
NICE = 10


class Prebuild:
    """One server's build across a pytest session.

    Args:
        label: the prefix of its progress lines (``minicluster``, ``s3server``, ...).
        what: what is built, as the progress and failure lines name it.
        no_go: why its tests are skipped without the ``go`` tool.
        rank: the builds run in this order, and the tests needing a build run in the order of the
            last build they need.
        needs: whether a collected test needs this build.
        builds: the session's builds this one is run with (:data:`BUILDS`).
    """

    def __init__(self, label: str, what: str, no_go: str, rank: int, needs: Callable[[Any], bool],
                 builds: Optional["Builds"] = None):
        self.label, self.what, self.no_go, self.rank, self.needs = label, what, no_go, rank, needs
        self.skip: Optional[str] = None
        self.error: Optional[str] = None
        self.value: Any = None
        self.seconds: Optional[float] = None
        self.log: Optional[Path] = None
        self._job: Optional[Tuple[str, str, Callable[[IO[str]], Any], Tuple[Type[BaseException], ...]]] = None
        self._done = threading.Event()
        self._shown = False
        (BUILDS if builds is None else builds).all.append(self)

    def build(self, session: Any, preparing: str, ready: str, build: Callable[[IO[str]], Any],
              errors: Tuple[Type[BaseException], ...], reason: Optional[str] = None) -> None:
        """Queue ``build(stream)``, run by :meth:`Builds.start`'s process; ``reason``, or no ``go``
        tool, skips the tests that need it instead."""
        reason = reason or (self.no_go if shutil.which("go") is None else None)
        if reason is not None:
            self.skip = reason
            self._done.set()
            return
        self._job = (preparing, ready, build, errors)

    @property
    def queued(self) -> bool:
        return self._job is not None and not self._done.is_set()

    def run(self) -> Tuple[Any, Optional[str], float]:
        """Run the queued build, its output into :attr:`log` (in the builder process): what it built,
        why it failed, how long it took."""
        assert self._job is not None and self.log is not None
        preparing, ready, build, errors = self._job
        value, error, t0 = None, None, time.monotonic()
        with open(self.log, "w") as stream:
            print(f"{self.label}: {preparing}", file=stream, flush=True)
            try:
                value = build(stream)
            except errors as exc:
                error = str(exc)
            except Exception as exc:                # never leave a waiting test hanging
                error = f"{type(exc).__name__}: {exc}"
            seconds = time.monotonic() - t0
            print(f"{self.label}: {ready} after {seconds:.0f}s", file=stream, flush=True)
        return value, error, seconds

    def finish(self, value: Any, error: Optional[str], seconds: Optional[float]) -> None:
        """Record the build's outcome (in the session) and release the tests waiting for it."""
        self.value, self.error, self.seconds = value, error, seconds
        self._done.set()

    def wait(self, config: Any) -> None:
        """Wait for the build, then print its log once (output capture suspended)."""
        if self._job is None or self._shown:
            return
        capman = config.pluginmanager.getplugin("capturemanager")
        t0 = time.monotonic()
        if not self._done.is_set():
            with capman.global_and_fixture_disabled():
                print(f"\n{self.label}: waiting for {self.what} to build (its log: {self.log})", file=sys.stderr,
                      flush=True)
            self._done.wait()
        self._shown = True
        text = self.log.read_text(errors="replace").rstrip() if self.log and self.log.exists() else ""
        with capman.global_and_fixture_disabled():
            print("\n" + text, file=sys.stderr)
            print(f"{self.label}: built in the background in {self.seconds or 0:.0f}s; the tests waited "
                  f"{time.monotonic() - t0:.0f}s for it", file=sys.stderr, flush=True)

    def result(self, fallback: Callable[[], Any]) -> Any:
        """For a fixture: skip or fail as the build went, else what it built (``fallback()`` when the
        hook did not run, e.g. the tests were collected through another path)."""
        if self._job is not None:
            self._done.wait()
        if self.skip is not None:
            pytest.skip(self.skip)
        if self.error is not None:
            pytest.fail(f"building {self.what} failed: {self.error}")
        if self.value is None:
            self.value = fallback()
        return self.value


def _interrupted(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt        # a build script's runner stops its process group on the way out


def _build_all(queued: List[Prebuild], out: Any) -> None:
    """The builder process: the builds one after another, each outcome sent to the session as it
    comes; SIGTERM stops the build running and the rest."""
    signal.signal(signal.SIGTERM, _interrupted)
    os.nice(NICE)
    try:
        for b in queued:
            out.send((b.label, *b.run()))
    except KeyboardInterrupt:
        pass
    finally:
        out.close()


class Builds:
    """A session's builds: the order of its tests, one builder process, the waits; each build's log
    in ``log_dir`` (default: the temporary directory)."""

    def __init__(self, log_dir: Optional[Path] = None) -> None:
        self.log_dir = log_dir
        self.all: List[Prebuild] = []
        self.process: Optional[Any] = None
        self._collector: Optional[threading.Thread] = None

    def rank(self, item: Any) -> int:
        """The rank of the last build ``item`` needs (0: none)."""
        return max((b.rank for b in self.all if b.needs(item)), default=0)

    def order(self, items: List[Any]) -> None:
        """Reorder ``items`` in place: those needing no build first, then by the last build they need
        (a stable sort: each group keeps its collected order)."""
        items.sort(key=self.rank)

    def start(self) -> None:
        """Fork the builder process (before any test has changed the session) and a thread that
        records each build's outcome as it arrives."""
        queued = sorted((b for b in self.all if b.queued), key=lambda b: b.rank)
        if not queued or self.process is not None:
            return
        for b in queued:
            fd, name = tempfile.mkstemp(prefix=f"ctr-volcano-{b.label}-", suffix=".log", dir=self.log_dir)
            os.close(fd)
            b.log = Path(name)
        ctx = multiprocessing.get_context("fork")
        reader, writer = ctx.Pipe(duplex=False)
        # a daemon: should the session exit without stop(), multiprocessing terminates it (SIGTERM)
        self.process = ctx.Process(target=_build_all, args=(queued, writer), name="prebuild", daemon=True)
        self.process.start()
        writer.close()
        self._collector = threading.Thread(target=self._collect, args=(queued, reader), name="prebuild", daemon=True)
        self._collector.start()

    def _collect(self, queued: List[Prebuild], reader: Any) -> None:
        by_label = {b.label: b for b in queued}
        while True:
            try:
                label, value, error, seconds = reader.recv()
            except (EOFError, OSError):
                break
            by_label[label].finish(value, error, seconds)
        assert self.process is not None
        self.process.join()
        for b in queued:
            if not b._done.is_set():
                b.finish(None, f"the builder process ended (exit code {self.process.exitcode}) before this build "
                               f"finished (its log: {b.log})", None)

    def wait_for(self, item: Any) -> None:
        """Before ``item`` runs: wait for every build it needs."""
        for b in sorted(self.all, key=lambda b: b.rank):
            if b.needs(item):
                b.wait(item.config)

    def stop(self) -> None:
        """At the session's end: stop a build still running (its tests were deselected or not reached)."""
        if self.process is not None and self.process.is_alive():
            self.process.terminate()
            self.process.join(timeout=60)
            if self.process.is_alive():
                self.process.kill()
                self.process.join(timeout=10)
        if self._collector is not None:
            self._collector.join(timeout=10)


#: This pytest session's builds.
BUILDS = Builds()
