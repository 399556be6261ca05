"""The KServe ``InferenceService`` that serves an exported model with the serving image.

A custom predictor container (the serving image runs ``ctr-volcano serve``): KServe's stock ONNX
runtime (Triton) would need clients to hash ids themselves, and its Paddle runtime reads one float
input. KServe's storage initializer copies ``storageUri`` (the model directory, with model.onnx and
serving.json) to ``/mnt/models`` (for a custom container it reads the ``STORAGE_URI`` variable) with
the S3 credentials of the service account named here (KServe's secret annotations on that account),
never with keys in the manifest. :func:`check` validates the manifest against the ``kserve``
package's ``V1beta1InferenceService`` model (the package ships no CRD).
"""
from __future__ import annotations

from typing import Any, Dict, Optional

from ctr_volcano.errors import BadInput
from ctr_volcano.util.k8s_syntax import check_quantity, is_dns1035_label

__all__ = ["SERVING_PORT", "STORAGE_SCHEMES", "render", "check"]

SERVING_PORT = 8080
#: The URIs KServe's storage initializer downloads.
STORAGE_SCHEMES = ("s3://", "gs://", "pvc://", "https://", "http://", "hdfs://")


def _checked(name: str, storage_uri: str, cpu: str, memory: str) -> None:
    if not is_dns1035_label(name):
        raise BadInput("name", name, "use a DNS-1035 label: lower-case letters, digits and '-', starting with a letter")
    if not storage_uri.startswith(STORAGE_SCHEMES):
        raise BadInput("storage_uri", storage_uri, f"give a URI KServe can download ({', '.join(STORAGE_SCHEMES)}), "
                                                   f"e.g. the model's s3:// prefix in the registry")
    check_quantity("cpu", cpu)
    check_quantity("memory", memory)


def render(name: str, storage_uri: str, image: str, namespace: Optional[str] = None,
           service_account: Optional[str] = None, cpu: str = "1", memory: str = "2Gi") -> Dict[str, Any]:
    """The manifest (a dict ready for YAML): V2 protocol, one predictor container on port 8080,
    requests = limits = ``cpu``/``memory``.

    Raises:
        BadInput: a name that is not a DNS-1035 label, a URI KServe cannot fetch, a bad quantity.
    """
    _checked(name, storage_uri, cpu, memory)
    resources = {"cpu": cpu, "memory": memory}
    container = {"name": "kserve-container", "image": image,
                 "args": ["--model", "/mnt/models", "--host", "0.0.0.0", "--port", str(SERVING_PORT)],
                 "env": [{"name": "STORAGE_URI", "value": storage_uri}],
                 "ports": [{"containerPort": SERVING_PORT, "protocol": "TCP"}],
                 "readinessProbe": {"httpGet": {"path": "/v2/health/ready", "port": SERVING_PORT}},
                 "resources": {"requests": dict(resources), "limits": dict(resources)}}
    predictor: Dict[str, Any] = {"containers": [container]}
    if service_account:
        predictor["serviceAccountName"] = service_account
    metadata: Dict[str, Any] = {"name": name, "annotations": {"serving.kserve.io/protocol-version": "v2"}}
    if namespace:
        metadata["namespace"] = namespace
    return {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
            "metadata": metadata, "spec": {"predictor": predictor}}


def check(manifest: Dict[str, Any]) -> None:
    """Validate against ``kserve``'s ``V1beta1InferenceService``: built through the models' own
    constructors (their client-side validation: types, required fields, enums); a field the models
    do not know is dropped on the way, so the manifest must serialize back unchanged.

    Raises:
        BadInput: a field the model rejects or does not know (named by its path).
    """
    try:
        obj = _build(manifest, "V1beta1InferenceService")
    except (ValueError, TypeError) as exc:
        raise BadInput("manifest", manifest.get("metadata", {}).get("name"),
                       f"V1beta1InferenceService rejects it: {' '.join(str(exc).split())[:300]}") from None
    diff = _first_difference(manifest, _dump(obj), "")
    if diff is not None:
        raise BadInput(f"manifest{diff}", "(unknown to V1beta1InferenceService)",
                       "remove or rename the field: kserve's model does not have it")


def _build(data: Any, type_name: str) -> Any:
    """``data`` as the OpenAPI type ``type_name`` (``list[T]``, ``dict(str, T)``, a primitive, or a
    model class of kserve's or of the Kubernetes client's, which kserve's models refer to)."""
    import kserve.models
    import kubernetes.client.models

    if data is None:
        return None
    if type_name.startswith(("list[", "List[")):
        if not isinstance(data, list):
            raise TypeError(f"expected a list for {type_name}, got {data!r}")
        return [_build(v, type_name[5:-1]) for v in data]
    if type_name.startswith(("dict(", "Dict[")):
        if not isinstance(data, dict):
            raise TypeError(f"expected a mapping for {type_name}, got {data!r}")
        inner = type_name[5:-1].split(", ", 1)[1]
        return {k: _build(v, inner) for k, v in data.items()}
    primitives: Dict[str, Any] = {"str": str, "int": int, "float": (int, float), "bool": bool}
    if type_name in primitives:
        if not isinstance(data, primitives[type_name]):
            raise TypeError(f"expected {type_name}, got {data!r}")
        return data
    if type_name == "object":
        return data
    klass = getattr(kserve.models, type_name, None) or getattr(kubernetes.client.models, type_name)
    kwargs = {attr: _build(data[key], klass.openapi_types[attr])
              for attr, key in klass.attribute_map.items() if key in data}
    return klass(**kwargs)


def _dump(obj: Any) -> Any:
    """A built model back to the manifest's camelCase form (set fields only)."""
    if hasattr(obj, "attribute_map") and hasattr(obj, "openapi_types"):
        return {obj.attribute_map[a]: _dump(getattr(obj, a)) for a in obj.openapi_types
                if getattr(obj, a) is not None}
    if isinstance(obj, list):
        return [_dump(v) for v in obj]
    if isinstance(obj, dict):
        return {k: _dump(v) for k, v in obj.items()}
    return obj


def _first_difference(want: Any, got: Any, path: str) -> Optional[str]:
    if isinstance(want, dict) and isinstance(got, dict):
        for key in want:
            if key not in got:
                return f"{path}.{key}"
            found = _first_difference(want[key], got[key], f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
        for i, (a, b) in enumerate(zip(want, got)):
            found = _first_difference(a, b, f"{path}[{i}]")
            if found:
                return found
        return None
    return None if want == got else path


#: Written beside an approved model by ``publish_model``.
MANIFEST_NAME = "inference_service.yaml"
#: KFP's artifact URIs for its object store, and what KServe's storage initializer calls them.
_KFP_SCHEMES = {"minio://": "s3://", "s3://": "s3://", "gs://": "gs://"}


def write_beside(model_dir: str, model_uri: str, name: str = "ctr") -> Optional[str]:
    """Write ``inference_service.yaml`` for the model at ``model_uri`` into ``model_dir``; returns its
    path, or ``None`` when the URI is local (a ``kfp.local`` run: nothing a cluster could fetch)."""
    import os

    import yaml

    from ctr_volcano.images import serving_image

    scheme = next((s for s in _KFP_SCHEMES if model_uri.startswith(s)), None)
    if scheme is None:
        return None
    uri = _KFP_SCHEMES[scheme] + model_uri[len(scheme):]
    path = os.path.join(model_dir, MANIFEST_NAME)
    with open(path, "w", encoding="utf-8") as fh:
        yaml.safe_dump(render(name, uri, serving_image()), fh, sort_keys=False)
    return path
