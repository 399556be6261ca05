"""Faults of the cluster itself while a real gang trains on process nodes (issue 25).

Shares the tier's session cluster (``tests/cluster/conftest.py``): a fault here is put right
before the test ends (a restarted component is up again), so later tests see a healthy cluster.
Every assertion is on real outcomes: the step's result, the Job's identity, the process table and
the model's AUC.
"""
from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest

from tests.cluster.helpers import assert_trained, get_job, job_phase, wait_for
from tests.cluster.test_process_nodes import GangSampler, StepThread, _alive, _claim, _evaluate_auc, _params
from tests.gang_helpers import parent_pid
from tests.s3store import restart_when_written

pytestmark = pytest.mark.cluster


def _roles(sampler: GangSampler) -> List[int]:
    """The four roles' own processes: not the helper children a role starts and ends as it goes (a
    fresh-clone run counted one, which had exited by the time the gang was checked again)."""
    live = sampler.live()
    return sorted(pid for pid in live if parent_pid(pid) not in live)


def test_a_restarted_apiserver_is_waited_out_and_the_step_succeeds(sandbox, tmp_path, planted):
    """kube-apiserver is killed and started again while a 2x2 gang trains: the launcher keeps
    polling with backoff, sees the same Job when the server answers, and the step succeeds with one
    attempt, one Job and the gang's processes never replaced; the model scores near the oracle."""
    from kubernetes import client

    sandbox.add_process_nodes(2)
    claim = _claim(sandbox, tmp_path)
    job = "ctr-api"
    with GangSampler(job) as sampler:
        step = StepThread(planted["prep"], str(tmp_path / "model"), _params(sandbox, claim, job, epochs=3)).start()
        lines = step.lines
        wait_for("the four gang processes", lambda: len(_roles(sampler)) == 4, timeout=300,
                 cluster=sandbox.cluster)
        wait_for("training under way", lambda: any("[trainer-0]" in line and "epoch" in line
                                                   for line in list(lines)), timeout=300)
        uid = get_job(sandbox.api(), sandbox.namespace, job)["metadata"]["uid"]
        gang = _roles(sampler)
        unreachable_s = sandbox.cluster.restart_apiserver(down_s=3.0)
        after = _roles(sampler)   # the gang's processes once the server is back: none new
        step.join(600)
    result, log = step.succeeded(), step.log
    retries = [line for line in lines if "API error, retrying" in line]
    refused = [line for line in lines if "refused right after an outage" in line]
    back = [line for line in lines if "API server answers again" in line]
    print(f"\napiserver restart: unreachable {unreachable_s:.1f}s; {len(retries)} launcher retries, "
          f"{len(refused)} refusals (403) after it; "
          f"{back[0].strip() if back else 'no retry line'}")
    assert retries and back, log                      # the launcher saw the outage and got past it
    assert set(after) <= set(gang), (gang, after)     # not replaced (it may have finished meanwhile)
    assert result.attempts == 1, log                  # no gang restart
    api = sandbox.api()
    jobs = client.CustomObjectsApi(api).list_namespaced_custom_object(
        "batch.volcano.sh", "v1alpha1", sandbox.namespace, "jobs")["items"]
    assert [(j["metadata"]["name"], j["metadata"]["uid"]) for j in jobs] == [(job, uid)]   # no duplicate
    assert job_phase(api, sandbox.namespace, job) == "Completed"
    auc = _evaluate_auc(tmp_path / "model", planted["prep"], tmp_path / "eval")
    print(f"apiserver restart: test AUC {auc:.4f}, oracle {planted['oracle_auc']:.4f}")
    assert_trained(auc, planted["oracle_auc"])
    wait_for("no process of the gang left", lambda: not sampler.live(), timeout=60)


def test_the_store_restarted_during_a_checkpoint_upload_costs_retries_not_the_run(
        sandbox, tmp_path, planted, own_s3, monkeypatch):
    """SeaweedFS is killed and started again as the gang's first checkpoint lands in it (the
    object-store hand-off, no volume): the pods' uploads retry, the step succeeds with one attempt,
    the model is complete (a row for every id trained on: no shard lost) and near the oracle, and the
    run's objects are deleted.

    Two pservers and one trainer: what the restart hits is the pservers' uploads, which trainer 0
    waits for. Two trainers add the async runs' spread (docs/training.md, "Run-to-run spread": a CI
    run's 2x2 gang here scored 0.683, with nothing lost), which is not this test's subject."""
    from kubernetes import client

    from ctr_model import store as s3
    from ctr_volcano.training.step import run_training_step

    ns, job = sandbox.namespace, "ctr-s3-restart"
    sandbox.add_process_nodes(2)
    client.CoreV1Api(sandbox.api()).create_namespaced_secret(ns, {
        "metadata": {"name": "store-creds"},
        "stringData": {"accesskey": own_s3.access_key, "secretkey": own_s3.secret_key}})
    service = sandbox.cluster.host_service("s3", ns, int(own_s3.endpoint.rsplit(":", 1)[1]))
    sandbox.cleanup.append(service.stop)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", own_s3.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", own_s3.secret_key)
    bucket = own_s3.create_bucket("faults")
    root = s3.join(bucket, "ctr-runs")
    seen: Dict[str, object] = {}
    killer = threading.Thread(target=restart_when_written, daemon=True,
                              args=(own_s3, f"faults/ctr-runs/{job}/output/checkpoints", 2.0, seen, 600.0, 0.05))
    killer.start()
    lines: List[str] = []
    try:
        with GangSampler(job) as sampler:
            result = run_training_step(planted["prep"], str(tmp_path / "model"), _params(
                sandbox, None, job, trainers=1, epochs=3, artifact_store="s3", s3_endpoint=service.url,
                s3_step_endpoint=own_s3.endpoint, s3_secret="store-creds", s3_root=root),
                log=lines.append)
    finally:
        seen["stop"] = True
        killer.join(120)
        service.stop()
    log = "\n".join(lines)
    retries = [line for line in lines if "store: " in line and "; retry " in line]
    print(f"\nstore restart: unreachable {seen.get('unreachable_s', 0):.1f}s with "
          f"{seen.get('written_at_kill')} checkpoint objects written; {len(retries)} retries in the "
          f"streamed pod logs; attempts {result.attempts}")
    assert seen.get("written_at_kill"), "the store was never restarted during a checkpoint"
    assert job_phase(sandbox.api(), ns, job) == "Completed", log
    assert result.attempts == 1, log
    assert (tmp_path / "model" / "model_meta.json").is_file()
    keys, ids = _model_keys(tmp_path / "model"), _trained_ids(planted["prep"])
    assert np.array_equal(keys, ids), (len(keys), len(ids))
    auc = _evaluate_auc(tmp_path / "model", planted["prep"], tmp_path / "eval")
    print(f"store restart: {len(keys)} sparse keys, every id of the training split; test AUC {auc:.4f}, oracle {planted['oracle_auc']:.4f}")
    assert_trained(auc, planted["oracle_auc"])
    store = s3.Store(s3.StoreConfig(endpoint=own_s3.endpoint, access_key=own_s3.access_key,
                                    secret_key=own_s3.secret_key))
    assert [n for n, is_dir in store.list(root, recursive=True) if not is_dir] == []   # run deleted
    wait_for("no process of the gang left", lambda: not sampler.live(), timeout=60)


def _model_keys(model_dir: Path) -> np.ndarray:
    """The exported model's sparse keys, sorted (the planted data's one table, as the scorer loads it)."""
    from ctr_model.infer import load_model

    return load_model(str(model_dir)).keys


def _trained_ids(prep: str) -> np.ndarray:
    """The distinct categorical ids of the training split (the planted Criteo layout), sorted: the
    keys a complete export has, one row each."""
    import pyarrow.parquet as pq

    columns = [f"C{i}" for i in range(1, 27)]
    tables = [pq.read_table(p, columns=columns) for p in sorted((Path(prep) / "train").glob("part-*.parquet"))]
    return np.unique(np.concatenate([c.to_numpy() for t in tables for c in t.columns])).astype(np.uint64)


def test_a_lost_node_restarts_the_gang_on_the_others_from_its_checkpoint(sandbox, tmp_path, planted):
    """A process node is lost mid-training (after the first checkpoint): its pods' processes die
    with it, the node goes NotReady and is removed, and the pod garbage collector deletes its pods.
    Volcano restarts the gang (same Job) on the nodes left, it resumes from the checkpoint on the
    claim, the step succeeds and the model scores near the oracle."""
    from kubernetes import client
    from nodeagent import ANN_NETNS, netns_pids

    from ctr_model import checkpoint as ckpt

    sandbox.add_process_nodes(3)
    claim = _claim(sandbox, tmp_path)
    job = "ctr-node"
    output = claim / "ctr-runs" / job / "output"
    core = client.CoreV1Api(sandbox.api())

    def gang_pods():
        return [p for p in core.list_namespaced_pod(sandbox.namespace).items
                if (p.metadata.labels or {}).get("volcano.sh/job-name") == job]

    with GangSampler(job) as sampler:
        step = StepThread(planted["prep"], str(tmp_path / "model"), _params(
            sandbox, claim, job, epochs=3, config={"checkpoint_secs": 0})).start()
        wait_for("the first checkpoint on the claim",
                 lambda: output.is_dir() and ckpt.latest_complete(str(output)) is not None,
                 timeout=300, interval=0.3, cluster=sandbox.cluster)
        uid = get_job(sandbox.api(), sandbox.namespace, job)["metadata"]["uid"]
        first = {p.metadata.name: p for p in gang_pods()}
        node = first[f"{job}-trainer-1"].spec.node_name
        on_node = sorted(n for n, p in first.items() if p.spec.node_name == node)
        victims = [pid for p in first.values() if p.spec.node_name == node
                   for pid in netns_pids(p.metadata.annotations[ANN_NETNS])]
        assert victims, f"no process of the gang found on {node}"
        t_lost = time.monotonic()
        sandbox.cluster.lose_node(node)
        wait_for(f"the processes on {node} dead", lambda: not [p for p in victims if _alive(p)], timeout=30)
        old_uids = {p.metadata.uid for p in first.values()}

        def new_gang_running():
            pods = gang_pods()
            fresh = [p for p in pods if p.metadata.uid not in old_uids and p.status.phase == "Running"]
            return fresh if len(fresh) == 4 else None

        regang = wait_for("the gang running again on the other nodes", new_gang_running, timeout=400,
                          interval=0.5, cluster=sandbox.cluster)
        recovered_s = time.monotonic() - t_lost
        step.join(600)
    result, log = step.succeeded(), step.log
    assert node not in {p.spec.node_name for p in regang}
    assert result.attempts == 2, log
    resumed = [line for line in log.splitlines() if "resumed from" in line]
    assert resumed, log
    assert get_job(sandbox.api(), sandbox.namespace, job)["metadata"]["uid"] == uid   # the same Job
    assert job_phase(sandbox.api(), sandbox.namespace, job) == "Completed"
    auc = _evaluate_auc(tmp_path / "model", planted["prep"], tmp_path / "eval")
    causes = [line.strip() for line in step.lines if "attempt 1 restarted:" in line]
    assert causes and "no failed or evicted pod" not in causes[0], log   # the restart is explained
    print(f"\nnode lost: {node} with {', '.join(on_node)}; gang running again on the other nodes "
          f"{recovered_s:.0f}s later; {resumed[0].strip()}; test AUC {auc:.4f}, oracle "
          f"{planted['oracle_auc']:.4f}; {causes[0]}")
    assert result.metrics.get("resumed_from_epoch", 0) >= 1
    assert_trained(auc, planted["oracle_auc"])
    wait_for("no process of the gang left", lambda: not sampler.live(), timeout=60)


@pytest.mark.skipif(os.geteuid() != 0, reason="a real full claim needs root (a tmpfs mounted as the claim)")
def test_a_claim_that_fills_during_a_checkpoint_fails_the_step_in_one_line(sandbox, tmp_path, planted):
    """The claim is a real tmpfs; once the gang's first checkpoint is complete it is filled to leave
    half a checkpoint's room: the next checkpoint's writer exits 2 with one line naming the path,
    the Job ends without a restart (a restarted gang would fill it again), no model is exported,
    and the first checkpoint stays complete for a later run."""
    from ctr_model import checkpoint as ckpt
    from ctr_model.space import tree_bytes

    sandbox.add_process_nodes(2)
    claim = _claim(sandbox, tmp_path, tmpfs_size="512m")
    job = "ctr-full"
    output = claim / "ctr-runs" / job / "output"
    with GangSampler(job) as sampler:
        step = StepThread(planted["prep"], str(tmp_path / "model"), _params(
            sandbox, claim, job, epochs=3, config={"checkpoint_secs": 0})).start()
        first = wait_for("the first checkpoint on the claim", lambda: output.is_dir() and ckpt.latest_complete(
            str(output)), timeout=300, interval=0.2, cluster=sandbox.cluster)
        size = tree_bytes(first.path, allocated=True)
        st = os.statvfs(claim)
        subprocess.run(["fallocate", "-l", str(st.f_bavail * st.f_frsize - size // 2), str(claim / "filler")],
                       check=True)
        step.join(600)
        wait_for("no process of the gang left", lambda: not sampler.live(), timeout=60)
    log, lines, err = step.log, step.lines, step.error
    assert err is not None, f"the step succeeded on a full claim\n{log}"
    head = str(err).splitlines()[0]
    print(f"\nfull claim after a {size}-byte checkpoint: {type(err).__name__}: {head[:400]}")
    assert "': no space left on device: " in str(err) and str(claim) in str(err), f"{err}\n{log}"
    assert getattr(err, "exit_code", None) == 2, f"{err!r}\n{log}"
    assert not [line for line in lines if "restarted:" in line], log          # no restart
    assert ckpt.latest_complete(str(output)).path == first.path               # the first one kept
    assert not (tmp_path / "model" / "model_meta.json").exists()


def test_a_claim_the_pods_cannot_reach_fails_in_one_line_without_restarts(sandbox, tmp_path, planted):
    """Item 3 as a user meets it: the claim's directory is one the pods' non-root user cannot
    traverse (mode 0700, root's: an export not opened to the pods' UID). The pods see the claim at
    its mount path in their image's tree, so only the volume's own directory can shut them out, as
    on a cluster. Every role checks its output directory first and exits 2: the step fails with
    one line naming the path, and the gang is never restarted."""
    import shutil
    import tempfile

    from ctr_volcano.training.step import run_training_step

    private = Path(tempfile.mkdtemp(prefix="ctr-private-", dir="/var/tmp"))
    sandbox.cleanup.append(lambda: shutil.rmtree(private, ignore_errors=True))
    assert os.stat(private).st_mode & 0o777 == 0o700
    sandbox.add_process_nodes(2)
    claim = _claim(sandbox, tmp_path, under=private)
    claim.chmod(0o700)          # the volume itself, root's and closed (its host parent is too)
    job = "ctr-noreach"
    lines: List[str] = []
    with pytest.raises(Exception) as info:
        run_training_step(planted["prep"], str(tmp_path / "model"), _params(sandbox, claim, job, epochs=1),
                          log=lines.append)
    err, log = info.value, "\n".join(lines)
    head = str(err).splitlines()[0]
    print(f"\nunreachable claim: {type(err).__name__}: {head[:400]}")
    assert getattr(err, "exit_code", None) == 2, f"{err!r}\n{log}"
    assert str(private) in head, f"{err}\n{log}"
    assert "Traceback" not in head
    assert not [line for line in lines if "restarted:" in line], log
    assert job_phase(sandbox.api(), sandbox.namespace, job) in ("Terminated", "Failed", None), log
