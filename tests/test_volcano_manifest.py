"""Job manifests: render-job output against the real Volcano CRD schema, plus the webhook's checks.

The CRD comes from the Volcano Go module (``tests/crds.py``: ``go mod download`` into Go's
module cache on first use); nothing from it is copied into the repo.
"""
from __future__ import annotations

import copy
import json

import pytest
import yaml

from ctr_volcano.app.cli.main import main as cli_main
from ctr_volcano.errors import BadInput
from ctr_volcano.training.store_access import SecretEnv
from ctr_volcano.training.volcano.manifest import (
    build_job,
    check_job,
    load_crd_schema,
    unknown_fields,
    validate_against_crd,
    validate_job,
)
from ctr_volcano.training.volcano.names import MAX_JOB_NAME, job_name_for
from ctr_volcano.training.volcano.spec import PREEMPTION_RESTARTS, PvcVolume, Resources, TrainJobSpec
from ctr_volcano.util.k8s_syntax import is_dns1035_label


@pytest.fixture(scope="module")
def crd(volcano_job_crd) -> str:
    return volcano_job_crd


TOL = json.dumps([{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}])
AFF = json.dumps({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
    {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}]}}})

# (id, extra argv) -- every combination is rendered by the real CLI and validated.
COMBOS = [
    ("defaults", []),
    ("one-each", ["--pservers", "1", "--trainers", "1"]),
    ("wide", ["--pservers", "8", "--trainers", "32"]),
    ("queue-priority", ["--queue", "research", "--priority-class", "high-priority"]),
    ("gpu", ["--gpus", "2", "--trainer-memory", "16Gi", "--trainer-cpu", "4"]),
    ("pserver-resources", ["--pserver-cpu", "500m", "--pserver-memory", "1Gi"]),
    ("no-retry", ["--max-retry", "0"]),
    ("many-retries", ["--max-retry", "10"]),
    ("keep-finished", ["--ttl", "-1"]),
    ("ttl-zero", ["--ttl", "0"]),
    ("node-selector", ["--node-selector", "pool=cpu", "--node-selector", "zone=a"]),
    ("tolerations", ["--tolerations", TOL]),
    ("affinity", ["--affinity", AFF]),
    ("service-account", ["--service-account", "ctr-trainer"]),
    ("pull-secrets", ["--image-pull-secret", "regcred", "--image-pull-secret", "regcred2",
                      "--image-pull-policy", "IfNotPresent"]),
    ("pvc", ["--pvc-name", "ctr-data", "--pvc-mount-path", "/mnt/ctr"]),
    ("secret-env", ["--secret-env", "AWS_ACCESS_KEY_ID=s3-creds:access-key",
                    "--secret-env", "AWS_SECRET_ACCESS_KEY=s3-creds:secret-key"]),
    ("env-labels", ["--env", "GLOG_v=1", "--label", "team=ads", "--label", "cost-center=42"]),
    ("ports", ["--ps-port", "40000", "--gloo-port", "40100"]),
    ("no-netpol", ["--disable-network-policy"]),
    ("shm", ["--shm-size", "1Gi"]),
    ("derived-name", ["--run-id", "5f1c2d7e-aaaa-bbbb-cccc-0123456789ab", "--task-name",
                      "train-ctr-with-a-very-long-task-name-that-gets-cut"]),
    ("explicit-dirs", ["--data-dir", "/data/prep", "--output-dir", "/data/out"]),
    ("object-store", ["--artifact-store", "s3", "--s3-secret", "store-creds", "--s3-endpoint",
                      "https://s3.example.internal:443", "--s3-root", "s3://ml/runs"]),
    ("topology-hard", ["--network-topology", "hard", "--highest-tier-allowed", "1"]),
    ("topology-soft", ["--network-topology", "soft"]),
    ("training-params", ["--epochs", "5", "--batch-size", "1024", "--lr", "0.01"]),
    ("everything", ["--pservers", "3", "--trainers", "5", "--queue", "q1", "--priority-class", "p1",
                    "--gpus", "1", "--node-selector", "a=b", "--tolerations", TOL, "--affinity", AFF,
                    "--service-account", "sa", "--image-pull-secret", "rc", "--pvc-name", "claim",
                    "--secret-env", "TOKEN=s:k", "--env", "A=1", "--label", "x=y", "--shm-size", "512Mi",
                    "--max-retry", "4", "--ttl", "60", "--disable-network-policy"]),
]


def render(capsys, argv):
    if "--pvc-name" not in argv and "s3" not in argv:   # the launcher refuses a Job without a hand-off
        argv = ["--pvc-name", "ctr-data"] + argv
    rc = cli_main(["render-job", "--namespace", "ml", "--image", "reg.local/ctr-trainer:1"] + argv)
    out = capsys.readouterr().out
    assert rc == 0
    return yaml.safe_load(out)


@pytest.mark.parametrize("argv", [c[1] for c in COMBOS], ids=[c[0] for c in COMBOS])
def test_render_job_validates_against_crd(capsys, crd, argv):
    if "--name" not in argv and "--run-id" not in argv:
        argv = ["--name", "ctr-demo"] + argv
    job = render(capsys, argv + ["--check-crd", crd])
    assert validate_against_crd(job, crd) == []
    assert validate_job(job) == []
    spec = job["spec"]
    replicas = {t["name"]: t["replicas"] for t in spec["tasks"]}
    # the gang is every pod, per task too; nothing is left to a webhook
    assert spec["minAvailable"] == sum(replicas.values())
    assert all(t["minAvailable"] == t["replicas"] for t in spec["tasks"])
    assert spec["schedulerName"] == "volcano"
    assert spec["maxRetry"] >= 1 and all(t["maxRetry"] == spec["maxRetry"] for t in spec["tasks"])
    trainer = next(t for t in spec["tasks"] if t["name"] == "trainer")
    assert trainer["policies"] == [{"event": "TaskCompleted", "action": "CompleteJob"}]
    for task in spec["tasks"]:
        pod = task["template"]["spec"]
        assert pod["restartPolicy"] == "Never"
        assert pod["securityContext"]["runAsNonRoot"] is True
        (container,) = pod["containers"]
        assert container["command"] == ["python", "-m", "ctr_model.train"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["CTR_ROLE"] == task["name"] and env["CTR_JOB_ID"] == job["metadata"]["name"]
        assert len(f"{job['metadata']['name']}-{task['name']}-{task['replicas'] - 1}") <= 63
    assert is_dns1035_label(job["metadata"]["name"])


def test_table_has_at_least_twenty_combinations():
    assert len(COMBOS) >= 20


def test_specific_fields_land_where_volcano_reads_them(capsys, crd):
    job = render(capsys, ["--name", "ctr-x", "--queue", "research", "--priority-class", "high",
                          "--gpus", "2", "--pvc-name", "claim", "--disable-network-policy", "--ttl", "-1",
                          "--max-retry", "0", "--secret-env", "TOKEN=creds:tok"])
    spec = job["spec"]
    assert spec["queue"] == "research" and spec["priorityClassName"] == "high"
    assert "ttlSecondsAfterFinished" not in spec
    # max_retry=0 restarts -> one attempt, plus room for restarts after the scheduler's evictions,
    # which the launcher does not count against max_retry (preemption.py)
    assert spec["maxRetry"] == 1 + PREEMPTION_RESTARTS
    assert spec["plugins"]["svc"] == ["--publish-not-ready-addresses", "--disable-network-policy"]
    assert {"event": "PodFailed", "action": "RestartJob"} in spec["policies"]
    ps, tr = spec["tasks"]
    assert tr["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert "nvidia.com/gpu" not in ps["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert [p["containerPort"] for p in ps["template"]["spec"]["containers"][0]["ports"]] == [36001, 36100]
    assert "ports" not in tr["template"]["spec"]["containers"][0]
    vol = ps["template"]["spec"]["volumes"][0]
    assert vol["persistentVolumeClaim"]["claimName"] == "claim"
    env = tr["template"]["spec"]["containers"][0]["env"]
    assert {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "tok"}}} in env
    from ctr_volcano.training.params import StepParams

    assert json.loads(next(e["value"] for e in env if e["name"] == "CTR_TRAIN_CONFIG"))["epochs"] == StepParams().epochs


def test_network_topology_lands_on_the_job_for_the_whole_gang(capsys, crd):
    """The Job's ``networkTopology`` (Volcano's job controller copies it onto the PodGroup), checked
    against the real CRD: a misspelt key would be reported as pruned."""
    hard = render(capsys, ["--name", "ctr-t", "--network-topology", "hard", "--highest-tier-allowed", "2",
                           "--check-crd", crd])
    assert hard["spec"]["networkTopology"] == {"mode": "hard", "highestTierAllowed": 2}
    assert validate_against_crd(hard, crd) == []
    assert all("partitionPolicy" not in t for t in hard["spec"]["tasks"])
    soft = render(capsys, ["--name", "ctr-t", "--network-topology", "soft"])
    assert soft["spec"]["networkTopology"] == {"mode": "soft"}
    assert "networkTopology" not in render(capsys, ["--name", "ctr-t"])["spec"]
    typo = copy.deepcopy(hard)
    typo["spec"]["networkTopology"]["highestTierAlowed"] = 1
    assert any("highestTierAlowed" in p for p in validate_against_crd(typo, crd))
    typo["spec"]["networkTopology"] = {"mode": "rack"}
    assert any("networkTopology" in p for p in validate_against_crd(typo, crd))


@pytest.mark.parametrize("argv, flag, fix", [
    (["--network-topology", "hard"], "--highest-tier-allowed", "Volcano ignores"),
    (["--network-topology", "soft", "--highest-tier-allowed", "1"], "--highest-tier-allowed", '"hard"'),
    (["--highest-tier-allowed", "1"], "--highest-tier-allowed", '"hard"'),
    (["--network-topology", "hard", "--highest-tier-allowed", "0"], "--highest-tier-allowed", ">= 1"),
])
def test_bad_network_topology_is_one_line_naming_the_flag(capsys, argv, flag, fix):
    rc = cli_main(["render-job", "--namespace", "ml", "--name", "ctr-x", "--pvc-name", "c"] + argv)
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert flag in err and fix in err


def test_bad_network_topology_mode_is_refused_by_the_spec_too():
    with pytest.raises(BadInput) as exc:
        TrainJobSpec(name="ctr-ok", namespace="ml", image="i:1", data_dir="/d", output_dir="/o",
                     network_topology="rack")
    assert exc.value.field == "network_topology" and "hard, soft" in str(exc.value)


def _valid_job():
    return build_job(TrainJobSpec(name="ctr-v", namespace="ml", image="i:1", data_dir="/d", output_dir="/o"))


@pytest.mark.parametrize("mutate, expected", [
    (lambda j: j["spec"].__setitem__("minAvailable", -1), "minAvailable"),
    (lambda j: j["spec"]["tasks"][0].__setitem__("name", "Bad_Name"), "tasks"),
    (lambda j: j["spec"]["policies"].append({"event": "NoSuchEvent", "action": "RestartJob"}), "event"),
    (lambda j: j["spec"].__setitem__("maxRetry", "3"), "maxRetry"),
    (lambda j: j["spec"].__setitem__("minAvailabel", 4), "minAvailabel"),
    (lambda j: j["spec"]["tasks"][1]["template"]["spec"].__setitem__("restartPolicyy", "Never"), "restartPolicyy"),
])
def test_crd_validation_catches_schema_errors_and_pruned_fields(crd, mutate, expected):
    job = _valid_job()
    assert validate_against_crd(job, crd) == []
    mutate(job)
    problems = validate_against_crd(job, crd)
    assert problems and any(expected in p for p in problems), problems


@pytest.mark.parametrize("mutate, expected", [
    (lambda j: j["spec"]["tasks"][1].__setitem__("name", "pserver"), "duplicate task names"),
    (lambda j: j["spec"]["tasks"][0].__setitem__("minAvailable", 5), "minAvailable 5 > replicas 2"),
    (lambda j: j["spec"].__setitem__("minAvailable", 9), "minAvailable 9 > total replicas 4"),
    (lambda j: j["spec"].__setitem__("minAvailable", 0), "not be gang-scheduled"),
    (lambda j: j["spec"].pop("schedulerName"), "default scheduler"),
    (lambda j: j["spec"]["tasks"].clear(), "at least one task"),
    (lambda j: j["spec"]["tasks"][0].pop("minAvailable"), "only the webhook"),
    (lambda j: j["spec"].__setitem__("queue", "root"), "leaf"),
    (lambda j: j["spec"]["policies"].append({"event": "PodFailed", "action": "AbortJob"}), "two policies"),
    (lambda j: j["spec"]["policies"].append({"event": "TaskFailed", "exitCode": 3, "action": "AbortJob"}),
     "mutually exclusive"),
    (lambda j: j["spec"]["policies"].append({"exitCode": 0, "action": "AbortJob"}), "exitCode 0"),
    (lambda j: j["spec"]["policies"].append({"events": ["*", "Unknown"], "action": "AbortJob"}), "'*'"),
    (lambda j: j["spec"]["plugins"].__setitem__("nope", []), "unknown plugin"),
    (lambda j: j["metadata"].__setitem__("name", "1-starts-with-digit"), "DNS-1035"),
    (lambda j: j["metadata"].__setitem__("name", "a" * 55), "> 63 characters"),
    (lambda j: j["spec"].__setitem__("maxRetry", 0), "maxRetry"),
])
def test_webhook_checks(mutate, expected):
    job = _valid_job()
    assert validate_job(job) == []
    mutate(job)
    problems = validate_job(job)
    assert any(expected in p for p in problems), problems
    with pytest.raises(BadInput):
        check_job(job)


def test_unknown_fields_walks_lists_and_maps(crd):
    schema = load_crd_schema(crd)
    job = copy.deepcopy(_valid_job())
    job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["envv"] = []
    job["spec"]["plugins"]["svc"] = ["--x"]  # a map of lists: values are free-form
    assert unknown_fields(job, schema) == [".spec.tasks[0].template.spec.containers[0].envv"]


def test_job_names_are_deterministic_distinct_and_short():
    a = job_name_for("run-1", "train-ctr")
    assert a == job_name_for("run-1", "train-ctr")
    assert a != job_name_for("run-2", "train-ctr") != job_name_for("run-1", "train-ctr-2")
    long = job_name_for("x" * 300, "T" * 300)
    assert len(long) <= MAX_JOB_NAME and is_dns1035_label(long)
    assert is_dns1035_label(job_name_for("{{$.pipeline_job_uuid}}", "Train CTR!"))
    with pytest.raises(BadInput, match="run_id"):
        job_name_for("", "t")


@pytest.mark.parametrize("field, value, fix", [
    ("name", "Has_Upper", "DNS-1035"),
    ("name", "a" * 55, "pod name"),
    ("namespace", "", "namespace"),
    ("image", "", "trainer image"),
    ("pservers", 0, "between 1 and 1000"),
    ("trainers", 2.5, "whole number"),
    ("queue", "root", "leaf"),
    ("max_retry", -1, "restarts"),
    ("ps_port", 80, "unprivileged"),
    ("gloo_port", 36001, "different from ps_port"),
    ("data_dir", "relative/path", "absolute"),
    ("env", {"CTR_ROLE": "x"}, "set by the launcher"),
    ("labels", {"volcano.sh/job-name": "x"}, "set by Volcano"),
    ("image_pull_policy", "Sometimes", "Always"),
    ("train_config", {"x": object()}, "JSON"),
])
def test_spec_rejects_bad_input_naming_field_and_fix(field, value, fix):
    base = dict(name="ctr-ok", namespace="ml", image="i:1", data_dir="/d", output_dir="/o")
    base[field] = value
    with pytest.raises(BadInput) as exc:
        TrainJobSpec(**base)
    assert exc.value.field.startswith(field) and fix in str(exc.value)


def test_nested_types_validate():
    with pytest.raises(BadInput, match="cpu"):
        Resources(cpu="lots")
    with pytest.raises(BadInput, match="mount_path"):
        PvcVolume("claim", "relative")
    with pytest.raises(BadInput, match="variable name"):
        SecretEnv("1BAD", "s", "k")
    with pytest.raises(BadInput, match="own mount_path"):
        TrainJobSpec(name="c", namespace="n", image="i", data_dir="/d", output_dir="/o",
                     volumes=[PvcVolume("a", "/m"), PvcVolume("b", "/m")])


def test_render_job_bad_flag_is_one_clear_line(capsys):
    rc = cli_main(["render-job", "--namespace", "ml", "--name", "ctr-x", "--pvc-name", "c", "--secret-env", "NOPE"])
    err = capsys.readouterr().err
    assert rc == 2 and "--secret-env='NOPE'" in err and "NAME=SECRET:KEY" in err
