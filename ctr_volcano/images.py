"""The one place that names container images.

Override at run time with ``CTR_VOLCANO_TRAINER_IMAGE`` / ``CTR_VOLCANO_COMPONENT_IMAGE`` or per call;
the Dockerfiles under ``dockerfiles/`` build them (see README.md, "Running on a real cluster").
The defaults point at a local registry (``localhost:5000``), the usual one for kind/minikube clusters;
push the images wherever your cluster pulls from and set the two variables (or the component's
``image`` parameter and the pipeline's base image).

Every tag is the package's version (:mod:`ctr_volcano.version`): a pipeline compiled with one release
names that release's images, so pipeline versions uploaded from an older release keep theirs.
"""
from __future__ import annotations

import os

from ctr_volcano.version import __version__

__all__ = ["REGISTRY", "TRAINER_IMAGE", "COMPONENT_IMAGE", "SERVING_IMAGE", "trainer_image",
           "component_image", "serving_image"]

#: Where the default images are pushed.
REGISTRY = "localhost:5000/ctr-volcano"
#: Training runtime: paddlepaddle + ctr_model only (no kfp: its proto-plus shadows Paddle's proto).
TRAINER_IMAGE = f"{REGISTRY}/ctr-trainer:{__version__}"
#: Component image: this package + kfp + kubernetes client (launcher, prep, evaluation).
COMPONENT_IMAGE = f"{REGISTRY}/ctr-component:{__version__}"
#: Model server: kserve + onnxruntime + the transforms, no Paddle (dockerfiles/Dockerfile.serving).
SERVING_IMAGE = f"{REGISTRY}/ctr-serving:{__version__}"


def trainer_image() -> str:
    """The training runtime image: ``CTR_VOLCANO_TRAINER_IMAGE`` or :data:`TRAINER_IMAGE`."""
    return os.environ.get("CTR_VOLCANO_TRAINER_IMAGE", TRAINER_IMAGE)


def component_image() -> str:
    """The component image: ``CTR_VOLCANO_COMPONENT_IMAGE`` or :data:`COMPONENT_IMAGE`."""
    return os.environ.get("CTR_VOLCANO_COMPONENT_IMAGE", COMPONENT_IMAGE)


def serving_image() -> str:
    """The model server image: ``CTR_VOLCANO_SERVING_IMAGE`` or :data:`SERVING_IMAGE`."""
    return os.environ.get("CTR_VOLCANO_SERVING_IMAGE", SERVING_IMAGE)
