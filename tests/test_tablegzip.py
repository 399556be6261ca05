"""The pservers' ``gzip`` (``ctr_model.tablegzip``): the program Paddle runs from ``PATH`` to write
table files, run here the way Paddle does (a shell filter)."""
from __future__ import annotations

import gzip
import os
import subprocess

import pytest

from ctr_model.tablegzip import use_fast_gzip


def _xfl(blob: bytes) -> int:
    """gzip header's XFL byte: 4 = fastest (level 1), 2 = best (level 9), 0 = default levels."""
    assert blob[:2] == b"\x1f\x8b"
    return blob[8]


def test_fast_gzip_comes_first_on_path_and_compresses_at_level_1(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", os.environ["PATH"])      # restored after the test
    text = b"".join(b"%d 0 0 %f %f\n" % (k, k * 0.001, k * 1e-5) for k in range(50_000))
    plain = subprocess.run(["sh", "-c", "gzip"], input=text, capture_output=True, check=True).stdout
    real = use_fast_gzip(str(tmp_path / "bin"))
    assert real and os.path.isabs(real)
    fast = subprocess.run(["sh", "-c", "gzip"], input=text, capture_output=True, check=True).stdout
    assert _xfl(plain) == 0 and _xfl(fast) == 4
    assert gzip.decompress(fast) == text
    assert subprocess.run(["sh", "-c", "gzip -dc"], input=fast, capture_output=True,
                          check=True).stdout == text                  # loading is unchanged
    assert use_fast_gzip(str(tmp_path / "bin")) is None                # never wraps itself


def test_without_gzip_nothing_changes(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert use_fast_gzip(str(tmp_path / "bin")) is None
    assert os.environ["PATH"] == str(tmp_path / "empty")
    assert not (tmp_path / "bin").exists()


@pytest.mark.parametrize("level", [1, 9])
def test_level_is_passed(tmp_path, monkeypatch, level):
    monkeypatch.setenv("PATH", os.environ["PATH"])
    use_fast_gzip(str(tmp_path / "bin"), level=level)
    out = subprocess.run(["sh", "-c", "gzip"], input=b"x" * 10_000, capture_output=True, check=True).stdout
    assert _xfl(out) == {1: 4, 9: 2}[level]
