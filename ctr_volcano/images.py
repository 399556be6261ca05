"""The one place that names container images.

Override at run time with ``CTR_VOLCANO_TRAINER_IMAGE`` / ``CTR_VOLCANO_COMPONENT_IMAGE`` or per call;
the Dockerfiles under ``dockerfiles/`` build them (see README.md, "Running on a real cluster").
The defaults point at a local registry (``localhost:5000``), the usual one for kind/minikube clusters;
push the images wherever your cluster pulls from and set the two variables (or the component's
``image`` parameter and the pipeline's base image).
"""
from __future__ import annotations

import os

__all__ = ["TRAINER_IMAGE", "COMPONENT_IMAGE", "SERVING_IMAGE", "trainer_image", "component_image",
           "serving_image"]

#: Training runtime: paddlepaddle + ctr_model only (no kfp: its proto-plus shadows Paddle's proto).
TRAINER_IMAGE = "localhost:5000/ctr-volcano/ctr-trainer:0.1.0"
#: Component image: this package + kfp + kubernetes client (launcher, prep, evaluation).
COMPONENT_IMAGE = "localhost:5000/ctr-volcano/ctr-component:0.1.0"
#: Model server: kserve + onnxruntime + the transforms, no Paddle (dockerfiles/Dockerfile.serving).
SERVING_IMAGE = "localhost:5000/ctr-volcano/ctr-serving:0.1.0"


def trainer_image() -> str:
    """The training runtime image: ``CTR_VOLCANO_TRAINER_IMAGE`` or :data:`TRAINER_IMAGE`."""
    return os.environ.get("CTR_VOLCANO_TRAINER_IMAGE", TRAINER_IMAGE)


def component_image() -> str:
    """The component image: ``CTR_VOLCANO_COMPONENT_IMAGE`` or :data:`COMPONENT_IMAGE`."""
    return os.environ.get("CTR_VOLCANO_COMPONENT_IMAGE", COMPONENT_IMAGE)


def serving_image() -> str:
    """The model server image: ``CTR_VOLCANO_SERVING_IMAGE`` or :data:`SERVING_IMAGE`."""
    return os.environ.get("CTR_VOLCANO_SERVING_IMAGE", SERVING_IMAGE)
