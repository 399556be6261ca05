"""tests/prebuild.py: the Go-built servers build in a forked background process, one after another,
nicer than the tests, while the tests that need no build run first; a test needing a build waits."""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
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


def _wait_for_file(path: Path, seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return path.exists()


def test_the_tests_needing_no_build_run_first_then_by_the_last_build_they_need(tmp_path):
    builds = Builds(tmp_path)
    _two(builds)
    items = [_item("cluster_a"), _item("store", "s3_server"), _item("unit_a"), _item("cluster_b", "s3_server"),
             _item("unit_b"), _item("store_b", "s3_server")]
    builds.order(items)
    assert [i.name for i in items] == ["unit_a", "unit_b", "store", "store_b", "cluster_a", "cluster_b"]


def _niceness() -> int:
    return int(subprocess.check_output(["nice"], text=True))


def test_the_builds_run_one_after_another_in_the_background_nicer_and_untouched_by_the_tests(
        monkeypatch, capsys, tmp_path):
    """The builds see the session as it was when they started: a test's later environment change
    (a TMPDIR it then deletes, as the notebook test's) never reaches them."""
    monkeypatch.setattr("shutil.which", lambda tool: "/usr/bin/" + tool)
    monkeypatch.delenv("CTR_PREBUILD_PROBE", raising=False)
    builds = Builds(tmp_path)
    s3, tier = _two(builds)
    release = tmp_path / "release"

    def build(label):
        def run(stream):
            (tmp_path / f"{label}.start").write_text(f"{time.monotonic()} {_niceness()} "
                                                     f"{os.environ.get('CTR_PREBUILD_PROBE', '-')}")
            print(f"{label} step", file=stream)
            if label == "s3":
                assert _wait_for_file(release)
            (tmp_path / f"{label}.end").write_text(str(time.monotonic()))
            return Path(f"/bin/{label}")
        return run
    s3.build(None, "preparing s3", "s3 ready", build("s3"), (RuntimeError,))
    tier.build(None, "preparing tier", "tier ready", build("tier"), (RuntimeError,))
    before = _niceness()
    builds.start()
    assert _wait_for_file(tmp_path / "s3.start")
    monkeypatch.setenv("CTR_PREBUILD_PROBE", "a test's own")
    time.sleep(0.2)
    assert not (tmp_path / "tier.start").exists()      # the first build holds the second back
    release.write_text("")
    builds.wait_for(_item("cluster_a"))
    assert tier.result(lambda: None) == Path("/bin/tier") and s3.result(lambda: None) == Path("/bin/s3")
    s3_start, tier_start = ((tmp_path / f"{b}.start").read_text().split() for b in ("s3", "tier"))
    assert float(tier_start[0]) >= float((tmp_path / "s3.end").read_text())
    assert int(s3_start[1]) == int(tier_start[1]) == min(before + NICE, 19)
    assert tier_start[2] == "-"                         # not the test's later change
    assert _niceness() == before                        # the session's processes keep theirs
    err = capsys.readouterr().err
    assert "tier: preparing tier\ntier step\ntier: tier ready after" in err and "s3" not in err
    builds.wait_for(_item("cluster_b", "s3_server"))    # each log is printed once, by the first test needing it
    err = capsys.readouterr().err
    assert "s3: preparing s3\ns3 step\ns3: s3 ready after" in err and "tier" not in err
    builds.stop()
    assert not builds.process.is_alive()


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
    """A session whose one build runs a script that sleeps (its process group id in ``<name>.pid``)."""
    script = tmp_path / f"{name}.sh"
    script.write_text(f"echo $$ > {tmp_path / (name + '.pid')}\necho building\nsleep 120\necho /never\n")
    builds = Builds(tmp_path)
    s3, tier = _two(builds)
    s3.build(None, "preparing", "ready", lambda stream: procgroup.run_build_script(script, RuntimeError, stream),
             (RuntimeError,))
    tier.build(None, "preparing", "ready", lambda stream: "/bin", (RuntimeError,))
    builds.start()
    assert _wait_for_file(tmp_path / f"{name}.pid")
    time.sleep(0.1)
    return builds, s3, tier, int((tmp_path / f"{name}.pid").read_text())


def test_the_session_end_stops_its_own_builds_and_no_other(monkeypatch, tmp_path):
    """A session's end stops the build its process runs (the script's whole group) and the builds
    after it, never those of another session (the one running this very test has its own)."""
    monkeypatch.setattr("shutil.which", lambda tool: "/usr/bin/" + tool)
    mine, s3, tier, pgid = _sleeping_build(tmp_path, "mine")
    other, _, _, other_pgid = _sleeping_build(tmp_path, "other")
    t0 = time.monotonic()
    mine.stop()
    assert not mine.process.is_alive() and time.monotonic() - t0 < 20
    assert _group_gone(pgid, 5), "the build's sleep outlived stop()"
    with pytest.raises(pytest.fail.Exception, match="the builder process ended"):
        s3.result(lambda: None)
    with pytest.raises(pytest.fail.Exception, match="the builder process ended"):
        tier.result(lambda: None)                       # never started
    assert other.process.is_alive() and not _group_gone(other_pgid, 0.2)
    other.stop()
    assert _group_gone(other_pgid, 5)
