"""report.html opened in a real browser: headless Chromium (Debian's package) lays out both charts.

Skipped where no Chromium is installed (``.ci/run`` installs it where it can). The page itself has no
scripts; the test adds one probe script to a copy that measures the charts after layout.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess

import numpy as np
import pytest

from ctr_volcano.evaluation import evaluate as ev

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)),
                None)

PROBE = """<script>
const out = [...document.querySelectorAll("svg")].map(svg => {
  const box = svg.getBoundingClientRect();
  const lines = [...svg.querySelectorAll("polyline")].map(p => p.getBBox());
  return {label: svg.getAttribute("aria-label"), width: box.width, height: box.height,
          lines: lines.map(b => [b.width, b.height]), points: svg.querySelectorAll("circle").length};
});
document.body.insertAdjacentHTML("beforeend", "<pre id='probe'>" + JSON.stringify(out) + "</pre>");
</script>"""


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get install chromium)")
def test_report_charts_render_with_nonzero_size_in_chromium(tmp_path):
    rng = np.random.default_rng(4)
    probs = rng.uniform(0.01, 0.6, 3000)
    labels = (rng.uniform(size=3000) < probs).astype(int)
    page = ev.render_report(ev.compute_metrics(labels, probs))
    (tmp_path / "report.html").write_text(page)
    probed = tmp_path / "probed.html"
    probed.write_text(page.replace("</body>", PROBE + "</body>"))
    res = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                          f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=3000",
                          "--dump-dom", probed.as_uri()], capture_output=True, text=True, timeout=120)
    m = re.search(r"<pre id=\"probe\">(.*?)</pre>", res.stdout, re.S)
    assert m, f"Chromium rendered no probe output (rc={res.returncode}): {res.stderr[-2000:]}"
    charts = {c["label"].split(" ")[0]: c for c in json.loads(m.group(1).replace("&quot;", '"'))}
    assert set(charts) == {"ROC", "Calibration"}, charts
    for name, chart in charts.items():
        assert chart["width"] > 100 and chart["height"] > 100, (name, chart)
        assert chart["lines"] and all(w > 0 and h > 0 for w, h in chart["lines"]), (name, chart)
    assert charts["Calibration"]["points"] == 10   # one marker per decile
