"""The tier's HyperNodes (``tools/minicluster/topology.py``) against Volcano's real HyperNode CRD,
and the shipped scheduler configuration's topology plugin. The cluster tier uses them in
``tests/cluster/test_topology.py``."""
from __future__ import annotations

import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from ctr_volcano.training.volcano.manifest import load_crd_schema, unknown_fields

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools" / "minicluster"))

import topology  # noqa: E402

HYPERNODE_CRD = REPO.parent / "shared" / "volcano" / "crd" / "runtime" / "topology.volcano.sh_hypernodes.yaml"


@pytest.fixture(scope="module")
def hypernode_schema():
    if not HYPERNODE_CRD.is_file():
        pytest.skip(f"no HyperNode CRD at {HYPERNODE_CRD} (../shared beside the checkout)")
    return load_crd_schema(str(HYPERNODE_CRD), topology.VERSION)


def test_two_leaves_and_a_spine_validate_against_the_crd(hypernode_schema):
    objects = topology.hypernodes({"leaf-a": ["n-p0", "n-p1"], "leaf-b": ["n-p2", "n-p3"]}, "spine")
    for obj in objects:
        errors = [e.message for e in jsonschema.Draft7Validator(hypernode_schema).iter_errors(obj)]
        assert errors == [] and unknown_fields(obj, hypernode_schema) == [], obj
    leaf_a, leaf_b, spine = objects
    assert leaf_a["spec"] == {"tier": 1, "members": [
        {"type": "Node", "selector": {"exactMatch": {"name": "n-p0"}}},
        {"type": "Node", "selector": {"exactMatch": {"name": "n-p1"}}}]}
    assert leaf_b["spec"]["members"][1]["selector"]["exactMatch"]["name"] == "n-p3"
    assert spine["spec"]["tier"] == 2
    assert [(m["type"], m["selector"]["exactMatch"]["name"]) for m in spine["spec"]["members"]] == [
        ("HyperNode", "leaf-a"), ("HyperNode", "leaf-b")]
    broken = dict(leaf_a, spec={"tier": 1, "members": [{"type": "Rack", "selector": {}}]})
    assert list(jsonschema.Draft7Validator(hypernode_schema).iter_errors(broken))


@pytest.mark.parametrize("leaves, why", [
    ({"a": [], "b": ["n1"]}, "no nodes"),
    ({"a": ["n1"], "b": ["n1"]}, "in leaves a and b"),
])
def test_a_node_belongs_to_one_nonempty_leaf(leaves, why):
    with pytest.raises(ValueError, match=why):
        topology.hypernodes(leaves, "spine")


def test_shipped_scheduler_configuration_has_the_topology_plugin():
    conf = yaml.safe_load((REPO / "deploy" / "volcano-scheduler.conf").read_text())
    plugins = {p["name"]: p for tier in conf["tiers"] for p in tier["plugins"]}
    assert "network-topology-aware" in plugins
    # pods without a topology are placed as before (no HyperNode bin-packing of plain gangs)
    assert plugins["network-topology-aware"]["arguments"]["hypernode.binpack.normal-pod.enable"] is False
