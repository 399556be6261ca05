"""The evaluation's self-contained HTML report: inline SVG plots drawn here (no matplotlib, no
scripts), so it renders as-is in the KFP UI's HTML visualization and in a browser from a laptop."""
from __future__ import annotations

import html
import math
from typing import Any, Dict, List, Sequence, Tuple

__all__ = ["render_report"]


def _svg_plot(title: str, xlabel: str, ylabel: str, series: Sequence[Tuple[str, Sequence[Tuple[float, float]], bool]],
              scale: float = 1.0, step: float = 0.25, size: int = 320) -> str:
    """A square plot of [0, scale]^2 with a dashed diagonal; each series is (css color, points, markers)."""
    pad_l, pad_b, pad_t, pad_r = 48, 40, 28, 12
    w, h = size + pad_l + pad_r, size + pad_t + pad_b

    def sx(x: float) -> float:
        return pad_l + max(0.0, min(1.0, x / scale)) * size

    def sy(y: float) -> float:
        return pad_t + (1.0 - max(0.0, min(1.0, y / scale))) * size

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
             f'viewBox="0 0 {w} {h}" role="img" aria-label="{html.escape(title)}">',
             f'<text x="{w / 2:.0f}" y="18" text-anchor="middle" font-weight="bold">{html.escape(title)}</text>',
             f'<rect x="{pad_l}" y="{pad_t}" width="{size}" height="{size}" fill="none" stroke="#888"/>']
    for i in range(int(round(scale / step)) + 1):
        t = i * step
        parts.append(f'<line x1="{sx(t):.1f}" y1="{sy(0):.1f}" x2="{sx(t):.1f}" y2="{sy(0) + 4:.1f}" stroke="#888"/>'
                     f'<text x="{sx(t):.1f}" y="{sy(0) + 16:.1f}" font-size="11" text-anchor="middle">{t:.4g}</text>'
                     f'<line x1="{sx(0) - 4:.1f}" y1="{sy(t):.1f}" x2="{sx(0):.1f}" y2="{sy(t):.1f}" stroke="#888"/>'
                     f'<text x="{sx(0) - 6:.1f}" y="{sy(t) + 4:.1f}" font-size="11" text-anchor="end">{t:.4g}</text>')
    parts.append(f'<line x1="{sx(0):.1f}" y1="{sy(0):.1f}" x2="{sx(scale):.1f}" y2="{sy(scale):.1f}" '
                 f'stroke="#bbb" stroke-dasharray="4 4"/>')
    for color, pts, markers in series:
        coords = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
        parts.append(f'<polyline points="{coords}" fill="none" stroke="{color}" stroke-width="2"/>')
        if markers:
            parts.extend(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{color}"/>' for x, y in pts)
    parts.append(f'<text x="{pad_l + size / 2:.0f}" y="{h - 6}" font-size="12" text-anchor="middle">'
                 f'{html.escape(xlabel)}</text>')
    parts.append(f'<text x="12" y="{pad_t + size / 2:.0f}" font-size="12" text-anchor="middle" '
                 f'transform="rotate(-90 12 {pad_t + size / 2:.0f})">{html.escape(ylabel)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _nice_axis(top: float) -> Tuple[float, float]:
    """Axis end and tick step for values up to ``top``: at most 5 round ticks, never past 1."""
    for step in (0.005, 0.01, 0.02, 0.025, 0.05, 0.1, 0.2, 0.25):
        n = max(1, math.ceil(top * 1.05 / step - 1e-9))
        if n <= 5:
            return min(1.0, n * step), step
    return 1.0, 0.25


def _summary_rows(metrics: Dict[str, Any]) -> List[Tuple[str, str]]:
    """The report's header table: the model's quality beside the constant predictor's, then what
    was evaluated (the model family and its config among it)."""
    rows = [("AUC", f"{metrics['auc']:.6f}"), ("log loss", f"{metrics['logloss']:.6f}")]
    if "constant_logloss" in metrics:
        ne = metrics.get("normalized_entropy")
        rows += [("log loss of the constant predictor (the click rate)", f"{metrics['constant_logloss']:.6f}"),
                 ("normalized entropy (log loss / constant's; below 1 beats the click rate)",
                  "" if ne is None else f"{ne:.4f}")]
    rows += [("rows", f"{metrics['rows']:,}"), ("positive rate (observed CTR)", f"{metrics['positive_rate']:.4%}"),
             ("mean prediction", f"{metrics['mean_prediction']:.4%}"),
             (f"accuracy at threshold {metrics['threshold']:g}", f"{metrics['accuracy']:.4%}")]
    rows.extend((f"{k}", str(v)) for k, v in metrics.get("context", {}).items())
    return rows


def render_report(metrics: Dict[str, Any], title: str = "CTR model evaluation") -> str:
    """Render :func:`compute_metrics` output as a self-contained HTML page (inline SVG, no scripts).

    The calibration plot uses a square axis zoomed to the largest predicted/observed CTR, since CTRs
    are small and a [0, 1] box would squash every point into a corner.
    """
    e = html.escape
    roc_pts = [(r["fpr"], r["tpr"]) for r in metrics["roc"]]
    cal = metrics["calibration"]
    top = max([c["mean_predicted"] for c in cal] + [c["observed_ctr"] for c in cal] + [1e-6])
    scale, step = _nice_axis(top)
    cal_pts = [(c["mean_predicted"], c["observed_ctr"]) for c in cal]
    roc_svg = _svg_plot(f"ROC curve (AUC {metrics['auc']:.4f})", "false positive rate",
                        "true positive rate", [("#1f77b4", roc_pts, False)])
    cal_svg = _svg_plot("Calibration by decile", "mean predicted CTR", "observed CTR",
                        [("#d62728", cal_pts, True)], scale=scale, step=step)
    cm = metrics["confusion_matrix"]
    rows = _summary_rows(metrics)
    summary = "".join(f"<tr><th>{e(k)}</th><td>{e(v)}</td></tr>" for k, v in rows)
    features = "".join(
        f"<tr><th>{e(f['name'])}</th><td>{e(f['kind'])}</td><td>{e(f['transform'])}</td>"
        f"<td>{'' if f['ids'] is None else format(f['ids'], ',')}</td>"
        f"<td>{'' if f['embedding_dim'] is None else f['embedding_dim']}</td>"
        f"<td>{'' if f['missing_rate'] is None else format(f['missing_rate'], '.2%')}</td></tr>"
        for f in metrics.get("features", []))
    feature_table = ("<h2>Features</h2>\n<table><tr><th>feature</th><th>kind</th><th>transform</th>"
                     "<th>ids</th><th>embedding dim</th><th>empty in prep</th></tr>\n"
                     f"{features}</table>\n") if features else ""
    cal_rows = "".join(
        f"<tr><td>{c['bin']}</td><td>{c['rows']:,}</td><td>{c['mean_predicted']:.4%}</td>"
        f"<td>{c['observed_ctr']:.4%}</td><td>{c['min_predicted']:.4g} to {c['max_predicted']:.4g}</td></tr>"
        for c in cal)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{e(title)}</title>
<style>
body {{ font-family: sans-serif; margin: 1.5em; color: #222; }}
table {{ border-collapse: collapse; margin: 0.5em 0 1.5em; }}
th, td {{ border: 1px solid #ccc; padding: 3px 10px; text-align: right; }}
th {{ background: #f4f4f4; text-align: left; }}
.plots {{ display: flex; flex-wrap: wrap; gap: 1.5em; }}
</style></head><body>
<h1>{e(title)}</h1>
<table>{summary}</table>
<div class="plots">{roc_svg}{cal_svg}</div>
<h2>Confusion matrix at threshold {metrics['threshold']:g}</h2>
<table><tr><th></th><th>predicted no click</th><th>predicted click</th></tr>
<tr><th>no click</th><td>{cm['tn']:,}</td><td>{cm['fp']:,}</td></tr>
<tr><th>click</th><td>{cm['fn']:,}</td><td>{cm['tp']:,}</td></tr></table>
<h2>Calibration by decile of predicted CTR</h2>
<table><tr><th>decile</th><th>rows</th><th>mean predicted</th><th>observed</th><th>prediction range</th></tr>
{cal_rows}</table>
{_task_table(metrics)}{feature_table}</body></html>
"""


def _task_table(metrics: Dict[str, Any]) -> str:
    """The report's section per task of a multi-task model (empty for one task)."""
    e = html.escape
    rows = []
    for name, m in (metrics.get("tasks") or {}).items():
        parts = [(f"{name} (over impressions)", m)] + [(f"{name} {k.replace('_', ' ')}", v)
                                                       for k, v in m.items() if k.startswith("after_")]
        rows += [f"<tr><th>{e(label)}</th><td>{s['auc']:.6f}</td><td>{s['logloss']:.6f}</td>"
                 f"<td>{s['rows']:,}</td><td>{s['rate']:.4%}</td></tr>" for label, s in parts]
    if not rows:
        return ""
    return ("<h2>Tasks</h2>\n<table><tr><th>task</th><th>AUC</th><th>log loss</th><th>rows</th>"
            "<th>positive rate</th></tr>\n" + "".join(rows) + "</table>\n")
