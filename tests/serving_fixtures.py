"""A model really trained on the committed sample (1 pserver, 1 trainer, 1 epoch: ~30 s), shared by
the ONNX export and serving tests, and the raw test-split rows it is compared on."""
from __future__ import annotations

import gzip
from pathlib import Path
from typing import List, Tuple

import pytest

from ctr_volcano.app.cli import main as cli

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def trained_model(tmp_path_factory, sample_dir) -> Tuple[Path, Path]:
    """``(prep_dir, model_dir)`` of a real local training run; the export wrote model.onnx."""
    root = tmp_path_factory.mktemp("served")
    prep, model = root / "prep", root / "model"
    assert cli.main(["prep", "--input", str(sample_dir), "--out", str(prep)]) == 0
    assert cli.main(["train", "--data", str(prep), "--model-out", str(model), "--pservers", "1",
                     "--trainers", "1", "--epochs", "1", "--workdir", str(root / "work")]) == 0
    return prep, model


def raw_lines(sample_dir: Path, limit: int) -> List[List[str]]:
    """The first ``limit`` raw sample lines as 40 fields each (label, I1..I13, C1..C26)."""
    rows: List[List[str]] = []
    for path in sorted(sample_dir.glob("part-*.tsv.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            for line in fh:
                rows.append(line.rstrip("\n").split("\t"))
                if len(rows) == limit:
                    return rows
    return rows
