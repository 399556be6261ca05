"""The object store's settings, URIs and errors: what the SDK, the pod contract and the client share.

Why its own module: :func:`ctr_model.contract.parse_role_env` reads a pod's store settings with the
rest of its contract, and the SDK validates an endpoint at its boundary, neither needing the client
(:mod:`ctr_model.store`, which re-exports every name here). Standard library only.

The variables, the same in every pod (set by the launcher, the credentials through a Secret
reference)::

    CTR_S3_ENDPOINT    http://host:port or https://host:port (scheme = TLS off/on); empty: AWS
    CTR_S3_REGION      signing region (default us-east-1)
    CTR_S3_ADDRESSING  path (default; MinIO, SeaweedFS) or virtual (bucket.host)
    CTR_S3_RETRY_S     how long one operation retries a store that is down (default 60)
    AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY   the credentials

Two error families: a store that refuses (bad settings, credentials, a missing bucket or prefix) is
a :class:`StoreError`, bad input; one still unreachable or failing with 5xx once the retries are
spent is a :class:`StoreUnreachable`, a transient outage, not the user's fault.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping, Optional, Tuple
from urllib.parse import urlparse

from ctr_model.errors import BadInput, TransientError

__all__ = ["StoreError", "StoreUnreachable", "StoreConfig", "check_endpoint", "check_addressing", "is_uri",
           "split_uri", "join", "retry_budget_s", "ENV_ENDPOINT", "ENV_REGION", "ENV_ADDRESSING", "ENV_ACCESS_KEY",
           "ENV_SECRET_KEY", "ENV_RETRY", "ADDRESSING", "RETRY_BUDGET_S"]

ENV_ENDPOINT = "CTR_S3_ENDPOINT"
ENV_REGION = "CTR_S3_REGION"
ENV_ADDRESSING = "CTR_S3_ADDRESSING"
ENV_ACCESS_KEY = "AWS_ACCESS_KEY_ID"
ENV_SECRET_KEY = "AWS_SECRET_ACCESS_KEY"
ADDRESSING = ("path", "virtual")
#: How long one object's copy keeps retrying a store that is down or restarting (seconds; the
#: ``CTR_S3_RETRY_S`` variable overrides it). A SeaweedFS restart took 12-32 s from kill to ready
#: here (tests/test_store_faults.py, a loaded 2-core machine); one minute covers a restarted store
#: pod without hiding a store that is gone for good.
RETRY_BUDGET_S = 60.0
ENV_RETRY = "CTR_S3_RETRY_S"


class StoreError(BadInput):
    """The object store refused (bad settings, credentials, a missing bucket or prefix): bad input.

    ``field`` is the URI's or variable's name, ``value`` its value; the fix names what to change.
    """


class StoreUnreachable(TransientError):
    """The object store stayed unreachable (or kept answering 5xx) through the retries: an outage.

    Attributes:
        uri: the URI the failed operation was on.
        why: one line naming the endpoint and what to check.
    """

    def __init__(self, uri: str, why: str):
        self.uri, self.why = uri, why
        super().__init__(f"{uri}: {why}")


def is_uri(location: str) -> bool:
    """Whether ``location`` is an ``s3://`` URI (anything else is a local path)."""
    return isinstance(location, str) and location.startswith("s3://")


def split_uri(uri: str) -> Tuple[str, str]:
    """``s3://bucket/a/b`` -> ``("bucket", "a/b")``; refuses anything without a bucket."""
    if not is_uri(uri):
        raise StoreError("uri", uri, "not an s3:// URI: use s3://BUCKET/PREFIX")
    rest = uri[len("s3://"):].strip("/")
    bucket, _, key = rest.partition("/")
    if not bucket:
        raise StoreError("uri", uri, "names no bucket: use s3://BUCKET/PREFIX")
    return bucket, key


def join(uri: str, *parts: str) -> str:
    """Join a URI and relative parts with ``/``."""
    out = uri.rstrip("/")
    for part in parts:
        part = part.strip("/")
        if part:
            out += "/" + part
    return out


@dataclass(frozen=True)
class StoreConfig:
    """How to reach the store.

    Attributes:
        endpoint: ``http(s)://host:port`` of an S3-compatible server; empty for AWS itself.
        region: signing region (SeaweedFS and MinIO accept any; AWS needs the bucket's).
        addressing: ``path`` (``host/bucket/key``: what in-cluster stores serve) or ``virtual``.
        access_key: access key id (from the Secret); empty for anonymous access.
        secret_key: secret access key.
        retry_s: how long one operation keeps retrying a store that is down (:func:`retrying`).
        connect_timeout_s: per connection attempt, so an unreachable endpoint fails in seconds.
        request_timeout_s: per request.
    """

    endpoint: str = ""
    region: str = "us-east-1"
    addressing: str = "path"
    access_key: str = ""
    secret_key: str = ""
    connect_timeout_s: float = 3.0
    request_timeout_s: float = 60.0
    retry_s: float = RETRY_BUDGET_S

    def __post_init__(self) -> None:
        check_endpoint(self.endpoint)
        check_addressing(self.addressing)
        if bool(self.access_key) != bool(self.secret_key):
            unset, other = (ENV_SECRET_KEY, ENV_ACCESS_KEY) if self.access_key else (ENV_ACCESS_KEY, ENV_SECRET_KEY)
            raise StoreError(unset, "", f"only {other} is set: set both (from the same Secret) or neither")

    @classmethod
    def from_env(cls, env: Optional[Mapping[str, str]] = None) -> "StoreConfig":
        """The settings from the store's variables (module docstring) of ``env`` (default: this
        process's); in a pod, :func:`ctr_model.contract.parse_role_env` calls it on the pod's."""
        env = os.environ if env is None else env
        return cls(endpoint=env.get(ENV_ENDPOINT, "").strip(),
                   region=env.get(ENV_REGION, "").strip() or "us-east-1",
                   addressing=env.get(ENV_ADDRESSING, "").strip() or "path",
                   access_key=env.get(ENV_ACCESS_KEY, ""), secret_key=env.get(ENV_SECRET_KEY, ""),
                   retry_s=retry_budget_s(env))

    def to_env(self) -> dict:
        """The non-secret variables (credentials travel separately, by Secret reference)."""
        return {ENV_ENDPOINT: self.endpoint, ENV_REGION: self.region, ENV_ADDRESSING: self.addressing}


def check_endpoint(endpoint: str, field: str = ENV_ENDPOINT) -> None:
    """Refuse an endpoint other than ``http(s)://HOST:PORT`` (empty: AWS itself), naming ``field``
    (the variable, or the caller's parameter that set it).

    Raises:
        StoreError: naming ``field``, the endpoint and the fix.
    """
    if endpoint:
        parsed = urlparse(endpoint)
        if parsed.scheme not in ("http", "https") or not parsed.netloc or parsed.path not in ("", "/"):
            raise StoreError(field, endpoint, "use http://HOST:PORT or https://HOST:PORT (the scheme switches "
                                              "TLS off/on)")


def check_addressing(addressing: str, field: str = ENV_ADDRESSING) -> None:
    """Refuse an addressing style other than ``path`` or ``virtual``, naming ``field``.

    Raises:
        StoreError: naming ``field``, the value and the fix.
    """
    if addressing not in ADDRESSING:
        raise StoreError(field, addressing, f"use one of {', '.join(ADDRESSING)}")


def retry_budget_s(env: Optional[Mapping[str, str]] = None) -> float:
    """``CTR_S3_RETRY_S`` (seconds), else :data:`RETRY_BUDGET_S`."""
    raw = (os.environ if env is None else env).get(ENV_RETRY, "").strip()
    try:
        return float(raw) if raw else RETRY_BUDGET_S
    except ValueError:
        raise StoreError(ENV_RETRY, raw, "give seconds, e.g. 60") from None
