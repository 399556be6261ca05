"""The one place that names container images.

Override at run time with ``CTR_VOLCANO_TRAINER_IMAGE`` / ``CTR_VOLCANO_COMPONENT_IMAGE`` or per call;
the Dockerfiles under ``docker/`` build them (see the README, "Running on a real cluster").
"""
from __future__ import annotations

import os

__all__ = ["TRAINER_IMAGE", "COMPONENT_IMAGE", "trainer_image", "component_image"]

#: Training runtime: paddlepaddle 2.6.2 + ctr_model only (no kfp: its proto-plus shadows Paddle's proto).
TRAINER_IMAGE = "ghcr.io/ctr-volcano/ctr-trainer:0.1.0"
#: Component image: this package + kfp + kubernetes client (launcher, prep, evaluation).
COMPONENT_IMAGE = "ghcr.io/ctr-volcano/ctr-component:0.1.0"


def trainer_image() -> str:
    return os.environ.get("CTR_VOLCANO_TRAINER_IMAGE", TRAINER_IMAGE)


def component_image() -> str:
    return os.environ.get("CTR_VOLCANO_COMPONENT_IMAGE", COMPONENT_IMAGE)
