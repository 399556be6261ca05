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
    """Run the real .ci/run with ``pip`` and ``python`` replaced by recorders on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    for name, rc in (("pip", 0), ("python", pytest_rc)):
        script = bin_dir / name
        script.write_text(f'#!/bin/sh\necho "{name} $*" >> "{log}"\nexit {rc}\n')
        script.chmod(script.stat().st_mode | stat.S_IEXEC)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}")
    res = subprocess.run(["bash", str(REPO / ".ci" / "run")], env=env, capture_output=True, text=True,
                         timeout=60)
    return res, log.read_text().splitlines() if log.exists() else []


def test_ci_script_runs_install_then_pytest_and_propagates_failures(tmp_path):
    res, calls = _run_ci_with_fake_tools(tmp_path, 0)
    assert res.returncode == 0, res.stderr
    assert calls == ['pip install -e .[test]', 'python -m pytest'], calls
    failing = tmp_path / "failing"
    failing.mkdir()
    res, _ = _run_ci_with_fake_tools(failing, 3)
    assert res.returncode == 3


def test_ci_script_fails_when_pytest_collects_nothing(tmp_path):
    res, _ = _run_ci_with_fake_tools(tmp_path, 5)
    assert res.returncode != 0 and res.returncode != 5
    assert "no tests" in res.stderr
