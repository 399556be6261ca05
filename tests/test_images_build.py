"""The image builder's pure parts (``tools/images``): Docker's ``.dockerignore`` rules, what the cache
key hashes, the ``USER`` resolution, the documented build commands, and the hygiene check on a
planted tree. No build happens here; the cluster tier builds the images and runs pods from them
(``tests/cluster/test_images.py``)."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools" / "images"))

import dockerignore  # noqa: E402  (tools/images is not a package)
import imagebuild  # noqa: E402
import verify  # noqa: E402


def _excluded(patterns: str, path: str) -> bool:
    ignore = [(neg, dockerignore.compile_pattern(p)) for neg, p in _read(patterns)]
    return dockerignore.excluded(path, ignore)


def _read(text: str):
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".dockerignore", delete=False) as fh:
        fh.write(text)
    return dockerignore.read_patterns(Path(fh.name))


@pytest.mark.parametrize("patterns,path,out", [
    ("*\n!ctr_model/\n", "ctr_model/train.py", False),              # re-admitted with its contents
    ("*\n!ctr_model/\n", "ctr_volcano/images.py", True),
    ("*\n!setup.py\n", "setup.py", False),
    ("*\n!ctr_model/\nctr_model/**/__pycache__\n", "ctr_model/__pycache__/x.pyc", True),   # ** spans none
    ("*\n!ctr_model/\nctr_model/**/__pycache__\n", "ctr_model/models/__pycache__/x.pyc", True),
    ("**/*.pyc\n", "a/b/c.pyc", True),
    ("*.pyc\n", "a/b.pyc", False),                                    # * stays in one segment
    ("/docs\n", "docs/x.md", True),                                    # a leading / means nothing
    ("docs/\n!docs/keep.md\n", "docs/keep.md", False),
    ("d?ta\n", "data/x", True),
    ("# a comment\n\n", "anything", False),
])
def test_dockerignore_follows_dockers_rules(patterns, path, out):
    assert _excluded(patterns, path) is out


@pytest.mark.parametrize("name", imagebuild.NAMES)
def test_each_context_admits_exactly_what_its_dockerfile_copies(name):
    """A ``COPY`` source the ignore file drops fails the build; a file admitted but never copied only
    makes the key move for nothing: the two must agree (and no bytecode goes in)."""
    dockerfile = REPO / "dockerfiles" / f"Dockerfile.{name}"
    copied = {line.split()[1].rstrip("/").split("/")[0] for line in dockerfile.read_text().splitlines()
              if line.startswith("COPY ")}
    admitted = list(dockerignore.admitted_files(REPO, dockerignore.ignore_file_for(dockerfile, REPO)))
    assert {rel.split("/")[0] for rel in admitted} == copied
    assert not [rel for rel in admitted if "__pycache__" in rel or rel.endswith(".pyc")]


def _spec(tmp_path: Path) -> imagebuild.ImageSpec:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text("A = 1\n")
    (tmp_path / "notes.txt").write_text("ignored\n")
    dockerfile = tmp_path / "Dockerfile.toy"
    dockerfile.write_text("FROM python:3.11-slim\nCOPY pkg/ /opt/pkg/\n")
    ignore = tmp_path / "Dockerfile.toy.dockerignore"
    ignore.write_text("*\n!pkg/\n")
    return imagebuild.ImageSpec("toy", dockerfile, dockerignore.ignore_file_for(dockerfile, tmp_path), "reg/toy:1")


def test_the_key_moves_with_what_the_build_can_copy_and_nothing_else(tmp_path):
    spec = _spec(tmp_path)
    assert spec.ignore_file == tmp_path / "Dockerfile.toy.dockerignore"
    key = imagebuild.image_key(spec, "base1", tmp_path)
    (tmp_path / "notes.txt").write_text("changed, but ignored\n")
    (tmp_path / "pkg" / "__pycache__").mkdir()
    assert imagebuild.image_key(spec, "base1", tmp_path) == key
    assert imagebuild.image_key(spec, "base2", tmp_path) != key                    # another base
    (tmp_path / "pkg" / "mod.py").write_text("A = 2\n")
    changed = imagebuild.image_key(spec, "base1", tmp_path)
    assert changed != key
    spec.ignore_file.write_text("*\n!pkg/\npkg/new.py\n")
    assert imagebuild.image_key(spec, "base1", tmp_path) != changed                # the ignore file


def test_user_resolves_with_the_images_own_files(tmp_path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\nctr:x:1000:1000::/home/ctr:/bin/sh\n")
    (tmp_path / "etc" / "group").write_text("root:x:0:\nctr:x:1000:\nstaff:x:50:\n")
    resolve = imagebuild.resolve_user
    assert resolve(tmp_path, "") is None
    assert resolve(tmp_path, "1000:1000") == (1000, 1000)
    assert resolve(tmp_path, "ctr") == (1000, 1000)
    assert resolve(tmp_path, "ctr:staff") == (1000, 50)
    assert resolve(tmp_path, "4242") == (4242, 0)             # not in passwd: GID 0, as runtimes do
    with pytest.raises(imagebuild.ImageBuildError, match="no user 'nobody'"):
        resolve(tmp_path, "nobody")


def test_the_documented_build_commands_are_the_ones_the_tier_runs():
    doc = (REPO / "docs" / "cluster.md").read_text()
    for name, spec in imagebuild.specs().items():
        command = " ".join(imagebuild.build_command(spec))
        assert command in doc, f"docs/cluster.md should show how {name} is built: {command}"
        assert command.startswith("buildah bud --isolation chroot --pull=never") and command.endswith(f"-t {spec.ref} .")


def test_every_dockerfile_names_the_one_base_the_builder_stands_in_for():
    assert imagebuild._base_ref(imagebuild.specs().values()) == "docker.io/library/python:3.11-slim"


def test_the_base_is_made_from_the_hosts_debian_sources(tmp_path, monkeypatch):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text("Types: deb\nURIs: http://mirror.invalid/debian\n"
                                                                "Suites: bookworm bookworm-updates\n")
    (tmp_path / "sources.list.d" / "other.sources.disabled").write_text("Suites: bookworm\n")
    (tmp_path / "sources.list.d" / "node.list").write_text("deb http://x.invalid/node nodistro main\n")
    monkeypatch.setattr(imagebuild, "APT_SOURCES", tmp_path)
    assert imagebuild.apt_sources() == [tmp_path / "sources.list.d" / "debian.sources"]
    (tmp_path / "sources.list.d" / "debian.sources").unlink()
    with pytest.raises(imagebuild.ImageBuildError, match="no apt source for Debian bookworm"):
        imagebuild.apt_sources()


def test_hygiene_names_what_a_final_tree_should_not_hold(tmp_path):
    root = tmp_path / "rootfs"
    for d in ("usr/bin", "root/.cache/pip", "var/cache/apt/archives", "var/lib/apt/lists/partial", "tmp",
              "opt/ctr/pkg/__pycache__", "home/ctr"):
        (root / d).mkdir(parents=True)
    for f in ("usr/bin/gcc", "usr/bin/python3", "var/cache/apt/archives/libgomp1.deb",
              "var/lib/apt/lists/mirror.invalid_debian_dists_bookworm_InRelease", "var/lib/apt/lists/lock", "tmp/x"):
        (root / f).write_text("")
    image = imagebuild.BuiltImage("toy", "reg/toy:1", tmp_path, {}, {"dockerfile": "dockerfiles/Dockerfile.toy"})
    found = verify.hygiene_problems(image)
    assert all(line.startswith("image reg/toy:1 (dockerfiles/Dockerfile.toy): ") for line in found)
    what = sorted(re.sub(r"^.*\): (.*) in the final layers$", r"\1", line) for line in found)
    assert what == ["apt list /var/lib/apt/lists/mirror.invalid_debian_dists_bookworm_InRelease",
                    "apt package /var/cache/apt/archives/libgomp1.deb", "build tool /usr/bin/gcc",
                    "bytecode cache of the copied sources /opt/ctr/pkg/__pycache__", "cache /root/.cache",
                    "left in /tmp: /tmp/x"]


def test_the_dockerfile_user_is_the_last_user_line(tmp_path):
    df = tmp_path / "Dockerfile"
    df.write_text("FROM python:3.11-slim\nUSER 0\nRUN true\nUSER 1000:1000\n")
    assert verify.dockerfile_user(df) == "1000:1000"
    assert verify.dockerfile_user(REPO / "dockerfiles" / "Dockerfile.component") == ""
    assert verify.dockerfile_user(REPO / "dockerfiles" / "Dockerfile.trainer") == "1000:1000"
