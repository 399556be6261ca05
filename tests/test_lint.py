"""Lint, import order and types are part of the test command: ruff (ruff.toml) and mypy (mypy.ini)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, timeout=600)


def test_ruff_lint_and_import_order_are_clean():
    res = _run("ruff", "check", "--output-format", "concise", ".")
    assert res.returncode == 0, f"ruff found problems (fix, or `ruff check --fix .`):\n{res.stdout}{res.stderr}"


def test_mypy_on_the_core_packages_is_clean():
    res = _run("mypy")
    assert res.returncode == 0, f"mypy (mypy.ini: ctr_model, ctr_volcano):\n{res.stdout}{res.stderr}"
