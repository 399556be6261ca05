"""The Volcano CRDs come from the same Volcano release the mini cluster is built from."""
from __future__ import annotations

import re
from pathlib import Path

from tests.crds import VOLCANO_MODULE, VOLCANO_VERSION

GO_MOD = Path(__file__).resolve().parents[1] / "tools" / "minicluster" / "cluster" / "go.mod"


def test_crd_version_is_the_minicluster_volcano_version():
    pinned = re.search(rf"^\s*{re.escape(VOLCANO_MODULE)}\s+(\S+)", GO_MOD.read_text(), re.M)
    assert pinned and pinned.group(1) == VOLCANO_VERSION, (
        f"update tests/crds.py's VOLCANO_VERSION to {pinned and pinned.group(1)}")


def test_job_crd_is_volcanos_own(volcano_job_crd):
    import yaml

    doc = yaml.safe_load(Path(volcano_job_crd).read_text())
    assert doc["kind"] == "CustomResourceDefinition" and doc["metadata"]["name"] == "jobs.batch.volcano.sh"
