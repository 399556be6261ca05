"""The Volcano backend: typed spec -> pure Job manifest -> thin Kubernetes client -> launcher.

Layers (each importable and testable on its own):

* :mod:`~ctr_volcano.training.volcano.spec` -- :class:`TrainJobSpec`, validated once;
* :mod:`~ctr_volcano.training.volcano.manifest` -- ``build_job(spec) -> dict``, ``validate_job``, CRD checks;
* :mod:`~ctr_volcano.training.volcano.names` -- deterministic DNS-safe Job names from the KFP run and task;
* :mod:`~ctr_volcano.training.volcano.client` -- :class:`KubeClient`, the only module that talks to Kubernetes,
  mapping each failure to its error family;
* :mod:`~ctr_volcano.training.volcano.api_calls` -- API calls retried by family, waits a cancel ends at once;
* :mod:`~ctr_volcano.training.volcano.launcher` -- :class:`VolcanoLauncher` (create/re-attach/watch/explain/
  collect/cancel), with a pod watch beside its poll (:mod:`~ctr_volcano.training.volcano.podwatch`),
  failed pods kept and the step's error chosen by exit-code family
  (:mod:`~ctr_volcano.training.volcano.failures`), a Pending gang explained
  (:mod:`~ctr_volcano.training.volcano.pending`, :mod:`~ctr_volcano.training.volcano.diagnosis`), its
  logs followed (:mod:`~ctr_volcano.training.volcano.podlogs`) and hangs timed
  (:mod:`~ctr_volcano.training.volcano.stall`);
* :mod:`~ctr_volcano.training.volcano.prep_job` -- the prep fan-out's workers as a Volcano Job per phase;
* :mod:`~ctr_volcano.training.volcano.handoff` and :mod:`~ctr_volcano.training.volcano.objectstore` --
  the data/model hand-off through a shared claim or the object store;
* :mod:`~ctr_volcano.training.volcano.rbac` -- the launcher's Role;
* :mod:`~ctr_volcano.training.volcano.backend` -- :class:`VolcanoBackend`, the training interface over
  all of the above (what :func:`ctr_volcano.training.step.run_training_step` calls).

This package imports nothing heavy.
"""

__all__: list[str] = []
