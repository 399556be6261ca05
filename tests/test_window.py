"""Data windows by run date: date resolution order, templates, and copying a window's files."""
from __future__ import annotations

import datetime as dt
import json

import pytest

from ctr_volcano.data.prep import resolve_inputs
from ctr_volcano.errors import BadInput
from ctr_volcano.retraining.window import (
    WINDOW_FILE,
    check_scoring_params,
    copy_window,
    resolve_run_date,
    resolve_window,
)

TODAY = dt.date(2026, 5, 17)


@pytest.mark.parametrize("run_date,schedule,create,want", [
    ("2026-01-03", "2026-02-01T02:00:00Z", "2026-02-01T01:00:00Z", ("2026-01-03", "run_date")),
    ("", "2026-02-01T02:00:00Z", "2026-01-31T23:00:00Z", ("2026-02-01", "schedule_time")),
    # one-off runs: the schedule placeholder is empty or the zero time; the create time decides
    ("", "", "2026-01-31T23:59:59+00:00", ("2026-01-31", "create_time")),
    ("", "1970-01-01T00:00:00Z", "2026-01-31T23:00:00Z", ("2026-01-31", "create_time")),
    # kfp.local leaves placeholders unresolved: today (UTC)
    ("", "{{$.pipeline_job_schedule_time_utc}}", "{{$.pipeline_job_create_time_utc}}",
     ("2026-05-17", "today")),
    # a time with an offset is taken in UTC
    ("", "2026-02-01T01:00:00+02:00", "", ("2026-01-31", "schedule_time")),
])
def test_run_date_resolution_order(run_date, schedule, create, want):
    date, source = resolve_run_date(run_date, schedule, create, today=TODAY)
    assert (date.isoformat(), source) == want


def test_templates_window_and_lag():
    w = resolve_window("/d/day={date}", run_date="2026-03-01", window_days=3, lag_days=1)
    assert [d.isoformat() for d in w.dates] == ["2026-02-26", "2026-02-27", "2026-02-28"]
    assert w.sources[-1] == "/d/day=2026-02-28"
    w = resolve_window("s3://b/clicks/{date:%Y/%m/%d}/", run_date="2026-03-01")
    assert w.sources == ("s3://b/clicks/2026/03/01/",)
    fixed = resolve_window("/data/sample", schedule_time="2026-03-01T00:00:00Z")
    assert fixed.sources == ("/data/sample",) and fixed.date_source == "schedule_time"


@pytest.mark.parametrize("kw,field", [
    ({"data_uri": "/d/{day}"}, "data_uri"),
    ({"data_uri": "/d/{date"}, "data_uri"),
    ({"data_uri": "/d/fixed", "window_days": 2}, "data_uri"),
    ({"data_uri": "/d/{date}", "window_days": 0}, "window_days"),
    ({"data_uri": "/d/{date}", "run_date": "03/01/2026"}, "run_date"),
    ({"data_uri": "/d/{date}", "schedule_time": "yesterday"}, "schedule_time"),
    ({"data_uri": ""}, "data_uri"),
])
def test_bad_window_inputs_name_the_field(kw, field):
    with pytest.raises(BadInput) as err:
        resolve_window(**kw)
    assert err.value.field == field


def test_copy_window_flattens_days_and_prep_reads_exactly_the_data(tmp_path):
    for day in ("2026-01-01", "2026-01-02"):
        d = tmp_path / "src" / f"day={day}"
        d.mkdir(parents=True)
        (d / "part-00000.tsv").write_text(f"{day}\n")
        (d / "oracle.json").write_text("{}")
        (d / ".hidden").write_text("x")
    w = resolve_window(str(tmp_path / "src") + "/day={date}", run_date="2026-01-02", window_days=2)
    names = copy_window(w, str(tmp_path / "raw"))
    assert names == ["2026-01-01-oracle.json", "2026-01-01-part-00000.tsv",
                     "2026-01-02-oracle.json", "2026-01-02-part-00000.tsv"]
    assert (tmp_path / "raw" / "2026-01-02-part-00000.tsv").read_text() == "2026-01-02\n"
    recorded = json.loads((tmp_path / "raw" / WINDOW_FILE).read_text())
    assert recorded["dates"] == ["2026-01-01", "2026-01-02"] and recorded["files"] == names
    # prep takes the TSV files only (not window.json or the oracles)
    assert [p.rsplit("/", 1)[1] for p in resolve_inputs([str(tmp_path / "raw")])] == \
        ["2026-01-01-part-00000.tsv", "2026-01-02-part-00000.tsv"]


def test_missing_day_names_the_day_and_where_the_date_came_from(tmp_path):
    (tmp_path / "day=2026-01-01").mkdir()
    (tmp_path / "day=2026-01-01" / "part-0.tsv").write_text("x\n")
    w = resolve_window(str(tmp_path) + "/day={date}", schedule_time="2026-01-02T02:00:00Z")
    with pytest.raises(BadInput, match=r"no data for 2026-01-02 \(run date 2026-01-02 from schedule_time\)"):
        copy_window(w, str(tmp_path / "raw"))


@pytest.mark.parametrize("params", [
    {}, {"score_data_uri": ""}, {"score_data_uri": "/mnt/ctr/candidates/day={date}", "score_fanout": 4},
    {"score_data_uri": "s3://b/candidates/{date:%Y/%m/%d}/"},
    {"score_data_uri": "/mnt/ctr/candidates/today.csv", "score_fanout": 0},   # a fixed path: the same rows daily
])
def test_scoring_params_accepted(params):
    check_scoring_params(params)


@pytest.mark.parametrize("params,message", [
    ({"score_data_uri": "c/day={day}"}, "score_data_uri='c/day={day}': unknown template field {day}"),
    ({"score_data_uri": "c/day={date"}, "score_data_uri='c/day={date': unbalanced braces"),
    ({"score_data_uri": "  "}, "score_data_uri='  ': give the candidates' location"),
    ({"score_fanout": -1}, "score_fanout=-1: use 0 to score in the step"),
    ({"score_fanout": 1.5}, "score_fanout=1.5"),
])
def test_scoring_params_refused_with_the_field_and_the_fix(params, message):
    with pytest.raises(BadInput) as err:
        check_scoring_params(params)
    assert str(err.value).startswith(message)
