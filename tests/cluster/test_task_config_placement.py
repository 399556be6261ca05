"""A gang launched from a KFP TaskConfig lands where the task said: real vc-scheduler decisions.

The TaskConfig is what KFP's executor hands ``train_ctr`` (a ``dsl.TaskConfig`` with a toleration, a
node selector and the run workspace as a volume, a ReadWriteMany claim that kube-controller-manager's
persistent-volume binder binds, so the scheduler's VolumeBinding plugin sees a real bound claim); the
product maps it (``StepParams`` ->
``build_spec``), checks the workspace claim's access mode through the API as the launcher's own
ServiceAccount (shipped Role), and the launcher submits the gang. Nodes: two labelled and tainted
(the only ones the gang may use), two bigger ones with neither. A second gang with the same settings
but no toleration must stay unbound: the taint is real, and the toleration is what lets the gang in.
"""
from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import pytest

from tests.cluster.helpers import (
    LauncherThread,
    bound_pods,
    finish_trainers,
    job_phase,
    job_pods,
    running_pods,
    wait_for,
)

pytestmark = pytest.mark.cluster

GANG = 4  # 2 pservers + 2 trainers, 1 cpu each
LABEL = "ctr-test/accelerator"
TAINT = "ctr-test/dedicated"


def _workspace_claim(sandbox, name: str) -> None:
    """An RWX claim like the run workspace KFP creates, bound by kube-controller-manager's
    persistent-volume binder to a hostPath volume reserved for it; returns once it is Bound."""
    from kubernetes import client

    from ctr_volcano.training.volcano.handoff import build_pvc

    ns = sandbox.namespace
    core = client.CoreV1Api(sandbox.api())
    pv_name = f"pv-{ns}-{name}"
    host_dir = Path(tempfile.mkdtemp(prefix=f"ctr-claim-{ns}-"))  # kwok runs no pod: nothing writes here
    sandbox.cleanup.append(lambda: shutil.rmtree(host_dir, ignore_errors=True))
    sandbox.cluster.create_host_volume(pv_name, host_dir, ns, name)
    sandbox.cleanup.append(lambda: _drop_claim(core, ns, name, pv_name))
    core.create_namespaced_persistent_volume_claim(ns, build_pvc(name, ns, size="1Gi"))
    wait_for(f"claim {name} Bound by the persistent-volume binder",
             lambda: core.read_namespaced_persistent_volume_claim(name, ns).status.phase == "Bound",
             timeout=60, cluster=sandbox.cluster)


def _drop_claim(core, ns: str, name: str, pv_name: str) -> None:
    """Delete the claim and its volume; clear the protection finalizers (the mini cluster's
    kube-controller-manager runs no pvc-protection or pv-protection controller)."""
    from kubernetes import client

    for delete, patch, args in ((core.delete_namespaced_persistent_volume_claim,
                                 core.patch_namespaced_persistent_volume_claim, (name, ns)),
                                (core.delete_persistent_volume, core.patch_persistent_volume, (pv_name,))):
        for call in (lambda: delete(*args), lambda: patch(*args, {"metadata": {"finalizers": None}})):
            try:
                call()
            except client.ApiException as exc:
                if exc.status != 404:
                    raise


def _spec(sandbox, name: str, output_dir: str, task_config):
    from ctr_volcano.training.params import StepParams
    from ctr_volcano.training.task_config import TaskPodConfig
    from ctr_volcano.training.volcano.backend import build_spec

    params = StepParams(backend="volcano", namespace=sandbox.namespace, image="example.invalid/ctr-trainer:kwok",
                        workspace_path="/kfp-workspace", task_config=TaskPodConfig.from_kfp(task_config),
                        cpu="1", memory="1Gi", max_retry=1, schedule_timeout_s=300, epochs=1)
    spec = build_spec(params, f"/kfp-workspace/ctr-runs/{name}/data", output_dir, name=name)
    return params, spec


def test_gang_from_a_task_config_lands_only_on_the_tainted_labelled_nodes(cluster, sandbox, tmp_path):
    from kfp import dsl
    from kubernetes import client

    from ctr_volcano.training.volcano.backend import check_claims
    from ctr_volcano.training.volcano.client import KubeClient

    api, ns = sandbox.api(), sandbox.namespace
    core = client.CoreV1Api(api)
    pool = f"gpu-{sandbox.pool}"
    targets = sandbox.add_nodes(2, cpu="2")
    decoys = sandbox.add_nodes(2, cpu="8")
    for node in targets:
        core.patch_node(node, {"metadata": {"labels": {LABEL: pool}},
                               "spec": {"taints": [{"key": TAINT, "value": pool, "effect": "NoSchedule"}]}})
    claim = "run-1-kfp-workspace"
    _workspace_claim(sandbox, claim)
    toleration = {"key": TAINT, "operator": "Equal", "value": pool, "effect": "NoSchedule"}
    volumes = [{"name": "kfp-workspace", "persistentVolumeClaim": {"claimName": claim}}]
    mounts = [{"name": "kfp-workspace", "mountPath": "/kfp-workspace"}]
    task_config = dsl.TaskConfig(tolerations=[toleration], node_selector={LABEL: pool}, volumes=volumes,
                                 volume_mounts=mounts)
    out = tmp_path / "placed"
    out.mkdir()
    params, spec = _spec(sandbox, "placed", str(out), task_config)
    assert params.handoff_volume == ("task_config", claim)
    kube = KubeClient.from_kubeconfig(sandbox.launcher_kubeconfig)
    try:
        check_claims(kube, params)  # reads the claim as the launcher's ServiceAccount
    finally:
        kube.close()

    no_toleration = dsl.TaskConfig(node_selector={LABEL: pool}, volumes=volumes, volume_mounts=mounts)
    shut_out = tmp_path / "shut-out"
    shut_out.mkdir()
    _, spec_b = _spec(sandbox, "shut-out", str(shut_out), no_toleration)

    run = LauncherThread(sandbox.launcher_kubeconfig, spec).start()
    blocked = LauncherThread(sandbox.launcher_kubeconfig, spec_b).start()
    try:
        try:
            wait_for("the gang Running", lambda: len(running_pods(api, ns, "placed")) == GANG, timeout=90,
                     cluster=cluster)
        except BaseException:
            print("\n".join(run.lines[-20:]))
            raise
        pods = job_pods(api, ns, "placed")
        placed = {p.metadata.name: p.spec.node_name for p in pods}
        assert set(placed.values()) <= set(targets), f"pods outside the tainted/labelled nodes: {placed}"
        for pod in pods:
            assert pod.spec.node_selector == {LABEL: pool}
            assert any(t.key == TAINT and t.value == pool for t in pod.spec.tolerations or [])
            assert [v.persistent_volume_claim.claim_name for v in pod.spec.volumes
                    if v.persistent_volume_claim] == [claim]
        # without the toleration the same gang gets no node, though the decoys have room to spare
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            assert bound_pods(api, ns, "shut-out") == [], "a gang without the toleration got a node"
            time.sleep(0.25)
        assert job_phase(api, ns, "shut-out") == "Pending"
        finish_trainers(api, ns, "placed", str(out))
        run.join(90)
    finally:
        run.launcher.cancel()
        blocked.launcher.cancel()
        blocked.join(60)
    assert run.error is None, run.log
    assert run.result.metrics["auc"] == 0.75
    print(f"\nplaced on {sorted(set(placed.values()))}; decoys {decoys} unused")
