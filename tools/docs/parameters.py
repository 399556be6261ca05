"""Write docs/parameters.md from the pipelines' and components' docstrings, so the reference never drifts.

The docstrings are the single source: KFP shows them in its UI, and this page renders them for readers
of the repository. Types and defaults come from the components' own specs (what KFP compiles), the
meaning of each parameter from its Google-style ``Args:`` entry. The set of pipelines and components is
``ctr_volcano.app.compile.compiled_files()``, the same set ``ctr-volcano compile`` writes.

    python tools/docs/parameters.py            # regenerate docs/parameters.md
    python tools/docs/parameters.py --check    # exit 1 if the committed page is stale

``tests/test_parameters_doc.py`` runs the check.
"""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any, Dict, List

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "parameters.md"
REGENERATE = "python tools/docs/parameters.py"

__all__ = ["render", "main", "PAGE", "REGENERATE"]

_PARAMETER_TYPES = {"String": "str", "Integer": "int", "Float": "float", "Boolean": "bool",
                    "TaskConfig": "TaskConfig", "Struct": "dict", "List": "list"}


def _type_name(kfp_type: str, output: bool) -> str:
    if kfp_type.startswith("system."):
        artifact = kfp_type[len("system."):].split("@")[0]
        return f"{'Output' if output else 'Input'}[{artifact}]"
    return _PARAMETER_TYPES.get(kfp_type, kfp_type)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _default(spec: Any) -> str:
    if spec.default is not None:
        return f"`{spec.default!r}`"
    return "optional" if spec.optional and spec.type.startswith("system.") else ""


def _returns(doc: Any) -> str:
    """The ``Returns:`` text; the parser reads a leading ``name:`` as a type, so put it back."""
    text = doc.returns.description or ""
    return _cell(f"{doc.returns.type_name}: {text}" if doc.returns.type_name else text)


def _legacy_difference(spec: Any, legacy: Any) -> List[str]:
    """What the ``--legacy-kfp`` variant of this pipeline/component takes that the default one does not."""
    import docstring_parser

    func = getattr(legacy, "python_func", None) or legacy.pipeline_func
    meaning = {p.arg_name: p.description or "" for p in docstring_parser.parse(func.__doc__ or "").params}
    default, old = spec.inputs or {}, legacy.component_spec.inputs or {}
    added = [f"`{n}` ({_type_name(i.type, False)}, default {_default(i) or 'none'}): {_cell(meaning.get(n, '')).rstrip('.')}"
             for n, i in old.items() if n not in default]
    dropped = [f"`{n}`" for n in default if n not in old]
    if not added and not dropped:
        return []
    parts = (["adds " + "; ".join(added)] if added else []) + (["drops " + ", ".join(dropped)] if dropped else [])
    return [f"The `ctr-volcano compile --legacy-kfp` variant (KFP backends older than 2.15) {' and '.join(parts)}.",
            ""]


def _section(rel: str, comp: Any, legacy: Any) -> List[str]:
    import docstring_parser

    func = getattr(comp, "python_func", None) or comp.pipeline_func
    doc = docstring_parser.parse(func.__doc__ or "")
    meaning = {p.arg_name: p.description or "" for p in doc.params}
    spec = comp.component_spec
    kind = "pipeline" if rel.startswith("pipelines/") else "component"
    source = Path(sys.modules[func.__module__].__file__ or "").relative_to(REPO)   # its module: some are generated
    lines = [f"## `{func.__name__}`", "",
             f"{kind.capitalize()}, compiled to [`{rel}`](../{rel}); defined in [`{source}`](../{source}).", ""]
    lines += [_cell(doc.short_description or ""), ""]
    if doc.long_description:
        lines += [_cell(doc.long_description), ""]
    lines += ["| Parameter | Type | Default | Meaning |", "|---|---|---|---|"]
    for name, inp in (spec.inputs or {}).items():
        lines.append(f"| `{name}` | {_type_name(inp.type, False)} | {_default(inp)} | {_cell(meaning.get(name, ''))} |")
    returned = ""
    for name, out in (spec.outputs or {}).items():
        if name == "Output":
            returned = _type_name(out.type, True)
            continue
        if name in meaning:  # a component's output artifact, documented under Args
            lines.append(f"| `{name}` | {_type_name(out.type, True)} |  | {_cell(meaning[name])} |")
    if returned and doc.returns:
        lines.append(f"| returns | {returned} |  | {_returns(doc)} |")
    lines.append("")
    outputs = [n for n in (spec.outputs or {}) if n not in meaning and n != "Output"]
    if outputs and doc.returns:
        lines += [f"Outputs ({', '.join(f'`{n}`' for n in outputs)}): {_returns(doc)}", ""]
    if legacy is not None:
        lines += _legacy_difference(spec, legacy)
    return lines


def render() -> str:
    """The whole page, from the docstrings of every compiled pipeline and component."""
    from ctr_volcano.app.compile import compiled_files

    files: Dict[str, Any] = compiled_files()
    legacy: Dict[str, Any] = compiled_files(legacy=True)
    lines = ["# Parameters", "",
             f"Generated from the docstrings by `{REGENERATE}`; do not edit by hand "
             "(`tests/test_parameters_doc.py` fails when this page and the docstrings differ).",
             "Under KFP, `\"\"` and `-1` mean \"not set\" where a parameter says so.", "",
             "Pipelines: " + ", ".join(f"[`{Path(r).stem}`](#{Path(r).stem})" for r in files if r.startswith("pipelines/"))
             + ". Components: " + ", ".join(f"[`{Path(r).stem}`](#{Path(r).stem})" for r in files
                                            if r.startswith("components/")) + ".", ""]
    for rel, comp in files.items():
        lines += _section(rel, comp, legacy.get(rel))
    return "\n".join(lines).rstrip() + "\n"


def main(argv: List[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/parameters.md is stale")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    page = render()
    if args.check:
        if not PAGE.is_file() or PAGE.read_text() != page:
            logging.error("%s is stale: regenerate with: %s", PAGE, REGENERATE)
            return 1
        return 0
    PAGE.write_text(page)
    logging.info("wrote %s", PAGE)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    sys.exit(main())
