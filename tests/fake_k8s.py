"""An HTTP-level fake Kubernetes API server on loopback, for the launcher's unit tests.

Why HTTP-level: the launcher is exercised through the real ``kubernetes`` client (URL building,
query parameters, JSON decoding, ``ApiException`` status codes), so only the server is fake. It serves
just the endpoints the launcher uses: Volcano Jobs (create/get/list/delete), PodGroups (get), PVCs (get), pods
(list by label), pod logs (tailLines, sinceSeconds, timestamps) and events (fieldSelector). POSTed Jobs
are validated against the real CRD schema when one is given (422 otherwise, like an API server with
a structural schema would reject type errors).

Tests drive the "cluster" with a *script*: a list of steps, one applied before each GET of the Job,
so a scenario (Pending -> Running -> pod fails -> Restarting -> Failed) is deterministic and fast.
Every request is recorded as (verb, apiGroup, resource) for the RBAC check.
"""
from __future__ import annotations

import json
import re
import threading
import uuid
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, List, Optional, Tuple
from urllib.parse import parse_qs, urlparse

__all__ = ["FakeKube", "rfc3339", "rfc3339_nano"]

Step = Callable[["FakeKube"], None]


def rfc3339(ts: Optional[datetime] = None) -> str:
    return (ts or datetime.now(timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_nano(ts: datetime) -> str:
    # kubelet style: fractional seconds with trailing zeros trimmed
    frac = f"{ts.microsecond:06d}000".rstrip("0")
    return ts.strftime("%Y-%m-%dT%H:%M:%S") + (f".{frac}" if frac else "") + "Z"


_ROUTES = [
    (re.compile(r"^/apis/(?P<group>batch\.volcano\.sh)/v1alpha1/namespaces/(?P<ns>[^/]+)/(?P<res>jobs)(/(?P<name>[^/]+))?$")),
    (re.compile(r"^/apis/(?P<group>scheduling\.volcano\.sh)/v1beta1/namespaces/(?P<ns>[^/]+)/(?P<res>podgroups)(/(?P<name>[^/]+))?$")),
    (re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/(?P<res>pods)(/(?P<name>[^/]+)(?P<sub>/log)?)?$")),
    (re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/(?P<res>events)(/(?P<name>[^/]+))?$")),
    (re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/(?P<res>persistentvolumeclaims)(/(?P<name>[^/]+))?$")),
]


class FakeKube:
    """The fake server and the cluster state it serves.

    Args:
        crd_path: if given, POSTed Jobs are validated against this CRD's schema (422 on errors).
    """

    def __init__(self, crd_path: Optional[str] = None):
        self.lock = threading.RLock()
        self.jobs: Dict[Tuple[str, str], Dict[str, Any]] = {}
        self.podgroups: Dict[Tuple[str, str], Dict[str, Any]] = {}
        self.pods: Dict[Tuple[str, str], Dict[str, Any]] = {}
        self.pvcs: Dict[Tuple[str, str], Dict[str, Any]] = {}
        self.logs: Dict[Tuple[str, str], List[Tuple[datetime, str]]] = {}
        self.events: List[Dict[str, Any]] = []
        self.requests: List[Tuple[str, str, str, str]] = []  # (verb, group, resource, path)
        self.script: List[Step] = []
        self.job_gets = 0
        self.fail_next: List[Tuple[str, int]] = []  # (verb prefix like "get jobs", HTTP status)
        self.forbid: Optional[str] = None  # "verb resource" answered with 403
        self.deletion_lingers = 0  # GETs a deleted Job stays visible (with deletionTimestamp)
        self._lingering: Dict[Tuple[str, str], int] = {}
        self._validator = None
        if crd_path:
            import jsonschema

            from ctr_volcano.training.volcano.manifest import load_crd_schema

            self._validator = jsonschema.Draft7Validator(load_crd_schema(crd_path))
        self._server: Optional[ThreadingHTTPServer] = None
        self._thread: Optional[threading.Thread] = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> "FakeKube":
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_a: Any) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                status, payload, ctype = fake._dispatch(self.command, self.path, body)
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=5)
            self._server = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def api_client(self) -> Any:
        from kubernetes import client

        cfg = client.Configuration()
        cfg.host = self.url
        return client.ApiClient(cfg)

    def write_kubeconfig(self, path: str, context: str = "fake") -> str:
        doc = {"apiVersion": "v1", "kind": "Config", "current-context": context,
               "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
               "users": [{"name": "fake", "user": {"token": "fake-token"}}],
               "contexts": [{"name": context, "context": {"cluster": "fake", "user": "fake"}}]}
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(doc, fh)
        return path

    # ------------------------------------------------------------------ state helpers (tests)
    def job(self, ns: str, name: str) -> Optional[Dict[str, Any]]:
        with self.lock:
            return self.jobs.get((ns, name))

    def put_job(self, job: Dict[str, Any], phase: Optional[str] = None, **status: Any) -> Dict[str, Any]:
        """Store ``job`` as if it had been created earlier (re-attach scenarios)."""
        with self.lock:
            meta = job.setdefault("metadata", {})
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", rfc3339())
            meta.setdefault("resourceVersion", "1")
            self.jobs[(meta["namespace"], meta["name"])] = job
            if phase:
                self.set_phase(meta["namespace"], meta["name"], phase, **status)
            return job

    def set_phase(self, ns: str, name: str, phase: str, reason: str = "", message: str = "",
                  **counts: Any) -> None:
        with self.lock:
            job = self.jobs[(ns, name)]
            status = job.setdefault("status", {})
            status["state"] = {"phase": phase, "reason": reason, "message": message,
                               "lastTransitionTime": rfc3339()}
            status.update(counts)

    def put_podgroup(self, ns: str, job: str, phase: str = "Pending",
                     conditions: Optional[List[Dict[str, Any]]] = None) -> Dict[str, Any]:
        with self.lock:
            uid = self.jobs[(ns, job)]["metadata"]["uid"]
            pg = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
                  "metadata": {"name": f"{job}-{uid}", "namespace": ns, "uid": str(uuid.uuid4())},
                  "spec": {"minMember": self.jobs[(ns, job)]["spec"]["minAvailable"]},
                  "status": {"phase": phase, "conditions": conditions or []}}
            self.podgroups[(ns, pg["metadata"]["name"])] = pg
            return pg

    def put_pod(self, ns: str, job: str, task: str, index: int, phase: str = "Running", *,
                exit_code: Optional[int] = None, reason: Optional[str] = None,
                waiting: Optional[str] = None, node: str = "node-1") -> Dict[str, Any]:
        """A pod as Volcano would create it (name, labels), in ``phase``; a new uid each call."""
        name = f"{job}-{task}-{index}"
        state: Dict[str, Any] = {"running": {"startedAt": rfc3339()}}
        if exit_code is not None:
            state = {"terminated": {"exitCode": exit_code, "reason": reason or ("Completed" if exit_code == 0 else "Error"),
                                    "startedAt": rfc3339(), "finishedAt": rfc3339()}}
        elif waiting:
            state = {"waiting": {"reason": waiting, "message": f"{waiting} for image"}}
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": ns, "uid": str(uuid.uuid4()),
                            "labels": {"volcano.sh/job-name": job, "volcano.sh/job-namespace": ns,
                                       "volcano.sh/task-spec": task, "volcano.sh/task-index": str(index)}},
               "spec": {"nodeName": node, "containers": [{"name": task, "image": "img"}]},
               "status": {"phase": phase,
                          "containerStatuses": [{"name": task, "ready": phase == "Running", "restartCount": 0,
                                                 "image": "img", "imageID": "", "state": state}]}}
        with self.lock:
            self.pods[(ns, name)] = pod
            self.logs[(ns, name)] = []  # a new pod (new uid) starts with an empty log
        return pod

    def finish_pod(self, ns: str, name: str, exit_code: int, reason: Optional[str] = None) -> None:
        """The same pod (same uid, same log) terminates with ``exit_code``."""
        with self.lock:
            pod = self.pods[(ns, name)]
            pod["status"]["phase"] = "Succeeded" if exit_code == 0 else "Failed"
            pod["status"]["containerStatuses"][0]["ready"] = False
            pod["status"]["containerStatuses"][0]["state"] = {"terminated": {
                "exitCode": exit_code, "reason": reason or ("Completed" if exit_code == 0 else "Error"),
                "startedAt": rfc3339(), "finishedAt": rfc3339()}}

    def delete_pod(self, ns: str, name: str) -> None:
        with self.lock:
            self.pods.pop((ns, name), None)
            self.logs.pop((ns, name), None)

    def log(self, ns: str, pod: str, *lines: str) -> None:
        with self.lock:
            buf = self.logs.setdefault((ns, pod), [])
            for line in lines:
                ts = datetime.now(timezone.utc)
                if buf and ts <= buf[-1][0]:
                    ts = buf[-1][0] + timedelta(microseconds=1)
                buf.append((ts, line))

    def add_event(self, ns: str, kind: str, name: str, reason: str, message: str,
                  type_: str = "Warning") -> None:
        with self.lock:
            self.events.append({
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"name": f"{name}.{uuid.uuid4().hex[:8]}", "namespace": ns},
                "involvedObject": {"kind": kind, "name": name, "namespace": ns},
                "reason": reason, "message": message, "type": type_, "count": 1,
                "lastTimestamp": rfc3339()})

    def verbs(self) -> List[Tuple[str, str, str]]:
        with self.lock:
            return [(v, g, r) for v, g, r, _ in self.requests]

    def count(self, verb: str, resource: str) -> int:
        return sum(1 for v, _, r in self.verbs() if v == verb and r == resource)

    # ------------------------------------------------------------------ HTTP dispatch
    def _dispatch(self, method: str, raw_path: str, body: bytes) -> Tuple[int, Any, str]:
        parsed = urlparse(raw_path)
        query = {k: v[0] for k, v in parse_qs(parsed.query).items()}
        for route in _ROUTES:
            m = route.match(parsed.path)
            if m:
                break
        else:
            return 404, _status(404, f"no route for {parsed.path}"), "application/json"
        group = m.groupdict().get("group") or ""
        ns, res, name = m.group("ns"), m.group("res"), m.group("name")
        sub = m.groupdict().get("sub")
        resource = res + (sub or "")
        verb = {"POST": "create", "DELETE": "delete", "PUT": "update", "PATCH": "patch"}.get(method)
        if verb is None:
            verb = "get" if name else ("watch" if query.get("watch") in ("true", "True", "1") else "list")
        with self.lock:
            self.requests.append((verb, group, resource, raw_path))
            key = f"{verb} {resource}"
            for i, (prefix, status) in enumerate(self.fail_next):
                if key.startswith(prefix):
                    del self.fail_next[i]
                    return status, _status(status, "injected failure"), "application/json"
            if self.forbid and key == self.forbid:
                return 403, _status(403, f'{resource} is forbidden: User "system:serviceaccount:x:y" '
                                         f'cannot {verb} resource "{resource}"'), "application/json"
            handler = getattr(self, f"_{res}")
            return handler(verb, ns, name, query, body, sub)

    def _jobs(self, verb: str, ns: str, name: Optional[str], query: Dict[str, str], body: bytes,
              _sub: Any) -> Tuple[int, Any, str]:
        if verb == "create":
            job = json.loads(body)
            if self._validator is not None:
                errors = [e.message for e in self._validator.iter_errors(job)]
                if errors:
                    return 422, _status(422, "; ".join(errors[:3])), "application/json"
            jname = job["metadata"]["name"]
            if (ns, jname) in self.jobs:
                return 409, _status(409, f'jobs.batch.volcano.sh "{jname}" already exists',
                                     reason="AlreadyExists"), "application/json"
            job["metadata"].update(uid=str(uuid.uuid4()), creationTimestamp=rfc3339(), resourceVersion="1")
            self.jobs[(ns, jname)] = job
            return 201, job, "application/json"
        if verb == "get":
            if (ns, name) in self._lingering:
                self._lingering[(ns, name)] -= 1
                if self._lingering[(ns, name)] <= 0:
                    del self._lingering[(ns, name)]
                    self._cascade(ns, name)
            job = self.jobs.get((ns, name))
            if job is not None and (ns, name) not in self._lingering:
                self.job_gets += 1
                if self.script:
                    step = self.script.pop(0)
                    step(self)
                job = self.jobs.get((ns, name))
            if job is None:
                return 404, _status(404, f'jobs.batch.volcano.sh "{name}" not found'), "application/json"
            return 200, job, "application/json"
        if verb == "delete":
            if (ns, name) not in self.jobs:
                return 404, _status(404, f'jobs.batch.volcano.sh "{name}" not found'), "application/json"
            job = self.jobs[(ns, name)]
            if self.deletion_lingers:
                job["metadata"]["deletionTimestamp"] = rfc3339()
                self._lingering[(ns, name)] = self.deletion_lingers
            else:
                self._cascade(ns, name)
            return 200, _status(200, "deleted", "Success"), "application/json"
        items = [j for (n, _), j in self.jobs.items() if n == ns]
        return 200, {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "JobList", "metadata": {},
                     "items": items}, "application/json"

    def _cascade(self, ns: str, name: str) -> None:
        job = self.jobs.pop((ns, name), None)
        if job is None:
            return
        uid = job["metadata"]["uid"]
        self.podgroups.pop((ns, f"{name}-{uid}"), None)
        for key in [k for k, p in self.pods.items()
                    if k[0] == ns and p["metadata"]["labels"].get("volcano.sh/job-name") == name]:
            self.delete_pod(*key)

    def put_pvc(self, ns: str, name: str, access_modes=("ReadWriteMany",)) -> Dict[str, Any]:
        """A bound claim with these access modes (what the step reads before submitting)."""
        pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
               "metadata": {"name": name, "namespace": ns, "uid": str(uuid.uuid4())},
               "spec": {"accessModes": list(access_modes), "resources": {"requests": {"storage": "1Gi"}}},
               "status": {"phase": "Bound", "accessModes": list(access_modes)}}
        with self.lock:
            self.pvcs[(ns, name)] = pvc
        return pvc

    def _persistentvolumeclaims(self, verb: str, ns: str, name: Optional[str], *_a: Any) -> Tuple[int, Any, str]:
        pvc = self.pvcs.get((ns, name or ""))
        if pvc is None:
            return 404, _status(404, f'persistentvolumeclaims "{name}" not found'), "application/json"
        return 200, pvc, "application/json"

    def _podgroups(self, verb: str, ns: str, name: Optional[str], *_a: Any) -> Tuple[int, Any, str]:
        pg = self.podgroups.get((ns, name or ""))
        if pg is None:
            return 404, _status(404, f'podgroups.scheduling.volcano.sh "{name}" not found'), "application/json"
        return 200, pg, "application/json"

    def _pods(self, verb: str, ns: str, name: Optional[str], query: Dict[str, str], _body: bytes,
              sub: Any) -> Tuple[int, Any, str]:
        if sub == "/log":
            pod = self.pods.get((ns, name or ""))
            if pod is None:
                return 404, _status(404, f'pods "{name}" not found'), "application/json"
            if pod["status"]["phase"] == "Pending":
                return 400, _status(400, f'container "{name}" is waiting to start: ContainerCreating'), \
                    "application/json"
            lines = list(self.logs.get((ns, name), []))
            if "sinceSeconds" in query:
                cut = datetime.now(timezone.utc) - timedelta(seconds=int(query["sinceSeconds"]))
                lines = [(t, line) for t, line in lines if t >= cut]
            if "tailLines" in query:
                lines = lines[-int(query["tailLines"]):] if int(query["tailLines"]) else []
            stamp = query.get("timestamps") in ("true", "True", "1")
            text = "".join((f"{rfc3339_nano(t)} {line}\n" if stamp else f"{line}\n") for t, line in lines)
            return 200, text.encode(), "text/plain"
        if name:
            pod = self.pods.get((ns, name))
            if pod is None:
                return 404, _status(404, f'pods "{name}" not found'), "application/json"
            return 200, pod, "application/json"
        if verb == "watch":   # a watch that sees no change before it ends (the poll drives the script)
            return 200, b"", "application/json"
        selector = dict(p.split("=", 1) for p in query.get("labelSelector", "").split(",") if "=" in p)
        items = [p for (n, _), p in sorted(self.pods.items()) if n == ns
                 and all(p["metadata"]["labels"].get(k) == v for k, v in selector.items())]
        return 200, {"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": items}, "application/json"

    def _events(self, verb: str, ns: str, name: Optional[str], query: Dict[str, str], *_a: Any) -> Tuple[int, Any, str]:
        selector = dict(p.split("=", 1) for p in query.get("fieldSelector", "").split(",") if "=" in p)

        def field(ev: Dict[str, Any], path: str) -> Any:
            cur: Any = ev
            for part in path.split("."):
                cur = (cur or {}).get(part)
            return cur

        items = [e for e in self.events if e["metadata"]["namespace"] == ns
                 and all(field(e, k) == v for k, v in selector.items())]
        return 200, {"apiVersion": "v1", "kind": "EventList", "metadata": {}, "items": items}, "application/json"


def _status(code: int, message: str, status: str = "Failure", reason: str = "") -> Dict[str, Any]:
    out = {"apiVersion": "v1", "kind": "Status", "status": status, "message": message, "code": code}
    if reason:
        out["reason"] = reason
    return out
