"""The launcher's RBAC: a namespaced ServiceAccount, Role and RoleBinding, nothing cluster-wide.

Why built, not hand-written: the rules must be exactly the verbs :mod:`ctr_volcano.training.volcano.client`
uses (a test replays every launcher path against a fake API server and checks each request against
:data:`RULES`), and ``deploy/rbac.yaml`` is generated from :func:`build_rbac` (a test keeps them in
sync).
"""
from __future__ import annotations

from typing import Any, Dict, List, Tuple

from ctr_volcano.errors import BadInput
from ctr_volcano.training.volcano.api_types import JOBS, PODGROUPS
from ctr_volcano.util.k8s_syntax import is_dns1123_label, is_dns1123_subdomain

__all__ = ["RULES", "build_rbac", "allows", "DEFAULT_NAME", "DEFAULT_SERVICE_ACCOUNT"]

DEFAULT_NAME = "ctr-volcano-launcher"
DEFAULT_SERVICE_ACCOUNT = "ctr-volcano-launcher"

#: (apiGroup, resource, verbs): exactly what the launcher does.
RULES: Tuple[Tuple[str, str, Tuple[str, ...]], ...] = (
    (JOBS.group, JOBS.plural, ("create", "get", "list", "watch", "delete")),
    (PODGROUPS.group, PODGROUPS.plural, ("get", "list", "watch")),
    ("", "pods", ("get", "list", "watch")),
    ("", "pods/log", ("get",)),
    ("", "events", ("list", "watch")),
    ("", "persistentvolumeclaims", ("get",)),  # refuse a ReadWriteOnce claim before submitting
)


def allows(group: str, resource: str, verb: str) -> bool:
    """Whether :data:`RULES` allow ``verb`` on ``group``/``resource``."""
    return any(g == group and r == resource and verb in verbs for g, r, verbs in RULES)


def build_rbac(namespace: str, service_account: str = DEFAULT_SERVICE_ACCOUNT, *,
               name: str = DEFAULT_NAME, create_service_account: bool = True) -> List[Dict[str, Any]]:
    """The manifests that let ``service_account`` in ``namespace`` run the launcher.

    Args:
        namespace: where the KFP steps and the Volcano Jobs run.
        service_account: the step pods' service account (KFP's default is ``pipeline-runner``).
        name: name of the Role and RoleBinding.
        create_service_account: include the ServiceAccount (False to bind an existing one).

    Returns:
        ``[ServiceAccount?, Role, RoleBinding]`` as dicts.
    """
    if not is_dns1123_label(namespace):
        raise BadInput("namespace", namespace, "use an existing namespace's name")
    if not is_dns1123_subdomain(service_account):
        raise BadInput("service_account", service_account, "use a valid ServiceAccount name")
    if not is_dns1123_subdomain(name):
        raise BadInput("name", name, "use a valid Role name")
    labels = {"app.kubernetes.io/name": "ctr-volcano", "app.kubernetes.io/component": "launcher-rbac"}
    docs: List[Dict[str, Any]] = []
    if create_service_account:
        docs.append({"apiVersion": "v1", "kind": "ServiceAccount",
                     "metadata": {"name": service_account, "namespace": namespace, "labels": labels}})
    rules: List[Dict[str, Any]] = [
        {"apiGroups": [group], "resources": [resource], "verbs": list(verbs)}
        for group, resource, verbs in RULES]
    docs.append({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                 "metadata": {"name": name, "namespace": namespace, "labels": labels},
                 "rules": rules})
    docs.append({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                 "metadata": {"name": name, "namespace": namespace, "labels": labels},
                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                 "subjects": [{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}]})
    return docs
