"""The build machinery the Go-built test servers share: ``tools/gobuild.sh`` (sourced by their
``build.sh``) and ``tools/procgroup.py`` (imported by their Python modules), run on tiny real
scripts: no Go build happens here."""
from __future__ import annotations

import hashlib
import io
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))

import procgroup  # noqa: E402  (tools/ is not a package)

#: A build script in the shape of tools/*/build.sh: its "build" appends to a counter file.
SCRIPT = """set -euo pipefail
TOOL=toy
. "{gobuild}"
gobuild_cache "1 toy-line" "{input}"
OUT="$ROOT/bin"
have_all() {{ [ -s "$OUT/toy" ]; }}
gobuild_begin "$OUT" "toy binary" "${{1:-}}"
gobuild_step "building toy" bash -c 'echo built >> "{count}"; sleep "$TOY_SLEEP"; [ -z "$TOY_FAIL" ]'
printf toy > "$STAGE/toy"
mkdir -p "$OUT"
mv "$STAGE/toy" "$OUT/toy"
echo "$OUT"
"""

#: The step's start line: seconds since the build began, in whole seconds of the clock (1 when a
#: second boundary falls between the two, however fast the machine; more on a loaded one).
STARTED = r"toy: \[\d+s\] building toy \.\.\."


@pytest.fixture()
def toy(tmp_path: Path) -> Path:
    (tmp_path / "input.txt").write_text("pinned input\n")
    script = tmp_path / "build.sh"
    script.write_text(SCRIPT.format(gobuild=REPO / "tools" / "gobuild.sh", input=tmp_path / "input.txt",
                                    count=tmp_path / "count"))
    return script


def _run(script: Path, *args: str, fail: bool = False, sleep: float = 0) -> subprocess.CompletedProcess:
    env = dict(os.environ, CTR_VOLCANO_CACHE=str(script.parent / "cache"), TOY_SLEEP=str(sleep),
               TOY_FAIL="1" if fail else "")
    return subprocess.run(["bash", str(script), *args], capture_output=True, text=True, env=env)


def _key(tmp_path: Path) -> str:
    """The cache key recipe every build script has used: sha256 of the key line, then the files."""
    return hashlib.sha256(b"1 toy-line\n" + (tmp_path / "input.txt").read_bytes()).hexdigest()[:16]


def test_builds_once_then_says_present(toy: Path, tmp_path: Path) -> None:
    out = tmp_path / "cache" / "toy" / _key(tmp_path) / "bin"
    printed = _run(toy, "--print-dir")
    assert printed.returncode == 0 and printed.stdout == f"{out}\n"
    assert not (tmp_path / "cache").exists()  # --print-dir builds nothing
    first = _run(toy)
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines()[-1] == str(out)
    assert re.search(STARTED, first.stderr) and "building toy done in" in first.stderr, first.stderr
    assert not list(out.parent.glob("stage.*"))  # the stage directory is removed
    second = _run(toy)
    assert second.stdout == f"{out}\n"
    assert f"toy: toy binary present in {out} (skipping build)" in second.stderr
    assert (tmp_path / "count").read_text() == "built\n"


def test_a_failed_step_fails_the_script(toy: Path, tmp_path: Path) -> None:
    failed = _run(toy, fail=True)
    assert failed.returncode == 1
    assert not (tmp_path / "cache" / "toy" / _key(tmp_path) / "bin").exists()
    assert not list((tmp_path / "cache" / "toy" / _key(tmp_path)).glob("stage.*"))


def test_a_concurrent_build_waits_for_the_lock(toy: Path, tmp_path: Path) -> None:
    results = []
    threads = [threading.Thread(target=lambda: results.append(_run(toy, sleep=1))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.returncode for r in results] == [0, 0]
    assert sum("(built by another process)" in r.stderr for r in results) == 1
    assert (tmp_path / "count").read_text() == "built\n"


def test_run_build_script_streams_and_returns_the_last_line(toy: Path, tmp_path: Path) -> None:
    stream = io.StringIO()
    env = dict(os.environ, CTR_VOLCANO_CACHE=str(tmp_path / "cache"), TOY_SLEEP="0", TOY_FAIL="")
    out = procgroup.run_build_script(toy, ValueError, stream, env=env)
    assert out == tmp_path / "cache" / "toy" / _key(tmp_path) / "bin"
    assert re.search(STARTED, stream.getvalue()), stream.getvalue()


def test_run_build_script_raises_with_the_tail(tmp_path: Path) -> None:
    script = tmp_path / "fail.sh"
    script.write_text("for i in $(seq 0 99); do echo line$i; done; exit 7\n")
    with pytest.raises(ValueError, match="exit 7") as info:
        procgroup.run_build_script(script, ValueError, io.StringIO())
    assert "line60" in str(info.value) and "line59" not in str(info.value)


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] == "Z"
    except FileNotFoundError:
        return True


class _Interrupting(io.StringIO):
    def write(self, s: str) -> int:
        if s.strip():
            raise KeyboardInterrupt
        return 0


def test_an_interrupt_kills_the_build_group(tmp_path: Path) -> None:
    script = tmp_path / "slow.sh"
    pidfile = tmp_path / "child.pid"
    script.write_text(f"trap '' TERM; sleep 300 & echo $! > {pidfile}; echo started; wait\n")
    with pytest.raises(KeyboardInterrupt):
        procgroup.run_build_script(script, ValueError, _Interrupting(), grace=0.5)
    child = int(pidfile.read_text())
    # SIGKILL is delivered asynchronously: on a loaded machine the child can still be seen running
    # for a moment after the group was signalled (seen in a CI-like run), so allow it a few seconds.
    for _ in range(50):
        if _gone(child):
            break
        threading.Event().wait(0.1)
    assert _gone(child)


def test_kill_group_reaches_children_of_a_dead_leader(tmp_path: Path) -> None:
    proc = subprocess.Popen(["bash", "-c", "sleep 300 & echo $!"], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    child = int(proc.stdout.readline()) if proc.stdout else 0
    proc.wait()
    assert not _gone(child)
    procgroup.kill_group(proc)
    for _ in range(50):
        if _gone(child):
            break
        threading.Event().wait(0.1)
    assert _gone(child)
