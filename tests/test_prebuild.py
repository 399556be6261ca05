"""tests/prebuild.py: the Go-built servers build in the background, one after another, at a lower CPU
priority, while the tests that need no build run first; a test needing a build waits for it."""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.prebuild import NICE, Builds, Prebuild

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import procgroup


class _Capman:
    @contextlib.contextmanager
    def global_and_fixture_disabled(self):
        yield


_CONFIG = SimpleNamespace(pluginmanager=SimpleNamespace(getplugin=lambda name: _Capman()))


def _item(name, *fixtures):
    return SimpleNamespace(name=name, fspath=f"/repo/tests/{name}.py", fixturenames=list(fixtures), config=_CONFIG)


def _two(builds):
    s3 = Prebuild("s3", "the S3 server", "no go", rank=1, needs=lambda i: "s3_server" in i.fixturenames,
                  builds=builds)
    tier = Prebuild("tier", "the cluster", "no go", rank=2, needs=lambda i: i.name.startswith("cluster_"),
                    builds=builds)
    return s3, tier


def test_the_tests_needing_no_build_run_first_then_by_the_last_build_they_need(tmp_path):
    builds = Builds(tmp_path)
    _two(builds)
    items = [_item("cluster_a"), _item("store", "s3_server"), _item("unit_a"), _item("cluster_b", "s3_server"),
             _item("unit_b"), _item("store_b", "s3_server")]
    builds.order(items)
    assert [i.name for i in items] == ["unit_a", "unit_b", "store", "store_b", "cluster_a", "cluster_b"]


def _niceness() -> int:
    return int(subprocess.check_output(["nice"], text=True))


def test_the_builds_run_one_after_another_in_the_background_at_a_lower_priority(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr("shutil.which", lambda tool: "/usr/bin/" + tool)
    builds = Builds(tmp_path)
    s3, tier = _two(builds)
    seen = {}
    release = threading.Event()

    def build(label):
        def run(stream):
            seen[label] = (time.monotonic(), _niceness())
            print(f"{label} step", file=stream)
            if label == "s3":
                release.wait(10)
            seen[label + " end"] = time.monotonic()
            return f"/bin/{label}"
        return run
    s3.build(None, "preparing s3", "s3 ready", build("s3"), (RuntimeError,))
    tier.build(None, "preparing tier", "tier ready", build("tier"), (RuntimeError,))
    before = _niceness()
    builds.start()
    time.sleep(0.3)
    assert "s3" in seen and "tier" not in seen        # the first build holds the second back
    release.set()
    builds.wait_for(_item("cluster_a"))
    assert tier.result(lambda: None) == "/bin/tier" and s3.result(lambda: None) == "/bin/s3"
    assert seen["tier"][0] >= seen["s3 end"]
    assert seen["s3"][1] == seen["tier"][1] == min(before + NICE, 19)
    assert _niceness() == before                      # this thread's processes keep theirs
    err = capsys.readouterr().err
    assert "tier: preparing tier\ntier step\ntier: tier ready after" in err and "s3" not in err
    builds.wait_for(_item("cluster_b", "s3_server"))    # each log is printed once, by the first test needing it
    err = capsys.readouterr().err
    assert "s3: preparing s3\ns3 step\ns3: s3 ready after" in err and "tier" not in err


def test_a_failed_build_fails_its_tests_and_a_missing_tool_skips_them(monkeypatch, tmp_path):
    monkeypatch.setattr("shutil.which", lambda tool: "/usr/bin/" + tool)
    builds = Builds(tmp_path)
    s3, tier = _two(builds)

    def broken(stream):
        raise RuntimeError("go build: exit 1")
    s3.build(None, "preparing", "ready", broken, (RuntimeError,))
    tier.build(None, "preparing", "ready", lambda stream: "/bin", (RuntimeError,), reason="no buildah here")
    builds.start()
    with pytest.raises(pytest.fail.Exception, match="building the S3 server failed: go build: exit 1"):
        s3.result(lambda: None)
    with pytest.raises(pytest.skip.Exception, match="no buildah here"):
        tier.result(lambda: None)


def _group_gone(pgid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def _sleeping_build(tmp_path, name):
    script = tmp_path / f"{name}.sh"
    script.write_text("echo building\nsleep 120\necho /never\n")
    builds = Builds(tmp_path)
    s3, _ = _two(builds)
    s3.build(None, "preparing", "ready", lambda stream: procgroup.run_build_script(script, RuntimeError, stream),
             (RuntimeError,))
    builds.start()
    deadline = time.monotonic() + 10
    while not procgroup.running_builds(builds.thread.ident) and time.monotonic() < deadline:
        time.sleep(0.05)
    (proc,) = procgroup.running_builds(builds.thread.ident)
    return builds, s3, proc


def test_the_session_end_stops_its_own_build_scripts_still_running_and_no_other(monkeypatch, tmp_path):
    """A session's end stops the builds its thread runs, never those of another (the session that
    runs this very test has its own builds running in the background)."""
    monkeypatch.setattr("shutil.which", lambda tool: "/usr/bin/" + tool)
    mine, s3, proc = _sleeping_build(tmp_path, "mine")
    other, other_s3, other_proc = _sleeping_build(tmp_path, "other")
    t0 = time.monotonic()
    mine.stop()
    assert not mine.thread.is_alive() and time.monotonic() - t0 < 10
    assert proc.poll() is not None
    assert _group_gone(proc.pid, 5), "the build's sleep outlived stop()"
    with pytest.raises(pytest.fail.Exception, match=r"mine.sh failed \(exit -?\d+\)"):
        s3.result(lambda: None)
    assert other_proc.poll() is None and other.thread.is_alive()
    other.stop()
    assert other_proc.poll() is not None and _group_gone(other_proc.pid, 5)
