"""The README's Quick start is the product's contract: two command lines, the second one is CI."""
from __future__ import annotations

import os
import re
import shlex
import stat
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _quick_start_lines():
    text = (REPO / "README.md").read_text()
    m = re.search(r"^## Quick start[ \t]*\n(.*?)(?=^## |\Z)", text, flags=re.M | re.S)
    assert m, "README.md needs a '## Quick start' section"
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", m.group(1), flags=re.M | re.S)
    assert len(blocks) == 1, f"Quick start must hold exactly one fenced block, found {len(blocks)}"
    return [ln for ln in blocks[0].splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


def test_readme_opens_with_quick_start_of_two_commands():
    text = (REPO / "README.md").read_text()
    headings = re.findall(r"^## .*$", text, flags=re.M)
    assert headings and headings[0].strip() == "## Quick start", headings[:3]
    lines = _quick_start_lines()
    assert len(lines) == 2, lines
    setup_and_run, setup_and_test = lines
    assert "ctr-volcano run" in setup_and_run and "pip install" in setup_and_run
    assert "pytest" in setup_and_test and "pip install" in setup_and_test


def _ci_commands():
    """Every command line .ci/run executes, with ``bash -c '...'`` unwrapped."""
    out = []
    for ln in (REPO / ".ci" / "run").read_text().splitlines():
        s = ln.strip()
        if not s or s.startswith("#"):
            continue
        try:
            words = shlex.split(s)
        except ValueError:
            continue
        if words[:2] == ["bash", "-c"] and len(words) == 3:
            out.append(words[2])
        out.append(s)
    return out


def test_ci_runs_the_second_quick_start_line_verbatim():
    second = _quick_start_lines()[1]
    assert second in _ci_commands(), f".ci/run must execute exactly: {second}"


def _run_ci_with_fake_tools(tmp_path, pytest_rc):
    """Run a copy of the real .ci/run (in a copy of the repo's top level, so the real ``.venv`` is never
    touched) with ``python3`` replaced by a recorder whose ``-m venv DIR`` makes recorders ``DIR/bin/pip``
    and ``DIR/bin/python``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    recorder = '#!/bin/sh\necho "{name} $*" >> "{log}"\nexit {rc}\n'
    python3 = bin_dir / "python3"
    python3.write_text(
        '#!/bin/sh\n'
        f'echo "python3 $*" >> "{log}"\n'
        'if [ "$1 $2" = "-m venv" ]; then\n'
        '  for last; do :; done\n'
        '  mkdir -p "$last/bin"\n'
        f"  printf '%s' '{recorder.format(name='pip', log=log, rc=0)}' > \"$last/bin/pip\"\n"
        f"  printf '%s' '{recorder.format(name='python', log=log, rc=pytest_rc)}' > \"$last/bin/python\"\n"
        '  chmod +x "$last/bin/pip" "$last/bin/python"\n'
        'fi\n')
    python3.chmod(python3.stat().st_mode | stat.S_IEXEC)
    repo = tmp_path / "repo"
    (repo / ".ci").mkdir(parents=True)
    (repo / ".ci" / "run").write_text((REPO / ".ci" / "run").read_text())
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", CTR_CI_SKIP_SYSTEM_PACKAGES="1")
    res = subprocess.run(["bash", str(repo / ".ci" / "run")], env=env, capture_output=True, text=True,
                         timeout=60)
    return res, log.read_text().splitlines() if log.exists() else []


def test_ci_script_runs_install_then_pytest_and_propagates_failures(tmp_path):
    res, calls = _run_ci_with_fake_tools(tmp_path, 0)
    assert res.returncode == 0, res.stderr
    assert calls == ['python3 -m venv --system-site-packages .venv', 'pip install -e .[test]',
                     'python -m pytest'], calls
    failing = tmp_path / "failing"
    failing.mkdir()
    res, _ = _run_ci_with_fake_tools(failing, 3)
    assert res.returncode == 3


def test_ci_script_fails_when_pytest_collects_nothing(tmp_path):
    res, _ = _run_ci_with_fake_tools(tmp_path, 5)
    assert res.returncode != 0 and res.returncode != 5
    assert "no tests" in res.stderr


def test_quick_start_installs_into_a_virtual_environment_not_the_system_python(tmp_path):
    """PEP 668: the system Python of current Debian/Ubuntu refuses ``pip install``; a venv accepts it."""
    for line in _quick_start_lines():
        steps = [s.strip() for s in line.split("&&")]
        assert steps[0].startswith("python3 -m venv "), steps[0]
        venv = shlex.split(steps[0])[-1]
        for step in steps[1:]:
            assert step.startswith(f"{venv}/bin/"), f"{step!r} would run outside the venv {venv}"
    first = shlex.split(_quick_start_lines()[0].split("&&")[0])
    subprocess.run(first, cwd=tmp_path, check=True, timeout=300, capture_output=True)
    venv_python = tmp_path / first[-1] / "bin" / "python"
    out = subprocess.run([str(venv_python), "-c", "import sys; print(sys.prefix != sys.base_prefix)"],
                         capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "True", out.stderr
