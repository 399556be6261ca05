"""Signatures built from a parameter list: components whose shipped source spells every default out,
pipelines whose parameters come from the step's declaration.

Why: KFP reads a component's interface from its Python signature and docstring, and runs the
function's source *alone* in the component image (only kfp and ``typing`` are imported there). A
default written as a name (``DEFAULT_SCORE_BATCH``), or parameters declared elsewhere (the training
step's, :func:`ctr_volcano.training.params.kfp_parameters`), must therefore be literals in that
source. :func:`shipped` re-defines a function from its own source with every default as a literal,
the declared parameters in place of its ``**kwargs`` (collected back into that dict as the body's
first statement) and their ``Args:`` text in its docstring; the new source is what
``inspect.getsource`` returns, so it is what KFP compiles into the YAML. A pipeline's source is
never shipped: :func:`with_parameters` gives it a ``__signature__`` and a docstring instead.
"""
from __future__ import annotations

import ast
import functools
import inspect
import linecache
import textwrap
from typing import Any, Callable, List, Optional, Sequence, Tuple

__all__ = ["shipped", "with_parameters", "pipeline_with_parameters", "with_args"]

_LITERALS = (type(None), bool, int, float, str)


def _literal(value: Any, where: str) -> str:
    if type(value) not in _LITERALS:
        raise TypeError(f"{where}: default {value!r} is not a literal KFP can ship (None, bool, int, float, str)")
    return repr(value)


def _entries(lines: List[str], start: int) -> Tuple[int, List[Tuple[str, List[str]]]]:
    """The ``Args:`` entries after line ``start`` (``Args:`` itself) as ``(name, lines)``; and the
    index of the first line after the section."""
    indent = None
    entries: List[Tuple[str, List[str]]] = []
    i = start + 1
    while i < len(lines):
        line = lines[i]
        width = len(line) - len(line.lstrip())
        if line.strip() and indent is None:
            indent = width
        if line.strip() and width < (indent or 0):
            break
        if line.strip() and width == indent:
            entries.append((line.strip().split(":", 1)[0].split(" ")[0], [line]))
        elif entries:
            entries[-1][1].append(line)
        i += 1
    while entries and not entries[-1][1][-1].strip():   # blank lines belong to the gap, not the entry
        entries[-1][1].pop()
        i -= 1
    return i, entries


def with_args(doc: str, extra: Sequence[Tuple[str, str]], after: Optional[str] = None) -> str:
    """``doc`` (a Google-style docstring) with ``extra`` ``(name, text)`` entries in its ``Args:``
    section, after the entry of ``after`` (default: at its end)."""
    lines = doc.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "Args:")
    end, entries = _entries(lines, start)
    indent = " " * (len(lines[start]) - len(lines[start].lstrip()) + 4)
    new = [(name, [f"{indent}{name}: {text}"]) for name, text in extra]
    at = len(entries) if after is None else 1 + next(i for i, (name, _) in enumerate(entries) if name == after)
    entries = entries[:at] + new + entries[at:]
    return "\n".join(lines[:start + 1] + [line for _, body in entries for line in body] + lines[end:])


def _docstring_source(doc: str) -> str:
    body = textwrap.indent(doc.replace("\\", "\\\\").replace('"""', '\\"\\"\\"'), "    ").lstrip()
    return f'    """{body}\n    """'


def _define(name: str, text: str, namespace: dict) -> Callable:
    """Execute the source ``text`` of function ``name`` and register it, so ``inspect.getsource``
    (KFP's compiler) reads exactly ``text``."""
    filename = f"<shipped {namespace.get('__name__', '?')}.{name}>"
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    # dont_inherit: this module's ``from __future__ import annotations`` would turn KFP's types into strings
    exec(compile(text, filename, "exec", dont_inherit=True), namespace)
    return namespace[name]


def shipped(func: Optional[Callable] = None, *, extra: Sequence[Any] = ()) -> Any:
    """Decorator: ``func`` re-defined from its own source, as KFP will ship it.

    Every default becomes a literal; ``extra`` (``KfpParameter``-like: ``name``, ``type``, ``default``,
    ``doc``) replaces ``func``'s ``**kwargs``, whose dict the body still receives under the same
    name; their texts join the docstring's ``Args:``. Use it under ``@dsl.component``.
    """
    if func is None:
        return functools.partial(shipped, extra=extra)
    source = textwrap.dedent(inspect.getsource(func))
    node = ast.parse(source).body[0]
    assert isinstance(node, ast.FunctionDef) and ast.get_docstring(node), f"{func.__name__}: needs a docstring"
    sig = inspect.signature(func)
    args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
    params = []
    for arg in args:
        default = sig.parameters[arg.arg].default
        text = arg.arg + (f": {ast.get_source_segment(source, arg.annotation)}" if arg.annotation else "")
        params.append(text + ("" if default is inspect.Parameter.empty
                              else f" = {_literal(default, f'{func.__name__}.{arg.arg}')}"))
    params += [f"{e.name}: {e.type.__name__} = {_literal(e.default, e.name)}" for e in extra]
    returns = f" -> {ast.get_source_segment(source, node.returns)}" if node.returns else ""
    doc = with_args(inspect.getdoc(func) or "", [(e.name, e.doc) for e in extra])
    head = [f"def {func.__name__}(", *(f"    {p}," for p in params), f"){returns}:", _docstring_source(doc)]
    if node.args.kwarg is not None:
        head.append(f"    {node.args.kwarg.arg} = dict({', '.join(f'{e.name}={e.name}' for e in extra)})")
    elif extra:
        raise TypeError(f"{func.__name__}: give it **kwargs to receive the extra parameters")
    body = source.splitlines()[node.body[0].end_lineno:]   # everything after the docstring, verbatim
    return _define(func.__name__, "\n".join(head + body) + "\n", dict(func.__globals__))


def with_parameters(body: Callable, extra: Sequence[Any], after: Optional[str] = None) -> Callable:
    """A pipeline function with ``body``'s own parameters and ``extra`` (``KfpParameter``-like)
    inserted after ``after`` (default: at the end), as KFP's ``dsl.pipeline`` reads them
    (``__signature__``, ``__doc__``); calls ``body`` with its own arguments and the extra ones as
    its ``**kwargs``."""
    sig = inspect.signature(body)
    own = [p for p in sig.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    added = [inspect.Parameter(e.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=e.default,
                               annotation=e.type) for e in extra]
    at = len(own) if after is None else 1 + [p.name for p in own].index(after)
    full = sig.replace(parameters=own[:at] + added + own[at:])

    @functools.wraps(body)
    def pipeline(*args: Any, **kwargs: Any) -> Any:
        return body(**full.bind(*args, **kwargs).arguments)

    pipeline.__signature__ = full  # type: ignore[attr-defined]
    pipeline.__annotations__ = {**{p.name: p.annotation for p in full.parameters.values()},
                                "return": full.return_annotation}
    pipeline.__doc__ = with_args(inspect.getdoc(body) or "", [(e.name, e.doc) for e in extra], after)
    return pipeline


def pipeline_with_parameters(extra: Sequence[Any], after: Optional[str] = None, **pipeline: Any) -> Callable:
    """Decorator: ``dsl.pipeline(with_parameters(func, extra, after), **pipeline)``."""
    from kfp import dsl

    def decorate(body: Callable) -> Any:
        return dsl.pipeline(with_parameters(body, extra, after), **pipeline)

    return decorate
