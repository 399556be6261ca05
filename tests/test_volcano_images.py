"""The images (which cannot be built on this machine) stay consistent with the code that names them.

Checks: the trainer Dockerfile's pins equal setup.py's; it ships only ``ctr_model`` and runs as the
UID the manifests demand; the build commands tag the references in ``ctr_volcano/images.py``; and
every module-level import in ``ctr_model`` is available in the trainer image.
"""
from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

from ctr_volcano import images
from ctr_volcano.volcano.spec import DEFAULT_UID

REPO = Path(__file__).resolve().parents[1]
TRAINER = (REPO / "dockerfiles" / "Dockerfile.trainer").read_text()
COMPONENT = (REPO / "dockerfiles" / "Dockerfile.component").read_text()
#: What the trainer image installs, besides the standard library.
TRAINER_PACKAGES = {"paddle", "numpy", "pyarrow", "ctr_model"}


def _setup_pins():
    tree = ast.parse((REPO / "setup.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "INSTALL_REQUIRES" for t in node.targets):
            return dict(re.match(r"([A-Za-z0-9_.-]+)==(.+)", s.value).groups() for s in node.value.elts)
    raise AssertionError("INSTALL_REQUIRES not found in setup.py")


def test_trainer_pins_match_setup_py():
    pins = _setup_pins()
    installed = dict(re.findall(r'"([A-Za-z0-9_.-]+)==([^"]+)"', TRAINER))
    assert installed == {k: pins[k] for k in ("paddlepaddle", "numpy", "pyarrow", "protobuf")}
    assert installed["numpy"].startswith("2.")  # the training stack is on numpy 2 (paddlepaddle 3.0.0)


def test_trainer_image_is_minimal_and_non_root():
    copies = re.findall(r"^COPY (\S+)", TRAINER, flags=re.M)
    assert copies == ["ctr_model/"]
    assert re.search(rf"^USER {DEFAULT_UID}:{DEFAULT_UID}$", TRAINER, flags=re.M)
    assert "kfp" not in re.sub(r"^#.*$", "", TRAINER, flags=re.M)


def test_build_commands_tag_the_images_the_code_names():
    assert f"-t {images.TRAINER_IMAGE} ." in TRAINER
    assert f"-t {images.COMPONENT_IMAGE} ." in COMPONENT
    docs = (REPO / "README.md").read_text()
    assert images.TRAINER_IMAGE in docs and images.COMPONENT_IMAGE in docs


def test_ctr_model_imports_only_what_the_trainer_image_has():
    stdlib = set(sys.stdlib_module_names)
    bad = []
    for path in sorted((REPO / "ctr_model").glob("*.py")):
        for node in ast.parse(path.read_text()).body:  # module level only; lazy imports are allowed
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            for name in names:
                top = name.split(".")[0]
                if top not in stdlib and top not in TRAINER_PACKAGES:
                    bad.append(f"{path.name}: {name}")
    assert not bad, f"module-level imports the trainer image lacks: {bad}"


def test_image_overrides(monkeypatch):
    monkeypatch.setenv("CTR_VOLCANO_TRAINER_IMAGE", "my.registry/t:1")
    assert images.trainer_image() == "my.registry/t:1"
    monkeypatch.delenv("CTR_VOLCANO_TRAINER_IMAGE")
    assert images.trainer_image() == images.TRAINER_IMAGE
