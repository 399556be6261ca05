"""Build the Go-built test servers in the background while the tests that need none of them run.

The S3 server, the cluster tier (its binaries and the project's images) and the KFP API server take
minutes to tens of minutes each to build on a new machine. Their plugins register a build in
``pytest_collection_finish`` when a selected test needs it; after collection one builder thread runs
the registered builds one after another (in :attr:`Prebuild.rank` order), at a lower CPU priority
than the tests, and the tests are reordered so that those needing no build run first, then those
needing the S3 server, then the cluster tier's, then the KFP server's (:meth:`Builds.order`). Before
a test that needs a build starts, and before its timeout starts counting, :meth:`Builds.wait_for`
waits for the build and prints its log. The fixtures then skip (no Go), fail (the build failed) or use what was
built (:meth:`Prebuild.result`).

Why: built first and in the foreground, the builds held every test back for ~30 minutes of a cold
CI run, while the default tier's tests (single-process pytest, many waits) left CPU idle.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any, Callable, List, Optional, Tuple, Type

import pytest

__all__ = ["Prebuild", "Builds", "BUILDS", "NICE"]

#: The builds' nice value, above the session's: a test's processes (a Paddle gang, the cluster's servers)
#: get the CPU first.
NICE = 10

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import procgroup  # noqa: E402  (tools/ is not a package)


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
        self._job: Optional[Tuple[str, str, Callable[[IO[str]], Any], Tuple[Type[BaseException], ...]]] = None
        self._done = threading.Event()
        self._log: Optional[Path] = None
        self._shown = False
        self.builds = BUILDS if builds is None else builds
        self.builds.all.append(self)

    def build(self, session: Any, preparing: str, ready: str, build: Callable[[IO[str]], Any],
              errors: Tuple[Type[BaseException], ...], reason: Optional[str] = None) -> None:
        """Queue ``build(stream)``, run by :meth:`Builds.start`'s thread; ``reason``, or no ``go``
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

    def run(self) -> None:
        """Run the queued build, its output into a log file (in the builder thread)."""
        assert self._job is not None
        preparing, ready, build, errors = self._job
        fd, name = tempfile.mkstemp(prefix=f"ctr-volcano-{self.label}-", suffix=".log", dir=self.builds.log_dir)
        self._log = Path(name)
        t0 = time.monotonic()
        with os.fdopen(fd, "w") as stream:
            print(f"{self.label}: {preparing}", file=stream, flush=True)
            try:
                self.value = build(stream)
            except errors as exc:
                self.error = str(exc)
            except BaseException as exc:            # never leave a waiting test hanging
                self.error = f"{type(exc).__name__}: {exc}"
            self.seconds = time.monotonic() - t0
            print(f"{self.label}: {ready} after {self.seconds:.0f}s", file=stream, flush=True)
        self._done.set()

    def wait(self, config: Any) -> None:
        """Wait for the build, then print its log once (output capture suspended)."""
        if self._job is None or self._shown:
            return
        capman = config.pluginmanager.getplugin("capturemanager")
        t0 = time.monotonic()
        if not self._done.is_set():
            with capman.global_and_fixture_disabled():
                print(f"\n{self.label}: waiting for {self.what} to build (its log: {self._log or 'not started'})",
                      file=sys.stderr, flush=True)
            self._done.wait()
        self._shown = True
        with capman.global_and_fixture_disabled():
            print("\n" + (self._log.read_text(errors="replace").rstrip() if self._log else ""), file=sys.stderr)
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


class Builds:
    """A session's builds: the order of its tests, one builder thread, the waits; each build's log
    in ``log_dir`` (default: the temporary directory)."""

    def __init__(self, log_dir: Optional[Path] = None) -> None:
        self.log_dir = log_dir
        self.all: List[Prebuild] = []
        self.thread: Optional[threading.Thread] = None

    def rank(self, item: Any) -> int:
        """The rank of the last build ``item`` needs (0: none)."""
        return max((b.rank for b in self.all if b.needs(item)), default=0)

    def order(self, items: List[Any]) -> None:
        """Reorder ``items`` in place: those needing no build first, then by the last build they need
        (a stable sort: each group keeps its collected order)."""
        items.sort(key=self.rank)

    def start(self) -> None:
        """Run the queued builds one after another in a thread :data:`NICE` nicer than the session
        (the builds' processes inherit the thread's priority)."""
        queued = sorted((b for b in self.all if b.queued), key=lambda b: b.rank)
        if not queued or self.thread is not None:
            return

        def builder() -> None:
            me = threading.get_native_id()
            os.setpriority(os.PRIO_PROCESS, me, min(os.getpriority(os.PRIO_PROCESS, me) + NICE, 19))
            for b in queued:
                b.run()
        self.thread = threading.Thread(target=builder, name="prebuild", daemon=True)
        self.thread.start()

    def wait_for(self, item: Any) -> None:
        """Before ``item`` runs: wait for every build it needs."""
        for b in sorted(self.all, key=lambda b: b.rank):
            if b.needs(item):
                b.wait(item.config)

    def stop(self) -> None:
        """At the session's end: stop a build still running (its tests were deselected or not reached)."""
        if self.thread is not None and self.thread.is_alive() and self.thread.ident is not None:
            procgroup.stop_builds(self.thread.ident)
            self.thread.join(timeout=300)


#: This pytest session's builds.
BUILDS = Builds()
