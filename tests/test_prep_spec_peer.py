"""The benchmark's polars peer for a feature spec (``bench/prep_spec_peer.py``) agrees with our
generic prep row for row, and its check can fail.

``bench/prep.py`` compares them on a sample of a few hundred MB; this runs the same peer and check
on every row of a few thousand, with ids of every length the hash distinguishes (under, exactly and
over 8 bytes, multi-byte UTF-8), empty values, empty items and lists longer than ``max_length``.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from ctr_model.feature_spec import spec_from_dict
from ctr_volcano.app.cli.main import main
from ctr_volcano.data.prep import PrepConfig, prep

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from prep_spec_peer import BENCH_SPEC, compare_spec_outputs, polars_spec_prep

SPEC = dict(BENCH_SPEC, categorical=[dict(c, max_length=3) if c.get("multivalued") else c
                                     for c in BENCH_SPEC["categorical"]])
EDGE_LINES = [
    "1,2.5,40.0,3,abcdefgh,x|y,,0",                                   # an 8-byte id
    "0,,,,user_with_a_very_long_id_0123456789,,site_0,0",             # 37 bytes; empty items
    "1,0.0,-3.25,0,caf\u00e9_\u00fcber,a||b|c|d|e,s\u00e9,0",         # UTF-8; an empty item; > max_length
    "0,7,12,5,u,|,site_299,0",                                        # a list of empty items
]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    d = tmp_path_factory.mktemp("spec_raw")
    (d / "spec.json").write_text(json.dumps(SPEC))
    assert main(["gen-data", "--feature-spec", str(d / "spec.json"), "--rows", "4000", "--out",
                 str(d / "raw"), "--seed", "4", "--oracle-rows", "1000"]) == 0
    path = d / "raw" / "part-00000.csv"
    lines = path.read_text().splitlines()
    for k, line in enumerate(EDGE_LINES):
        lines.insert(300 + 700 * k, line)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return [str(path)]


@pytest.fixture(scope="module")
def ours(inputs, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("ours"))
    stats = prep(inputs, out, PrepConfig(seed=7, test_fraction=0.2, shards=2, test_shards=1),
                 spec=spec_from_dict(SPEC))
    assert stats["rows_rejected"] == 0 and stats["rows_in"] == 4000 + len(EDGE_LINES)
    return out


def test_polars_peer_agrees_on_every_row(inputs, ours, tmp_path):
    polars_spec_prep(spec_from_dict(SPEC), inputs, str(tmp_path / "peer"), seed=7, test_fraction=0.2)
    check = compare_spec_outputs(spec_from_dict(SPEC), ours, str(tmp_path / "peer"), sample_mod=1)
    assert check["ok"], check["problems"]
    assert check["rows_checked"] == 4000 + len(EDGE_LINES)
    sampled = compare_spec_outputs(spec_from_dict(SPEC), ours, str(tmp_path / "peer"), sample_mod=8)
    assert sampled["ok"] and 0 < sampled["rows_checked"] < check["rows_checked"] / 4


@pytest.mark.parametrize("change", ["seed", "hash_buckets", "max_length"])
def test_the_check_catches_a_peer_that_differs(change, inputs, ours, tmp_path):
    doc, seed = json.loads(json.dumps(SPEC)), 7
    if change == "seed":
        seed = 8
    elif change == "hash_buckets":
        doc["categorical"][0]["hash_buckets"] = 100_019
    else:
        doc["categorical"][1]["max_length"] = 4
    polars_spec_prep(spec_from_dict(doc), inputs, str(tmp_path / "peer"), seed=seed, test_fraction=0.2)
    check = compare_spec_outputs(spec_from_dict(SPEC), ours, str(tmp_path / "peer"), sample_mod=1)
    assert not check["ok"] and check["problems"]
