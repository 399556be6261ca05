"""ctr_volcano: data prep, training launchers (local gang and Volcano), evaluation and the CLI.

The KFP components in ``components/`` are thin adapters over the functions in this package;
``ctr_model`` is the code that runs inside each training pod.
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
