"""Data and model handoff through a shared ReadWriteMany PVC.

Why: on a real cluster the KFP step's inputs live at local paths inside the step's own pod (the KFP
launcher downloaded them), and the Volcano pods cannot see them. The simplest handoff that needs no
credentials in the training pods is one RWX claim mounted by both the step's pod and every gang pod, at
the same path. Per run, the step copies the prep output into ``<mount>/ctr-runs/<job>/data`` (unless it
already lives on the claim), the gang writes ``<mount>/ctr-runs/<job>/output``, and the step copies
``output/model`` into its KFP Model output, so the model is tracked by KFP like any other artifact.

Copies are made under a temporary name and renamed, so a retried step never sees half a copy; a
completed copy is reused (a re-attached step does not copy again).

The object-store mode (no volume) is :mod:`ctr_volcano.training.volcano.objectstore`; see docs/handoff.md.
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

from ctr_model.space import copy_tree
from ctr_volcano.errors import BadInput
from ctr_volcano.util.outputs import room_for

__all__ = ["RunDirs", "RUNS_DIR", "run_paths", "put_on_claim", "prepare_run_dir", "copy_model_out", "build_pvc"]

#: Sub-directory of the claim that holds one directory per training job.
RUNS_DIR = "ctr-runs"
_DONE = ".ctr-copy-complete"


@dataclass(frozen=True)
class RunDirs:
    """Paths of one run on the shared claim (identical in the step's pod and the gang's pods).

    Attributes:
        root: ``<mount>/ctr-runs/<job>``.
        data_dir: the prep output the trainers read.
        output_dir: where the gang writes ``model/``, ``metrics.json`` and ``checkpoints/``.
        copied: whether the data was copied by this call (False: reused or already on the claim).
        init_model: the warm-start model on the claim, or ``None``.
    """

    root: str
    data_dir: str
    output_dir: str
    copied: bool
    init_model: Optional[str] = None


def _inside(path: str, parent: str) -> bool:
    path, parent = os.path.realpath(path), os.path.realpath(parent)
    return path == parent or path.startswith(parent.rstrip(os.sep) + os.sep)


def run_paths(mount_path: str, job_name: str, data_path: Optional[str] = None) -> Tuple[str, str, str]:
    """``(root, data_dir, output_dir)`` of job ``job_name``'s run directory on the claim: the data in
    place when it is on the claim already, else its copy under the root (nothing is touched)."""
    root = os.path.join(mount_path, RUNS_DIR, job_name)
    data_dir = os.path.join(root, "data")
    if data_path is not None and _inside(data_path, mount_path):
        data_dir = os.path.realpath(data_path)
    return root, data_dir, os.path.join(root, "output")


def put_on_claim(src: str, mount_path: str, dst: str) -> Tuple[str, bool]:
    """``src`` itself if it is on the claim, else a complete copy at ``dst`` (reused if complete)."""
    if _inside(src, mount_path):
        return os.path.realpath(src), False
    if os.path.isfile(os.path.join(dst, _DONE)):
        return dst, False
    tmp = f"{dst}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    with room_for("pvc_mount_path", dst):
        copy_tree(src, tmp)   # a half copy is removed when the claim fills
    with open(os.path.join(tmp, _DONE), "w", encoding="utf-8") as fh:
        fh.write(src + "\n")
    shutil.rmtree(dst, ignore_errors=True)
    os.replace(tmp, dst)
    return dst, True


def prepare_run_dir(mount_path: str, job_name: str, data_path: str,
                    init_model: Optional[str] = None) -> RunDirs:
    """Create the run directory on the claim and put the training data there.

    Args:
        mount_path: where the PVC is mounted in this pod (and in the gang's pods).
        job_name: the Volcano Job name (one directory per job).
        data_path: the prep output as this pod sees it (a KFP Dataset path).
        init_model: a model to warm-start from as this pod sees it; copied to ``<root>/init_model``
            because the pservers read it.

    Returns:
        The run's directories. Output directories are made world-writable because the gang runs as a
        non-root UID while the step's pod may not, and not every volume type honours ``fsGroup``.
    """
    if not os.path.isdir(mount_path):
        raise BadInput("pvc_mount_path", mount_path,
                       "mount the shared ReadWriteMany PVC in this step at this path "
                       "(kfp.kubernetes.mount_pvc(task, pvc_name=..., mount_path=...))")
    if not os.path.isdir(data_path):
        raise BadInput("train_data", data_path, "pass the data-prep output directory")
    root, _, output_dir = run_paths(mount_path, job_name)
    os.makedirs(output_dir, exist_ok=True)
    for d in (os.path.join(mount_path, RUNS_DIR), root, output_dir):
        os.chmod(d, 0o777)
    data_dir, copied = put_on_claim(data_path, mount_path, os.path.join(root, "data"))
    init_dir = None
    if init_model:
        if not os.path.isdir(init_model):
            raise BadInput("init_model", init_model, "pass an exported model directory")
        init_dir, _ = put_on_claim(init_model, mount_path, os.path.join(root, "init_model"))
    return RunDirs(root, data_dir, output_dir, copied=copied, init_model=init_dir)


def copy_model_out(output_dir: str, model_dir: str) -> str:
    """Copy ``<output_dir>/model`` into the KFP Model output directory; returns ``model_dir``."""
    src = os.path.join(output_dir, "model")
    if not os.path.isdir(src):
        raise BadInput("output_dir", output_dir, "the gang wrote no model/ here; check the trainer-0 log")
    os.makedirs(model_dir, exist_ok=True)
    with room_for("model_dir", model_dir):
        copy_tree(src, model_dir, dirs_exist_ok=True)
    return model_dir


def build_pvc(name: str, namespace: str, size: str = "20Gi",
              storage_class: Optional[str] = None) -> Dict[str, Any]:
    """A ReadWriteMany PersistentVolumeClaim for the handoff (``deploy/pvc-example.yaml``).

    Args:
        name: the claim's name (the component's ``pvc_name``).
        namespace: the namespace of the KFP runs and the Volcano Jobs.
        size: requested capacity.
        storage_class: an RWX-capable StorageClass (NFS, CephFS, EFS, Filestore...); ``None`` for
            the cluster default, which is often ReadWriteOnce only.
    """
    spec: Dict[str, Any] = {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": size}}}
    if storage_class:
        spec["storageClassName"] = storage_class
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {"app.kubernetes.io/name": "ctr-volcano"}},
            "spec": spec}
