"""The Volcano API types the launcher creates and reads, named once: ``(group, version, plural)``.

The Job builder (the ``apiVersion`` it writes), the client (the custom-object calls) and the RBAC
builder (the Role's rules) all name them; a Volcano API move is then one edit here.
"""
from __future__ import annotations

from typing import NamedTuple

__all__ = ["ApiType", "JOBS", "PODGROUPS"]


class ApiType(NamedTuple):
    """A custom resource's coordinates in the Kubernetes API."""

    group: str
    version: str
    plural: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


#: Volcano's gang-scheduled Job (what the launcher submits).
JOBS = ApiType("batch.volcano.sh", "v1alpha1", "jobs")
#: The PodGroup Volcano creates per Job (where a stuck gang's reason is).
PODGROUPS = ApiType("scheduling.volcano.sh", "v1beta1", "podgroups")
