"""The model registry the retraining pipeline reads and writes: a directory or object-store prefix.

Layout under ``<registry>/<model name>/``::

    versions/<version>/model/...        the exported model (with warm_start/)
    versions/<version>/version.json     metrics, data window, parent version, decision, time
    champion.json                       {"version": ..., ...}: the serving model

Why this shape: every version is kept, refused ones too (with the gate's reason), so the lineage of
the champion -- which version it was warm-started from, on which days -- can be read back.
``version.json`` is written after the model files, so a version without it is incomplete and
ignored. ``champion.json`` is replaced atomically (a rename on a filesystem, a single PUT on an
object store), so readers see the old or the new champion, never a mix.

Paths without a scheme are local directories (a mounted volume on a cluster); other URIs go
through ``pyarrow.fs`` (``s3://bucket/prefix``, ``gs://...``).
"""
from __future__ import annotations

import datetime as _dt
import functools
import json
import os
import re
import uuid
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional

from ctr_model.space import tree_bytes
from ctr_volcano.errors import BadInput
from ctr_volcano.util.outputs import room_for

__all__ = ["ModelRegistry", "ModelVersion", "CHAMPION_FILE", "VERSION_FILE"]

CHAMPION_FILE = "champion.json"
VERSION_FILE = "version.json"
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


@dataclass(frozen=True)
class ModelVersion:
    """One registered version.

    Attributes:
        version: its id (the KFP run id of the run that trained it).
        model_uri: where its exported model directory is.
        meta: its ``version.json``.
    """

    version: str
    model_uri: str
    meta: Mapping[str, Any]


class ModelRegistry:
    """Versions and the champion pointer of one model under a directory or prefix.

    Args:
        root: the registry's directory (or ``s3://bucket/prefix``).
        model_name: the model's name (letters, digits, ``.``, ``_``, ``-``).

    Raises:
        BadInput: an empty root or a name that is not path-safe.
    """

    def __init__(self, root: str, model_name: str):
        import pyarrow.fs as pafs

        from ctr_model.store import filesystem_for

        if not root or not root.strip():
            raise BadInput("registry", root, "give a directory or object-store prefix, e.g. /mnt/ctr/registry")
        if not _NAME_RE.match(model_name or ""):
            raise BadInput("model_name", model_name, "use letters, digits, '.', '_' or '-' (e.g. ctr-dnn)")
        self.root, self.model_name = root, model_name
        self.fs, base = filesystem_for(root, field="registry")
        scheme = root.split("://", 1)[0] if "://" in root else ""
        self._scheme = {"": "", "minio": "s3://"}.get(scheme, f"{scheme}://")   # minio:// is S3
        self.local = isinstance(self.fs, pafs.LocalFileSystem)
        self.base = f"{base.rstrip('/')}/{model_name}"

    # ------------------------------------------------------------------------------- reading
    def _uri(self, path: str) -> str:
        return f"{self._scheme}{path}" if self._scheme else path

    def _read_json(self, path: str) -> Optional[dict]:
        """The JSON document at ``path`` (``None`` if there is none), read whole and retried like
        every store call (a store just restarted can cut a read off)."""
        import pyarrow.fs as pafs

        from ctr_model.store import retrying

        def read() -> Optional[dict]:
            if self.fs.get_file_info(path).type != pafs.FileType.File:
                return None
            with self.fs.open_input_stream(path) as fh:
                return json.loads(fh.read().decode("utf-8"))

        return read() if self.local else retrying(f"read {path}", read)

    def get(self, version: str) -> Optional[ModelVersion]:
        """A complete version, or ``None``."""
        vdir = f"{self.base}/versions/{version}"
        meta = self._read_json(f"{vdir}/{VERSION_FILE}")
        if meta is None:
            return None
        return ModelVersion(version=version, model_uri=self._uri(f"{vdir}/model"), meta=meta)

    def versions(self) -> List[ModelVersion]:
        """Complete versions, oldest first (by registration time)."""
        import pyarrow.fs as pafs

        sel = pafs.FileSelector(f"{self.base}/versions", allow_not_found=True)
        found = [self.get(i.base_name) for i in self.fs.get_file_info(sel)
                 if i.type == pafs.FileType.Directory]
        return sorted((v for v in found if v is not None), key=lambda v: v.meta.get("created", ""))

    def champion(self) -> Optional[ModelVersion]:
        """The current champion, or ``None`` before the first promotion."""
        pointer = self._read_json(f"{self.base}/{CHAMPION_FILE}")
        if pointer is None:
            return None
        found = self.get(pointer["version"])
        if found is None:
            raise BadInput("registry", self.root, f"{CHAMPION_FILE} names version {pointer['version']!r}, "
                                                  f"which has no {VERSION_FILE}: restore it or point "
                                                  f"{CHAMPION_FILE} at a complete version")
        return found

    def download(self, version: ModelVersion, dst_dir: str) -> str:
        """Copy a version's model directory to the local ``dst_dir``; returns ``dst_dir``."""
        import pyarrow.fs as pafs

        src = version.model_uri[len(self._scheme):] if self._scheme else version.model_uri
        os.makedirs(dst_dir, exist_ok=True)
        pafs.copy_files(src, dst_dir, source_filesystem=self.fs,
                        destination_filesystem=pafs.LocalFileSystem())
        return dst_dir

    # ------------------------------------------------------------------------------- writing
    def _write_json(self, path: str, data: Mapping[str, Any]) -> None:
        payload = (json.dumps(data, indent=2, sort_keys=True, default=str) + "\n").encode("utf-8")
        if self.local:   # write aside, then rename over: atomic on one filesystem
            tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
            with self.fs.open_output_stream(tmp) as fh:
                fh.write(payload)
            os.replace(tmp, path)
        else:            # one PUT of a small object is atomic on S3 and GCS (retried whole)
            from ctr_model.store import retrying

            def put() -> None:
                with self.fs.open_output_stream(path) as fh:
                    fh.write(payload)

            retrying(f"put {path}", put)

    def _copy_in(self, src: str, dst: str) -> None:
        """Copy a local tree into the registry; on an object store file by file, each retried while
        the store restarts (``ctr_model.store.retrying``), so a blip costs a retry, not the run."""
        import pyarrow.fs as pafs

        from ctr_model.store import copy_stream, retrying

        local = pafs.LocalFileSystem()
        if self.local:
            pafs.copy_files(src, dst, source_filesystem=local, destination_filesystem=self.fs)
            return
        for root, _dirs, files in os.walk(src):
            for name in sorted(files):
                path = os.path.join(root, name)
                target = f"{dst}/{os.path.relpath(path, src)}"
                retrying(f"register {target}", functools.partial(copy_stream, local, path, self.fs, target))

    def register(self, model_dir: str, version: str, *, metrics: Mapping[str, Any],
                 window: Optional[Mapping[str, Any]] = None, parent: Optional[str] = None,
                 decision: Optional[Mapping[str, Any]] = None,
                 validation: Optional[Mapping[str, Any]] = None) -> ModelVersion:
        """Store a local model directory as ``version`` (idempotent for a retried step).

        Args:
            model_dir: the exported model to store.
            version: the version id (the KFP run id); path-safe.
            metrics: what the gate measured (AUCs, rows).
            window: the data window it was trained on.
            parent: the version it was warm-started from.
            decision: the gate's decision (``publish``, ``reason``).
            validation: the data validation's verdict and findings (``{"verdict", "findings"}``).
        """

        if not _NAME_RE.match(version or ""):
            raise BadInput("version", version, "use letters, digits, '.', '_' or '-' (the KFP run id is)")
        if not os.path.isfile(os.path.join(model_dir, "model_meta.json")):
            raise BadInput("model", model_dir, "pass the exported model directory (with model_meta.json)")
        vdir = f"{self.base}/versions/{version}"
        self.fs.delete_dir_contents(vdir, missing_dir_ok=True)   # a half-written earlier attempt
        meta = {"version": version, "model_name": self.model_name, "metrics": dict(metrics),
                "window": dict(window or {}), "parent": parent, "decision": dict(decision or {}),
                "validation": dict(validation or {"verdict": "skipped", "findings": []}),
                "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="microseconds")}
        # a full volume: nothing partial stays registered, and the champion is untouched
        with room_for("registry", self._uri(vdir), lambda: tree_bytes(model_dir),
                      cleanup=lambda: self.fs.delete_dir(vdir)):
            self.fs.create_dir(f"{vdir}/model", recursive=True)
            self._copy_in(os.path.abspath(model_dir), f"{vdir}/model")
            self._write_json(f"{vdir}/{VERSION_FILE}", meta)   # last: marks the version complete
        return ModelVersion(version=version, model_uri=self._uri(f"{vdir}/model"), meta=meta)

    def promote(self, version: str) -> Dict[str, Any]:
        """Make ``version`` the champion (atomic pointer update); returns the pointer written."""
        found = self.get(version)
        if found is None:
            raise BadInput("version", version, "register it first; only complete versions can be champion")
        previous = self._read_json(f"{self.base}/{CHAMPION_FILE}")
        pointer = {"version": version, "model_uri": found.model_uri,
                   "previous": previous.get("version") if previous else None,
                   "auc": found.meta.get("metrics", {}).get("challenger_auc"),
                   "updated": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
        self.fs.create_dir(self.base, recursive=True)
        self._write_json(f"{self.base}/{CHAMPION_FILE}", pointer)
        return pointer
