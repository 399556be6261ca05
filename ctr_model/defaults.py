"""Defaults that the pipelines' signatures and the CLI show, kept free of heavy imports.

Why a module of its own: ``components/`` and ``pipelines/`` are imported at compile time on a laptop,
where only the standard library and kfp may load; :mod:`ctr_model.features` needs numpy.
"""

__all__ = ["DEFAULT_HASH_BUCKETS"]

#: Hash buckets of the categorical ids when the user names none (a prime just above one million).
DEFAULT_HASH_BUCKETS = 1_000_001
