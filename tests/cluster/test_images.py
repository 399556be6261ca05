"""The three images, built from ``dockerfiles/*`` as a user builds them (``tools/images/imagebuild.py``),
checked the way a first deployment would find them wanting: everything each entrypoint imports is in
the image (``tools/images/entrycheck.py`` run inside it), it runs as the user its Dockerfile names,
and no build tool or cache is left in its final tree. Two Dockerfiles broken on purpose, one without
the system library Paddle loads and one whose ``.dockerignore`` leaves a package out, build fine and
are caught, by a message naming the image and the missing piece.

Skipped, saying why, where the images cannot be built (no root, no ``buildah`` or ``mmdebstrap``).
"""
from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path
from typing import Dict

import pytest

from tests.cluster.conftest import built_images

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "images"))

import dockerignore  # noqa: E402  (tools/images is not a package)
import imagebuild  # noqa: E402
import verify  # noqa: E402

pytestmark = pytest.mark.cluster

NAMES = imagebuild.NAMES
#: Where the broken copies are tagged (never the product's names).
BROKEN = "localhost/ctr-volcano-broken"


def test_each_image_is_built_from_its_dockerfile_and_tagged_as_the_product_names_it():
    from ctr_volcano import images as product

    images = built_images()
    assert {n: i.ref for n, i in images.items()} == {
        "trainer": product.trainer_image(), "component": product.component_image(),
        "serving": product.serving_image()}
    for name, image in images.items():
        assert image.facts["dockerfile"] == f"dockerfiles/Dockerfile.{name}"
        assert (image.rootfs / "usr" / "local" / "bin" / "python").exists()
        print(f"\n{image.ref}: {image.facts['image_bytes'] / 1e6:.0f} MB in {image.facts['layers']} layers, "
              f"built in {image.facts['build_s']:.0f} s")


def test_the_entries_checked_are_what_the_product_runs():
    """``verify.ENTRIES`` cannot drift from what the pods really run."""
    from ctr_volcano.training.volcano.manifest import ENTRYPOINT as GANG
    from ctr_volcano.training.volcano.prep_job import ENTRYPOINT as PREP

    assert GANG[:2] == ("python", "-m") and PREP[:2] == ("python", "-m")
    assert verify.ENTRIES["trainer"] == (f"module:{GANG[2]}",)
    assert {f"module:{GANG[2]}", f"module:{PREP[2]}", "components:components"} == set(verify.ENTRIES["component"])
    serving = built_images()["serving"]
    assert verify.ENTRIES["serving"] == ("verb:" + " ".join(serving.config["Entrypoint"]),)


@pytest.mark.parametrize("name", NAMES)
def test_everything_the_entrypoints_import_is_in_the_image(name):
    assert verify.entry_problems(built_images()[name]) == []


@pytest.mark.parametrize("name", NAMES)
def test_the_image_runs_as_its_dockerfile_says(name):
    """Trainer and serving images as UID/GID 1000 (non-root, as the Volcano manifests and KServe
    run them); the component image as root on purpose (the KFP launcher writes at ``/``)."""
    image = built_images()[name]
    dockerfile = REPO / "dockerfiles" / f"Dockerfile.{name}"
    assert verify.user_problems(image, dockerfile) == []
    want = {"trainer": (1000, 1000), "serving": (1000, 1000), "component": None}[name]
    assert imagebuild.resolve_user(image.rootfs, image.config.get("User") or "") == want


@pytest.mark.parametrize("name", NAMES)
def test_no_build_tools_or_caches_in_the_final_layers(name):
    assert verify.hygiene_problems(built_images()[name]) == []


def _context_copy(dest: Path) -> Path:
    """The files any of the three Dockerfiles may copy, and ``dockerfiles/``: a build context to break."""
    for name in NAMES:
        dockerfile = REPO / "dockerfiles" / f"Dockerfile.{name}"
        for rel in dockerignore.admitted_files(REPO, dockerignore.ignore_file_for(dockerfile, REPO)):
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, dest / rel)
    shutil.copytree(REPO / "dockerfiles", dest / "dockerfiles", dirs_exist_ok=True)
    return dest


def _broken(tmp_path: Path, name: str, tag: str, edit) -> Dict[str, object]:
    built_images()   # skipped where images cannot be built
    context = _context_copy(tmp_path / "context")
    edit(context)
    image = imagebuild.build([name], context=context, tag=f"{BROKEN}/{tag}")[name]
    problems = verify.entry_problems(image)
    print("\n" + "\n".join(problems))
    return {"image": image, "problems": problems}


def test_a_dockerfile_without_libgomp1_fails_naming_the_image_and_the_library(tmp_path):
    """The trainer's Dockerfile without its ``apt-get install libgomp1``: the build succeeds (pip
    installs Paddle), and ``import paddle`` fails on the missing ``libgomp.so.1``."""
    def drop_libgomp(context: Path) -> None:
        path = context / "dockerfiles" / "Dockerfile.trainer"
        text = path.read_text()
        broken = re.sub(r"\nRUN apt-get update(?:[^\n]*\\\n)*[^\n]*\n", "\n", text)
        assert "libgomp1" in text and "libgomp1" not in broken.split("# libgomp1")[-1]
        path.write_text(broken)

    tag = "ctr-trainer:no-libgomp1"
    out = _broken(tmp_path, "trainer", tag, drop_libgomp)
    assert out["problems"], "an image without libgomp1 passed the entry check"
    assert all(f"image {BROKEN}/{tag} (dockerfiles/Dockerfile.trainer)" in p for p in out["problems"])
    assert any("`import paddle` fails" in p and "libgomp.so.1" in p for p in out["problems"]), out["problems"]


def test_a_dockerignore_leaving_a_package_out_fails_naming_the_image_and_the_package(tmp_path):
    """The serving image's ``.dockerignore`` with one line more (``ctr_volcano/serving``, as if meant
    for the top-level ``serving/``): the build and its ``ctr-volcano serve --help`` succeed, and the
    entrypoint's import of the server fails, named."""
    def drop_package(context: Path) -> None:
        path = context / "dockerfiles" / "Dockerfile.serving.dockerignore"
        path.write_text(path.read_text() + "ctr_volcano/serving\n")

    tag = "ctr-serving:no-serving-package"
    out = _broken(tmp_path, "serving", tag, drop_package)
    assert out["problems"], "an image without ctr_volcano.serving passed the entry check"
    assert all(f"image {BROKEN}/{tag} (dockerfiles/Dockerfile.serving)" in p for p in out["problems"])
    assert any("ctr_volcano.serving" in p and "No module named" in p for p in out["problems"]), out["problems"]
