"""The feature spec: which columns of a team's click logs are the label, the dense and the categorical
features, and how each is transformed. One frozen, validated dataclass.

Why one document: prep reads it once where it enters (a YAML or JSON file, or a JSON string from a
pipeline parameter), writes it into the output's ``schema.json``, and everything downstream (the
trainer's slots, evaluation, the exported model, the scorer, warm start) reads it from there, so
there is never a second copy to drift. Every problem in a spec is reported at once, in one line,
each naming the key, the value and the fix (:class:`SpecError`), before any data is read.

The Criteo preset (:func:`criteo_spec`, the default when no spec is given) is today's layout
exactly: tab-separated, no header, ``label, I1..I13, C1..C26``, the ``criteo`` dense transform and
one shared table of ``hash_buckets`` ids, so data, models and warm starts made before the spec
existed stay valid. The transforms themselves are in :mod:`ctr_model.transforms`.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ctr_model.checks import is_int, is_real
from ctr_model.defaults import DEFAULT_HASH_BUCKETS
from ctr_model.errors import BadInput
from ctr_model.features import DENSE_COLUMNS, LABEL, RAW_COLUMNS, SPARSE_COLUMNS
from ctr_model.spec_attention import ATTENTION, DEFAULT_UNITS, attention_doc, check_attention, read_attention
from ctr_model.spec_crosses import CROSS_EMBEDDING_DIM, Cross, check_crosses, read_crosses
from ctr_model.spec_labels import check_labels, read_labels
from ctr_model.validation_spec import check_section

__all__ = ["FORMATS", "DENSE_TRANSFORMS", "POOLINGS", "SpecError", "DenseFeature",
           "CategoricalFeature", "Cross", "FeatureSpec", "criteo_spec", "spec_from_dict", "load_spec",
           "spec_from_text", "split_spec", "input_description"]

FORMATS = ("criteo", "csv", "tsv", "parquet")
DENSE_TRANSFORMS = ("criteo", "log1p", "standardize", "none")
POOLINGS = ("sum", "mean", ATTENTION)
#: The embedding width when neither the feature nor the spec names one (TrainConfig's default).
DEFAULT_EMBEDDING_DIM = 10
#: Multi-valued features keep at most this many ids per row when the feature names no max_length.
DEFAULT_MAX_LENGTH = 16

_TOP_KEYS = ("format", "header", "delimiter", "columns", "label", "labels", "depends_on", "dense",
             "categorical", "crosses", "ignore", "hash_buckets", "embedding_dim", "validation")
_DENSE_KEYS = ("name", "transform", "fill", "mean", "std")
_CAT_KEYS = ("name", "hash_buckets", "embedding_dim", "multivalued", "separator", "pooling",
             "max_length", "query", "attention_units")


class SpecError(BadInput):
    """A feature spec is invalid: bad input naming the field ``feature_spec``, its file (``source``;
    without one, the bad keys) and every problem. ``problems`` holds ``(key, value, fix)`` for every
    bad key."""

    def __init__(self, problems: Sequence[Tuple[str, Any, str]], source: Optional[str] = None):
        self.problems = list(problems)
        text = "; ".join(f"{key}={value!r}: {fix}" for key, value, fix in self.problems)
        super().__init__("feature_spec", source if source is not None else [key for key, _, _ in self.problems],
                         f"{len(self.problems)} problem(s): {text}")


@dataclass(frozen=True)
class DenseFeature:
    """A numeric column.

    Attributes:
        name: its column in the input (and in prep's Parquet).
        transform: ``criteo`` (integer field; empty and negatives -> 0; ``log1p``), ``log1p``
            (any number; negatives -> 0; ``log1p``), ``standardize`` (``(x - mean) / std``, both
            computed by prep on the kept rows), ``none`` (the number as float32).
        fill: the raw value of an empty field (before the transform; ``criteo`` always uses 0).
        mean: ``standardize`` only: set by prep (or by hand, then prep keeps it).
        std: ``standardize`` only, > 0.
    """

    name: str
    transform: str = "log1p"
    fill: float = 0.0
    mean: Optional[float] = None
    std: Optional[float] = None


@dataclass(frozen=True)
class CategoricalFeature:
    """A categorical column: ids (integers or strings) hashed into ``[0, hash_buckets)``.

    Attributes:
        name: its column in the input.
        hash_buckets: ids of this feature's embedding table (> the number of categorical features,
            whose first ids are the per-feature "empty" ids).
        embedding_dim: width of this feature's embedding; features of one width share a sparse table
            (:mod:`ctr_model.sparse_tables`).
        multivalued: a Parquet list column, or a CSV/TSV field split on ``separator``; its ids'
            embeddings are pooled with ``pooling``.
        separator: one character between the values of a multi-valued CSV/TSV field.
        pooling: ``sum`` or ``mean`` of a multi-valued feature's embeddings, or ``attention``
            against its ``query`` (DIN's target attention, :mod:`ctr_model.spec_attention`).
        max_length: a multi-valued feature keeps its first ``max_length`` values.
        query, attention_units: ``attention`` only: the candidate feature (single-valued, one id
            space and embedding with the history) and the activation unit's hidden widths.
    """

    name: str
    hash_buckets: int = DEFAULT_HASH_BUCKETS
    embedding_dim: int = DEFAULT_EMBEDDING_DIM
    multivalued: bool = False
    separator: str = "|"
    pooling: str = "sum"
    max_length: int = DEFAULT_MAX_LENGTH
    query: str = ""
    attention_units: Tuple[int, ...] = DEFAULT_UNITS


@dataclass(frozen=True)
class FeatureSpec:
    """The whole layout of the input and of prep's output (see the module docstring).

    Attributes:
        format: ``criteo``, ``csv``, ``tsv`` or ``parquet`` (gzip is told by the file name).
        header: csv/tsv: the first line of every file names the columns.
        delimiter: the field separator (one character; ``,`` for csv, a tab otherwise).
        columns: csv/tsv without a header: every column's name, in file order.
        label: the 0/1 label column (with ``labels``: the first of them).
        labels: several 0/1 label columns, one task each, in task order (e.g. ``[click, purchase]``)
            for a multi-task family (``esmm``, ``mmoe``); empty: the one ``label``.
        depends_on: ``(task, parent)`` pairs: ``task`` is observed only where ``parent`` is 1 (a
            conversion only after a click); written ``depends_on: {purchase: click}``. Prep refuses a
            row where the task is 1 and its parent 0.
        dense: the numeric features.
        categorical: the categorical features.
        crosses: hashed cross-product columns of two or more single-valued categorical features
            (:mod:`ctr_model.spec_crosses`): prep writes each as a column after the categorical ones;
            Wide&Deep's wide part reads them.
        ignore: columns of the input that are neither label nor feature.
        hash_buckets: the default of each categorical feature's (and cross's) ``hash_buckets``.
        embedding_dim: the default of each categorical feature's ``embedding_dim``.
        validation: thresholds of the data checks (:mod:`ctr_model.validation_spec`, docs/validation.md);
            empty means the defaults.
    """

    format: str = "criteo"
    header: bool = False
    delimiter: str = "\t"
    columns: Tuple[str, ...] = RAW_COLUMNS
    label: str = LABEL
    labels: Tuple[str, ...] = ()
    depends_on: Tuple[Tuple[str, str], ...] = ()
    dense: Tuple[DenseFeature, ...] = tuple(DenseFeature(c, "criteo") for c in DENSE_COLUMNS)
    categorical: Tuple[CategoricalFeature, ...] = tuple(CategoricalFeature(c) for c in SPARSE_COLUMNS)
    crosses: Tuple[Cross, ...] = ()
    ignore: Tuple[str, ...] = ()
    hash_buckets: int = DEFAULT_HASH_BUCKETS
    embedding_dim: int = DEFAULT_EMBEDDING_DIM
    validation: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        problems = _check_spec(self)
        if problems:
            raise SpecError(problems)

    @property
    def is_criteo(self) -> bool:
        """Today's fixed layout (prep's Criteo fast path, one shared id table)."""
        return self.format == "criteo"

    @property
    def task_labels(self) -> Tuple[str, ...]:
        """Every label column, one per task, in task order (``(label,)`` for one task)."""
        return self.labels or (self.label,)

    @property
    def parents(self) -> Dict[str, str]:
        """``{task: parent}`` of the tasks observed only after another's 1 (:attr:`depends_on`)."""
        return dict(self.depends_on)

    @property
    def output_columns(self) -> Tuple[str, ...]:
        """The columns of prep's Parquet, in order: the labels, dense, categorical."""
        return (self.task_labels + tuple(d.name for d in self.dense)
                + tuple(c.name for c in self.categorical))

    @property
    def slot_features(self) -> Tuple[CategoricalFeature, ...]:
        """The network's categorical slots, in order: the categorical features, then each cross as a
        single-valued feature of its ``hash_buckets`` (its ids are prep's, never hashed from input)."""
        return self.categorical + tuple(CategoricalFeature(x.name, x.hash_buckets, CROSS_EMBEDDING_DIM)
                                        for x in self.crosses)

    @property
    def cross_features(self) -> Tuple[str, ...]:
        """The categorical features some cross takes (their ids are what the crosses are made of)."""
        return tuple(dict.fromkeys(f for x in self.crosses for f in x.features))

    @property
    def prepped_columns(self) -> Tuple[str, ...]:
        """The columns of prep's Parquet: :attr:`output_columns`, then the crosses'."""
        return self.output_columns + tuple(x.name for x in self.crosses)

    def to_dict(self) -> Dict[str, Any]:
        """A JSON-ready dict that :func:`spec_from_dict` turns back into an equal spec."""
        doc = asdict(self)
        for key in ("columns", "ignore", "labels"):
            doc[key] = list(doc[key])
        if not doc["validation"]:
            del doc["validation"]   # the documents written before the section existed stay the same
        doc["depends_on"] = dict(self.depends_on)
        doc["dense"] = [{k: v for k, v in d.items() if v is not None} for d in doc["dense"]]
        doc["categorical"] = [attention_doc(c) for c in doc["categorical"]]
        if self.crosses:
            doc["crosses"] = [{"features": list(x.features), "hash_buckets": x.hash_buckets, "name": x.name}
                              for x in self.crosses]
        else:
            del doc["crosses"]      # the documents written before crosses existed stay the same
        return doc

    def with_dense(self, dense: Sequence[DenseFeature]) -> "FeatureSpec":
        """This spec with its dense features replaced (prep fills in standardize statistics)."""
        doc = self.to_dict()
        doc["dense"] = [{k: v for k, v in asdict(d).items() if v is not None} for d in dense]
        return spec_from_dict(doc)


def input_description(spec: Optional[FeatureSpec]) -> str:
    """What an input file of ``spec``'s layout is, for hints (``None``: Criteo TSV), e.g. ``a CSV
    file with a header (label 'click' and 23 feature columns)``."""
    if spec is None or spec.is_criteo:
        return "a Criteo TSV file (label, 13 integer and 26 categorical fields, tab-separated)"
    features = len(spec.dense) + len(spec.categorical)
    shape = (f"label {spec.label!r} and {features} feature column{'s' if features != 1 else ''} "
             f"of the feature spec")
    if spec.format == "parquet":
        return f"a Parquet file ({shape})"
    how = "with a header" if spec.header else f"with the spec's {len(spec.columns)} columns, no header"
    sep = {",": "comma", "\t": "tab", ";": "semicolon", "|": "pipe"}.get(spec.delimiter, repr(spec.delimiter))
    return f"a {spec.format.upper()} file {how}, {sep}-separated ({shape})"


def criteo_spec(hash_buckets: int = DEFAULT_HASH_BUCKETS) -> FeatureSpec:
    """The Criteo preset: today's layout, with ``hash_buckets`` ids in its one shared table."""
    return FeatureSpec(categorical=tuple(CategoricalFeature(c, hash_buckets) for c in SPARSE_COLUMNS),
                       hash_buckets=hash_buckets)


# ---------------------------------------------------------------------------------------------
# reading a spec


def spec_from_dict(doc: Mapping[str, Any]) -> FeatureSpec:
    """Build a spec from a parsed YAML/JSON document, reporting every bad key at once.

    Raises:
        SpecError: naming each bad key, its value and the fix.
    """
    if not isinstance(doc, Mapping):
        raise SpecError([("feature_spec", type(doc).__name__, "write a mapping of keys such as "
                          "format, label, dense, categorical (docs/features.md)")])
    problems: List[Tuple[str, Any, str]] = []
    _unknown_keys(doc, _TOP_KEYS, "", problems)
    fmt = doc.get("format", "criteo")
    if fmt == "criteo":
        return _criteo_from_dict(doc, problems)
    top = {k: doc[k] for k in _TOP_KEYS if k in doc and k not in ("dense", "categorical", "crosses")}
    for key in ("columns", "ignore", "labels"):
        if key in top and isinstance(top[key], list):
            top[key] = tuple(top[key])
    read_labels(top, problems)
    if "delimiter" not in top:
        top["delimiter"] = "," if fmt == "csv" else "\t"
    top.setdefault("columns", ())
    defaults = {"hash_buckets": doc.get("hash_buckets", DEFAULT_HASH_BUCKETS),
                "embedding_dim": doc.get("embedding_dim", DEFAULT_EMBEDDING_DIM)}
    dense = _entries(doc.get("dense", []), "dense", _DENSE_KEYS, {}, problems)
    categorical = _entries(doc.get("categorical", []), "categorical", _CAT_KEYS, defaults, problems)
    read_attention(categorical)
    crosses = read_crosses(doc.get("crosses", []), defaults["hash_buckets"], problems)
    try:
        spec = FeatureSpec(dense=tuple(DenseFeature(**d) for d in dense),
                           categorical=tuple(CategoricalFeature(**c) for c in categorical),
                           crosses=crosses, **top)
    except SpecError as exc:
        raise SpecError(problems + exc.problems) from None
    if problems:
        raise SpecError(problems)
    return spec


def _criteo_from_dict(doc: Mapping[str, Any], problems: List[Tuple[str, Any, str]]) -> FeatureSpec:
    """The preset, from ``format: criteo`` and at most ``hash_buckets`` (or the preset's own
    :meth:`FeatureSpec.to_dict`, as ``schema.json`` carries it)."""
    buckets = doc.get("hash_buckets", DEFAULT_HASH_BUCKETS)
    spec = None
    try:
        spec = criteo_spec(buckets)
        if doc.get("validation"):
            spec = replace(spec, validation=doc["validation"])
    except SpecError as exc:
        problems.extend(exc.problems)
    preset = spec.to_dict() if spec is not None else {}
    for key in _TOP_KEYS:
        if key in doc and key not in ("format", "hash_buckets", "validation") and doc[key] != preset.get(key):
            problems.append((key, doc[key], "format criteo is the fixed Criteo layout (label, "
                             "I1..I13, C1..C26); remove this key, or use format tsv with columns"))
    if problems or spec is None:
        raise SpecError(problems)
    return spec


def _unknown_keys(doc: Mapping[str, Any], allowed: Sequence[str], where: str,
                  problems: List[Tuple[str, Any, str]]) -> None:
    import difflib

    for key in doc:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), list(allowed), n=1)
            fix = f"did you mean {close[0]!r}?" if close else f"use one of {', '.join(allowed)}"
            problems.append((f"{where}{key}", doc[key], f"unknown key; {fix}"))


def _entries(items: Any, where: str, allowed: Sequence[str], defaults: Mapping[str, Any],
             problems: List[Tuple[str, Any, str]]) -> List[Dict[str, Any]]:
    """The valid-looking entries of the ``dense`` or ``categorical`` list (the rest are reported)."""
    if not isinstance(items, list):
        problems.append((where, items, "write a list of mappings, each with at least a name"))
        return []
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, Mapping) or "name" not in item:
            problems.append((f"{where}[{i}]", item, "write a mapping with at least a name"))
            continue
        _unknown_keys(item, allowed, f"{where}[{i}].", problems)
        entry = dict(defaults)
        entry.update({k: v for k, v in item.items() if k in allowed})
        out.append(entry)
    return out


def spec_from_text(text: str, source: str = "feature_spec") -> FeatureSpec:
    """A spec from JSON text, or YAML text when PyYAML is installed (JSON is YAML too).

    Raises:
        SpecError: unparsable text or a bad key.
    """
    try:
        doc = json.loads(text)
    except ValueError:
        try:
            import yaml  # only at this boundary; the trainer reads the spec from schema.json
        except ImportError:
            raise SpecError([(source, text[:60], "not valid JSON (install PyYAML to read YAML)")]) \
                from None
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise SpecError([(source, text[:60], f"not valid YAML or JSON: {str(exc)[:120]}")]) \
                from None
    return spec_from_dict(doc)


def load_spec(path: str) -> FeatureSpec:
    """Read a spec file (``.json``, ``.yaml`` or ``.yml``).

    Raises:
        SpecError: a missing or unreadable file, or a bad key.
    """
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise SpecError([("feature_spec", path, f"cannot read it ({exc.strerror or exc}); "
                          f"give the path of a YAML or JSON file")], path) from None
    try:
        return spec_from_text(text, os.path.basename(path))
    except SpecError as exc:
        raise SpecError(exc.problems, path) from None


# ---------------------------------------------------------------------------------------------
# validation (pure; every problem collected)


def _check_spec(spec: FeatureSpec) -> List[Tuple[str, Any, str]]:
    problems: List[Tuple[str, Any, str]] = []
    _check_layout(spec, problems)
    check_labels(spec, problems)
    for i, d in enumerate(spec.dense):
        _check_dense(d, f"dense[{i}]", problems)
    for i, c in enumerate(spec.categorical):
        _check_categorical(spec, c, f"categorical[{i}]", problems)
    _check_names(spec, problems)
    check_crosses(spec, problems)
    check_attention(spec, problems)
    problems.extend(check_section(spec.validation or None, [d.name for d in spec.dense],
                                  [c.name for c in spec.categorical]))
    return problems


def _check_layout(spec: FeatureSpec, problems: List[Tuple[str, Any, str]]) -> None:
    if spec.format not in FORMATS:
        problems.append(("format", spec.format, f"use one of {', '.join(FORMATS)}"))
    if not isinstance(spec.header, bool):
        problems.append(("header", spec.header, "use true or false"))
    if not isinstance(spec.delimiter, str) or len(spec.delimiter) != 1 or spec.delimiter in "\r\n\"":
        problems.append(("delimiter", spec.delimiter, "use one character, e.g. ',' or a tab"))
    elif spec.format == "tsv" and spec.delimiter != "\t":
        problems.append(("delimiter", spec.delimiter, "tsv is tab-separated; use format csv "
                         "for another delimiter"))
    if not isinstance(spec.label, str) or not spec.label:
        problems.append(("label", spec.label, "name the 0/1 label column"))
    for key, min_value in (("hash_buckets", 2), ("embedding_dim", 1)):
        if not is_int(getattr(spec, key), min_value, 2 ** 62):
            problems.append((key, getattr(spec, key), f"use an integer >= {min_value}"))
    if not spec.dense and not spec.categorical:
        problems.append(("dense", [], "declare at least one dense or categorical feature"))
    if spec.format in ("csv", "tsv") and not spec.header and not spec.columns:
        problems.append(("columns", [], "a file without a header needs columns: every column's "
                         "name in file order (or set header: true)"))
    if spec.columns and (spec.header or spec.format == "parquet") and spec.format != "criteo":
        problems.append(("columns", list(spec.columns), "remove columns: the header (or the "
                         "Parquet schema) names the columns"))


def _check_dense(d: DenseFeature, where: str, problems: List[Tuple[str, Any, str]]) -> None:
    if d.transform not in DENSE_TRANSFORMS:
        problems.append((f"{where}.transform", d.transform, f"use one of {', '.join(DENSE_TRANSFORMS)}"))
    if not is_real(d.fill, -3.4e38, 3.4e38):
        problems.append((f"{where}.fill", d.fill, "use a finite number (the raw value of an empty field)"))
    if (d.mean is not None or d.std is not None) and d.transform != "standardize":
        problems.append((f"{where}.mean", d.mean, "mean and std belong to transform standardize only"))
    if d.mean is not None and not is_real(d.mean, -3.4e38, 3.4e38):
        problems.append((f"{where}.mean", d.mean, "use a finite number, or leave it to prep"))
    if d.std is not None and not (is_real(d.std, 0.0, 3.4e38) and float(d.std) > 0):
        problems.append((f"{where}.std", d.std, "use a number > 0, or leave it to prep"))


def _check_categorical(spec: FeatureSpec, c: CategoricalFeature, where: str,
                       problems: List[Tuple[str, Any, str]]) -> None:
    slots = len(spec.categorical)
    if not is_int(c.hash_buckets, slots + 1, 2 ** 62):
        problems.append((f"{where}.hash_buckets", c.hash_buckets, f"use an integer > {slots} (ids "
                         f"0..{slots - 1} are the per-feature empty ids)"))
    if not is_int(c.embedding_dim, 1, 4096):
        problems.append((f"{where}.embedding_dim", c.embedding_dim, "use an integer in [1, 4096]"))
    if not isinstance(c.multivalued, bool):
        problems.append((f"{where}.multivalued", c.multivalued, "use true or false"))
    if c.pooling not in POOLINGS:
        problems.append((f"{where}.pooling", c.pooling, f"use one of {', '.join(POOLINGS)}"))
    if not is_int(c.max_length, 1, 4096):
        problems.append((f"{where}.max_length", c.max_length, "use an integer in [1, 4096]"))
    if c.multivalued is True and spec.format == "criteo":
        problems.append((f"{where}.multivalued", True, "the criteo format has no multi-valued "
                         "columns; use csv, tsv or parquet"))
    if c.multivalued is True and spec.format in ("csv", "tsv") and (
            not isinstance(c.separator, str) or len(c.separator) != 1
            or c.separator == spec.delimiter):
        problems.append((f"{where}.separator", c.separator, "use one character other than the "
                         "delimiter, e.g. '|'"))


def _check_names(spec: FeatureSpec, problems: List[Tuple[str, Any, str]]) -> None:
    """Names are unique non-empty strings; with ``columns``, each is a column and each column used."""
    named = [("label", spec.label)] + [(f"labels[{i}]", n) for i, n in enumerate(spec.labels) if i > 0]
    named += [(f"dense[{i}].name", d.name) for i, d in enumerate(spec.dense)]
    named += [(f"categorical[{i}].name", c.name) for i, c in enumerate(spec.categorical)]
    named += [(f"ignore[{i}]", n) for i, n in enumerate(spec.ignore)]
    seen: Dict[str, str] = {}
    for key, name in named:
        if not isinstance(name, str) or not name:
            problems.append((key, name, "use a non-empty column name"))
        elif name in seen:
            problems.append((key, name, f"duplicated: {seen[name]} names the same column; "
                             f"each column has one role"))
        else:
            seen[name] = key
    if not spec.columns:
        return
    if len(set(spec.columns)) != len(spec.columns):
        dup = sorted({c for c in spec.columns if list(spec.columns).count(c) > 1})
        problems.append(("columns", dup, "duplicated column names; name each column once"))
    for key, name in named:
        if isinstance(name, str) and name and name not in spec.columns:
            problems.append((key, name, "unknown column: not in columns; fix the name or add it "
                             "to columns"))
    for name in spec.columns:
        if name not in seen:
            problems.append(("columns", name, "column with no role: make it a feature, the label, "
                             "or list it under ignore"))


def split_spec(schema_doc: Mapping[str, Any]) -> FeatureSpec:
    """The spec a split directory's ``schema.json`` document carries: the one prep wrote, or the
    Criteo preset for data written before specs existed (its ``hash_buckets`` kept).

    Raises:
        SpecError: if the embedded spec is invalid (a hand-edited ``schema.json``).
    """
    doc = schema_doc.get("feature_spec")
    if doc is None:
        return criteo_spec(int(schema_doc.get("hash_buckets", DEFAULT_HASH_BUCKETS)))
    return spec_from_dict(doc)
