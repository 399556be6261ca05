"""Inside an image: import everything its entrypoints import, and say what is missing and why.

Why: an image that lacks a module its entrypoint imports (a package the ``.dockerignore`` left out,
a dependency nobody pinned) or a system library one of them loads (``libgomp.so.1`` for Paddle) builds
fine and fails only when a pod first runs it, often deep in a lazy import. The product imports heavy
libraries inside functions, so importing the entry module is not enough; this follows the imports:

* an entry is a module run as a program (``module:ctr_model.train``: its whole source, every
  function's imports included), the handler of a console script's sub-command
  (``verb:ctr-volcano serve``: the function argparse dispatches to), or every KFP component of a
  package (``components:components``: each component's function);
* every ``import``/``from ... import`` in an entry's source is imported for real (so a missing shared
  library shows, as it would in the pod), except inside a ``try`` that handles ``ImportError`` (an
  optional dependency, by its author's choice);
* a function or class of the entry's own packages that it imports by name or calls (``f()``,
  ``module.f()``, ``Class()``) is followed the same way, transitively: the static call graph of the
  entry through the package; a module imported as a whole is imported, not read (its functions the
  entry never reaches would claim more than it needs).

Prints one JSON document: ``{"checked": [...], "missing": [{"module", "error", "chain"}]}``; exit 1
when something is missing. Runs with the image's own interpreter; stdlib only.
"""
from __future__ import annotations

import argparse
import ast
import importlib
import importlib.metadata
import inspect
import json
import sys
import textwrap
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

__all__ = ["check", "main"]

_OPTIONAL = {"ImportError", "ModuleNotFoundError"}


def _imports(tree: ast.AST, optional: bool = False) -> Iterator[Tuple[ast.AST, bool]]:
    """Every import node under ``tree`` with whether a ``try`` handling ``ImportError`` guards it."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, optional
        elif isinstance(node, ast.Try):
            names = set()
            for handler in node.handlers:
                kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
                names.update(getattr(k, "id", getattr(k, "attr", "")) for k in kinds if k is not None)
            guarded = optional or bool(names & _OPTIONAL)
            for stmt in node.body:
                yield from _imports(ast.Module(body=[stmt], type_ignores=[]), guarded)
            for part in node.handlers + node.orelse + node.finalbody:
                yield from _imports(part, optional)
        else:
            yield from _imports(node, optional)


class Checker:
    """The walk over one image's entries (see the module docstring)."""

    def __init__(self, ours: Sequence[str]) -> None:
        self.ours = tuple(ours)
        self.seen: set = set()
        self.checked: List[str] = []
        self.missing: List[Dict[str, Any]] = []

    def _ours(self, obj: Any) -> bool:
        module = getattr(obj, "__module__", None) or ""
        return module.split(".")[0] in self.ours

    def _import(self, name: str, chain: List[str]) -> Optional[Any]:
        try:
            module = importlib.import_module(name)
        except Exception as exc:  # ImportError, or OSError of a shared library, as the pod would see
            if not any(m["module"] == name for m in self.missing):
                self.missing.append({"module": name, "error": f"{type(exc).__name__}: {exc}",
                                     "chain": list(chain)})
            return None
        if name not in self.checked:
            self.checked.append(name)
        return module

    def _targets(self, node: ast.AST, package: str) -> Iterator[Tuple[str, List[str]]]:
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, []
            return
        assert isinstance(node, ast.ImportFrom)
        base = node.module or ""
        if node.level:
            parts = package.split(".")
            base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
        yield base, [a.name for a in node.names if a.name != "*"]

    def visit(self, obj: Any, chain: List[str]) -> None:
        """Import what ``obj``'s source imports; follow our own functions and classes it names."""
        label = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", repr(obj))
        module = inspect.getmodule(obj)
        key = f"{getattr(module, '__name__', '?')}:{label}"
        if key in self.seen:
            return
        self.seen.add(key)
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(obj)))
        except (OSError, TypeError):
            return
        package = module.__name__ if hasattr(module, "__path__") else module.__name__.rpartition(".")[0]
        here = chain + [key]
        for node, optional in _imports(tree):
            if optional:
                continue
            for name, names in self._targets(node, package):
                imported = self._import(name, here)
                for attr in names if imported is not None else []:
                    self._follow(imported, name, attr, here)
        for callee in _callees(tree, vars(module)):
            if self._ours(callee):
                self.visit(callee, here)

    def _follow(self, module: Any, name: str, attr: str, chain: List[str]) -> None:
        value = getattr(module, attr, None)
        if value is None or inspect.ismodule(value):
            self._import(f"{name}.{attr}", chain)   # a submodule: imported, not read
            return
        value = getattr(value, "python_func", value)   # a KFP component: its function
        if (inspect.isfunction(value) or inspect.isclass(value)) and self._ours(value):
            self.visit(value, chain)


def _callees(tree: ast.AST, scope: Dict[str, Any]) -> Iterator[Any]:
    """The functions and classes ``tree`` calls by a name of ``scope`` (its module's globals):
    ``f(...)``, ``mod.f(...)``, ``Class(...)``."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        parts, func = [], node.func
        while isinstance(func, ast.Attribute):
            parts.insert(0, func.attr)
            func = func.value
        if not isinstance(func, ast.Name) or func.id not in scope:
            continue
        value = scope[func.id]
        for attr in parts:
            value = getattr(value, attr, None)
        value = getattr(value, "python_func", value)
        if inspect.isfunction(value) or inspect.isclass(value):
            yield value


def _module_targets(name: str) -> List[Any]:
    """What ``python -m name`` runs: the module, or for a package its ``__main__`` as well (imported
    under its own name, so its ``if __name__ == "__main__"`` block does not run)."""
    import importlib.util

    module = importlib.import_module(name)
    if hasattr(module, "__path__") and importlib.util.find_spec(f"{name}.__main__") is not None:
        return [module, importlib.import_module(f"{name}.__main__")]
    return [module]


def _verb_handler(script: str, verb: str) -> Any:
    """The function a console script's argparse parser dispatches ``verb`` to."""
    (ep,) = [e for e in importlib.metadata.entry_points(group="console_scripts") if e.name == script]
    module = importlib.import_module(ep.module)
    parser = module.build_parser()
    for action in parser._subparsers._group_actions:    # argparse keeps sub-parsers there
        if verb in getattr(action, "choices", {}):
            return action.choices[verb].get_default("func")
    raise LookupError(f"{script} has no sub-command {verb!r}")


def _components(package: str) -> Iterator[Any]:
    """Every KFP component function of ``package``'s modules."""
    import pkgutil

    pkg = importlib.import_module(package)
    for info in pkgutil.iter_modules(pkg.__path__, package + "."):
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            func = getattr(value, "python_func", None)
            if func is not None and getattr(func, "__module__", "") == info.name:
                yield func


def check(entries: Sequence[str], ours: Sequence[str]) -> Dict[str, Any]:
    """Walk ``entries`` (``module:M``, ``verb:SCRIPT VERB``, ``components:PKG``); the report."""
    checker = Checker(ours)
    for entry in entries:
        kind, _, what = entry.partition(":")
        try:
            if kind == "module":
                targets: List[Any] = _module_targets(what)
            elif kind == "verb":
                targets = [_verb_handler(*what.split(" ", 1))]
            elif kind == "components":
                targets = list(_components(what))
            else:
                raise ValueError(f"unknown entry kind {kind!r}")
        except Exception as exc:
            checker.missing.append({"module": what, "error": f"{type(exc).__name__}: {exc}", "chain": [entry]})
            continue
        for target in targets:
            checker.visit(target, [entry])
    return {"checked": sorted(checker.checked), "missing": checker.missing}


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("entries", nargs="+")
    parser.add_argument("--ours", default="ctr_model,ctr_volcano,components,pipelines",
                        help="the packages whose functions are followed (comma-separated)")
    args = parser.parse_args(argv)
    report = check(args.entries, args.ours.split(","))
    print(json.dumps(report))
    return 1 if report["missing"] else 0


if __name__ == "__main__":
    sys.exit(main())
