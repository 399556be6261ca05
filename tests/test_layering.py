"""Layering rules that keep images small and imports cheap.

* ``ctr_model/`` runs inside the trainer image, which has Paddle but no kfp and no Kubernetes client
  (kfp's proto-plus shadows Paddle's ``proto`` package): it must never import either.
* ``components/`` and ``pipelines/`` are imported at compile time on a laptop: their top-level imports
  are the standard library, kfp and our own light modules; heavy libraries are imported inside the
  component functions, which run in the component image.

Each rule is checked twice: statically (AST, every import statement) and dynamically (import in a
fresh interpreter, then look at ``sys.modules``).
"""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FORBIDDEN_IN_CTR_MODEL = ("kfp", "kubernetes")
HEAVY = ("paddle", "pandas", "pyarrow", "numpy", "sklearn")
#: Our modules that components/ and pipelines/ may import at top level (no heavy dependencies).
LIGHT_OWN = ("components", "pipelines", "ctr_volcano.images", "ctr_volcano.errors", "ctr_volcano.legacy_kfp",
             "ctr_volcano.volcano.handoff")


def _py_files(package: str):
    files = sorted((REPO / package).rglob("*.py"))
    assert files, f"no modules found under {package}/"
    return files


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(tree: ast.AST, top_level_only: bool):
    """(module name, line) for each import; relative imports resolve to their package prefix."""
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    for node in nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                yield "." * node.level + (node.module or ""), node.lineno
            else:
                yield node.module or "", node.lineno
                for alias in node.names:  # ``from kfp import kubernetes`` is kfp, fine; record the pair
                    yield f"{node.module}.{alias.name}", node.lineno


def _root(name: str) -> str:
    return name.split(".")[0]


@pytest.mark.parametrize("path", _py_files("ctr_model"), ids=lambda p: str(p.relative_to(REPO)))
def test_ctr_model_never_imports_kfp_or_kubernetes_ast(path):
    tree = ast.parse(path.read_text(), filename=str(path))
    bad = [(name, line) for name, line in _imports(tree, top_level_only=False)
           if _root(name) in FORBIDDEN_IN_CTR_MODEL]
    # also catch importlib-style dynamic imports of the forbidden names
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            fn = node.func
            fname = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
            if fname in ("import_module", "__import__") and isinstance(node.args[0].value, str) \
                    and _root(node.args[0].value) in FORBIDDEN_IN_CTR_MODEL:
                bad.append((node.args[0].value, node.lineno))
    assert not bad, f"{path.relative_to(REPO)} imports {bad}: ctr_model runs in the trainer image without kfp/kubernetes"


def _modules_loaded_by(modules, roots):
    """Import ``modules`` in a fresh interpreter; return the loaded modules whose root is in ``roots``."""
    code = ("import importlib, json, sys\n"
            f"for m in {list(modules)!r}: importlib.import_module(m)\n"
            f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {roots!r})))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_ctr_model_never_imports_kfp_or_kubernetes_at_runtime():
    modules = [_module_name(p) for p in _py_files("ctr_model") if p.name != "__main__.py"]
    leaked = _modules_loaded_by(modules, FORBIDDEN_IN_CTR_MODEL)
    assert leaked == [], f"importing ctr_model pulled in {leaked[:10]}"


def _top_level_files():
    return _py_files("components") + _py_files("pipelines")


def _allowed_top_level(name: str) -> bool:
    if name.startswith("."):
        return True  # relative import inside components/ or pipelines/
    root = _root(name)
    if root in sys.stdlib_module_names or root == "__future__" or root == "kfp":
        return True
    return any(name == own or name.startswith(own + ".") for own in LIGHT_OWN)


@pytest.mark.parametrize("path", _top_level_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_components_and_pipelines_top_level_imports_are_light_ast(path):
    tree = ast.parse(path.read_text(), filename=str(path))
    bad = []
    for name, line in _imports(tree, top_level_only=True):
        # ``from X import y`` yields both X and X.y; judge the module X (y may be a function)
        if not _allowed_top_level(name) and not _allowed_top_level(name.rsplit(".", 1)[0]):
            bad.append((name, line))
    assert not bad, (f"{path.relative_to(REPO)} imports {bad} at module level: import heavy libraries "
                     "inside the component function")


def test_light_own_modules_are_light():
    """The allow-list itself: ctr_volcano.images/errors import only the standard library."""
    for rel in ("ctr_volcano/images.py", "ctr_volcano/errors.py"):
        tree = ast.parse((REPO / rel).read_text())
        roots = {_root(n) for n, _ in _imports(tree, top_level_only=False)}
        assert roots <= set(sys.stdlib_module_names) | {"__future__"}, (rel, roots)


def test_components_and_pipelines_import_no_heavy_library_at_runtime():
    leaked = _modules_loaded_by([_module_name(p) for p in _top_level_files()], HEAVY)
    assert leaked == [], f"importing components/pipelines pulled in {sorted({_root(m) for m in leaked})}"


def test_checkers_flag_violations():
    """The rules above can fail: a heavy top-level import and a nested kfp import are caught."""
    tree = ast.parse("import os\nfrom kfp import dsl\nimport pandas as pd\n"
                     "def f():\n    from kubernetes import client\n")
    top = [n for n, _ in _imports(tree, top_level_only=True)
           if not _allowed_top_level(n) and not _allowed_top_level(n.rsplit(".", 1)[0])]
    assert top == ["pandas"]
    nested = [n for n, _ in _imports(tree, top_level_only=False) if _root(n) in FORBIDDEN_IN_CTR_MODEL]
    assert "kubernetes" in nested and "kfp" in nested
