"""Batch scoring on Volcano: a Job of N real scoring pods (the component image's environment, on
process nodes) sharing one claim, over prep's fan-out units. N=1 and N=3 pods write the shards the
one-process scorer writes for the same input, byte for byte, with the same counts and rejects."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from ctr_volcano.images import component_image
from ctr_volcano.scoring import ScoreArgs, score
from ctr_volcano.scoring.volcano import score_on_volcano
from ctr_volcano.training.volcano.client import KubeClient
from ctr_volcano.training.volcano.prep_job import PrepPods
from tests.cluster.test_process_nodes import _claim
from tests.scoring_fixtures import avazu_model, candidates, write_csv

pytestmark = pytest.mark.cluster

COMPONENT_IMAGE = component_image()   # as the product names it; the process nodes run its build
BLOCK = 24 << 10         # small units: the file makes a dozen, so each of 3 pods gets several


def _digests(out: Path) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.glob("part-*.parquet"))}


def test_score_pods_write_the_one_process_shards_for_1_and_3_pods(sandbox, tmp_path):
    sandbox.add_process_nodes(2)
    claim = _claim(sandbox, tmp_path)
    cols = candidates(4000, seed=21)
    raw = claim / "candidates"
    raw.mkdir()
    write_csv(raw / "a.csv", cols)
    text = (raw / "a.csv").read_text().split("\n")
    text[1200] = "1,2"                                     # line 1201: a wrong field count
    (raw / "a.csv").write_text("\n".join(text))
    model = avazu_model(tmp_path, cols)
    args = ScoreArgs(model=model, inputs=(str(raw),), out=str(tmp_path / "one"), keep=("id",), block_bytes=BLOCK)
    expected = score(args)
    client = KubeClient.from_kubeconfig(sandbox.launcher_kubeconfig)
    for n in (1, 3):
        lines: list = []
        pods = PrepPods(namespace=sandbox.namespace, image=COMPONENT_IMAGE, claim_name="ctr-data",
                        mount_path=str(claim), job_name=f"ctr-score-{n}", cpu="1", memory="1Gi",
                        node_selector=tuple(sandbox.node_selector.items()), schedule_timeout_s=300, poll_s=0.5)
        out = tmp_path / f"pods{n}"
        doc = score_on_volcano(ScoreArgs(model=model, inputs=(str(raw),), out=str(out), keep=("id",),
                                         workers=n, block_bytes=BLOCK), pods, client, log=lines.append)
        print(f"\nscoring on {n} pod(s): " + "; ".join(lines))
        assert _digests(out) == _digests(tmp_path / "one") and len(_digests(out)) == expected["units"] > 6
        assert {k: doc[k] for k in ("rows_in", "rows_scored", "rows_rejected", "rejected_by_reason")} \
            == {k: expected[k] for k in ("rows_in", "rows_scored", "rows_rejected", "rejected_by_reason")}
        rejects = [json.loads(x) for x in (out / "rejects.jsonl").read_text().splitlines()]
        assert [(r["line"], r["reason"]) for r in rejects] == [(1201, "wrong field count")]
        assert f"all {n} pods succeeded" in " ".join(lines)
        assert not (claim / "ctr-runs" / f"ctr-score-{n}" / "scores").exists()
        assert os.path.isfile(out / "scores.json")
