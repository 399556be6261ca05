"""Draw a compiled pipeline's DAG as SVG: the tasks, their dependencies and ``dsl.If`` groups.

Pure: compiled pipeline YAML (the IR ``ctr-volcano compile`` writes) in, an SVG string out, so the
picture is drawn from what KFP runs, not from a hand-kept diagram. Tasks are placed in rows by longest
dependency path; a condition group is a dashed box around its tasks, labelled with its condition.
``render_pictures.py`` turns the SVG into the README's PNG with headless Chromium.
"""
from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Tuple

__all__ = ["Node", "dag_nodes", "svg"]

ROW_H, NODE_W, NODE_H, GAP, PAD = 84, 300, 46, 14, 24


@dataclass(frozen=True)
class Node:
    """One task of the root DAG; a condition group holds the tasks of its sub-DAG in ``inner``."""

    name: str
    label: str
    component: str
    deps: Tuple[str, ...]
    condition: str = ""
    inner: Tuple["Node", ...] = field(default=())


def _condition_text(expr: str) -> str:
    """``inputs.parameter_values['pipelinechannel--check-auc-gate-Output'] == true`` -> readable."""
    return re.sub(r"inputs\.parameter_values\['pipelinechannel--([a-z0-9-]+?)-(\w+)'\]", r"\1.\2", expr)


def _nodes(dag: Dict[str, Any], components: Dict[str, Any]) -> List[Node]:
    out = []
    for name, task in sorted(dag.get("tasks", {}).items()):
        ref = task["componentRef"]["name"]
        sub = components.get(ref, {}).get("dag")
        cond = task.get("triggerPolicy", {}).get("condition", "")
        out.append(Node(name=name, label=task.get("taskInfo", {}).get("name", name),
                        component=ref.removeprefix("comp-"), deps=tuple(task.get("dependentTasks", ())),
                        condition=_condition_text(cond), inner=tuple(_nodes(sub, components)) if sub else ()))
    return out


def dag_nodes(pipeline_doc: Dict[str, Any]) -> List[Node]:
    """The root DAG's tasks of a compiled pipeline (the first YAML document)."""
    return _nodes(pipeline_doc["root"]["dag"], pipeline_doc.get("components", {}))


def _rows(nodes: List[Node]) -> Dict[str, int]:
    by_name = {n.name: n for n in nodes}
    row: Dict[str, int] = {}

    def depth(name: str) -> int:
        if name not in row:
            row[name] = 1 + max((depth(d) for d in by_name[name].deps if d in by_name), default=-1)
        return row[name]

    for n in nodes:
        depth(n.name)
    return row


def _box(x: float, y: float, node: Node) -> str:
    return (f'<rect x="{x}" y="{y}" width="{NODE_W}" height="{NODE_H}" rx="8" class="task"/>'
            f'<text x="{x + NODE_W / 2}" y="{y + 20}" class="label">{html.escape(node.label)}</text>'
            f'<text x="{x + NODE_W / 2}" y="{y + 37}" class="comp">{html.escape(node.component)}</text>')


def svg(pipeline_doc: Dict[str, Any]) -> str:
    """The pipeline's graph as a standalone SVG document."""
    nodes = dag_nodes(pipeline_doc)
    rows = _rows(nodes)
    n_rows = max(rows.values()) + 1
    per_row: Dict[int, List[Node]] = {}
    for n in nodes:
        per_row.setdefault(rows[n.name], []).append(n)
    width = PAD * 2 + max(len(r) for r in per_row.values()) * (NODE_W + 2 * GAP) + 120
    title = pipeline_doc.get("pipelineInfo", {}).get("displayName") or pipeline_doc["pipelineInfo"]["name"]
    top = PAD + 34
    height = top + n_rows * ROW_H + sum(len(n.inner) for n in nodes) * (NODE_H + GAP) + PAD
    pos: Dict[str, Tuple[float, float, float]] = {}  # name -> x centre, top y, bottom y
    parts: List[str] = []
    for r in range(n_rows):
        row = per_row.get(r, [])
        y = top + r * ROW_H
        for i, n in enumerate(row):
            x = (width - len(row) * (NODE_W + 2 * GAP)) / 2 + GAP + i * (NODE_W + 2 * GAP)
            if n.inner:
                h = 30 + len(n.inner) * (NODE_H + GAP)
                parts.append(f'<rect x="{x - GAP}" y="{y}" width="{NODE_W + 2 * GAP}" height="{h}" rx="10" '
                             f'class="group"/><text x="{x}" y="{y + 19}" class="cond">'
                             f'if {html.escape(n.condition)}</text>')
                for j, inner in enumerate(n.inner):
                    parts.append(_box(x, y + 28 + j * (NODE_H + GAP), inner))
                pos[n.name] = (x + NODE_W / 2, y, y + h)
            else:
                parts.append(_box(x, y, n))
                pos[n.name] = (x + NODE_W / 2, y, y + NODE_H)
    edges: List[str] = []
    for n in nodes:
        for k, dep in enumerate(d for d in n.deps if d in pos):
            (x1, _, y1), (x2, y2, _) = pos[dep], pos[n.name]
            if rows[n.name] - rows[dep] == 1:
                edges.append(f'<path d="M{x1},{y1} L{x2},{y2 - 2}" class="edge"/>')
            else:  # a skip over rows: bend out to the right, further for longer skips
                bend = NODE_W / 2 + 18 + 14 * (rows[n.name] - rows[dep])
                edges.append(f'<path d="M{x1 + NODE_W / 2},{y1 - NODE_H / 2} C{x1 + bend},{y1 - NODE_H / 2} '
                             f'{x2 + bend},{y2 + 16} {x2 + NODE_W / 2 + (GAP if n.inner else 0)},{y2 + 16}" '
                             f'class="edge"/>')
    style = (".task{fill:#eef4fb;stroke:#3b6ea8;stroke-width:1.5}"
             ".group{fill:none;stroke:#8a8a8a;stroke-width:1.2;stroke-dasharray:5 4}"
             ".label{font:600 15px sans-serif;text-anchor:middle;fill:#1d2b3a}"
             ".comp{font:12px monospace;text-anchor:middle;fill:#5b6670}"
             ".cond{font:italic 12px monospace;fill:#6b4a00}"
             ".title{font:600 16px sans-serif;fill:#1d2b3a}"
             ".edge{fill:none;stroke:#7d8a96;stroke-width:1.4;marker-end:url(#arrow)}")
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
            f'viewBox="0 0 {width:.0f} {height:.0f}" role="img" aria-label="{html.escape(title)}">'
            f'<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
            f'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#7d8a96"/></marker></defs>'
            f'<style>{style}</style><rect width="100%" height="100%" fill="#ffffff"/>'
            f'<text x="{PAD}" y="{PAD + 8}" class="title">{html.escape(title)}</text>'
            + "".join(edges) + "".join(parts) + "</svg>\n")
