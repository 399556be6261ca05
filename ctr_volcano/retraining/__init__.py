"""Recurring retraining: the run's data window (:mod:`.window`), the model registry
(:mod:`.registry`) and the champion/challenger gate (:mod:`.gate`)."""

__all__: list[str] = []
