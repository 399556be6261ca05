"""Golden test: docs/parameters.md is what the pipelines' and components' docstrings render to."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools" / "docs"))

import parameters  # noqa: E402


def test_committed_parameters_page_matches_the_docstrings():
    assert parameters.PAGE.read_text() == parameters.render(), (
        f"docs/parameters.md is stale: the docstrings render to something else. Regenerate with: "
        f"{parameters.REGENERATE}")


def test_every_parameter_of_every_compiled_component_has_a_meaning():
    """A parameter added without an ``Args:`` entry would show an empty cell: refuse it."""
    rows = [ln for ln in parameters.render().splitlines() if ln.startswith("| `")]
    assert len(rows) > 60
    empty = [ln for ln in rows if ln.rstrip().endswith("|  |") or ln.rstrip().endswith("| |")]
    assert not empty, empty


def test_a_changed_docstring_makes_the_check_fail(tmp_path, monkeypatch):
    stale = tmp_path / "parameters.md"
    stale.write_text(parameters.render().replace("passes over the training data", "laps of the data", 1))
    monkeypatch.setattr(parameters, "PAGE", stale)
    assert parameters.main(["--check"]) == 1
    stale.write_text(parameters.render())
    assert parameters.main(["--check"]) == 0


def test_script_runs_from_a_plain_checkout():
    res = subprocess.run([sys.executable, "tools/docs/parameters.py", "--check"], cwd=REPO, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
