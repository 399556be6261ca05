"""The real Kubernetes OpenAPI v3 schemas, for validating manifests our builders make.

Read from the ``k8s.io/kubernetes`` module in the Go module cache (``api/openapi-spec/v3``), at the
version the cluster tier pins in ``tools/minicluster/cluster/go.mod``; the first cluster-tier build
downloads it, and :func:`openapi_dir` fetches it when a test needs it first. ``$ref``/``allOf`` are inlined so :func:`ctr_volcano.training.volcano.manifest.unknown_fields`
can walk the result like a CRD schema.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Dict, List

from tests.crds import CrdUnavailable, download_module

REPO = Path(__file__).resolve().parents[1]
GO_MOD = REPO / "tools" / "minicluster" / "cluster" / "go.mod"

__all__ = ["openapi_dir", "schema_for", "problems", "kubernetes_version"]


def kubernetes_version() -> str:
    """The ``k8s.io/kubernetes`` version the cluster tier pins."""
    return re.search(r"^\s*k8s\.io/kubernetes (v\S+)", GO_MOD.read_text(), re.M).group(1)


def openapi_dir() -> Path:
    """``api/openapi-spec/v3`` of the pinned Kubernetes module, fetched into Go's module cache on first
    use (as the cluster tier's build does; later calls read the cache).

    Raises:
        CrdUnavailable: Go is not installed, or the download failed.
    """
    path = download_module("k8s.io/kubernetes", kubernetes_version()) / "api" / "openapi-spec" / "v3"
    if not path.is_dir():
        raise CrdUnavailable(f"{path} is missing: the module layout changed")
    return path


def _inline(node: Any, defs: Dict[str, Any], seen: tuple = ()) -> Any:
    if isinstance(node, list):
        return [_inline(n, defs, seen) for n in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        if name in seen:  # recursive types: stop, accept anything below
            return {}
        return _inline(defs[name], defs, seen + (name,))
    out = {k: _inline(v, defs, seen) for k, v in node.items() if k not in ("allOf", "description")}
    for part in node.get("allOf") or []:
        out.update(_inline(part, defs, seen))
    return out


def schema_for(base: Path, api_file: str, name: str) -> Dict[str, Any]:
    """The inlined schema of ``name`` (e.g. ``io.k8s.api.apps.v1.ReplicaSet``) from ``base/api_file``."""
    doc = json.loads((base / api_file).read_text())
    return _inline(doc["components"]["schemas"][name], doc["components"]["schemas"])


def problems(obj: Dict[str, Any], schema: Dict[str, Any]) -> List[str]:
    """JSON-schema errors plus fields the schema does not declare (the API server would drop them)."""
    import jsonschema

    from ctr_volcano.training.volcano.manifest import unknown_fields

    errors = [f"{'.'.join(str(p) for p in e.absolute_path)}: {e.message}"
              for e in jsonschema.Draft7Validator(schema).iter_errors(json.loads(json.dumps(obj)))]
    return errors + [f"{p}: unknown field" for p in unknown_fields(obj, schema)]
