"""The Queue builder (``ctr-volcano render-queue``): valid against Volcano's own Queue CRD, and the
admission webhook's rules (guarantee <= deserved <= capability) refused before anything is applied."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from ctr_volcano.errors import BadInput
from ctr_volcano.training.volcano.queue import QueueSpec, build_queue, quantity_value, validate_queue_against_crd


@pytest.fixture(scope="module")
def queue_crd(volcano_job_crd) -> str:
    """Volcano's real Queue CRD, beside the Job CRD in the Volcano Go module."""
    return str(Path(volcano_job_crd).with_name("scheduling.volcano.sh_queues.yaml"))


def test_a_full_queue_matches_the_crd_and_carries_every_field(queue_crd):
    spec = QueueSpec("team-a", weight=3, deserved={"cpu": "6", "memory": "24Gi"},
                     capability={"cpu": "8", "memory": "32Gi"}, guarantee={"cpu": "4"},
                     reclaimable=False, priority=2)
    queue = build_queue(spec)
    assert validate_queue_against_crd(queue, queue_crd) == []
    assert queue == {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
                     "metadata": {"name": "team-a"},
                     "spec": {"weight": 3, "reclaimable": False,
                              "deserved": {"cpu": "6", "memory": "24Gi"},
                              "capability": {"cpu": "8", "memory": "32Gi"},
                              "guarantee": {"resource": {"cpu": "4"}}, "priority": 2}}


def test_a_bare_queue_leaves_unset_shares_out(queue_crd):
    queue = build_queue(QueueSpec("light"))
    assert queue["spec"] == {"weight": 1, "reclaimable": True}
    assert validate_queue_against_crd(queue, queue_crd) == []


def test_the_crd_check_finds_a_field_the_api_server_would_drop(queue_crd):
    queue = build_queue(QueueSpec("light"))
    queue["spec"]["weigth"] = 2
    assert any("weigth" in p for p in validate_queue_against_crd(queue, queue_crd))


@pytest.mark.parametrize("kwargs, field, fix", [
    (dict(name="Team-A"), "name", "DNS-1123"),
    (dict(name="root"), "name", "other than 'root'"),
    (dict(name="a", weight=0), "weight", "1 to 65535"),
    (dict(name="a", weight=True), "weight", "1 to 65535"),
    (dict(name="a", priority=-1), "priority", ">= 0"),
    (dict(name="a", deserved={"cpu": "six"}), "deserved", "Kubernetes quantity"),
    (dict(name="a", deserved={"cpu": "9"}, capability={"cpu": "8"}), "deserved", "within the capability cpu=8"),
    (dict(name="a", guarantee={"cpu": "2"}), "deserved", "at least the guarantee cpu=2"),
    (dict(name="a", guarantee={"memory": "4Gi"}, deserved={"memory": "3Gi"}), "deserved", "guarantee memory=4Gi"),
])
def test_bad_queues_are_refused_naming_the_field_and_the_fix(kwargs, field, fix):
    with pytest.raises(BadInput) as info:
        QueueSpec(**kwargs)
    assert info.value.field == field and fix in str(info.value)


def test_quantities_compare_across_units():
    assert quantity_value("500m") == 0.5 and quantity_value("2") == 2.0
    assert quantity_value("1Gi") == 2.0 ** 30 and quantity_value("1G") == 1e9 and quantity_value("3e3") == 3000.0
    assert QueueSpec("a", deserved={"memory": "1000Mi"}, capability={"memory": "1Gi"})   # 1000Mi < 1Gi


def test_render_queue_prints_the_builders_queue_and_checks_the_crd(queue_crd, capsys):
    from ctr_volcano.app.cli.main import main

    assert main(["render-queue", "--name", "heavy", "--weight", "3", "--deserved", "cpu=6",
                 "--capability", "cpu=8", "--no-reclaimable", "--check-crd", queue_crd, "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == build_queue(
        QueueSpec("heavy", weight=3, deserved={"cpu": "6"}, capability={"cpu": "8"}, reclaimable=False))


def test_render_queue_refuses_a_deserved_share_over_the_capability_with_exit_2(capsys):
    from ctr_volcano.app.cli.main import main

    assert main(["render-queue", "--name", "heavy", "--deserved", "cpu=9", "--capability", "cpu=8"]) == 2
    assert "--deserved='cpu=9': keep it within the capability cpu=8" in capsys.readouterr().err
