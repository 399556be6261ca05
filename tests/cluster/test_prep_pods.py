"""Issue 24's fanned-out prep on Volcano: each phase a Job of N real prep pods (the component image,
built from its Dockerfile, on process nodes) sharing one claim. N=1 and N=3 write the same shards, byte for byte,
as the one-process prep of the same input; a refused input fails in the one-process prep's line."""
from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import time
from pathlib import Path

import pytest

from ctr_volcano.data.prep import PrepConfig, prep
from ctr_volcano.errors import BadInput
from ctr_volcano.images import component_image
from ctr_volcano.training.volcano.client import KubeClient
from ctr_volcano.training.volcano.prep_job import PrepPods, prep_on_volcano
from tests.cluster.test_process_nodes import _claim

pytestmark = pytest.mark.cluster

COMPONENT_IMAGE = component_image()   # as the product names it; the process nodes run its build
#: Small blocks: the inputs make dozens of units, so every one of 3 workers gets many.
CONFIG = PrepConfig(hash_buckets=10_007, block_bytes=1 << 17, shards=3, test_shards=2, workers=1, seed=4)


def _digests(split_dirs) -> dict:
    return {f"{split}/{name}": hashlib.sha256((Path(d) / name).read_bytes()).hexdigest()
            for split, d in split_dirs for name in sorted(os.listdir(d))}


def _raw(dest: Path, sample_dir: Path) -> Path:
    (src,) = sorted(sample_dir.glob("part-00000.*"))[:1]
    lines = gzip.open(src, "rt").read().splitlines()[:24_000]
    for k in range(0, 12_000, 997):
        lines[k] = "1\t2\t3"
    dest.mkdir(parents=True)
    (dest / "a.tsv").write_text("\n".join(lines[:12_000]) + "\n")
    with gzip.open(dest / "b.tsv.gz", "wt") as fh:
        fh.write("\n".join(lines[12_000:]) + "\n")
    return dest


def _pods(sandbox, claim: Path, name: str) -> PrepPods:
    return PrepPods(namespace=sandbox.namespace, image=COMPONENT_IMAGE, claim_name="ctr-data",
                    mount_path=str(claim), job_name=name, cpu="1", memory="1Gi",
                    node_selector=tuple(sandbox.node_selector.items()), schedule_timeout_s=300, poll_s=0.5)


def test_prep_pods_write_the_one_process_shards_for_1_and_3_pods(sandbox, tmp_path, sample_dir):
    sandbox.add_process_nodes(2)
    claim = _claim(sandbox, tmp_path)
    raw = _raw(claim / "raw", sample_dir)
    expected = prep([str(raw)], str(tmp_path / "one"), CONFIG)
    want = _digests([("train", tmp_path / "one" / "train"), ("test", tmp_path / "one" / "test")])
    client = KubeClient.from_kubeconfig(sandbox.launcher_kubeconfig)
    for n in (1, 3):
        lines = []
        t0 = time.monotonic()
        stats = prep_on_volcano(str(raw), str(tmp_path / f"train{n}"), str(tmp_path / f"test{n}"), CONFIG, n,
                                _pods(sandbox, claim, f"ctr-prep-{n}"), client, log=lines.append)
        took = time.monotonic() - t0
        print(f"\nprep on {n} pod(s): {took:.1f} s; " + "; ".join(lines))
        assert _digests([("train", tmp_path / f"train{n}"), ("test", tmp_path / f"test{n}")]) == want
        assert {k: stats[k] for k in ("rows_in", "rows_train", "rows_test", "rows_rejected", "rejected_by_reason")} \
            == {k: expected[k] for k in ("rows_in", "rows_train", "rows_test", "rows_rejected", "rejected_by_reason")}
        assert stats["rows_rejected"] == 13 and stats["workers"] == n
        assert f"all {n} pods succeeded" in " ".join(lines)
        assert not (claim / "ctr-runs" / f"ctr-prep-{n}" / "prep").exists()   # the claim's copy is removed


def test_a_refused_input_fails_the_pods_in_the_one_process_line(sandbox, tmp_path, sample_dir):
    sandbox.add_process_nodes(1)
    claim = _claim(sandbox, tmp_path)
    raw = _raw(claim / "raw", sample_dir)
    whole = (raw / "b.tsv.gz").read_bytes()
    (raw / "b.tsv.gz").write_bytes(whole[: len(whole) // 2])     # a gzip file cut short
    with pytest.raises(BadInput) as one:
        prep([str(raw)], str(tmp_path / "one"), CONFIG)
    client = KubeClient.from_kubeconfig(sandbox.launcher_kubeconfig)
    with pytest.raises(BadInput) as pods:
        prep_on_volcano(str(raw), str(tmp_path / "train"), str(tmp_path / "test"), CONFIG, 2,
                        _pods(sandbox, claim, "ctr-prep-bad"), client, log=lambda line: None)
    assert str(pods.value) == str(one.value)
    assert not (tmp_path / "train").exists()
    shutil.rmtree(claim / "ctr-runs", ignore_errors=True)
