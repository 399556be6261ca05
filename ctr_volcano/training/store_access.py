"""How the gang reaches the object store: the endpoint the pods use and the Secret their keys come from.

Why its own module: the step's parameters validate these settings at the boundary, and the Volcano
Job builder turns them into pod environment; both sit on it (docs/handoff.md).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Tuple

from ctr_volcano.errors import BadInput
from ctr_volcano.util.k8s_syntax import ENV_NAME, check_quantity, is_dns1123_subdomain

__all__ = ["ObjectStore", "SecretEnv", "KFP_ARTIFACT_SECRET", "KFP_ACCESS_KEY_KEY", "KFP_SECRET_KEY_KEY",
           "KFP_ARTIFACT_ENDPOINT", "SCRATCH_MOUNT"]

#: The Secret KFP itself reads its artifact store's credentials from, in the run's namespace, and
#: its keys (kubeflow/pipelines backend/src/v2/config/env.go: minioArtifactSecretName,
#: minioArtifactAccessKeyKey, minioArtifactSecretKeyKey; manifests/kustomize/third-party/seaweedfs/
#: base/seaweedfs/mlpipeline-minio-artifact-secret.yaml). The SeaweedFS install keeps MinIO's names.
KFP_ARTIFACT_SECRET = "mlpipeline-minio-artifact"
KFP_ACCESS_KEY_KEY = "accesskey"
KFP_SECRET_KEY_KEY = "secretkey"
#: KFP's default store endpoint (objectstore.MinioDefaultEndpoint; the SeaweedFS install serves S3
#: behind the same ``minio-service`` Service, port 9000 -> 8333), plain HTTP.
KFP_ARTIFACT_ENDPOINT = "http://minio-service.kubeflow:9000"
#: Where each pod's own scratch (an emptyDir) is mounted in object-store mode.
SCRATCH_MOUNT = "/scratch"


@dataclass(frozen=True)
class SecretEnv:
    """An environment variable taken from a Secret key (credentials stay out of the manifest).

    Attributes:
        name: the environment variable's name.
        secret: the Secret's name in the job's namespace.
        key: the key inside the Secret.
    """

    name: str
    secret: str
    key: str

    def __post_init__(self) -> None:
        if not ENV_NAME.match(self.name):
            raise BadInput("env_from_secrets.name", self.name, "use a valid variable name like AWS_ACCESS_KEY_ID")
        if not is_dns1123_subdomain(self.secret):
            raise BadInput("env_from_secrets.secret", self.secret, "use the name of a Secret (lower case, DNS-1123)")
        if not self.key:
            raise BadInput("env_from_secrets.key", self.key, "name the key inside the Secret")


@dataclass(frozen=True)
class ObjectStore:
    """Object-store hand-off: the gang reads and writes ``s3://`` URIs, no shared volume.

    Attributes:
        endpoint: the S3 API as the pods reach it, ``http(s)://host:port`` (scheme = TLS off/on);
            KFP's own store by default.
        secret: the Secret holding the credentials (referenced by ``secretKeyRef``; never copied
            into the manifest); KFP's artifact-store Secret by default.
        access_key_key: the key of the access key id inside ``secret``.
        secret_key_key: the key of the secret access key inside ``secret``.
        region: the signing region.
        addressing: ``path`` (in-cluster stores) or ``virtual``.
        scratch_size: size limit of each pod's scratch emptyDir (its shards, tables, model);
            ``None`` for no limit.
    """

    endpoint: str = KFP_ARTIFACT_ENDPOINT
    secret: str = KFP_ARTIFACT_SECRET
    access_key_key: str = KFP_ACCESS_KEY_KEY
    secret_key_key: str = KFP_SECRET_KEY_KEY
    region: str = "us-east-1"
    addressing: str = "path"
    scratch_size: Optional[str] = None

    def __post_init__(self) -> None:
        from ctr_model.store import check_addressing, check_endpoint

        check_endpoint(self.endpoint, "object_store.endpoint")
        check_addressing(self.addressing, "object_store.addressing")
        if not self.endpoint:
            raise BadInput("object_store.endpoint", self.endpoint,
                           "give the S3 endpoint as the pods reach it, e.g. " + KFP_ARTIFACT_ENDPOINT)
        if not is_dns1123_subdomain(self.secret):
            raise BadInput("object_store.secret", self.secret,
                           f"name the Secret with the store's keys (KFP's is {KFP_ARTIFACT_SECRET})")
        for name in ("access_key_key", "secret_key_key"):
            if not re.match(r"^[-._a-zA-Z0-9]+$", getattr(self, name) or ""):
                raise BadInput(f"object_store.{name}", getattr(self, name), "name a key of the Secret")
        check_quantity("object_store.scratch_size", self.scratch_size)

    def env(self) -> Tuple[Tuple[str, str], ...]:
        """The plain variables every pod gets (``ctr_model.store`` reads them)."""
        from ctr_model.contract import ENV_SCRATCH_DIR
        from ctr_model.store import ENV_ADDRESSING, ENV_ENDPOINT, ENV_REGION

        return ((ENV_ENDPOINT, self.endpoint), (ENV_REGION, self.region),
                (ENV_ADDRESSING, self.addressing), (ENV_SCRATCH_DIR, SCRATCH_MOUNT))

    def secret_env(self) -> Tuple[SecretEnv, ...]:
        """The credentials, by reference."""
        from ctr_model.store import ENV_ACCESS_KEY, ENV_SECRET_KEY

        return (SecretEnv(ENV_ACCESS_KEY, self.secret, self.access_key_key),
                SecretEnv(ENV_SECRET_KEY, self.secret, self.secret_key_key))
