"""Pure rendering of a bound pod into what a process-backed node runs: per container argv, env,
mounts, user; init containers first, in order.

This is the part of a kubelet that reads the pod spec: container defaults from each container's
image, the container's ``command``/``args``/``workingDir``, its ``env`` (plain values, ``$(VAR)`` expansion,
``fieldRef``, ``secretKeyRef``, ``configMapKeyRef``), ``envFrom``, and its volumes (``configMap``,
``secret``, ``projected`` service-account token, ``downwardAPI``, ``persistentVolumeClaim``,
``emptyDir``, ``hostPath``) with their ``volumeMounts``. No I/O: the API lookups are passed in as
functions (:class:`Lookups`), so the rules are unit-tested with plain dicts and the node agent
(``nodeagent.py``) only executes the plan.

Two error families, as a kubelet has: :class:`NotReady` (a referenced object is missing or a claim
is not bound yet: the pod waits, the agent retries) and :class:`PodSpecError` (the pod asks for
something a process node cannot give: the pod fails with that message).
"""
from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

__all__ = ["NotReady", "PodSpecError", "Lookups", "Mount", "LaunchPlan", "ImageDefaults", "PodPlan",
           "render_pod", "render_volumes", "expand_vars", "hosts_file", "hosts_peers", "pod_hostname"]


class NotReady(Exception):
    """A referenced object is missing or not bound yet; the pod stays Pending and is retried."""


class PodSpecError(Exception):
    """The pod cannot run on a process node; it fails with this message."""


@dataclass(frozen=True)
class Lookups:
    """API reads the renderer needs (the agent passes closures over its client).

    Attributes:
        secret: ``(namespace, name) -> data`` (base64 values, as the API returns) or ``None``.
        config_map: ``(namespace, name) -> data`` or ``None``.
        claim_path: ``(namespace, claim) -> host directory`` of the bound PersistentVolume; raises
            :class:`NotReady` while the claim is unbound.
        sa_token: ``(namespace, service account, audience or None, seconds) -> token``.
    """

    secret: Callable[[str, str], Optional[Mapping[str, str]]]
    config_map: Callable[[str, str], Optional[Mapping[str, str]]]
    claim_path: Callable[[str, str], str]
    sa_token: Callable[[str, str, Optional[str], int], str]


@dataclass(frozen=True)
class Mount:
    """One mount in the pod's mount namespace.

    Attributes:
        target: the path inside the pod.
        source: a host path to bind (``""`` for a tmpfs).
        files: for content volumes (configMap, secret, projected): relative path -> bytes, written
            by the agent into a per-pod directory that becomes ``source``.
        mode: file mode of ``files``.
        read_only: remount read-only.
        tmpfs: mount a fresh tmpfs instead of binding.
    """

    target: str
    source: str = ""
    files: Tuple[Tuple[str, bytes], ...] = ()
    mode: int = 0o644
    read_only: bool = False
    tmpfs: bool = False
    #: the pod volume this mount belongs to: every container mounting it sees one directory
    volume: str = ""
    #: ``subPath`` inside that volume (created in an emptyDir, as a kubelet does)
    sub_path: str = ""


@dataclass(frozen=True)
class LaunchPlan:
    """Everything needed to start the pod's single container as a process."""

    argv: Tuple[str, ...]
    env: Tuple[Tuple[str, str], ...]
    workdir: str
    uid: Optional[int]
    gid: Optional[int]
    hostname: str
    mounts: Tuple[Mount, ...]
    container: str
    grace_s: int = 30
    image: str = ""


@dataclass(frozen=True)
class ImageDefaults:
    """What a container inherits from its image: ``ENV``, ``ENTRYPOINT``, ``CMD``, ``WORKDIR``, ``USER``."""

    env: Mapping[str, str]
    cmd: Tuple[str, ...] = ()
    workdir: str = ""
    user: Optional[Tuple[int, int]] = None
    entrypoint: Tuple[str, ...] = ()


@dataclass(frozen=True)
class PodPlan:
    """The whole pod: init containers (run one after the other) and containers (run together)."""

    init: Tuple[LaunchPlan, ...]
    containers: Tuple[LaunchPlan, ...]

    @property
    def all(self) -> Tuple[LaunchPlan, ...]:
        return self.init + self.containers


_VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)|\$\$")


def expand_vars(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion: known names are replaced, unknown ones kept, ``$$`` -> ``$``."""
    def sub(m: "re.Match[str]") -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env[name] if name in env else m.group(0)

    return _VAR.sub(sub, text)


def pod_hostname(pod: Mapping[str, Any]) -> str:
    spec = pod.get("spec") or {}
    return str(spec.get("hostname") or pod["metadata"]["name"])[:63]


def _field_value(pod: Mapping[str, Any], path: str, pod_ip: str, node_ip: str) -> str:
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    simple = {
        "metadata.name": meta.get("name"), "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"), "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.podIP": pod_ip, "status.podIPs": pod_ip, "status.hostIP": node_ip,
        "status.hostIPs": node_ip,
    }
    if path in simple:
        return str(simple[path] or "")
    m = re.match(r"^metadata\.(labels|annotations)\['([^']+)'\]$", path)
    if m:
        return str((meta.get(m.group(1)) or {}).get(m.group(2), ""))
    if path in ("metadata.labels", "metadata.annotations"):
        items = meta.get(path.split(".")[1]) or {}
        return "\n".join(f'{k}="{v}"' for k, v in sorted(items.items()))
    raise PodSpecError(f"fieldRef {path!r} is not supported on process nodes")


def _decode(data: Mapping[str, str], key: str) -> str:
    return base64.b64decode(data[key]).decode()


def _env(pod: Mapping[str, Any], container: Mapping[str, Any], image_env: Mapping[str, str],
         lookups: Lookups, pod_ip: str, node_ip: str,
         service_env: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    ns = pod["metadata"]["namespace"]
    env: Dict[str, str] = dict(image_env)
    env["HOSTNAME"] = pod_hostname(pod)
    env.update(service_env or {})   # the kubelet's service variables; the container's own win
    declared: Dict[str, str] = {}   # what $(VAR) may refer to: the container's own variables
    for src in container.get("envFrom") or []:
        prefix = src.get("prefix", "")
        if "configMapRef" in src:
            ref = src["configMapRef"]
            data = lookups.config_map(ns, ref["name"])
            if data is None and not ref.get("optional"):
                raise NotReady(f"configmap {ns}/{ref['name']} (envFrom) not found")
            declared.update({prefix + k: v for k, v in (data or {}).items()})
        elif "secretRef" in src:
            ref = src["secretRef"]
            data = lookups.secret(ns, ref["name"])
            if data is None and not ref.get("optional"):
                raise NotReady(f"secret {ns}/{ref['name']} (envFrom) not found")
            declared.update({prefix + k: _decode(data, k) for k in (data or {})})
    for var in container.get("env") or []:
        name = var["name"]
        if "valueFrom" not in var:
            declared[name] = expand_vars(str(var.get("value", "")), declared)
            continue
        source = var["valueFrom"]
        if "fieldRef" in source:
            declared[name] = _field_value(pod, source["fieldRef"]["fieldPath"], pod_ip, node_ip)
        elif "secretKeyRef" in source or "configMapKeyRef" in source:
            is_secret = "secretKeyRef" in source
            ref = source["secretKeyRef" if is_secret else "configMapKeyRef"]
            kind = "secret" if is_secret else "configmap"
            data = (lookups.secret if is_secret else lookups.config_map)(ns, ref["name"])
            if data is None or ref["key"] not in data:
                if ref.get("optional"):
                    continue
                raise NotReady(f"{kind} {ns}/{ref['name']} key {ref['key']!r} (env {name}) not found")
            declared[name] = _decode(data, ref["key"]) if is_secret else str(data[ref["key"]])
        else:
            raise PodSpecError(f"env {name}: valueFrom {sorted(source)} is not supported on process nodes")
    env.update(declared)
    return env


def _items(data: Mapping[str, str], items: Optional[List[Mapping[str, Any]]], decode: bool,
           what: str) -> List[Tuple[str, bytes]]:
    def raw(key: str) -> bytes:
        return base64.b64decode(data[key]) if decode else str(data[key]).encode()

    if not items:
        return [(k, raw(k)) for k in sorted(data)]
    out = []
    for item in items:
        if item["key"] not in data:
            raise NotReady(f"{what}: key {item['key']!r} not found")
        out.append((item["path"], raw(item["key"])))
    return out


def _volume(pod: Mapping[str, Any], vol: Mapping[str, Any], lookups: Lookups, pod_ip: str,
            node_ip: str) -> Mount:
    ns = pod["metadata"]["namespace"]
    name = vol["name"]
    if "configMap" in vol or "secret" in vol:
        is_secret = "secret" in vol
        src = vol["secret" if is_secret else "configMap"]
        obj = src["secretName"] if is_secret else src["name"]
        what = f"{'secret' if is_secret else 'configmap'} {ns}/{obj} (volume {name})"
        data = (lookups.secret if is_secret else lookups.config_map)(ns, obj)
        if data is None:
            if src.get("optional"):
                return Mount(target="", files=())
            raise NotReady(f"{what} not found")
        return Mount(target="", files=tuple(_items(data, src.get("items"), is_secret, what)),
                     mode=int(src.get("defaultMode", 0o644)))
    if "projected" in vol:
        files: List[Tuple[str, bytes]] = []
        for source in vol["projected"].get("sources") or []:
            if "serviceAccountToken" in source:
                tok = source["serviceAccountToken"]
                token = lookups.sa_token(ns, (pod.get("spec") or {}).get("serviceAccountName") or "default",
                                         tok.get("audience"), int(tok.get("expirationSeconds", 3607)))
                files.append((tok["path"], token.encode()))
            elif "configMap" in source or "secret" in source:
                is_secret = "secret" in source
                src = source["secret" if is_secret else "configMap"]
                data = (lookups.secret if is_secret else lookups.config_map)(ns, src["name"])
                what = f"{'secret' if is_secret else 'configmap'} {ns}/{src['name']} (volume {name})"
                if data is None:
                    if src.get("optional"):
                        continue
                    raise NotReady(f"{what} not found")
                files.extend(_items(data, src.get("items"), is_secret, what))
            elif "downwardAPI" in source:
                for item in source["downwardAPI"].get("items") or []:
                    if "fieldRef" not in item:
                        raise PodSpecError(f"volume {name}: only downwardAPI fieldRef items are supported")
                    files.append((item["path"], _field_value(
                        pod, item["fieldRef"]["fieldPath"], pod_ip, node_ip).encode()))
            else:
                raise PodSpecError(f"volume {name}: projected source {sorted(source)} is not supported")
        return Mount(target="", files=tuple(files), mode=int(vol["projected"].get("defaultMode", 0o644)))
    if "downwardAPI" in vol:
        files = []
        for item in vol["downwardAPI"].get("items") or []:
            if "fieldRef" not in item:
                raise PodSpecError(f"volume {name}: only downwardAPI fieldRef items are supported")
            files.append((item["path"], _field_value(pod, item["fieldRef"]["fieldPath"], pod_ip,
                                                     node_ip).encode()))
        return Mount(target="", files=tuple(files))
    if "persistentVolumeClaim" in vol:
        claim = vol["persistentVolumeClaim"]
        return Mount(target="", source=lookups.claim_path(ns, claim["claimName"]),
                     read_only=bool(claim.get("readOnly")))
    if "emptyDir" in vol:
        memory = (vol["emptyDir"] or {}).get("medium") == "Memory"
        return Mount(target="", tmpfs=memory)   # disk-backed: the agent gives it a per-pod directory
    if "hostPath" in vol:
        return Mount(target="", source=vol["hostPath"]["path"])
    raise PodSpecError(f"volume {name}: type {sorted(k for k in vol if k != 'name')} is not supported "
                       "on process nodes")


def render_volumes(pod: Mapping[str, Any], lookups: Lookups, pod_ip: str, node_ip: str) -> Dict[str, Mount]:
    """The pod's volumes by name (targets empty: each container's ``volumeMounts`` place them).

    Raises:
        NotReady: a referenced object is missing; retry later.
        PodSpecError: a volume type a process node cannot give.
    """
    spec = pod.get("spec") or {}
    out = {}
    for v in spec.get("volumes") or []:
        m = _volume(pod, v, lookups, pod_ip, node_ip)
        out[v["name"]] = Mount(target="", source=m.source, files=m.files, mode=m.mode,
                               read_only=m.read_only, tmpfs=m.tmpfs, volume=v["name"])
    return out


def _container(pod: Mapping[str, Any], c: Mapping[str, Any], image: ImageDefaults,
               volumes: Mapping[str, Mount], lookups: Lookups, pod_ip: str, node_ip: str,
               service_env: Optional[Mapping[str, str]]) -> LaunchPlan:
    spec = pod.get("spec") or {}
    env = _env(pod, c, image.env, lookups, pod_ip, node_ip, service_env)
    # Kubernetes' rule: ``command`` replaces the image's ENTRYPOINT (and drops its CMD), ``args``
    # replaces its CMD only
    if c.get("command"):
        argv = list(c["command"]) + list(c.get("args") or [])
    else:
        argv = list(image.entrypoint) + list(c.get("args") or image.cmd)
    if not argv:
        raise PodSpecError(f"container {c['name']}: no command, no args, and the image no ENTRYPOINT or CMD")
    argv = [expand_vars(a, env) for a in argv]
    pod_sc, c_sc = spec.get("securityContext") or {}, c.get("securityContext") or {}
    uid = c_sc.get("runAsUser", pod_sc.get("runAsUser"))
    gid = c_sc.get("runAsGroup", pod_sc.get("runAsGroup"))
    if uid is None and image.user:
        uid, gid = image.user[0], image.user[1] if gid is None else gid
    if uid is None and (c_sc.get("runAsNonRoot") or pod_sc.get("runAsNonRoot")):
        raise PodSpecError(f"container {c['name']}: runAsNonRoot is set but neither the pod nor the image "
                           "names a UID")
    if uid == 0 and (c_sc.get("runAsNonRoot") or pod_sc.get("runAsNonRoot")):
        raise PodSpecError(f"container {c['name']}: runAsNonRoot is set but the pod runs as UID 0")
    mounts: List[Mount] = []
    for vm in c.get("volumeMounts") or []:
        if vm["name"] not in volumes:
            raise PodSpecError(f"volumeMount {vm['mountPath']}: no volume named {vm['name']!r}")
        base = volumes[vm["name"]]
        sub = vm.get("subPath", "")
        if sub and (sub.startswith("/") or ".." in sub.split("/")):
            raise PodSpecError(f"volumeMount {vm['mountPath']}: subPath {sub!r} must be relative")
        # a host directory's subPath is a host path; in a volume the agent makes (emptyDir, content
        # volumes) it is resolved there
        joined = bool(sub and base.source)
        mounts.append(Mount(target=vm["mountPath"], source=f"{base.source}/{sub}" if joined else base.source,
                            files=base.files, mode=base.mode,
                            read_only=bool(vm.get("readOnly")) or base.read_only, tmpfs=base.tmpfs,
                            volume=base.volume or vm["name"], sub_path="" if joined else sub))
    return LaunchPlan(argv=tuple(argv), env=tuple(env.items()), workdir=c.get("workingDir") or image.workdir or "/",
                      uid=None if uid is None else int(uid), gid=None if gid is None else int(gid),
                      hostname=pod_hostname(pod), mounts=tuple(mounts), container=c["name"],
                      grace_s=int(spec.get("terminationGracePeriodSeconds", 30)), image=str(c.get("image", "")))


def render_pod(pod: Mapping[str, Any], *, images: Callable[[str], ImageDefaults], lookups: Lookups,
               pod_ip: str, node_ip: str, service_env: Optional[Mapping[str, str]] = None) -> PodPlan:
    """The launch plans of ``pod``'s init containers and containers.

    Args:
        pod: the pod as the API returns it (camelCase JSON).
        images: image reference -> its defaults (``ENV`` -- the container's ``env`` overrides it --,
            ``ENTRYPOINT`` unless the container has a ``command``, ``CMD`` unless it has ``args``
            or a ``command``, ``WORKDIR``, ``USER``, which ``runAsUser``/``runAsGroup`` override);
            may raise :class:`PodSpecError`.
        lookups: API reads (secrets, configmaps, claims, tokens).
        pod_ip: the address the node gave the pod (``status.podIP``).
        node_ip: the node's address (``status.hostIP``).
        service_env: variables a kubelet puts in every container (``KUBERNETES_SERVICE_HOST``, ...).

    Raises:
        NotReady: a referenced object is missing; retry later.
        PodSpecError: the pod cannot run on a process node.
    """
    spec = pod.get("spec") or {}
    if not spec.get("containers"):
        raise PodSpecError("the pod has no containers")
    volumes = render_volumes(pod, lookups, pod_ip, node_ip)
    for c in spec.get("initContainers") or []:
        if c.get("restartPolicy") == "Always":
            raise PodSpecError(f"init container {c['name']}: sidecar containers (restartPolicy Always) "
                               "are not supported on process nodes")

    def plans(key: str) -> Tuple[LaunchPlan, ...]:
        return tuple(_container(pod, c, images(str(c.get("image", ""))), volumes, lookups, pod_ip, node_ip,
                                service_env) for c in spec.get(key) or [])

    return PodPlan(init=plans("initContainers"), containers=plans("containers"))


def hosts_peers(slices: List[Mapping[str, Any]]) -> List[Tuple[str, str, str]]:
    """``(ip, hostname, service)`` of every endpoint of the raw EndpointSlice dicts of a namespace.

    Raw dicts, not the client's models, on purpose: a Service with no pod yet (the headless Service
    of a gang still waiting for its slots) has a slice with ``endpoints: null``, which the
    ``kubernetes`` client's model refuses with a ``ValueError``; reading the list through it failed
    every host refresh of the namespace for as long as any gang there waited, so the running gang's
    trainers never resolved their pservers and hung until their DNS wait ran out (the seed
    comparison's restart of its first Volcano gang).
    """
    peers: List[Tuple[str, str, str]] = []
    for es in slices:
        svc = ((es.get("metadata") or {}).get("labels") or {}).get("kubernetes.io/service-name")
        for ep in es.get("endpoints") or []:
            addresses = ep.get("addresses") or []
            if svc and addresses and (ep.get("hostname") or not ep.get("targetRef")):
                # a pod's own name; or a Service's name for an endpoint that is no pod's
                peers.append((addresses[0], ep.get("hostname") or "", svc))
    return peers


def hosts_file(pod_ip: str, hostname: str, subdomain: str, namespace: str,
               peers: List[Tuple[str, str, str]], domain: str = "cluster.local") -> str:
    """``/etc/hosts`` of a pod: localhost, itself, and ``peers`` ``(ip, hostname, service)`` taken
    from the EndpointSlices of its namespace (the names a cluster DNS would answer).

    A peer without a hostname (an endpoint of a Service that is not a pod's subdomain, e.g. a host
    service of ``hostservice.py``) gives the Service's own name, as a headless Service's DNS record.
    """
    lines = ["# Kubernetes-managed hosts file (process node; peers from EndpointSlices).",
             "127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
    seen = set()
    own = [f"{hostname}.{subdomain}.{namespace}.svc.{domain}", f"{hostname}.{subdomain}"] if subdomain else []
    lines.append("\t".join([pod_ip] + own + [hostname]))
    seen.add((pod_ip, hostname, subdomain))
    for ip, host, svc in sorted(peers):
        if (ip, host, svc) in seen:
            continue
        seen.add((ip, host, svc))
        if not host:
            lines.append(f"{ip}\t{svc}.{namespace}.svc.{domain}\t{svc}.{namespace}\t{svc}")
            continue
        lines.append(f"{ip}\t{host}.{svc}.{namespace}.svc.{domain}\t{host}.{svc}")
    return "\n".join(lines) + "\n"
