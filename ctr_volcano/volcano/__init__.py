"""Volcano backend: typed spec -> pure Job manifest -> thin Kubernetes client -> launcher.

Layers (each importable and testable on its own):

* :mod:`~ctr_volcano.volcano.spec` -- :class:`TrainJobSpec`, validated once;
* :mod:`~ctr_volcano.volcano.manifest` -- ``build_job(spec) -> dict``, ``validate_job``, CRD checks;
* :mod:`~ctr_volcano.volcano.names` -- deterministic DNS-safe Job names from the KFP run and task;
* :mod:`~ctr_volcano.volcano.client` -- :class:`KubeClient`, the only module that talks to Kubernetes;
* :mod:`~ctr_volcano.volcano.launcher` -- :class:`VolcanoLauncher` (create/re-attach/watch/explain/
  collect/cancel), reading the gang's state with :mod:`~ctr_volcano.volcano.diagnosis` and following
  its logs with :mod:`~ctr_volcano.volcano.podlogs`;
* :mod:`~ctr_volcano.volcano.handoff` -- the shared-PVC data/model handoff;
* :mod:`~ctr_volcano.volcano.rbac` -- the launcher's Role;
* :mod:`~ctr_volcano.volcano.step` -- one training step for either backend (component + CLI);
* :mod:`~ctr_volcano.volcano.cli` -- the flags and handler of ``ctr-volcano train --backend volcano``.

This package imports nothing heavy.
"""

__all__: list[str] = []
