"""The prep fan-out's Volcano Job: the manifest against the real CRD schema, and the runner's own logic
(what a failed or unplaced phase raises) on a scripted client. The pods themselves run in the cluster
tier (tests/cluster/test_prep_pods.py)."""
from __future__ import annotations

import json
import os

import pytest

from ctr_volcano.data.prep.fanout import FanoutFailed
from ctr_volcano.errors import BadInput
from ctr_volcano.training.volcano.manifest import validate_against_crd, validate_job
from ctr_volcano.training.volcano.prep_job import PrepPods, VolcanoRunner, build_prep_job


def _pods(tmp_path, **over) -> PrepPods:
    fields = dict(namespace="ml", image="reg.local/ctr-trainer:1", claim_name="ctr-data",
                  mount_path=str(tmp_path), job_name="ctr-prep-run1", schedule_timeout_s=5.0, poll_s=1.0)
    fields.update(over)
    return PrepPods(**fields)


def test_the_job_is_a_gang_of_n_valid_against_the_crd(tmp_path, volcano_job_crd):
    job = build_prep_job(_pods(tmp_path, node_selector=(("pool", "cpu"),)), "parse", f"{tmp_path}/w", 3)
    assert validate_against_crd(job, volcano_job_crd) == [] and validate_job(job) == []
    spec = job["spec"]
    (task,) = spec["tasks"]
    assert job["metadata"]["name"] == "ctr-prep-run1-parse"
    assert spec["minAvailable"] == task["minAvailable"] == task["replicas"] == 3
    assert spec["plugins"] == {"env": []}            # VC_TASK_INDEX is the worker's index
    assert spec["policies"][0] == {"exitCode": 2, "action": "TerminateJob"}
    pod = task["template"]["spec"]
    assert pod["containers"][0]["command"] == ["python", "-m", "ctr_volcano.data.prep.fanout", "parse",
                                               "--work", f"{tmp_path}/w", "--count", "3"]
    assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == "ctr-data"
    assert pod["containers"][0]["volumeMounts"][0]["mountPath"] == str(tmp_path)
    assert pod["nodeSelector"] == {"pool": "cpu"} and pod["restartPolicy"] == "Never"


class _Client:
    """Answers the runner's calls from a script: the Job's phases in turn, the pods, their logs."""

    def __init__(self, phases, pods=(), podgroup=None):
        self.phases, self.pods, self.podgroup = list(phases), list(pods), podgroup
        self.created, self.deleted, self.exists = [], [], False

    def create_job(self, job):
        self.created.append(job)
        self.exists = True
        return job

    def get_job(self, namespace, name):
        if not self.exists:
            return None
        phase = self.phases.pop(0) if len(self.phases) > 1 else self.phases[0]
        return {"metadata": {"uid": "u1"}, "status": {"state": {"phase": phase}}}

    def delete_job(self, namespace, name):
        self.deleted.append(name)
        was, self.exists = self.exists, False
        return was

    def list_pods(self, namespace, selector):
        return self.pods

    def read_log(self, namespace, pod, tail_lines=None):
        return f"starting\nlast line of {pod}\n"

    def get_podgroup(self, namespace, name):
        return self.podgroup if name == "ctr-prep-run1-parse-u1" else None


def _failed(name, code):
    return {"metadata": {"name": name},
            "status": {"containerStatuses": [{"state": {"terminated": {"exitCode": code}}}]}}


def _runner(client, tmp_path, **over):
    t = [0.0]

    def sleep(s):
        t[0] += s
    return VolcanoRunner(client, _pods(tmp_path, **over), clock=lambda: t[0], sleep=sleep, log=lambda line: None)


def test_a_phase_whose_pods_succeed_returns_and_deletes_its_job(tmp_path):
    client = _Client(["Pending", "Running", "Completed"])
    _runner(client, tmp_path).run("parse", f"{tmp_path}/w", 2)
    assert len(client.created) == 1 and client.deleted == ["ctr-prep-run1-parse"] * 2


def test_a_refused_input_comes_back_as_the_worker_raised_it(tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    (work / "error-parse-1.json").write_text(json.dumps({"field": "input", "value": "/d/b.gz", "fix": "re-download it"}))
    client = _Client(["Running", "Terminated"], pods=[_failed("ctr-prep-run1-parse-0", 137),
                                                      _failed("ctr-prep-run1-parse-1", 2)])
    with pytest.raises(BadInput) as err:
        _runner(client, tmp_path).run("parse", str(work), 2)
    assert str(err.value) == "input='/d/b.gz': re-download it"


def test_another_failure_names_the_worker_and_its_last_log_line(tmp_path):
    client = _Client(["Running", "Failed"], pods=[_failed("ctr-prep-run1-write-1", 137)])
    with pytest.raises(FanoutFailed, match=r"write worker 1 exited 137: last line of ctr-prep-run1-write-1"):
        _runner(client, tmp_path).run("write", f"{tmp_path}/w", 2)


@pytest.mark.parametrize("pods, why", [
    ([{"metadata": {"name": "ctr-prep-run1-write-0"}, "status": {"containerStatuses": [
        {"state": {"waiting": {"reason": "ErrImagePull", "message": "pull access denied for reg.local/x"}}}]}}],
     "pod ctr-prep-run1-write-0: ErrImagePull: pull access denied for reg.local/x"),
    ([], "no pod of it is left to say why"),
])
def test_a_job_that_failed_without_a_failed_pod_says_what_its_pods_show(tmp_path, pods, why):
    """A pod whose image cannot be pulled never exits: the failure names the pull, not only the phase."""
    client = _Client(["Running", "Failed"], pods=pods)
    with pytest.raises(FanoutFailed, match="the Job ended Failed with no pod that exited non-zero; " + why):
        _runner(client, tmp_path).run("write", f"{tmp_path}/w", 2)


def test_an_unplaced_gang_fails_with_its_podgroup_reason(tmp_path):
    pg = {"status": {"phase": "Pending", "conditions": [
        {"type": "Unschedulable", "status": "True", "reason": "NotEnoughResources",
         "message": "3/3 tasks in gang unschedulable"}]}}
    with pytest.raises(BadInput, match=r"not scheduled within 5 s \(PodGroup ctr-prep-run1-parse-u1 Pending: "
                                       r"Unschedulable \(NotEnoughResources\)"):
        _runner(_Client(["Pending"], podgroup=pg), tmp_path).run("parse", f"{tmp_path}/w", 3)


def test_the_work_directory_must_be_on_the_claim(tmp_path):
    with pytest.raises(BadInput, match="pvc_mount_path"):
        _runner(_Client(["Completed"]), tmp_path).run("parse", os.path.dirname(str(tmp_path)) + "/elsewhere", 1)
