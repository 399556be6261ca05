"""The trainer's rooms stay rooms: the SDK never imports the pod entrypoint's package, every module of
it stays short, and a role reads the environment only through the contract."""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterator, Tuple

import pytest

REPO = Path(__file__).resolve().parents[1]
#: Module-level budget of a room (the functions' 60 lines are tests/test_layering.py's).
MAX_MODULE_LINES = 500
#: Where a process variable of the product may be read: the contract, and the store's settings it calls.
ENV_READERS = {"ctr_model/contract.py", "ctr_model/store_config.py"}
#: The process's own search paths, passed on to the children a role starts (not configuration).
SEARCH_PATHS = {"PATH", "PYTHONPATH"}


def _imports(tree: ast.AST) -> Iterator[Tuple[str, int]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level:
            yield node.module or "", node.lineno
            yield from ((f"{node.module}.{alias.name}", node.lineno) for alias in node.names)


def _sdk_files():
    return sorted(p for pkg in ("ctr_volcano", "components", "pipelines") for p in (REPO / pkg).rglob("*.py"))


@pytest.mark.parametrize("path", _sdk_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_nothing_in_the_sdk_imports_the_pod_entrypoint(path):
    bad = [(name, line) for name, line in _imports(ast.parse(path.read_text()))
           if name == "ctr_model.train" or name.startswith("ctr_model.train.")]
    assert not bad, f"{path.relative_to(REPO)} imports the training pods' package: {bad}"


def test_every_room_of_the_trainer_is_short():
    rooms = sorted((REPO / "ctr_model" / "train").glob("*.py"))
    assert len(rooms) >= 10 and not (REPO / "ctr_model" / "train.py").exists()
    long = {p.name: n for p in rooms if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, long


def _env_reads(tree: ast.AST) -> Iterator[Tuple[str, int]]:
    """``(variable or '?', line)`` of every ``os.environ.get(...)``, ``os.environ[...]`` and
    ``os.getenv(...)`` read; a whole ``os.environ`` passed on counts as ``'*'``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            target = ast.unparse(node.func)
            if target in ("os.environ.get", "os.getenv") and node.args:
                arg = node.args[0]
                yield (arg.value if isinstance(arg, ast.Constant) else "?"), node.lineno
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value) == "os.environ" \
                and isinstance(node.ctx, ast.Load):
            yield ast.unparse(node.slice), node.lineno
        elif isinstance(node, ast.IfExp) and "os.environ" in (ast.unparse(node.body), ast.unparse(node.orelse)):
            yield "*", node.lineno


def test_a_role_reads_the_environment_only_through_the_contract():
    found = {}
    for path in sorted((REPO / "ctr_model").rglob("*.py")):
        rel = str(path.relative_to(REPO))
        reads = [(name, line) for name, line in _env_reads(ast.parse(path.read_text()))
                 if name not in SEARCH_PATHS]
        if reads and rel not in ENV_READERS:
            found[rel] = reads
    assert not found, f"variables read outside ctr_model/contract.py: {found}"


def test_the_env_check_finds_a_read():
    tree = ast.parse("import os\nx = os.environ.get('CTR_CACHE_DIR')\ny = os.environ['CTR_SCRATCH_DIR']\n"
                     "z = os.environ if e is None else e\n")
    assert list(_env_reads(tree)) == [("CTR_CACHE_DIR", 2), ("'CTR_SCRATCH_DIR'", 3), ("*", 4)]
