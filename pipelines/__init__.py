"""Ready-made Kubeflow pipelines built from the components in ``components/``.

Each pipeline's compiled YAML is committed next to its source (``ctr_training_pipeline.yaml``), so it
can be uploaded to the KFP UI without installing this package; ``ctr-volcano compile`` regenerates it.
"""

from pipelines.ctr_training_pipeline import ctr_training_pipeline

__all__ = ["ctr_training_pipeline"]
