"""Prep's counts, rejects and per-column statistics over a whole run (``stats.json``)."""
from __future__ import annotations

import json
import os
from dataclasses import asdict
from typing import Any, Dict, List, Optional, Protocol, Sequence

import numpy as np

from ctr_model.atomic import write_json, write_text
from ctr_model.feature_spec import FeatureSpec, input_description
from ctr_model.features import RAW_COLUMNS, SCHEMA_VERSION, write_split_schema
from ctr_volcano.data.prep.config import PrepConfig
from ctr_volcano.data.prep.parse import looks_like_header
from ctr_volcano.data.profile.profile import PROFILE_FILE, DataProfile
from ctr_volcano.errors import BadInput

__all__ = ["Accumulator", "Shards", "write_outputs", "write_profile"]


class Shards(Protocol):
    """A split's written shards, as the stats read them (:class:`~.split.ShardSet` is one)."""

    dir: str

    def files(self) -> List[Dict[str, Any]]: ...


class Accumulator:
    """Counts, rejects and per-column statistics over the whole run."""

    def __init__(self, config: PrepConfig, names: Sequence[str] = RAW_COLUMNS[1:],
                 hash_buckets: Optional[int] = None, spec: Optional[FeatureSpec] = None):
        self.config = config
        self.expected = input_description(spec)    # what the hints say the input should be
        self.criteo = spec is None or spec.is_criteo
        self.names = tuple(names)          # the feature columns whose missing rates are reported
        self.hash_buckets = config.hash_buckets if hash_buckets is None else hash_buckets
        self.rows_in_before = 0        # lines of all blocks seen so far (global line index base)
        self.rows_in = 0
        self.rows_train = 0
        self.rows_test = 0
        self.rows_rejected = 0
        self.pos_train = 0
        self.pos_test = 0
        self.missing = np.zeros(len(self.names), dtype=np.int64)
        self.by_reason: Dict[str, int] = {}
        self.examples: List[Dict[str, Any]] = []
        self.inputs: List[Dict[str, Any]] = []
        self.profile = DataProfile()

    def add_profile(self, part: DataProfile) -> None:
        """Merge the next part (a block's, a batch's) of the data profile, in input order."""
        self.profile = DataProfile.merged([self.profile, part])

    def add_rejects(self, path: str, first_line: int, rejects, n_lines: int) -> None:
        self.rows_in += n_lines
        self.rows_rejected += len(rejects)
        for i, category, detail, text in rejects:
            if self.criteo and first_line + i == 1 and looks_like_header(text):
                detail = ("a header line (column names); Criteo TSV files have none: remove it "
                          f"(e.g. tail -n +2), first fields {text[:40].decode('utf-8', 'replace')!r}")
            self.by_reason[category] = self.by_reason.get(category, 0) + 1
            if len(self.examples) < self.config.max_examples:
                self.examples.append({"file": path, "line": first_line + i, "reason": detail,
                                      "text": text[:200].decode("utf-8", "replace")})
        if n_lines >= 1000 and len(rejects) > n_lines // 2 and rejects:
            i, _, detail, _ = rejects[0]
            raise BadInput("input", f"{path}:{first_line + i}",
                           f"{len(rejects)} of {n_lines} lines in this block are bad "
                           f"(first: {detail}); is this {self.expected}?")

    def add_good(self, missing: np.ndarray, train_part, test_part) -> None:
        import pyarrow.compute as pc

        self.missing += missing
        self.rows_train += train_part.num_rows
        self.rows_test += test_part.num_rows
        if train_part.num_rows:
            self.pos_train += int(pc.sum(train_part.column(0).cast("int64")).as_py() or 0)
        if test_part.num_rows:
            self.pos_test += int(pc.sum(test_part.column(0).cast("int64")).as_py() or 0)

    def check_bad_fraction(self) -> None:
        frac = self.rows_rejected / self.rows_in
        if self.rows_rejected and frac > self.config.max_bad_fraction:
            first = self.examples[0] if self.examples else {"file": "?", "line": "?",
                                                            "reason": "?"}
            raise BadInput(
                "max_bad_fraction", self.config.max_bad_fraction,
                f"{self.rows_rejected} of {self.rows_in} lines ({frac:.4%}) were rejected; "
                f"first at {first['file']}:{first['line']}: {first['reason']}. Fix the input, "
                f"or raise --max-bad-fraction to accept it"
                + (f"; most lines are bad: is this {self.expected}?" if frac > 0.5 else ""))

    def stats(self, train: Shards, test: Shards, seconds: float) -> Dict[str, Any]:
        good = self.rows_train + self.rows_test
        if self.rows_in != good + self.rows_rejected:  # a bug, never bad input
            raise RuntimeError(f"row accounting broke: rows_in={self.rows_in} != train "
                               f"{self.rows_train} + test {self.rows_test} + rejected "
                               f"{self.rows_rejected}")
        total_bytes = sum(i["bytes"] for i in self.inputs)
        return {
            "schema_version": SCHEMA_VERSION,
            "hash_buckets": self.hash_buckets,
            "rows_in": self.rows_in,
            "rows_train": self.rows_train,
            "rows_test": self.rows_test,
            "rows_rejected": self.rows_rejected,
            "rejected_fraction": self.rows_rejected / self.rows_in if self.rows_in else 0.0,
            "rejected_by_reason": dict(sorted(self.by_reason.items())),
            "rejected_examples": self.examples,
            "positive_rate": (self.pos_train + self.pos_test) / good if good else 0.0,
            "positive_rate_train": self.pos_train / self.rows_train if self.rows_train else 0.0,
            "positive_rate_test": self.pos_test / self.rows_test if self.rows_test else 0.0,
            "missing_rate": {name: (int(m) / good if good else 0.0)
                             for name, m in zip(self.names, self.missing)},
            "train_files": train.files(),
            "test_files": test.files(),
            "inputs": self.inputs,
            "config": asdict(self.config),
            "seconds": round(seconds, 3),
            "input_mb_per_s": round(total_bytes / 1e6 / seconds, 2) if seconds > 0 else None,
        }


def write_outputs(acc: "Accumulator", train: Shards, test: Shards, seconds: float, id_space: int,
                  spec_doc: Dict[str, Any], stats_path: Optional[str], **extra: Any) -> Dict[str, Any]:
    """The end of a prep run, whichever reader made it: the rejected share checked, both splits'
    ``schema.json`` (with the feature spec) and ``stats.json`` written; returns the stats.

    Raises:
        BadInput: more rows were rejected than ``max_bad_fraction`` allows (nothing is written).
    """
    acc.check_bad_fraction()
    stats = acc.stats(train, test, seconds)
    stats.update(extra)
    if acc.config.profile:
        write_profile(acc, train, spec_doc, stats_path)
    for shards, rows, positives in ((train, acc.rows_train, acc.pos_train), (test, acc.rows_test, acc.pos_test)):
        write_split_schema(shards.dir, id_space, rows, shards.files(), spec_doc,
                           positive_rate=positives / rows if rows else None)
    if stats_path:
        write_json(stats_path, stats)
    return stats


def write_profile(acc: Accumulator, train: Shards, spec_doc: Dict[str, Any], stats_path: Optional[str]) -> None:
    """``profile.json`` into the train split's directory (which carries it to training and into the
    model) and beside ``stats.json``."""
    source = {"rows_in": acc.rows_in, "rows_rejected": acc.rows_rejected,
              "inputs": [i["path"] for i in acc.inputs]}
    text = json.dumps(acc.profile.to_doc(spec_doc, source), separators=(",", ":")) + "\n"
    for folder in [train.dir] + ([os.path.dirname(stats_path) or "."] if stats_path else []):
        write_text(os.path.join(folder, PROFILE_FILE), text)
