"""The images (which cannot be built on this machine) stay consistent with the code that names them.

Checks: the trainer Dockerfile's pins satisfy setup.py's; it ships only ``ctr_model`` and runs as the
UID the manifests demand; the build commands tag the references in ``ctr_volcano/images.py``; and
every module-level import in ``ctr_model`` is available in the trainer image.
"""
from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

from ctr_volcano import images
from ctr_volcano.training.volcano.spec import DEFAULT_UID

REPO = Path(__file__).resolve().parents[1]
TRAINER = (REPO / "dockerfiles" / "Dockerfile.trainer").read_text()
COMPONENT = (REPO / "dockerfiles" / "Dockerfile.component").read_text()
#: What the trainer image installs, besides the standard library.
TRAINER_PACKAGES = {"paddle", "numpy", "pyarrow", "onnx", "ctr_model"}


def _setup_requirements(*names: str):
    """``package -> SpecifierSet`` of setup.py's lists ``names`` (the specifiers of a package add up)."""
    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet

    tree = ast.parse((REPO / "setup.py").read_text())
    out: dict = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") in names for t in node.targets):
            for elt in node.value.elts:
                req = Requirement(elt.value)
                out[req.name.lower()] = out.get(req.name.lower(), SpecifierSet()) & req.specifier
    assert out, f"{names} not found in setup.py"
    return out


def test_trainer_pins_satisfy_setup_py():
    """The trainer image pins exact versions (what the pods and the process nodes run); each must be
    one the package's base and ``train`` requirements accept."""
    wants = _setup_requirements("INSTALL_REQUIRES", "TRAIN_REQUIRES")
    installed = dict(re.findall(r'"([A-Za-z0-9_.-]+)==([^"]+)"', TRAINER))
    assert set(installed) == {"paddlepaddle", "numpy", "pyarrow", "protobuf", "onnx"}
    for name, version in installed.items():
        assert version in wants[name.lower()], f"the trainer image's {name}=={version} is outside setup.py's {wants[name.lower()]}"
    assert installed["numpy"].startswith("2.")  # the training stack is on numpy 2 (paddlepaddle 3.0.0)


def test_the_base_install_holds_no_paddle():
    assert "paddlepaddle" not in _setup_requirements("INSTALL_REQUIRES")
    assert "paddlepaddle" in _setup_requirements("TRAIN_REQUIRES")


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


def test_image_tags_follow_the_package_version_written_once():
    """One place writes the version (ctr_volcano/version.py); setup.py reads it, every image tag is
    it, so today's pipelines and those uploaded from 0.1.0 name different images."""
    import subprocess

    from ctr_volcano import __version__

    assert {ref.rsplit(":", 1)[1] for ref in (images.TRAINER_IMAGE, images.COMPONENT_IMAGE,
                                              images.SERVING_IMAGE)} == {__version__}
    setup_py = (REPO / "setup.py").read_text()
    assert "version=VERSION" in setup_py and __version__ not in setup_py
    out = subprocess.run([sys.executable, "setup.py", "--version"], cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.strip().splitlines()[-1] == __version__, out.stderr[-2000:]
    literal = [str(p.relative_to(REPO)) for pkg in ("ctr_volcano", "ctr_model", "components", "pipelines")
               for p in sorted((REPO / pkg).rglob("*.py")) if f'"{__version__}"' in p.read_text()]
    assert literal == ["ctr_volcano/version.py"]
    released = (REPO / "tests" / "released" / "0.1.0" / "train_ctr.yaml").read_text()
    assert "ctr-component:0.1.0" in released and images.COMPONENT_IMAGE not in released


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
