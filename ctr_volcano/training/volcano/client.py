"""A thin client for exactly the Kubernetes calls the launcher makes.

Why a wrapper at all: the launcher's logic (re-attach, explain, collect) should see plain dicts and the
product's error families, not the ``kubernetes`` package's models and ``ApiException``. Every call
here maps one API request, and :func:`api_error` maps each failure by what it is:

* :class:`~ctr_volcano.errors.TransientError` -- connection errors, 408, 429, 5xx, and a 409 that is a
  write conflict (the object changed under the request): the caller retries with a bound;
  :class:`WatchExpired` (410 Gone: a watch's resume point is too old) is one too;
* :class:`~ctr_volcano.errors.BadInput` -- :class:`Forbidden` (401/403, naming the missing RBAC rule),
  :class:`JobExists` (409 ``AlreadyExists`` on create), 404 on the Job resource (Volcano is not
  installed), 422 (the API server's message).

The verbs used are exactly those in :mod:`ctr_volcano.training.volcano.rbac`.

``kubernetes`` is imported lazily so that importing this module stays cheap.
"""
from __future__ import annotations

import json
import os
from typing import Any, Dict, Iterator, List, Optional, Tuple

from ctr_volcano.errors import BadInput, TransientError
from ctr_volcano.training.volcano.api_types import JOBS as _JOBS
from ctr_volcano.training.volcano.api_types import PODGROUPS as _PODGROUPS

__all__ = ["KubeClient", "JobExists", "Forbidden", "WatchExpired", "api_error", "in_cluster_namespace",
           "SERVICE_ACCOUNT_DIR"]

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"

_TRANSIENT_STATUS = {0, 408, 429, 500, 502, 503, 504}


class JobExists(BadInput):
    """``create_job`` found a Job with that name already (HTTP 409 ``AlreadyExists``).

    Bad input where nobody catches it (the name is taken); the launcher catches it to re-attach to a
    Job that another attempt of the same step created first."""

    def __init__(self, what: str, message: str):
        super().__init__("name", what, f"a Job of this name already exists ({message}); delete it or "
                                       "choose another name")


class Forbidden(BadInput):
    """The API server refused the request (HTTP 401/403): this service account lacks a rule of the
    launcher's Role. Right after an API outage a refusal can be transient (a restarted API server
    refuses until its RBAC caches are filled): the launcher decides that, not this class."""

    def __init__(self, what: str, status: int, message: str):
        super().__init__("rbac", what, f"the API server refused ({status}: {message}); apply the Role "
                                       "from `ctr-volcano rbac` to this service account")


class WatchExpired(TransientError):
    """A watch's resume point is too old (HTTP 410 Gone): the next watch must start from now."""


def in_cluster_namespace(default: str = "default") -> str:
    """The namespace of the pod we run in (its service account's), else ``default``."""
    try:
        with open(os.path.join(SERVICE_ACCOUNT_DIR, "namespace"), encoding="utf-8") as fh:
            return fh.read().strip() or default
    except OSError:
        return default


class KubeClient:
    """The launcher's view of the API server.

    Build it with :meth:`from_kubeconfig`, :meth:`in_cluster` or :meth:`auto`; or pass any
    ``kubernetes.client.ApiClient``.

    Args:
        api_client: a configured ``kubernetes.client.ApiClient``.
        request_timeout_s: (connect, read) timeout of every request, so a hung API server becomes a
            retried :class:`TransientError` instead of a hung step.
    """

    def __init__(self, api_client: Any, request_timeout_s: float = 30.0):
        from kubernetes import client as k8s

        self.api_client = api_client
        self._custom = k8s.CustomObjectsApi(api_client)
        self._core = k8s.CoreV1Api(api_client)
        self._timeout = (min(request_timeout_s, 10.0), request_timeout_s)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_kubeconfig(cls, path: Optional[str] = None, context: Optional[str] = None,
                        **kwargs: Any) -> "KubeClient":
        """A client from a kubeconfig file (``None``: ``$KUBECONFIG`` or ``~/.kube/config``)."""
        from kubernetes import config

        try:
            api = config.new_client_from_config(config_file=path, context=context)
        except Exception as exc:  # ConfigException, FileNotFoundError, yaml errors
            raise BadInput("kubeconfig", path or os.environ.get("KUBECONFIG", "~/.kube/config"),
                           f"point at a readable kubeconfig with a valid context ({exc})") from None
        return cls(api, **kwargs)

    @classmethod
    def in_cluster(cls, **kwargs: Any) -> "KubeClient":
        """A client from the pod's service account (inside a KFP step)."""
        from kubernetes import client as k8s
        from kubernetes import config

        cfg = k8s.Configuration()
        try:
            config.load_incluster_config(client_configuration=cfg)
        except config.ConfigException as exc:
            raise BadInput("kubeconfig", None, f"not running in a pod; pass a kubeconfig ({exc})") from None
        return cls(k8s.ApiClient(cfg), **kwargs)

    @classmethod
    def auto(cls, kubeconfig: Optional[str] = None, context: Optional[str] = None,
             **kwargs: Any) -> "KubeClient":
        """Kubeconfig if one is given (or ``$KUBECONFIG`` is set), else in-cluster config."""
        if kubeconfig or context or os.environ.get("KUBECONFIG") or not os.environ.get("KUBERNETES_SERVICE_HOST"):
            return cls.from_kubeconfig(kubeconfig, context, **kwargs)
        return cls.in_cluster(**kwargs)

    def close(self) -> None:
        """Release the connection pool."""
        try:
            self.api_client.close()
        except Exception:  # pragma: no cover - best effort
            pass

    # ------------------------------------------------------------------ error mapping
    def _call(self, what: str, fn: Any, *args: Any, not_found_ok: bool = False,
              none_on: Tuple[int, ...] = (), **kwargs: Any) -> Any:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        kwargs.setdefault("_request_timeout", self._timeout)
        try:
            return fn(*args, **kwargs)
        except ApiException as exc:
            status = int(exc.status or 0)
            if (status == 404 and not_found_ok) or status in none_on:
                return None
            raise api_error(what, exc) from None
        except (HTTPError, OSError) as exc:
            raise api_error(what, exc) from None

    def _dict(self, obj: Any) -> Dict[str, Any]:
        return self.api_client.sanitize_for_serialization(obj)

    # ------------------------------------------------------------------ Volcano Jobs
    def create_job(self, job: Dict[str, Any]) -> Dict[str, Any]:
        """POST the Job; raises :class:`JobExists` when one of that name exists."""
        ns = job["metadata"]["namespace"]
        return self._call(f"create jobs.batch.volcano.sh {ns}/{job['metadata']['name']}",
                          self._custom.create_namespaced_custom_object, *_JOBS[:2], ns, _JOBS[2], job)

    def get_job(self, namespace: str, name: str) -> Optional[Dict[str, Any]]:
        """The Job, or ``None`` if it does not exist."""
        return self._call(f"get jobs.batch.volcano.sh {namespace}/{name}",
                          self._custom.get_namespaced_custom_object, *_JOBS[:2], namespace, _JOBS[2],
                          name, not_found_ok=True)

    def delete_job(self, namespace: str, name: str) -> bool:
        """Delete the Job and (background propagation) its pods; ``False`` if it was already gone."""
        res = self._call(f"delete jobs.batch.volcano.sh {namespace}/{name}",
                         self._custom.delete_namespaced_custom_object, *_JOBS[:2], namespace, _JOBS[2],
                         name, propagation_policy="Background", not_found_ok=True)
        return res is not None

    # ------------------------------------------------------------------ PodGroups, pods, events
    def get_podgroup(self, namespace: str, name: str) -> Optional[Dict[str, Any]]:
        """The PodGroup, or ``None``."""
        return self._call(f"get podgroups.scheduling.volcano.sh {namespace}/{name}",
                          self._custom.get_namespaced_custom_object, *_PODGROUPS[:2], namespace,
                          _PODGROUPS[2], name, not_found_ok=True)

    def get_pod(self, namespace: str, name: str) -> Optional[Dict[str, Any]]:
        """The pod as an API-shaped dict, or ``None``."""
        res = self._call(f"get pods {namespace}/{name}", self._core.read_namespaced_pod, name, namespace,
                         not_found_ok=True)
        return None if res is None else self._dict(res)

    def get_pvc(self, namespace: str, name: str) -> Optional[Dict[str, Any]]:
        """The PersistentVolumeClaim as an API-shaped dict, or ``None``."""
        res = self._call(f"get persistentvolumeclaims {namespace}/{name}",
                         self._core.read_namespaced_persistent_volume_claim, name, namespace, not_found_ok=True)
        return None if res is None else self._dict(res)

    def list_pods(self, namespace: str, label_selector: str) -> List[Dict[str, Any]]:
        """Pods matching ``label_selector``, as API-shaped dicts (camelCase keys)."""
        res = self._call(f"list pods {namespace} -l {label_selector}",
                         self._core.list_namespaced_pod, namespace, label_selector=label_selector)
        return self._dict(res).get("items") or []

    def watch_pods(self, namespace: str, label_selector: str, timeout_s: int = 60,
                   resource_version: Optional[str] = None) -> Iterator[Dict[str, Any]]:
        """Every pod update matching ``label_selector`` for up to ``timeout_s`` seconds (API-shaped
        dicts). A poll can miss a state that lasts less than its period (a pod Failed and deleted by
        Volcano within a second); a watch sees each one. ``resource_version`` (the last pod's
        ``metadata.resourceVersion``) resumes where an earlier watch ended, so what changed between
        the two is replayed, not lost; the API server answers 410 when that point is too old
        (:class:`WatchExpired`). Errors are mapped as every other call's (:func:`api_error`)."""
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        what = f"watch pods {namespace} -l {label_selector}"
        since = {"resource_version": resource_version} if resource_version else {}
        w = watch.Watch()
        try:
            for event in w.stream(self._core.list_namespaced_pod, namespace, label_selector=label_selector,
                                  timeout_seconds=int(timeout_s), _request_timeout=int(timeout_s) + 10,
                                  **since):
                if isinstance(event.get("object"), dict):   # an ERROR event carries a Status dict
                    continue
                yield self._dict(event["object"])
        except (ApiException, HTTPError, OSError) as exc:
            raise api_error(what, exc) from None
        finally:
            w.stop()

    def read_log(self, namespace: str, pod: str, *, container: Optional[str] = None,
                 tail_lines: Optional[int] = None, since_seconds: Optional[int] = None,
                 timestamps: bool = False, previous: bool = False) -> Optional[str]:
        """The pod's log text, or ``None`` if the pod (or its log) is gone."""
        kwargs: Dict[str, Any] = {"timestamps": timestamps}
        if container:
            kwargs["container"] = container
        if tail_lines is not None:
            kwargs["tail_lines"] = tail_lines
        if since_seconds is not None:
            kwargs["since_seconds"] = since_seconds
        if previous:
            kwargs["previous"] = True
        # 400: the container has not started yet (ContainerCreating): no log to read yet.
        return self._call(f"get pods/log {namespace}/{pod}", self._core.read_namespaced_pod_log,
                          pod, namespace, not_found_ok=True, none_on=(400,), **kwargs)

    def list_events(self, namespace: str, field_selector: str) -> List[Dict[str, Any]]:
        """Core events matching ``field_selector`` (e.g. ``involvedObject.name=<job>``)."""
        res = self._call(f"list events {namespace} --field-selector {field_selector}",
                         self._core.list_namespaced_event, namespace, field_selector=field_selector)
        return self._dict(res).get("items") or []


def api_error(what: str, exc: BaseException) -> Exception:
    """The product's error for a failed request ``what``: an ``ApiException`` by its status (and for
    409 by the Status reason), a connection error as transient. See the module docstring."""
    status = int(getattr(exc, "status", None) or 0)
    if not hasattr(exc, "status"):      # urllib3's HTTPError, OSError: no answer at all
        return TransientError(f"{what}: {type(exc).__name__}: {exc}")
    message, reason = _api_status(exc)
    if status == 409:
        if reason == "AlreadyExists" or "already exists" in message:
            return JobExists(what, message)
        return TransientError(f"{what}: HTTP 409 {message} (a conflicting write; try again)")
    if status == 410:
        return WatchExpired(f"{what}: HTTP 410 {message}")
    if status in _TRANSIENT_STATUS:
        return TransientError(f"{what}: HTTP {status} {message}")
    if status in (401, 403):
        return Forbidden(what, status, message)
    if status == 404:
        return BadInput("cluster", what, f"not found ({message}); is Volcano installed "
                                         "(CRD jobs.batch.volcano.sh) and does the namespace exist?")
    return BadInput("job", what, f"the API server rejected it ({status}: {message})")


def _api_status(exc: Any) -> Tuple[str, str]:
    """``(message, reason)`` of the API server's Status in ``exc``'s body (the HTTP reason if none)."""
    try:
        body = json.loads(exc.body)
        return str(body.get("message") or exc.reason), str(body.get("reason") or "")
    except Exception:
        return str(exc.reason or ""), ""
