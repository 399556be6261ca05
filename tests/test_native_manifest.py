"""The native deployment builder: real schemas, and the same pod contract as the Volcano Job.

* Every object validates against the real Kubernetes OpenAPI v3 schema of its kind (apps/v1
  ReplicaSet, batch/v1 Job, v1 Service) from the pinned ``k8s.io/kubernetes`` module, and every pod
  template against the PodTemplateSpec embedded in Volcano's Job CRD (from the Volcano Go module).
* Each native pod's environment, resolved the way the kubelet resolves it, parses with the pods'
  own ``parse_role_env`` into exactly the RoleSpec the Volcano Job's pod of the same role and index
  gets from Volcano's plugins: the entrypoint cannot tell the deployments apart.
* Discovery: the host names in the contract are the pods' hostname.subdomain, and the headless
  Service selects every pod of the gang.
"""
from __future__ import annotations

import pytest

from bench.native import COMPLETION_INDEX_ANNOTATION, build_native
from ctr_model.contract import PSERVER, TRAINER, parse_role_env, volcano_plugin_env
from ctr_volcano.errors import BadInput
from ctr_volcano.training.volcano.manifest import build_job, load_crd_schema, unknown_fields
from ctr_volcano.training.volcano.spec import PvcVolume, TrainJobSpec
from tests import k8s_openapi


@pytest.fixture
def spec():
    return TrainJobSpec(name="ctr-n", namespace="ml", image="img:1", data_dir="/mnt/ctr/d",
                        output_dir="/mnt/ctr/o", pservers=2, trainers=3, max_retry=1,
                        volumes=(PvcVolume("ctr-data", "/mnt/ctr"),), priority_class="low",
                        train_config={"epochs": 1})


def by_kind(objects):
    out = {}
    for obj in objects:
        out.setdefault(obj["kind"], []).append(obj)
    return out


def env_of(template, annotations=None):
    """The container env as the kubelet resolves it (values and the fieldRefs we use)."""
    env = {}
    for item in template["spec"]["containers"][0]["env"]:
        if "value" in item:
            env[item["name"]] = item["value"]
            continue
        path = item["valueFrom"]["fieldRef"]["fieldPath"]
        assert path == f"metadata.annotations['{COMPLETION_INDEX_ANNOTATION}']", path
        env[item["name"]] = (annotations or {})[COMPLETION_INDEX_ANNOTATION]
    return env


def test_shape_apply_order_and_no_gang(spec):
    objects = build_native(spec)
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [
        ("Service", "ctr-n"), ("ReplicaSet", "ctr-n-pserver-0"), ("ReplicaSet", "ctr-n-pserver-1"),
        ("Job", "ctr-n-trainer")]
    kinds = by_kind(objects)
    job = kinds["Job"][0]["spec"]
    assert (job["completionMode"], job["completions"], job["parallelism"], job["backoffLimit"]) == \
        ("Indexed", 3, 3, 1)
    templates = [rs["spec"]["template"] for rs in kinds["ReplicaSet"]] + [job["template"]]
    for tpl in templates:
        assert tpl["spec"]["schedulerName"] == "default-scheduler"
        assert "scheduling.k8s.io/group-name" not in (tpl["metadata"].get("annotations") or {})
        # the same image, entrypoint, volumes and priority as the Volcano Job's pods
        assert tpl["spec"]["containers"][0]["image"] == "img:1"
        assert tpl["spec"]["containers"][0]["command"] == ["python", "-m", "ctr_model.train"]
        assert tpl["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] == "ctr-data"
        assert tpl["spec"]["priorityClassName"] == "low"
    assert [rs["spec"]["template"]["spec"]["restartPolicy"] for rs in kinds["ReplicaSet"]] == ["Always"] * 2
    assert job["template"]["spec"]["restartPolicy"] == "Never"
    assert build_native(spec, scheduler_name="other")[1]["spec"]["template"]["spec"]["schedulerName"] == "other"
    with pytest.raises(BadInput, match="scheduler_name"):
        build_native(spec, scheduler_name="")


def test_every_pod_gets_the_contract_the_volcano_pod_of_the_same_role_and_index_gets(spec):
    volcano = {t["name"]: t["template"] for t in build_job(spec)["spec"]["tasks"]}
    hosts = {PSERVER: [f"ctr-n-pserver-{i}.ctr-n" for i in range(2)],
             TRAINER: [f"ctr-n-trainer-{i}.ctr-n" for i in range(3)]}
    kinds = by_kind(build_native(spec))
    natives = [(PSERVER, i, env_of(rs["spec"]["template"])) for i, rs in enumerate(kinds["ReplicaSet"])]
    job_tpl = kinds["Job"][0]["spec"]["template"]
    natives += [(TRAINER, i, env_of(job_tpl, {COMPLETION_INDEX_ANNOTATION: str(i)})) for i in range(3)]
    for role, index, native_env in natives:
        # what Volcano's env + svc plugins add to the pod of the Volcano Job
        volcano_env = {**env_of(volcano[role]), **volcano_plugin_env(role, index, hosts)}
        assert native_env == volcano_env, (role, index)
        parsed = parse_role_env(native_env)
        assert (parsed.role, parsed.index, parsed.pservers, parsed.trainers) == (role, index, 2, 3)
        assert parse_role_env(volcano_env) == parsed


def test_contract_host_names_are_the_pods_dns_names_and_the_service_selects_them(spec):
    kinds = by_kind(build_native(spec))
    svc = kinds["Service"][0]
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True
    selector = svc["spec"]["selector"]
    pserver_hosts = env_of(kinds["ReplicaSet"][0]["spec"]["template"])["VC_PSERVER_HOSTS"].split(",")
    for i, rs in enumerate(kinds["ReplicaSet"]):
        tpl = rs["spec"]["template"]
        assert f"{tpl['spec']['hostname']}.{tpl['spec']['subdomain']}" == pserver_hosts[i]
        labels = tpl["metadata"]["labels"]
        assert all(labels.get(k) == v for k, v in rs["spec"]["selector"]["matchLabels"].items())
        assert all(labels.get(k) == v for k, v in selector.items())
        assert tpl["spec"]["subdomain"] == svc["metadata"]["name"]
    job = kinds["Job"][0]
    tpl = job["spec"]["template"]
    # an Indexed Job names pod i's host "<job name>-<i>"; with the subdomain that is the contract's name
    trainer_hosts = env_of(tpl, {COMPLETION_INDEX_ANNOTATION: "0"})["VC_TRAINER_HOSTS"].split(",")
    assert trainer_hosts == [f"{job['metadata']['name']}-{i}.{tpl['spec']['subdomain']}" for i in range(3)]
    assert all(tpl["metadata"]["labels"].get(k) == v for k, v in selector.items())
    # the two pserver ReplicaSets never select each other's pods
    a, b = (rs["spec"]["selector"]["matchLabels"] for rs in kinds["ReplicaSet"])
    assert a != b


def test_pod_templates_match_the_real_podtemplatespec_schema(spec, volcano_job_crd):
    schema = load_crd_schema(volcano_job_crd)   # from the Volcano Go module: no ../shared needed
    tpl_schema = schema["properties"]["spec"]["properties"]["tasks"]["items"]["properties"]["template"]
    import jsonschema

    kinds = by_kind(build_native(spec))
    for tpl in [rs["spec"]["template"] for rs in kinds["ReplicaSet"]] + [kinds["Job"][0]["spec"]["template"]]:
        errors = [e.message for e in jsonschema.Draft7Validator(tpl_schema).iter_errors(tpl)]
        assert not errors and not unknown_fields(tpl, tpl_schema), (errors, unknown_fields(tpl, tpl_schema))


@pytest.fixture(scope="module")
def openapi():
    """The real OpenAPI schemas, fetched with Go when not cached yet (skipped only without Go)."""
    try:
        return k8s_openapi.openapi_dir()
    except k8s_openapi.CrdUnavailable as exc:
        if "Go is not installed" in str(exc):
            pytest.skip(str(exc))
        raise


@pytest.mark.parametrize("kind,api_file,name", [
    ("Service", "api__v1_openapi.json", "io.k8s.api.core.v1.Service"),
    ("ReplicaSet", "apis__apps__v1_openapi.json", "io.k8s.api.apps.v1.ReplicaSet"),
    ("Job", "apis__batch__v1_openapi.json", "io.k8s.api.batch.v1.Job"),
])
def test_objects_match_the_real_kubernetes_openapi_schema(spec, openapi, kind, api_file, name):
    schema = k8s_openapi.schema_for(openapi, api_file, name)
    objects = [o for o in build_native(spec) if o["kind"] == kind]
    assert objects
    for obj in objects:
        assert k8s_openapi.problems(obj, schema) == []
    # and the check can fail: a misspelt field and a wrong type are both caught
    bad = dict(objects[0], spec=dict(objects[0]["spec"], replicaz=1, selector="app"))
    assert len(k8s_openapi.problems(bad, schema)) >= 2
