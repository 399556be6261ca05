"""Rendering of a pod for the process-backed nodes (``tools/minicluster/podspec.py``) and the path
rules of a container's root (``podinit.in_root``): pure rules, checked with plain dicts and a small
tree. The cluster tier runs them for real."""
from __future__ import annotations

import base64
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools" / "minicluster"))

import hostservice  # noqa: E402
import podinit  # noqa: E402
import podspec  # noqa: E402


def _lookups(configmaps=None, secrets=None, claims=None):
    configmaps, secrets, claims = configmaps or {}, secrets or {}, claims or {}

    def claim_path(ns, name):
        if name not in claims:
            raise podspec.NotReady(f"claim {name} unbound")
        return claims[name]

    return podspec.Lookups(secret=lambda ns, n: secrets.get(n), config_map=lambda ns, n: configmaps.get(n),
                           claim_path=claim_path, sa_token=lambda ns, sa, aud, s: f"token-of-{ns}/{sa}")


def _pod(container=None, **spec):
    c = {"name": "main", "image": "reg/x/ctr-trainer:1", "command": ["python", "-m", "m"]}
    c.update(container or {})
    return {"metadata": {"name": "job-trainer-1", "namespace": "ns", "uid": "u-1",
                         "labels": {"volcano.sh/task-spec": "trainer"}},
            "spec": {"containers": [c], "nodeName": "proc-0", "hostname": "job-trainer-1",
                     "subdomain": "job", **spec}}


_TRAINER = podspec.ImageDefaults(env={"PATH": "/venv/bin:/usr/bin", "HOME": "/home/ctr", "PYTHONPATH": "/opt/ctr"},
                                 cmd=("python", "-m", "default"), workdir="/home/ctr", user=(1000, 1000))


def _render_pod(pod, lookups=None, image=_TRAINER, **kw):
    args = dict(images=lambda ref: image, lookups=lookups or _lookups(), pod_ip="10.88.0.7",
                node_ip="127.0.0.1")
    args.update(kw)
    return podspec.render_pod(pod, **args)


def _render(pod, lookups=None, image=_TRAINER, **kw):
    """The plan of the pod's only container."""
    plan = _render_pod(pod, lookups, image, **kw)
    assert not plan.init and len(plan.containers) == 1
    return plan.containers[0]


def test_env_sources_and_expansion():
    b64 = base64.b64encode(b"s3cret").decode()
    pod = _pod({"env": [
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "TASK", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['volcano.sh/task-spec']"}}},
        {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "s", "key": "pw"}}},
        {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "mode"}}},
        {"name": "OPT", "valueFrom": {"configMapKeyRef": {"name": "nope", "key": "k", "optional": True}}},
        {"name": "URL", "value": "http://$(IP):80/$(MISSING)/$$(IP)"},
        {"name": "HOME", "value": "/tmp/h"}],
        "args": ["--pod=$(POD)"], "workingDir": "/w"})
    plan = _render(pod, _lookups(configmaps={"c": {"mode": "fast"}}, secrets={"s": {"pw": b64}}))
    env = dict(plan.env)
    assert env["POD"] == "job-trainer-1" and env["NS"] == "ns" and env["IP"] == "10.88.0.7"
    assert env["TASK"] == "trainer" and env["PW"] == "s3cret" and env["MODE"] == "fast"
    assert "OPT" not in env
    assert env["URL"] == "http://10.88.0.7:80/$(MISSING)/$(IP)"
    assert env["HOME"] == "/tmp/h" and env["PYTHONPATH"] == "/opt/ctr" and env["HOSTNAME"] == "job-trainer-1"
    assert plan.argv == ("python", "-m", "m", "--pod=job-trainer-1")
    assert plan.workdir == "/w" and (plan.uid, plan.gid) == (1000, 1000)


def test_missing_references_wait_and_unsupported_fields_fail():
    with pytest.raises(podspec.NotReady, match="configmap ns/c"):
        _render(_pod({"env": [{"name": "M", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}]}))
    with pytest.raises(podspec.NotReady, match="claim data unbound"):
        _render(_pod(volumes=[{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]))
    with pytest.raises(podspec.PodSpecError, match="resourceFieldRef"):
        _render(_pod({"env": [{"name": "C", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}}]}))
    sidecar = _pod(initContainers=[{"name": "s", "image": "x", "command": ["a"], "restartPolicy": "Always"}])
    with pytest.raises(podspec.PodSpecError, match="sidecar"):
        _render_pod(sidecar)
    with pytest.raises(podspec.PodSpecError, match="runAsNonRoot"):
        _render(_pod(securityContext={"runAsNonRoot": True, "runAsUser": 0}))


def test_volumes_and_mounts():
    pod = _pod({"volumeMounts": [
        {"name": "svc", "mountPath": "/etc/volcano"},
        {"name": "data", "mountPath": "/mnt/ctr", "readOnly": True},
        {"name": "data", "mountPath": "/mnt/sub", "subPath": "runs/a"},
        {"name": "shm", "mountPath": "/dev/shm"},
        {"name": "token", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]},
        serviceAccountName="trainer-sa",
        volumes=[{"name": "svc", "configMap": {"name": "job-svc", "items": [
                      {"key": "pserver.host", "path": "pserver.host"}]}},
                 {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
                 {"name": "shm", "emptyDir": {"medium": "Memory"}},
                 {"name": "token", "projected": {"sources": [
                     {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
                     {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                     {"downwardAPI": {"items": [{"path": "namespace",
                                                 "fieldRef": {"fieldPath": "metadata.namespace"}}]}}]}}])
    lookups = _lookups(configmaps={"job-svc": {"pserver.host": "job-pserver-0.job\n", "trainer.host": "t\n"},
                                   "kube-root-ca.crt": {"ca.crt": "PEM"}},
                       claims={"data": "/srv/pv1"})
    mounts = {m.target: m for m in _render(pod, lookups).mounts}
    assert mounts["/etc/volcano"].files == (("pserver.host", b"job-pserver-0.job\n"),)
    assert mounts["/mnt/ctr"].source == "/srv/pv1" and mounts["/mnt/ctr"].read_only
    assert mounts["/mnt/sub"].source == "/srv/pv1/runs/a" and not mounts["/mnt/sub"].read_only
    assert mounts["/dev/shm"].tmpfs
    assert dict(mounts["/var/run/secrets/kubernetes.io/serviceaccount"].files) == {
        "token": b"token-of-ns/trainer-sa", "ca.crt": b"PEM", "namespace": b"ns"}
    bad = _pod({"volumeMounts": [{"name": "data", "mountPath": "/x", "subPath": "../etc"}]},
               volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}])
    with pytest.raises(podspec.PodSpecError, match="subPath"):
        _render(bad, lookups)


def test_command_defaults_come_from_the_image():
    plan = _render(_pod({"command": None}))
    assert plan.argv == ("python", "-m", "default")
    plan = _render(_pod({"command": None, "args": ["a", "b"]}),
                   image=podspec.ImageDefaults(env={}, cmd=("python", "-m", "default")))
    assert plan.argv == ("a", "b") and plan.uid is None


def test_init_containers_and_containers_each_get_their_own_plan():
    """An Argo-shaped pod: an init container, a main and a wait container, each with its own image,
    sharing the pod's emptyDirs (one volume name each), the wait container's /tmp a subPath."""
    pod = _pod({"name": "main", "image": "reg/ctr-component:1", "command": ["/var/run/argo/argoexec", "emissary"],
                "volumeMounts": [{"name": "var-run-argo", "mountPath": "/var/run/argo"}]},
               initContainers=[{"name": "init", "image": "quay/argoexec:v3", "command": ["argoexec", "init"],
                                "volumeMounts": [{"name": "var-run-argo", "mountPath": "/var/run/argo"}]}],
               volumes=[{"name": "var-run-argo", "emptyDir": {}}, {"name": "tmp-dir-argo", "emptyDir": {}}])
    pod["spec"]["containers"].append({
        "name": "wait", "image": "quay/argoexec:v3", "command": ["argoexec", "wait"],
        "env": [{"name": "ARGO_POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}}],
        "volumeMounts": [{"name": "var-run-argo", "mountPath": "/var/run/argo"},
                         {"name": "tmp-dir-argo", "mountPath": "/tmp", "subPath": "0"}]})
    images = {"quay/argoexec:v3": podspec.ImageDefaults(env={"PATH": "/go/bin"}),
              "reg/ctr-component:1": _TRAINER}
    plan = _render_pod(pod, images=images.__getitem__,
                       service_env={"KUBERNETES_SERVICE_HOST": "10.88.0.1", "KUBERNETES_SERVICE_PORT": "443"})
    assert [p.container for p in plan.init] == ["init"]
    assert [p.container for p in plan.containers] == ["main", "wait"]
    init, main, wait = plan.all
    assert init.argv == ("argoexec", "init") and dict(init.env)["PATH"] == "/go/bin"
    assert dict(main.env)["PYTHONPATH"] == "/opt/ctr" and main.uid == 1000 and wait.uid is None
    assert dict(wait.env)["ARGO_POD_UID"] == "u-1"
    assert all(dict(p.env)["KUBERNETES_SERVICE_HOST"] == "10.88.0.1" for p in plan.all)
    shared = {(p.container, m.target): (m.volume, m.sub_path) for p in plan.all for m in p.mounts}
    assert shared[("init", "/var/run/argo")] == shared[("wait", "/var/run/argo")] == ("var-run-argo", "")
    assert shared[("wait", "/tmp")] == ("tmp-dir-argo", "0")


def test_hosts_file_names_peers_like_cluster_dns():
    text = podspec.hosts_file("10.88.0.3", "job-trainer-0", "job", "ns",
                              [("10.88.0.2", "job-pserver-0", "job"), ("10.88.0.3", "job-trainer-0", "job")])
    lines = text.splitlines()
    assert "127.0.0.1\tlocalhost" in lines
    assert "10.88.0.3\tjob-trainer-0.job.ns.svc.cluster.local\tjob-trainer-0.job\tjob-trainer-0" in lines
    assert "10.88.0.2\tjob-pserver-0.job.ns.svc.cluster.local\tjob-pserver-0.job" in lines
    assert sum("job-trainer-0.job" in line for line in lines) == 1


def test_a_host_service_is_a_headless_service_the_pods_resolve_by_name():
    service, slice_ = hostservice.service_objects("s3", "ns", "10.88.0.1", 8333)
    assert service["spec"] == {"clusterIP": "None", "ports": [{"name": "tcp", "port": 8333, "protocol": "TCP"}]}
    assert "selector" not in service["spec"]         # no controller rewrites the hand-written slice
    assert slice_["metadata"]["labels"]["kubernetes.io/service-name"] == "s3"
    assert slice_["endpoints"] == [{"addresses": ["10.88.0.1"], "conditions": {"ready": True}}]
    # the node agent's peers: (address, hostname or "", service) -> the Service's own name
    text = podspec.hosts_file("10.88.0.3", "job-trainer-0", "job", "ns", [("10.88.0.1", "", "s3")])
    assert "10.88.0.1\ts3.ns.svc.cluster.local\ts3.ns\ts3" in text.splitlines()
    assert hostservice.service_host("s3", "ns") == "s3.ns.svc.cluster.local"
    svc = hostservice.HostService("br", "ns-s1", 1, 8333, host="s3.ns.svc.cluster.local")
    assert (svc.address, svc.port, svc.url) == ("10.88.1.1", 8333, "http://s3.ns.svc.cluster.local:8333")
    with pytest.raises(ValueError):
        hostservice.HostService("br", "x", 256, 1)


@pytest.mark.parametrize("container,argv", [
    ({}, ["ctr-volcano", "serve", "--help"]),                                   # ENTRYPOINT + CMD
    ({"args": ["--model", "/m"]}, ["ctr-volcano", "serve", "--model", "/m"]),   # args replace CMD only
    ({"command": ["python"], "args": ["-V"]}, ["python", "-V"]),                # command drops both
    ({"command": ["sh"]}, ["sh"]),
])
def test_entrypoint_and_cmd_follow_the_kubernetes_rules(container, argv):
    """The serving image has ``ENTRYPOINT ["ctr-volcano", "serve"]``; its InferenceService gives args."""
    image = podspec.ImageDefaults(env={}, entrypoint=("ctr-volcano", "serve"), cmd=("--help",))
    c = {"name": "main", "image": "x", **container}
    assert list(_render({"metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": {"containers": [c]}},
                        image=image).argv) == argv


def test_no_command_anywhere_is_refused():
    with pytest.raises(podspec.PodSpecError, match="no ENTRYPOINT or CMD"):
        _render({"metadata": {"name": "p", "namespace": "ns", "uid": "u"},
                 "spec": {"containers": [{"name": "main", "image": "x"}]}}, image=podspec.ImageDefaults(env={}))


def test_mount_targets_resolve_symlinks_inside_the_image(tmp_path):
    """Debian's ``/var/run -> /run`` must lead to the image's ``/run``: resolved on the host, Argo's
    ``/var/run/argo`` volume would have been mounted on the host's ``/run/argo``."""
    root = tmp_path / "rootfs"
    (root / "run").mkdir(parents=True)
    (root / "var").mkdir()
    (root / "var" / "run").symlink_to("/run")
    (root / "opt").mkdir()
    (root / "opt" / "up").symlink_to("../../..")
    (root / "opt" / "loop").symlink_to("loop")
    assert podinit.in_root(str(root), "/var/run/argo") == f"{root}/run/argo"
    assert podinit.in_root(str(root), "/opt/up/etc") == f"{root}/etc"       # .. stops at the root
    assert podinit.in_root(str(root), "/home/ctr/../x") == f"{root}/home/x"
    with pytest.raises(OSError, match="too many levels"):
        podinit.in_root(str(root), "/opt/loop/x")


def test_hosts_peers_survive_a_slice_without_endpoints():
    """A gang still waiting for slots has a headless Service whose slice has ``endpoints: null``;
    the running gang's peers must still be read (it used to fail every refresh of the namespace,
    so the first gang's trainers never resolved their pservers and hung until their DNS wait ran out)."""
    slices = [  # as the API server returns them (JSON), recorded from the seed comparison
        {"metadata": {"name": "vol-b-x1", "labels": {"kubernetes.io/service-name": "vol-b"}},
         "addressType": "IPv4", "endpoints": None},
        {"metadata": {"name": "vol-a-x2", "labels": {"kubernetes.io/service-name": "vol-a"}},
         "addressType": "IPv4", "endpoints": [
             {"addresses": ["10.88.0.14"], "hostname": "vol-a-pserver-0", "conditions": {"ready": True},
              "targetRef": {"kind": "Pod", "name": "vol-a-pserver-0"}},
             {"addresses": ["10.88.0.15"], "conditions": {"ready": True},
              "targetRef": {"kind": "Pod", "name": "other"}},        # no hostname: not a gang member
         ]},
        {"metadata": {"name": "s3-x", "labels": {"kubernetes.io/service-name": "s3"}},
         "endpoints": [{"addresses": ["10.88.0.1"]}]},
    ]
    assert podspec.hosts_peers(slices) == [("10.88.0.14", "vol-a-pserver-0", "vol-a"), ("10.88.0.1", "", "s3")]
    text = podspec.hosts_file("10.88.0.16", "vol-a-trainer-0", "vol-a", "seed", podspec.hosts_peers(slices))
    assert "10.88.0.14\tvol-a-pserver-0.vol-a.seed.svc.cluster.local\tvol-a-pserver-0.vol-a" in text.splitlines()
