"""Kubernetes' syntax rules for names and quantities, checked before anything is submitted.

Why here: the Job spec, the step's parameters, the object-store settings and the RBAC builder all
validate names the API server would refuse; one copy of the rules, below every capability.
"""
from __future__ import annotations

import re
from typing import Optional

from ctr_volcano.errors import BadInput

__all__ = ["DNS1035_LABEL", "DNS1123_LABEL", "DNS1123_SUBDOMAIN", "is_dns1035_label", "is_dns1123_label",
           "is_dns1123_subdomain", "check_quantity", "quantity_number", "ENV_NAME", "LABEL_KEY",
           "LABEL_VALUE"]

DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def is_dns1035_label(value: str) -> bool:
    """True if ``value`` may name a Service (and so a Volcano Job with the svc plugin)."""
    return len(value) <= 63 and bool(DNS1035_LABEL.match(value))


def is_dns1123_label(value: str) -> bool:
    """True if ``value`` is a DNS-1123 label (pod hostnames, task names)."""
    return len(value) <= 63 and bool(DNS1123_LABEL.match(value))


def is_dns1123_subdomain(value: str) -> bool:
    """True if ``value`` is a DNS-1123 subdomain (namespaces' objects, queues, priority classes)."""
    return len(value) <= 253 and bool(DNS1123_SUBDOMAIN.match(value))


_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|Ki|M|Mi|G|Gi|T|Ti|P|Pi|E|Ei|e[0-9]+)?$")
_QUANTITY_NUMBER = re.compile(r"^[0-9]+(\.[0-9]+)?")
#: A container environment variable name as this product accepts it.
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


def check_quantity(field_name: str, value: Optional[str]) -> None:
    """Refuse ``value`` unless it is ``None`` or a Kubernetes quantity (``500m``, ``2``, ``4Gi``)."""
    if value is not None and not _QUANTITY.match(str(value)):
        raise BadInput(field_name, value, "use a Kubernetes quantity such as '500m', '2', '4Gi'")


def quantity_number(value: object) -> Optional[float]:
    """The number in front of a quantity's suffix (``"500m"`` -> 500.0), ``None`` if it has none."""
    number = _QUANTITY_NUMBER.match(str(value)) if value is not None else None
    return float(number.group()) if number is not None else None
