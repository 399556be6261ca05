"""Build a Go-built test server once, before the first test that needs it.

The cluster tier, the S3 server and the KFP API server each build their binaries in
``pytest_collection_finish`` rather than in a fixture, so a cold build (minutes to tens of minutes)
is not counted against the per-test timeout and its progress is printed live (output capture
suspended). Their fixtures then skip (no Go), fail (the build failed) or use what was built.
"""
from __future__ import annotations

import shutil
import sys
import time
from typing import Any, Callable, Optional, Tuple, Type

import pytest

__all__ = ["Prebuild"]


class Prebuild:
    """One server's build state across a pytest session.

    Args:
        label: the prefix of its progress lines (``minicluster``, ``s3server``, ...).
        what: what is built, as the progress and failure lines name it.
        no_go: why its tests are skipped without the ``go`` tool.
    """

    def __init__(self, label: str, what: str, no_go: str):
        self.label, self.what, self.no_go = label, what, no_go
        self.skip: Optional[str] = None
        self.error: Optional[str] = None
        self.value: Any = None

    def build(self, session: Any, preparing: str, ready: str, build: Callable[[], Any],
              errors: Tuple[Type[BaseException], ...]) -> None:
        """Run ``build`` with output capture suspended; remember its result, or why it failed."""
        if shutil.which("go") is None:
            self.skip = self.no_go
            return
        capman = session.config.pluginmanager.getplugin("capturemanager")
        t0 = time.monotonic()
        with capman.global_and_fixture_disabled():
            print(f"\n{self.label}: {preparing}", file=sys.stderr, flush=True)
            try:
                self.value = build()
            except errors as exc:
                self.error = str(exc)
            print(f"{self.label}: {ready} after {time.monotonic() - t0:.0f}s", file=sys.stderr, flush=True)

    def result(self, fallback: Callable[[], Any]) -> Any:
        """For a fixture: skip or fail as the build went, else what it built (``fallback()`` when the
        hook did not run, e.g. the tests were collected through another path)."""
        if self.skip is not None:
            pytest.skip(self.skip)
        if self.error is not None:
            pytest.fail(f"building {self.what} failed: {self.error}")
        if self.value is None:
            self.value = fallback()
        return self.value
