"""Data windows by run date: which raw data a (scheduled) retraining run reads.

A recurring run must pick up the day's new data without anyone editing its parameters, so the
pipeline's ``data_uri`` may be a template: ``{date}`` is replaced by an ISO date (``2026-01-31``) and
``{date:%Y/%m/%d}`` by any ``strftime`` format. The run's date comes, in this order, from an explicit
``run_date`` (back-fills), the run's scheduled time (KFP's ``PIPELINE_JOB_SCHEDULE_TIME_UTC``
placeholder, set for recurring runs), its create time (one-off runs), and -- where neither placeholder
is resolved, as under ``kfp.local`` -- today's UTC date. The window is ``window_days`` consecutive
days ending ``lag_days`` before the run date (a nightly run at 02:00 reads yesterday with
``lag_days=1``).

:func:`copy_window` materialises a window as one flat directory of day-prefixed files, which is what
the prep step reads; sources are local paths (a mounted volume) or any URI ``pyarrow.fs`` opens.
"""
from __future__ import annotations

import datetime as _dt
import os
import string
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ctr_model.checks import is_int
from ctr_volcano.errors import BadInput

__all__ = ["DataWindow", "resolve_run_date", "resolve_window", "copy_window", "check_scoring_params", "WINDOW_FILE"]

#: Written next to the copied files (prep skips ``.json``): the window, for people and later steps.
WINDOW_FILE = "window.json"


@dataclass(frozen=True)
class DataWindow:
    """The resolved input of one run.

    Attributes:
        run_date: the run's date.
        date_source: where it came from (``run_date``, ``schedule_time``, ``create_time``, ``today``).
        dates: the window's days, oldest first.
        sources: one resolved URI per day (all equal to ``data_uri`` for a fixed, untemplated one).
        data_uri: the template.
    """

    run_date: _dt.date
    date_source: str
    dates: Tuple[_dt.date, ...]
    sources: Tuple[str, ...]
    data_uri: str

    def to_dict(self) -> Dict[str, Any]:
        return {"run_date": self.run_date.isoformat(), "date_source": self.date_source,
                "dates": [d.isoformat() for d in self.dates], "sources": list(self.sources),
                "data_uri": self.data_uri}


def _timestamp_date(text: str) -> Optional[_dt.date]:
    """The UTC date of an RFC 3339 time; ``None`` if empty, an unresolved placeholder or zero."""
    text = (text or "").strip()
    if not text or text.startswith("{{"):
        return None
    try:
        stamp = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise BadInput("schedule_time", text, "expected an RFC 3339 time such as "
                                              "2026-01-31T02:00:00Z (KFP fills it in)") from None
    if stamp.year <= 1970:       # unset protobuf timestamps come back as the epoch or year 1
        return None
    if stamp.tzinfo is not None:
        stamp = stamp.astimezone(_dt.timezone.utc)
    return stamp.date()


def resolve_run_date(run_date: str = "", schedule_time: str = "", create_time: str = "",
                     today: Optional[_dt.date] = None) -> Tuple[_dt.date, str]:
    """The run's date and where it came from (see the module docstring for the order)."""
    if run_date and run_date.strip():
        try:
            return _dt.date.fromisoformat(run_date.strip()), "run_date"
        except ValueError:
            raise BadInput("run_date", run_date, "use an ISO date, e.g. 2026-01-31, or leave it "
                                                 "empty to use the run's scheduled time") from None
    for name, value in (("schedule_time", schedule_time), ("create_time", create_time)):
        date = _timestamp_date(value)
        if date is not None:
            return date, name
    return today or _dt.datetime.now(_dt.timezone.utc).date(), "today"


def _has_date_field(template: str) -> bool:
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    except ValueError:
        raise BadInput("data_uri", template, "unbalanced braces; write {date} or "
                                             "{date:%Y/%m/%d} for the day, {{ and }} for braces") from None
    unknown = [f for f in fields if f != "date"]
    if unknown:
        raise BadInput("data_uri", template, f"unknown template field {{{unknown[0]}}}; the only one "
                                             f"is {{date}} (e.g. .../day={{date}})")
    return bool(fields)


def resolve_window(data_uri: str, run_date: str = "", schedule_time: str = "", create_time: str = "",
                   window_days: int = 1, lag_days: int = 0,
                   today: Optional[_dt.date] = None) -> DataWindow:
    """Resolve ``data_uri`` for a run.

    Raises:
        BadInput: empty URI, bad template, a multi-day window over an untemplated URI, bad sizes.
    """
    if not data_uri or not data_uri.strip():
        raise BadInput("data_uri", data_uri, "give the raw data's location, e.g. /mnt/ctr/clicks/day={date}")
    for name, value, lo in (("window_days", window_days, 1), ("lag_days", lag_days, 0)):
        if not is_int(value, lo, 366):
            raise BadInput(name, value, f"use an integer in {lo}..366")
    templated = _has_date_field(data_uri)
    if window_days > 1 and not templated:
        raise BadInput("data_uri", data_uri, f"window_days={window_days} needs a date template in the "
                                             f"URI, e.g. {data_uri.rstrip('/')}/day={{date}}")
    date, source = resolve_run_date(run_date, schedule_time, create_time, today)
    last = date - _dt.timedelta(days=lag_days)
    dates = tuple(last - _dt.timedelta(days=k) for k in reversed(range(window_days)))
    sources = tuple(data_uri.format(date=d) if templated else data_uri for d in dates)
    return DataWindow(run_date=date, date_source=source, dates=dates, sources=sources,
                      data_uri=data_uri)


def check_scoring_params(params: Mapping[str, Any]) -> None:
    """The retraining pipeline's scoring parameters, checked before a back-fill's first run or an
    upload: ``score_data_uri`` empty (no scoring) or a location whose only template field is ``{date}``
    (a fixed path scores the same rows every day), ``score_fanout`` a whole number >= 0.

    Raises:
        BadInput: naming ``score_data_uri`` or ``score_fanout``, with the fix.
    """
    uri = params.get("score_data_uri") or ""
    if uri and not str(uri).strip():
        raise BadInput("score_data_uri", uri, "give the candidates' location, e.g. /mnt/ctr/candidates/day={date}, "
                                              "or leave it empty to score nothing")
    if uri:
        try:
            _has_date_field(str(uri))
        except BadInput as exc:
            raise BadInput("score_data_uri", uri, exc.fix) from None
    fanout = params.get("score_fanout", 0)
    if not is_int(fanout, 0):
        raise BadInput("score_fanout", fanout, "use 0 to score in the step, or N > 0 for a Volcano Job of N "
                                               "scoring pods on pvc_name")


def _filesystem(uri: str):
    from ctr_model.store import StoreError, filesystem_for

    try:
        return filesystem_for(uri)
    except StoreError as exc:
        raise BadInput("data_uri", uri, f"{exc}; or use a path on a mounted volume") from None


def copy_window(window: DataWindow, dst_dir: str) -> List[str]:
    """Copy every day's files into ``dst_dir`` as ``<date>-<name>``; returns the copied names.

    A day's source may be a directory (its regular, non-hidden files, not recursing) or one file.
    ``dst_dir/window.json`` records the window and the files.

    Raises:
        BadInput: a day's data is missing or empty (the message names the day and the URI).
    """
    import pyarrow.fs as pafs

    from ctr_model.atomic import write_json

    os.makedirs(dst_dir, exist_ok=True)
    local = pafs.LocalFileSystem()
    copied: List[str] = []
    for date, uri in zip(window.dates, window.sources):
        fs, path = _filesystem(uri)
        info = fs.get_file_info(path)
        if info.type == pafs.FileType.Directory:
            files = [f for f in fs.get_file_info(pafs.FileSelector(path))
                     if f.type == pafs.FileType.File and not f.base_name.startswith((".", "_"))]
        elif info.type == pafs.FileType.File:
            files = [info]
        else:
            files = []
        if not files:
            raise BadInput("data_uri", uri, f"no data for {date.isoformat()} (run date "
                                            f"{window.run_date.isoformat()} from {window.date_source}); "
                                            f"check the day's partition or pass run_date")
        for f in sorted(files, key=lambda f: f.base_name):
            name = f"{date.isoformat()}-{f.base_name}"
            pafs.copy_files(f.path, os.path.join(dst_dir, name), source_filesystem=fs,
                            destination_filesystem=local)
            copied.append(name)
    write_json(os.path.join(dst_dir, WINDOW_FILE), {**window.to_dict(), "files": copied})
    return copied
