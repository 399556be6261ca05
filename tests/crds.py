"""The real Volcano CRD schemas, from the Volcano Go module (the one the test cluster is built from).

Manifests are validated against Volcano's own ``config/crd`` files, never a hand-written copy. They are
fetched the way the cluster tier gets its binaries: ``go mod download`` puts the pinned module into
Go's module cache once (network on first use only), and every later call reads it from there.
``$CTR_VOLCANO_CRD_DIR`` points at another directory holding the same files instead.

A test helper (it moved here from ``ctr_volcano.training.volcano.crds``): the product itself only
validates against a CRD file its user names (``ctr-volcano render-job --check-crd FILE``).
"""
from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from ctr_volcano.errors import CtrVolcanoError

__all__ = ["VOLCANO_MODULE", "VOLCANO_VERSION", "ENV_CRD_DIR", "CrdUnavailable", "crd_dir", "job_crd_path", "download_module"]

VOLCANO_MODULE = "volcano.sh/volcano"
#: The release the mini cluster's vc-scheduler and vc-controller-manager are built from
#: (``tools/minicluster/cluster/go.mod``; a test keeps the two equal).
VOLCANO_VERSION = "v1.15.1"
ENV_CRD_DIR = "CTR_VOLCANO_CRD_DIR"
JOB_CRD_FILE = "batch.volcano.sh_jobs.yaml"


class CrdUnavailable(CtrVolcanoError):
    """The CRD files cannot be found or fetched (no Go toolchain, no module cache, no network)."""


@functools.lru_cache(maxsize=1)
def crd_dir() -> Path:
    """The directory of Volcano's CRD manifests (``batch.volcano.sh_jobs.yaml`` and friends).

    Raises:
        CrdUnavailable: ``$CTR_VOLCANO_CRD_DIR`` lacks the Job CRD, Go is not installed, or
            ``go mod download`` failed (its message is included).
    """
    env = os.environ.get(ENV_CRD_DIR)
    if env:
        if not (Path(env) / JOB_CRD_FILE).is_file():
            raise CrdUnavailable(f"{ENV_CRD_DIR}={env} holds no {JOB_CRD_FILE}: point it at Volcano's "
                                 f"config/crd/volcano/bases directory")
        return Path(env)
    module_dir = download_module(VOLCANO_MODULE, VOLCANO_VERSION)
    bases = module_dir / "config" / "crd" / "volcano" / "bases"
    if not (bases / JOB_CRD_FILE).is_file():
        raise CrdUnavailable(f"{bases} holds no {JOB_CRD_FILE}: the module layout changed")
    return bases


def download_module(module: str, version: str) -> Path:
    """The directory of Go module ``module@version`` in Go's module cache, downloaded on first use.

    Raises:
        CrdUnavailable: Go is not installed, or ``go mod download`` failed (its message is included).
    """
    go = shutil.which("go")
    if go is None:
        raise CrdUnavailable(f"Go is not installed: it fetches {module}@{version}; install Go or set "
                             f"{ENV_CRD_DIR}")
    env_go = dict(os.environ, GOFLAGS="-mod=mod", GOTOOLCHAIN="local", GO111MODULE="on")
    with tempfile.TemporaryDirectory(prefix="ctr-gomod-") as cwd:   # outside any go.mod
        proc = subprocess.run([go, "mod", "download", "-json", f"{module}@{version}"],
                              cwd=cwd, env=env_go, capture_output=True, text=True)
    try:
        info = json.loads(proc.stdout)
    except ValueError:
        info = {}
    if proc.returncode != 0 or not info.get("Dir"):
        why = info.get("Error") or proc.stderr.strip() or f"exit code {proc.returncode}"
        raise CrdUnavailable(f"go mod download {module}@{version} failed: {why}")
    return Path(info["Dir"])


def job_crd_path() -> str:
    """Path of Volcano's Job CRD (``batch.volcano.sh_jobs.yaml``); see :func:`crd_dir`."""
    return str(crd_dir() / JOB_CRD_FILE)
