"""The validation's report for people: an HTML page (the KFP UI shows it) and the Metrics scalars."""
from __future__ import annotations

import html
from typing import Any, Dict, List, Mapping

__all__ = ["render_html", "metric_scalars", "VERDICT_CODES"]

#: The verdict as a number (KFP Metrics hold numbers): 0 pass, 1 warn, 2 fail.
VERDICT_CODES = {"pass": 0.0, "warn": 1.0, "fail": 2.0}
_COLOURS = {"pass": "#1a7f37", "warn": "#9a6700", "fail": "#cf222e"}


def metric_scalars(result: Mapping[str, Any]) -> Dict[str, float]:
    """``verdict`` (0/1/2), the number of findings of each severity, and each statistic's largest
    value over the features."""
    out = {"verdict": VERDICT_CODES[result["verdict"]],
           "fail_findings": float(sum(f["severity"] == "fail" for f in result["findings"])),
           "warn_findings": float(sum(f["severity"] == "warn" for f in result["findings"]))}
    for per in result["statistics"].values():
        for stat, value in per.items():
            out[f"max_{stat}"] = max(out.get(f"max_{stat}", 0.0), min(float(value), 1e9))
    return out


def _cell(value: Any) -> str:
    return f"{value:.4f}" if isinstance(value, float) else html.escape(str(value))


def render_html(result: Mapping[str, Any]) -> str:
    """One page: the verdict, the findings (one line each), the statistics of every feature."""
    verdict = result["verdict"]
    rows: List[str] = []
    stats = result["statistics"]
    columns = sorted({s for per in stats.values() for s in per})
    flagged = {(f["feature"], f["statistic"]): f["severity"] for f in result["findings"]}
    for feature, per in stats.items():
        cells = []
        for s in columns:
            style = f' style="color:{_COLOURS[flagged[(feature, s)]]};font-weight:bold"' if (feature, s) in flagged else ""
            cells.append(f"<td{style}>{_cell(per[s]) if s in per else ''}</td>")
        rows.append(f"<tr><td>{html.escape(feature)}</td>{''.join(cells)}</tr>")
    findings = "".join(f"<li><b>{f['severity']}</b> {html.escape(f['line'])}</li>" for f in result["findings"]) \
        or "<li>none</li>"
    ref = result.get("reference") or {}
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>Data validation</title><style>"
        "body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse}td,th{border:1px solid #ccc;"
        "padding:2px 8px;text-align:right}td:first-child{text-align:left}</style></head><body>"
        f"<h1>Data validation: <span style='color:{_COLOURS[verdict]}'>{verdict.upper()}</span></h1>"
        f"<p>Data: {html.escape(str((result.get('data') or {}).get('path', '')))} "
        f"({(result.get('data') or {}).get('rows', '?')} rows). Reference: "
        f"{html.escape(str(ref.get('path') or 'none (first run: schema only)'))}"
        f"{' (' + str(ref.get('rows')) + ' rows)' if ref.get('rows') is not None else ''}.</p>"
        f"<h2>Findings</h2><ul>{findings}</ul>"
        "<h2>Statistics</h2><table><tr><th>feature</th>"
        + "".join(f"<th>{html.escape(c)}</th>" for c in columns) + "</tr>" + "".join(rows) + "</table>"
        "<p>Thresholds and how to tune them: docs/validation.md.</p></body></html>\n")
