"""The README's pictures: the pipeline graph is drawn from the compiled DAG and is current; both PNGs
are real, small images (tools/docs/render_pictures.py renders them with headless Chromium)."""
from __future__ import annotations

import hashlib
import io
import sys
from pathlib import Path

import yaml
from PIL import Image

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools" / "docs"))

import pipeline_graph  # noqa: E402
import render_pictures  # noqa: E402

REGENERATE = "python tools/docs/render_pictures.py --only pipeline   (needs chromium)"


def _training_doc():
    return next(yaml.safe_load_all((REPO / "pipelines" / "ctr_training_pipeline.yaml").read_text()))


def test_graph_holds_the_compiled_dag_tasks_dependencies_and_condition():
    doc = _training_doc()
    nodes = {n.name: n for n in pipeline_graph.dag_nodes(doc)}
    assert set(nodes) == set(doc["root"]["dag"]["tasks"])
    for name, node in nodes.items():
        assert set(node.deps) == set(doc["root"]["dag"]["tasks"][name].get("dependentTasks", []))
    (group,) = [n for n in nodes.values() if n.inner]
    assert [t.component for t in group.inner] == ["publish-model"]
    assert group.condition == "check-auc-gate.Output == true"
    page = pipeline_graph.svg(doc)
    for label in ("raw data", "prepare data", "train (parameter server)", "evaluate", "AUC gate", "publish model"):
        assert f">{label}<" in page
    assert page.count('class="edge"') == sum(len(n.deps) for n in nodes.values())


def test_committed_pipeline_picture_was_rendered_from_the_committed_pipeline():
    png = (REPO / "docs" / "img" / "pipeline.png").read_bytes()
    want = hashlib.sha256(render_pictures.graph_svg().encode()).hexdigest()
    assert render_pictures.png_text(png).get("SVG-SHA256") == want, (
        f"docs/img/pipeline.png is stale: the compiled pipeline draws another graph. Regenerate with: {REGENERATE}")


def test_committed_pictures_are_small_real_pngs():
    for name in ("pipeline.png", "report.png"):
        data = (REPO / "docs" / "img" / name).read_bytes()
        assert len(data) < 200_000, (name, len(data))
        image = Image.open(io.BytesIO(data))
        image.load()
        assert image.format == "PNG" and min(image.size) >= 300, (name, image.size)
        assert image.convert("L").getextrema()[0] < 100, f"{name} has no dark pixels: a blank screenshot?"
        assert "Source" in image.text, name  # what it was rendered from


def test_text_chunks_written_here_are_read_by_pillow(tmp_path):
    buf = io.BytesIO()
    Image.new("RGB", (4, 3), "white").save(buf, format="PNG")
    tagged = render_pictures.with_png_text(buf.getvalue(), {"Source": "a test", "SVG-SHA256": "ab" * 32})
    image = Image.open(io.BytesIO(tagged))
    image.load()  # checks every chunk's CRC
    assert image.text == {"Source": "a test", "SVG-SHA256": "ab" * 32}
    assert render_pictures.png_text(tagged) == image.text
