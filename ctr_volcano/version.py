"""The package's version, written once: ``setup.py`` reads it from here and the image tags in
:mod:`ctr_volcano.images` follow it, so a release's compiled pipelines name that release's images."""

__all__ = ["__version__"]

__version__ = "0.2.0"
