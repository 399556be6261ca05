"""Render the README's pictures with headless Chromium: the pipeline graph and an evaluation report.

* ``docs/img/pipeline.png``: the DAG of the committed ``pipelines/ctr_training_pipeline.yaml``, drawn by
  ``pipeline_graph.py``. The PNG records the SHA-256 of the SVG it was rendered from (a PNG ``tEXt``
  chunk), so ``tests/test_doc_pictures.py`` can tell when the compiled pipeline changed and the picture
  is stale, without depending on Chromium's exact pixels.
* ``docs/img/report.png``: the top of ``report.html`` from a real ``ctr-volcano run`` on the committed
  sample (run here in a temporary work dir, 30-90 s), or from ``--report PATH`` (e.g. the output of
  ``ctr-volcano evaluate``).

    python tools/docs/render_pictures.py                      # both pictures
    python tools/docs/render_pictures.py --only pipeline      # just the graph (no training)

Needs Debian's ``chromium`` (``apt-get install chromium``). Each picture must stay under 200 KB.
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import logging
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path
from typing import Dict, Optional

import pipeline_graph  # beside this script: sys.path[0] when run, put there by the tests when imported
import yaml

REPO = Path(__file__).resolve().parents[2]
IMG = REPO / "docs" / "img"
PIPELINE_YAML = REPO / "pipelines" / "ctr_training_pipeline.yaml"
MAX_BYTES = 200_000
REPORT_VIEW = (1000, 850)  # the metrics table and both charts
#: Chromium's headless screenshots sometimes leave the bottom of the window blank (the viewport is
#: shorter than --window-size): shoot this much taller, then crop to the view.
SLACK = 400

__all__ = ["graph_svg", "png_text", "with_png_text", "render_pipeline", "render_report", "main"]

log = logging.getLogger("render_pictures")


def graph_svg(pipeline_yaml: Path = PIPELINE_YAML) -> str:
    """The SVG of the compiled pipeline's DAG (what the PNG is rendered from)."""
    return pipeline_graph.svg(next(yaml.safe_load_all(pipeline_yaml.read_text())))


def png_text(data: bytes) -> Dict[str, str]:
    """The ``tEXt`` entries of a PNG."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    out, pos = {}, 8
    while pos < len(data):
        (length,), kind = struct.unpack(">I", data[pos:pos + 4]), data[pos + 4:pos + 8]
        if kind == b"tEXt":
            key, _, value = data[pos + 8:pos + 8 + length].partition(b"\0")
            out[key.decode("latin-1")] = value.decode("latin-1")
        pos += 12 + length
    return out


def with_png_text(data: bytes, entries: Dict[str, str]) -> bytes:
    """The PNG with ``tEXt`` chunks added right after its header chunk."""
    if data[:8] != b"\x89PNG\r\n\x1a\n" or data[12:16] != b"IHDR":
        raise ValueError("not a PNG")
    end_of_ihdr = 8 + 12 + struct.unpack(">I", data[8:12])[0]
    chunks = b""
    for key, value in entries.items():
        body = b"tEXt" + key.encode("latin-1") + b"\0" + value.encode("latin-1")
        chunks += struct.pack(">I", len(body) - 4) + body + struct.pack(">I", zlib.crc32(body))
    return data[:end_of_ihdr] + chunks + data[end_of_ihdr:]


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return name
    raise SystemExit("render_pictures: Chromium not found: install Debian's package (apt-get install chromium)")


def _screenshot(page: Path, out: Path, width: int, height: int) -> bytes:
    """A PNG of the page's top-left ``width`` x ``height`` pixels."""
    from PIL import Image

    with tempfile.TemporaryDirectory(prefix="ctr-chromium-") as profile:
        res = subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                              "--hide-scrollbars", "--virtual-time-budget=3000", f"--user-data-dir={profile}", f"--window-size={width},{height + SLACK}",
                              f"--screenshot={out}", page.as_uri()], capture_output=True, text=True, timeout=120)
    if res.returncode != 0 or not out.is_file():
        raise SystemExit(f"render_pictures: Chromium failed on {page} (rc={res.returncode}): {res.stderr[-1000:]}")
    buf = io.BytesIO()
    with Image.open(out) as shot:
        shot.crop((0, 0, width, height)).save(buf, format="PNG", optimize=True)
    return buf.getvalue()


def _write(dst: Path, png: bytes) -> None:
    if len(png) > MAX_BYTES:
        raise SystemExit(f"render_pictures: {dst.name} is {len(png)} bytes, over {MAX_BYTES}: shrink the view")
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_bytes(png)
    log.info("wrote %s (%d bytes)", dst.relative_to(REPO), len(png))


def render_pipeline(work: Path) -> None:
    """docs/img/pipeline.png from the committed compiled pipeline."""
    svg = graph_svg()
    page = work / "pipeline.svg"
    page.write_text(svg)
    width, height = (int(float(v)) for v in svg.split('viewBox="0 0 ', 1)[1].split('"', 1)[0].split())
    png = _screenshot(page, work / "pipeline.png", width, height)
    _write(IMG / "pipeline.png", with_png_text(png, {
        "Source": f"tools/docs/pipeline_graph.py of {PIPELINE_YAML.relative_to(REPO)}",
        "SVG-SHA256": hashlib.sha256(svg.encode()).hexdigest()}))


def render_report(work: Path, report: Optional[Path]) -> None:
    """docs/img/report.png from a given report.html or from a fresh ``ctr-volcano run``."""
    source = "given report"
    if report is None:
        workdir = work / "run"
        log.info("running the pipeline on data/sample (ctr-volcano run --workdir %s)", workdir)
        subprocess.run([sys.executable, "-m", "ctr_volcano.app.cli.main", "run", "--workdir", str(workdir)], cwd=REPO,
                       check=True, timeout=900)
        summary = json.loads((workdir / "summary.json").read_text())
        report = workdir / "report.html"
        source = f"ctr-volcano run on data/sample: AUC {summary['auc']:.4f}, log loss {summary['logloss']:.4f}"
    png = _screenshot(report, work / "report.png", *REPORT_VIEW)
    _write(IMG / "report.png", with_png_text(png, {"Source": source}))


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("pipeline", "report"), help="render one picture")
    parser.add_argument("--report", type=Path, help="an existing report.html instead of a fresh run")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    with tempfile.TemporaryDirectory(prefix="ctr-pictures-", dir="/tmp") as tmp:
        if args.only in (None, "pipeline"):
            render_pipeline(Path(tmp))
        if args.only in (None, "report"):
            render_report(Path(tmp), args.report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
