"""The import paths of release 0.1.0 that already-uploaded pipeline versions use, kept for the 0.2 releases.

Why: a pipeline version uploaded to KFP embeds every component's source, with imports such as
``from ctr_volcano.volcano.step import StepParams, run_training_step``, and runs it in whatever
component image its tag names. Release 0.2.0 moved the package into capability folders, so those
modules live elsewhere now; this table maps each old module to its new home. From 0.2.0 on the image
tags follow the package version (:mod:`ctr_volcano.images`), so a version uploaded from 0.1.0 names
the ``:0.1.0`` images and a 0.2.0 pipeline the ``:0.2.0`` ones; the table is for an old version that
runs on a newer image anyway: a ``:0.1.0`` tag rebuilt from a later tree (before 0.2.0 the tag did
not follow the code), or an image overridden by hand. Nothing in this package imports an old path
(tests/test_layering.py checks that, and tests/test_released_imports.py runs the 0.1.0 YAML).

Removal: in 0.3.0 delete this module and the :func:`install` call in ``ctr_volcano/__init__.py``;
before upgrading an image past 0.2.x, re-upload pipeline versions compiled with 0.2 (``ctr-volcano
submit`` uploads the current YAML as a new version).
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from typing import Dict, Optional, Sequence

__all__ = ["RELEASED_MODULES", "install"]

#: Old module (as 0.1.0's component YAML imports it) -> the module that now holds those names.
#: ``None``: an old package that only holds an alias below it (``ctr_volcano.volcano``).
RELEASED_MODULES: Dict[str, Optional[str]] = {
    "ctr_volcano.champion_gate": "ctr_volcano.retraining.gate",
    "ctr_volcano.evaluate": "ctr_volcano.evaluation.evaluate",
    "ctr_volcano.prep": "ctr_volcano.data.prep",
    "ctr_volcano.registry": "ctr_volcano.retraining.registry",
    "ctr_volcano.volcano": None,
    "ctr_volcano.volcano.step": "ctr_volcano.training.step",
    "ctr_volcano.window": "ctr_volcano.retraining.window",
}


class _AliasLoader(importlib.abc.Loader):
    """Loads an old name as the module that replaced it (the same module object, not a copy)."""

    def __init__(self, old: str, new: Optional[str]) -> None:
        self.old, self.new = old, new
        self._spec: Optional[importlib.machinery.ModuleSpec] = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        if self.new is None:
            module = types.ModuleType(self.old, f"Moved in 0.2.0: see {__name__}.")
            module.__path__ = []   # a package, so its aliased children can be imported
            return module
        warnings.warn(f"{self.old} moved to {self.new} in 0.2.0; the old path goes in 0.3.0 "
                      "(recompile and re-upload the pipeline)", DeprecationWarning, stacklevel=2)
        module = importlib.import_module(self.new)
        self._spec = module.__spec__   # the import system overwrites __spec__ with the alias's
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        if self._spec is not None:
            module.__spec__ = self._spec


class _AliasFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Optional[Sequence[str]] = None,
                  target: Optional[types.ModuleType] = None) -> Optional[importlib.machinery.ModuleSpec]:
        if fullname not in RELEASED_MODULES:
            return None
        new = RELEASED_MODULES[fullname]
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(fullname, new), is_package=new is None)


def install() -> None:
    """Make the old paths importable (idempotent)."""
    if not any(isinstance(finder, _AliasFinder) for finder in sys.meta_path):
        sys.meta_path.append(_AliasFinder())
