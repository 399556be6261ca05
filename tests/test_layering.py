"""The architecture, enforced: layers, no import cycle, light imports where images and laptops need them.

The layers, highest first (docs/architecture.md says why each sits where it does)::

    app                                   the CLI, the kfp.local runner, compile, submit, back-fill
    pipelines > components                KFP's view: compiled, uploaded, run
    retraining > scoring > validation > serving > evaluation > training > data     the capabilities
    util, errors, images, compat          helpers every capability uses
    ctr_model                             what runs in the trainer image

A module may import its own layer and those below, never above. Inside ``training``: ``step`` (the
only module importing both backends) > ``local``, ``volcano`` (which never import each other) >
the interface (``api``, ``params``, ``checks``, ``task_config``, ``store_access``). Every import
counts, also one inside a function (a lazy import is still a dependency). No cycle anywhere, at
module level: the test finds strongly connected components itself.

Also here, from the start of the project:

* ``ctr_model/`` runs inside the trainer image, which has Paddle but no kfp and no Kubernetes client
  (kfp's proto-plus shadows Paddle's ``proto`` package): it must never import either.
* ``components/`` and ``pipelines/`` are imported at compile time on a laptop: their top-level imports
  are the standard library, kfp and our own light modules; heavy libraries are imported inside the
  component functions, which run in the component image.
* No function in the packages is longer than :data:`MAX_FUNCTION_LINES` lines after its docstring,
  no module longer than :data:`MAX_MODULE_LINES` lines.

Each import rule is checked statically (AST, every import statement), the light-import rules also
dynamically (import in a fresh interpreter, then look at ``sys.modules``).
"""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Set, Tuple

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("ctr_model", "ctr_volcano", "components", "pipelines")
FORBIDDEN_IN_CTR_MODEL = ("kfp", "kubernetes")
HEAVY = ("paddle", "pandas", "pyarrow", "numpy", "sklearn")
#: Our modules that components/ and pipelines/ may import at top level (no heavy dependencies).
LIGHT_OWN = ("components", "pipelines", "ctr_volcano.images", "ctr_volcano.version", "ctr_volcano.errors",
             "ctr_volcano.compat",
             "ctr_volcano.training.params", "ctr_volcano.training.task_config",
             "ctr_volcano.training.store_access", "ctr_volcano.util.k8s_syntax", "ctr_model.defaults",
             "ctr_model.errors")
#: Layers, lowest first; a module belongs to the layer of the longest prefix that names it.
LAYERS: Tuple[Tuple[str, ...], ...] = (
    ("ctr_model",),
    ("ctr_volcano", "ctr_volcano.errors", "ctr_volcano.images", "ctr_volcano.util", "ctr_volcano.compat"),
    ("ctr_volcano.data",),
    ("ctr_volcano.training",),
    ("ctr_volcano.evaluation",),
    ("ctr_volcano.serving",),
    ("ctr_volcano.validation",),
    ("ctr_volcano.scoring",),
    ("ctr_volcano.retraining",),
    ("components",),
    ("pipelines",),
    ("ctr_volcano.app",),
)
#: Inside ``training``, lowest first (same rule, one level down).
TRAINING_LAYERS: Tuple[Tuple[str, ...], ...] = (
    ("ctr_volcano.training", "ctr_volcano.training.api", "ctr_volcano.training.params",
     "ctr_volcano.training.checks", "ctr_volcano.training.task_config", "ctr_volcano.training.store_access"),
    ("ctr_volcano.training.local", "ctr_volcano.training.volcano"),
    ("ctr_volcano.training.step",),
)
#: Siblings that must not import each other.
INDEPENDENT = (("ctr_volcano.training.local", "ctr_volcano.training.volcano"),)
MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 500
#: Modules still over :data:`MAX_MODULE_LINES`, each to be split by job; the test fails once one is
#: within the limit, so the list only shrinks.
OVER_MODULE_LIMIT: Tuple[str, ...] = ()


def _py_files(package: str) -> List[Path]:
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


# ------------------------------------------------------------------------------------------------
# the module graph


def _all_modules() -> Dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in _py_files(pkg)}


def import_graph(sources: Dict[str, str]) -> Dict[str, Set[str]]:
    """``module -> modules of ``sources`` it imports`` (every import statement, at any depth).

    ``from a.b import c`` depends on ``a.b.c`` when that is a module, else on ``a.b``.
    """
    graph: Dict[str, Set[str]] = {}
    for module, text in sources.items():
        deps: Set[str] = set()
        for name, _ in _imports(ast.parse(text), top_level_only=False):
            target = _resolve(name, sources)
            if target is not None and target != module:
                deps.add(target)
        graph[module] = deps
    return graph


def _resolve(name: str, modules: Iterable[str]) -> Optional[str]:
    names = set(modules)
    while name:
        if name in names:
            return name
        name = name.rpartition(".")[0]
    return None


def cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[List[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def layer_of(module: str, layers: Tuple[Tuple[str, ...], ...]) -> Optional[int]:
    """Index of the layer whose longest prefix names ``module``; ``None`` if no layer does."""
    best: Tuple[int, int] = (-1, -1)
    for level, prefixes in enumerate(layers):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best[0]:
                best = (len(prefix), level)
    return best[1] if best[0] >= 0 else None


def layer_violations(graph: Dict[str, Set[str]], layers: Tuple[Tuple[str, ...], ...]) -> List[str]:
    """Every import of a module in a higher layer than the importer's."""
    bad = []
    for module, deps in sorted(graph.items()):
        mine = layer_of(module, layers)
        for dep in sorted(deps):
            theirs = layer_of(dep, layers)
            if mine is not None and theirs is not None and theirs > mine:
                bad.append(f"{module} (layer {mine}) imports {dep} (layer {theirs})")
    return bad


def sibling_violations(graph: Dict[str, Set[str]], pairs: Tuple[Tuple[str, str], ...]) -> List[str]:
    def under(module: str, prefix: str) -> bool:
        return module == prefix or module.startswith(prefix + ".")

    return [f"{m} imports {d}" for m, deps in sorted(graph.items()) for d in sorted(deps)
            for a, b in pairs for x, y in ((a, b), (b, a)) if under(m, x) and under(d, y)]


@pytest.fixture(scope="module")
def graph() -> Dict[str, Set[str]]:
    return import_graph({name: path.read_text() for name, path in _all_modules().items()})


def test_every_module_has_a_layer(graph):
    assert [m for m in graph if layer_of(m, LAYERS) is None] == []


def test_no_import_cycle(graph):
    assert cycles(graph) == [], "import cycles (break each by moving the shared part down a layer)"


def test_layers_are_respected(graph):
    assert layer_violations(graph, LAYERS) == []


def test_training_layers_are_respected(graph):
    inside = {m: {d for d in deps if d.startswith("ctr_volcano.training")}
              for m, deps in graph.items() if m.startswith("ctr_volcano.training")}
    assert layer_violations(inside, TRAINING_LAYERS) == []
    assert sibling_violations(graph, INDEPENDENT) == []


def test_only_the_step_imports_both_backends(graph):
    both = [m for m, deps in graph.items()
            if any(d.startswith("ctr_volcano.training.local") for d in deps)
            and any(d.startswith("ctr_volcano.training.volcano") for d in deps)]
    assert both == ["ctr_volcano.training.step"]


def test_nothing_imports_the_released_paths_it_keeps_for_old_pipelines():
    """The 0.1.0 paths in ``ctr_volcano.compat`` serve uploaded pipeline versions only."""
    from ctr_volcano.compat import RELEASED_MODULES

    users = []
    for pkg in PACKAGES + ("tests", "bench", "tools"):
        for path in _py_files(pkg):
            if path.name in ("test_released_imports.py", "compat.py"):
                continue
            for name, line in _imports(ast.parse(path.read_text()), top_level_only=False):
                if name in RELEASED_MODULES:
                    users.append(f"{path.relative_to(REPO)}:{line} imports {name}")
    assert users == []


def test_the_checkers_find_violations():
    """The rules above can fail: a cycle, an upward import, a sibling import are each caught."""
    sources = {
        "ctr_volcano.data.a": "from ctr_volcano.training.b import x\n",        # upward
        "ctr_volcano.training.b": "def f():\n    import ctr_volcano.training.c\n",
        "ctr_volcano.training.c": "from ctr_volcano.training import b\n",     # b <-> c, lazily
        "ctr_volcano.training.local.d": "import ctr_volcano.training.volcano.e\n",
        "ctr_volcano.training.volcano.e": "x = 1\n",
    }
    g = import_graph(sources)
    assert cycles(g) == [["ctr_volcano.training.b", "ctr_volcano.training.c"]]
    assert layer_violations(g, LAYERS) == ["ctr_volcano.data.a (layer 2) imports ctr_volcano.training.b (layer 3)"]
    assert sibling_violations(g, INDEPENDENT) == ["ctr_volcano.training.local.d imports ctr_volcano.training.volcano.e"]


# ------------------------------------------------------------------------------------------------
# function length


def _is_kfp_definition(node: ast.AST) -> bool:
    """A ``@dsl.pipeline``/``@dsl.component`` function: its signature and docstring are KFP's interface."""
    return isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
        "pipeline" in ast.unparse(d) or "component" in ast.unparse(d) for d in node.decorator_list)


def _body_after_docstring(node: ast.AST) -> list:
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
    return body


def long_functions(text: str, limit: int = MAX_FUNCTION_LINES) -> List[Tuple[str, int, int]]:
    """``(name, line, lines after the docstring)`` of each function longer than ``limit``; the
    signature and docstring of a KFP pipeline or component defined inside it do not count."""
    out = []
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        body = _body_after_docstring(node)
        if not body:
            continue
        length = node.end_lineno - body[0].lineno + 1
        for inner in ast.walk(node):
            if inner is not node and _is_kfp_definition(inner) and _body_after_docstring(inner):
                start = min([inner.lineno] + [d.lineno for d in inner.decorator_list])
                length -= _body_after_docstring(inner)[0].lineno - start
        if length > limit:
            out.append((node.name, node.lineno, length))
    return out


@pytest.mark.parametrize("package", PACKAGES)
def test_no_function_is_longer_than_the_limit(package):
    found = [f"{p.relative_to(REPO)}:{line} {name} ({n} lines)"
             for p in _py_files(package) for name, line, n in long_functions(p.read_text())]
    assert found == [], f"split these into functions of at most {MAX_FUNCTION_LINES} lines"


def test_no_module_is_longer_than_the_limit():
    found = sorted(str(p.relative_to(REPO)) for pkg in PACKAGES for p in _py_files(pkg)
                   if len(p.read_text().splitlines()) > MAX_MODULE_LINES)
    assert [m for m in found if m not in OVER_MODULE_LIMIT] == [], \
        f"split these by job into modules of at most {MAX_MODULE_LINES} lines"
    assert [m for m in OVER_MODULE_LIMIT if m not in found] == [], "within the limit now: remove from OVER_MODULE_LIMIT"


def test_the_length_check_counts_after_the_docstring():
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    ok = f'def f():\n    """Doc\n    string."""\n{body}\n'
    assert long_functions(ok) == []
    assert long_functions(ok + "    y = 0\n") == [("f", 1, MAX_FUNCTION_LINES + 1)]
    signature = "\n".join(f"        p{i}: int = {i}," for i in range(MAX_FUNCTION_LINES))
    builder = (f"def build():\n    @dsl.pipeline(name='p')\n    def p(\n{signature}\n    ):\n"
               f"        \"\"\"Doc.\"\"\"\n        return None\n    return p\n")
    assert long_functions(builder) == []     # a nested pipeline's signature is KFP's, not ours


# ------------------------------------------------------------------------------------------------
# light imports


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


@pytest.mark.parametrize("module", [m for m in LIGHT_OWN if m not in ("components", "pipelines")])
def test_light_own_modules_import_only_the_standard_library_and_each_other(module):
    """The allow-list itself: at module level, each light module imports the standard library and
    other light modules only (what it needs at run time it imports inside functions)."""
    path = REPO / (module.replace(".", "/") + ".py")
    tree = ast.parse(path.read_text())
    light = LIGHT_OWN + ("ctr_model.checks",)
    bad = {n for n, _ in _imports(tree, top_level_only=True)
           if _root(n) not in set(sys.stdlib_module_names) | {"__future__"}
           and not any(n == own or n.startswith(own + ".") for own in light)}
    assert bad == set(), (module, bad)


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
