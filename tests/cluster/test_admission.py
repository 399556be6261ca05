"""Volcano's real admission webhook (vc-webhook-manager) sits in front of every Job in the tier.

* It is registered the way a production install registers it, serves with the tier's certificate,
  and a Job of ours passes it; its defaulting changes nothing the product relies on.
* Every Job our client-side check (:func:`ctr_volcano.training.volcano.manifest.validate_job`) refuses is
  refused by the real webhook too, with the webhook's own message: the client-side check is an early,
  friendlier copy of the server's rules, not a different set.
"""
from __future__ import annotations

import copy
import json

import pytest

from ctr_volcano.training.volcano.manifest import build_job, validate_job
from tests.cluster.helpers import get_job, make_spec

pytestmark = pytest.mark.cluster


def _create(api, namespace, body):
    from kubernetes import client
    return client.CustomObjectsApi(api).create_namespaced_custom_object(
        "batch.volcano.sh", "v1alpha1", namespace, "jobs", body)


def test_webhook_is_registered_with_the_tiers_ca_and_serving(cluster):
    import base64

    from kubernetes import client
    assert cluster.alive().get("vc-webhook-manager"), cluster.log_tail("vc-webhook-manager")
    adm = client.AdmissionregistrationV1Api(cluster.api_client())
    ca = cluster.pki["ca"].read_bytes()
    mutating = {c.metadata.name: c for c in adm.list_mutating_webhook_configuration().items}
    validating = {c.metadata.name: c for c in adm.list_validating_webhook_configuration().items}
    for name, confs in (("volcano-admission-service-jobs-mutate", mutating),
                        ("volcano-admission-service-jobs-validate", validating)):
        hook = confs[name].webhooks[0]
        assert hook.failure_policy == "Fail"
        assert base64.b64decode(hook.client_config.ca_bundle) == ca
        assert hook.client_config.url.startswith(cluster.webhook_url)


def test_our_job_passes_admission_and_the_defaulting_changes_nothing_we_rely_on(cluster, sandbox):
    api = sandbox.api()
    sent = build_job(make_spec(sandbox, "adm-ok", "/mnt/ctr/out"))
    _create(api, sandbox.namespace, copy.deepcopy(sent))
    stored = get_job(api, sandbox.namespace, "adm-ok")
    assert stored["spec"] == sent["spec"], "the mutating webhook changed the Job's spec"
    for key, value in sent["metadata"]["labels"].items():
        assert stored["metadata"]["labels"][key] == value


def _bad(job, what):
    job = copy.deepcopy(job)
    spec = job["spec"]
    if what == "task minAvailable > replicas":
        spec["tasks"][0]["minAvailable"] = spec["tasks"][0]["replicas"] + 1
    elif what == "job minAvailable > replicas":
        spec["minAvailable"] = sum(t["replicas"] for t in spec["tasks"]) + 1
    elif what == "duplicate task names":
        spec["tasks"][1]["name"] = spec["tasks"][0]["name"]
    elif what == "exitCode 0 policy":
        spec["policies"].append({"exitCode": 0, "action": "RestartJob"})
    elif what == "event in two policies":
        spec["policies"].append({"event": "PodFailed", "action": "AbortJob"})
    elif what == "unknown plugin":
        spec["plugins"]["nosuch"] = []
    elif what == "root queue":
        spec["queue"] = "root"
    else:  # pragma: no cover
        raise AssertionError(what)
    return job


@pytest.mark.parametrize("what", ["task minAvailable > replicas", "job minAvailable > replicas",
                                  "duplicate task names", "exitCode 0 policy", "event in two policies",
                                  "unknown plugin", "root queue"])
def test_a_job_our_check_refuses_is_refused_by_the_real_webhook(cluster, sandbox, what):
    from kubernetes import client
    good = build_job(make_spec(sandbox, "adm-bad", "/mnt/ctr/out"))
    assert validate_job(good) == []
    bad = _bad(good, what)
    assert validate_job(bad), f"our client-side check let '{what}' through"
    with pytest.raises(client.ApiException) as exc:
        _create(sandbox.api(), sandbox.namespace, bad)
    assert exc.value.status == 400, exc.value.body
    message = json.loads(exc.value.body)["message"]
    assert message.startswith('admission webhook "validatejob.volcano.sh" denied the request'), message
    assert get_job(sandbox.api(), sandbox.namespace, "adm-bad") is None
