"""ctr_volcano: data prep, training backends (local gang and Volcano), evaluation, retraining and the CLI.

The package is one folder per capability, layered (docs/architecture.md; tests/test_layering.py
enforces it): ``app`` > ``components``, ``pipelines`` > ``retraining`` > ``evaluation`` >
``training`` > ``data`` > ``util``, ``errors``, ``images`` > ``ctr_model``. The KFP components in
``components/`` are thin adapters over these functions; ``ctr_model`` is the code that runs inside
each training pod.
"""
from ctr_volcano import compat as _compat
from ctr_volcano.version import __version__

__all__ = ["__version__"]

_compat.install()   # 0.1.0's import paths, for pipeline versions uploaded before the move
