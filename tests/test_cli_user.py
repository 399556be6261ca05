"""The CLI as a user meets it: through the real console script, as a subprocess.

Each bad input a new user tried (a typo in the feature spec, a gzip file named ``.csv``, a path that
does not exist) ends in one line naming the field, the value and the fix, with exit code 2, from
``ctr-volcano run`` and from the verb that reads that input, in seconds (before any step or gang
starts). A step that fails inside ``run`` ends the run with that step's own line and names the log
file that holds the rest; a success prints a few lines. Each error family has its own exit code.
"""
from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ctr_volcano.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_TRANSIENT

EXE = shutil.which("ctr-volcano") or os.path.join(os.path.dirname(sys.executable), "ctr-volcano")
SPEC = {"format": "csv", "header": True, "label": "clicked", "dense": [{"name": "price"}],
        "categorical": [{"name": "user"}, {"name": "ad"}]}


def cli(*argv: str, cwd: Path, timeout: float = 120, env: dict = None) -> subprocess.CompletedProcess:
    """``ctr-volcano ARGV`` in ``cwd``; temporary files (a failed run's kept scratch) under ``cwd/tmp``."""
    (cwd / "tmp").mkdir(exist_ok=True)
    return subprocess.run([EXE, *argv], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "TMPDIR": str(cwd / "tmp"), **(env or {})})


def one_error_line(proc: subprocess.CompletedProcess, verb: str) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith(f"ctr-volcano {verb}: error: ")]
    assert len(errors) == 1 and lines[-1] == errors[0], proc.stderr
    assert "Traceback" not in proc.stderr and "\x1b[" not in proc.stderr, proc.stderr
    return errors[0]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """A small CSV of clicks, its spec, the same CSV gzip-compressed but named ``.csv``."""
    d = tmp_path_factory.mktemp("inputs")
    rows = ["clicked,user,ad,price"] + [f"{i % 2},u{i % 37},a{i % 5},{i % 11}.5" for i in range(400)]
    (d / "clicks.csv").write_text("\n".join(rows) + "\n")
    (d / "packed.csv").write_bytes(gzip.compress((d / "clicks.csv").read_bytes()))
    (d / "spec.json").write_text(json.dumps(SPEC))
    (d / "typo.json").write_text(json.dumps({**SPEC, "lable": "clicked"}))
    return d


@pytest.mark.parametrize("case", ["spec typo", "gzip named .csv", "no such path"])
def test_each_bad_input_is_one_line_and_exit_2_from_run_and_from_prep(case, inputs, tmp_path):
    data, spec = {"spec typo": ("clicks.csv", "typo.json"), "gzip named .csv": ("packed.csv", "spec.json"),
                  "no such path": ("nope.csv", "spec.json")}[case]
    want = {"spec typo": "unknown key; did you mean 'label'?",
            "gzip named .csv": "this file is gzip-compressed; name it .gz",
            "no such path": "no such file or directory"}[case]
    started = time.monotonic()
    prep = cli("prep", "--input", str(inputs / data), "--out", str(tmp_path / "prep"),
               "--feature-spec", str(inputs / spec), cwd=tmp_path)
    run = cli("run", "--data", str(inputs / data), "--workdir", str(tmp_path / "w"),
              "-p", f"feature_spec={(inputs / spec).read_text()}", cwd=tmp_path)
    for verb, proc in (("prep", prep), ("run", run)):
        assert proc.returncode == EXIT_BAD_INPUT, (verb, proc.stderr)
        line = one_error_line(proc, verb)
        assert want in line, line
    assert time.monotonic() - started < 60          # refused before any step or gang started
    assert not (tmp_path / "prep").exists() and not (tmp_path / "w" / "runs").exists()
    if case == "no such path":
        assert "--data='" in one_error_line(run, "run") and "pass --data PATH" not in run.stderr
    if case == "spec typo":
        assert "use one of" not in one_error_line(run, "run")    # a suggestion, not a 20-item list


def test_a_back_fill_refuses_a_spec_typo_before_its_first_day(inputs, tmp_path):
    proc = cli("run", "--days", "2", "--start-date", "2026-01-01", "--data", str(tmp_path / "day={date}"),
               "--workdir", str(tmp_path / "w"), "-p", f"feature_spec={(inputs / 'typo.json').read_text()}",
               cwd=tmp_path)
    assert proc.returncode == EXIT_BAD_INPUT and "did you mean 'label'?" in one_error_line(proc, "run")
    assert not (tmp_path / "w").exists()


def test_train_refuses_a_missing_prep_dir_in_one_line(tmp_path):
    proc = cli("train", "--data", str(tmp_path / "nope"), "--model-out", str(tmp_path / "m"), cwd=tmp_path)
    assert proc.returncode == EXIT_BAD_INPUT
    assert "--data=" in one_error_line(proc, "train")


def test_a_step_that_refuses_its_input_ends_run_with_its_own_line_and_the_log(tmp_path):
    """The data passes run's up-front checks (a file, plain text) but prep rejects every line."""
    raw = tmp_path / "raw.tsv"
    raw.write_text("this is not criteo\n" * 50)
    proc = cli("run", "--data", str(raw), "--workdir", str(tmp_path / "w"), cwd=tmp_path)
    assert proc.returncode == EXIT_BAD_INPUT, proc.stderr
    line = one_error_line(proc, "run")
    assert line.startswith("ctr-volcano run: error: step prepare-ctr-data: max_bad_fraction=0.001: 50 of 50 lines")
    log = Path(line.rsplit("(detail: ", 1)[1].rstrip(")"))
    assert log.name == "run.log" and log.parent.parent == tmp_path / "w" / "runs"
    text = log.read_text()
    assert "Traceback (most recent call last):" in text and "ctr_model.errors.BadInput" in text
    assert "\x1b[" not in text
    assert len(proc.stderr.splitlines()) <= 4, proc.stderr    # the start, the step, the error
    assert not (tmp_path / "w" / "summary.json").exists()
    verbose = cli("run", "-v", "--data", str(raw), "--workdir", str(tmp_path / "w"), cwd=tmp_path)
    assert verbose.returncode == EXIT_BAD_INPUT and "Traceback (most recent call last):" in verbose.stderr
    assert verbose.stderr.strip().splitlines()[-1].startswith("ctr-volcano run: error: step prepare-ctr-data: ")


def test_the_failed_steps_error_is_read_from_its_log(tmp_path):
    """The parser behind it: the last traceback of the failed task's section, its family."""
    from ctr_volcano.app.run_log import LocalRunFailed, StepBadInput, StepOutage, step_error

    log = tmp_path / "run.log"
    section = ("Executing task 'prep'\n    Traceback (most recent call last):\n      File \"x\", line 1\n"
               "    ctr_model.errors.BadInput: first=1: an earlier error\n\n    During handling of the above "
               "exception, another exception occurred:\n\n    Traceback (most recent call last):\n"
               "      File \"x\", line 2\n        raise {cls}\n    {cls}: {msg}\n    second line\n"
               "Task 'prep' finished with status FAILURE\nExecuting task 'other'\n")
    cases = [("ctr_model.errors.BadInput", "field='v': the fix", StepBadInput, EXIT_BAD_INPUT),
             ("ctr_model.errors.TransientError", "store unreachable", StepOutage, EXIT_TRANSIENT),
             ("KeyError", "'x'", LocalRunFailed, EXIT_FAILED),
             ("evil.module.BadInput", "not ours", LocalRunFailed, EXIT_FAILED)]
    from ctr_volcano.errors import exit_code_of

    for cls, msg, family, code in cases:
        log.write_text(section.format(cls=cls, msg=msg))
        err = step_error(log, "prep", "fallback")
        assert type(err) is family and exit_code_of(err) == code, (cls, err)
        assert msg in str(err) and "second line" not in str(err) and str(log) in str(err)
    log.write_text("no traceback here\n")
    assert "fallback" in str(step_error(log, "prep", "fallback"))


@pytest.mark.parametrize("family, args, code", [("BadInput", ("f", 1, "fix"), EXIT_BAD_INPUT),
                                                ("TransientError", ("store down",), EXIT_TRANSIENT),
                                                ("JobFailed", ("j", "Failed", "crashed"), EXIT_FAILED),
                                                ("Interrupted", (15,), 143)])
def test_each_error_family_has_its_exit_code(family, args, code, monkeypatch, capsys):
    from ctr_volcano import errors
    from ctr_volcano.app.cli import main, train

    def fail(_args):
        raise getattr(errors, family)(*args)

    monkeypatch.setattr(train, "_handle", fail)
    assert main.main(["train", "--data", "d", "--model-out", "m"]) == code
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ctr-volcano train: ")


def test_the_help_speaks_of_any_layout(tmp_path):
    for argv, phrase in ((["prep", "--help"], "feature spec"), (["run", "--help"], "feature_spec")):
        out = " ".join(cli(*argv, cwd=tmp_path).stdout.split())
        assert phrase in out and "raw Criteo TSV ->" not in out, out
    assert "-v, --verbose" in cli("run", "--help", cwd=tmp_path).stdout


def test_a_column_list_says_how_many_more_and_suggests_the_name(inputs, tmp_path):
    wide = tmp_path / "wide.csv"
    names = ["clicked", "user", "ad", "price"] + [f"extra_{i}" for i in range(30)]
    wide.write_text(",".join(names) + "\n" + ",".join(["1"] * len(names)) + "\n")
    spec = {**SPEC, "dense": [{"name": "prize"}], "ignore": names[4:]}
    proc = cli("prep", "--input", str(wide), "--out", str(tmp_path / "p"), "--feature-spec", json.dumps(spec),
               cwd=tmp_path)
    line = one_error_line(proc, "prep")
    assert proc.returncode == EXIT_BAD_INPUT
    assert "did you mean 'price'?" in line and "and 14 more" in line, line


@pytest.mark.slow
def test_train_without_workdir_leaves_no_temp_dir_after_a_success(tmp_path):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {"TMPDIR": str(scratch)}
    assert cli("gen-data", "--rows", "3000", "--out", str(tmp_path / "raw"), cwd=tmp_path, env=env).returncode == 0
    assert cli("prep", "--input", str(tmp_path / "raw"), "--out", str(tmp_path / "prep"), "--shards", "2",
               cwd=tmp_path, env=env).returncode == 0
    proc = cli("train", "--data", str(tmp_path / "prep"), "--model-out", str(tmp_path / "model"), "--pservers", "1",
               "--trainers", "1", "--epochs", "1", "--max-retry", "0", cwd=tmp_path, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "model" / "model_meta.json").is_file()
    assert json.loads(proc.stdout.strip().splitlines()[-1])["output_dir"] is None
    assert list(scratch.iterdir()) == []     # no ctr-train-* (checkpoints, gang logs) left behind
