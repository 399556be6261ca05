"""Check built images the way a user's first deployment would find them wanting.

Three checks, each returning one line per problem that names the image, its Dockerfile and the
missing or unwanted piece (the cluster tier's ``tests/cluster/test_images.py`` asserts there are
none, and that a Dockerfile broken on purpose is caught by name):

* :func:`entry_problems`: in the image, everything its entrypoints import imports
  (``entrycheck.py``, run through ``imagerun.py``): a module the ``.dockerignore`` left out, a
  dependency not installed, a system library a wheel loads (``libgomp.so.1``);
* :func:`user_problems`: the image runs as the ``USER`` its Dockerfile says (a process in it reports
  that UID and GID), and as non-root when the Dockerfile says so;
* :func:`hygiene_problems`: no build tools (compilers, ``make``) and no caches (pip's, apt's lists
  and packages, ``__pycache__`` of the copied sources, files left in ``/tmp``) in the final tree.

Usage: ``python3 tools/images/verify.py [NAME...]`` (root; the images built). Stdlib only.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import imagebuild as build  # noqa: E402  (tools/images is not a package)
import imagerun  # noqa: E402

__all__ = ["ENTRIES", "OURS", "BUILD_TOOLS", "entry_problems", "user_problems", "hygiene_problems",
           "dockerfile_user", "main"]

#: What each image runs (``entrycheck.py``'s entry syntax). The trainer: the gang's pods
#: (``ctr_volcano.training.volcano.manifest.ENTRYPOINT``). The component image: every KFP component,
#: the fanned-out prep pods (``prep_job.ENTRYPOINT``) and the local gang a step may start. The
#: serving image: its ``ENTRYPOINT``, ``ctr-volcano serve``. A test keeps these equal to the product's.
ENTRIES: Dict[str, Tuple[str, ...]] = {
    "trainer": ("module:ctr_model.train",),
    "component": ("components:components", "module:ctr_volcano.data.prep.fanout", "module:ctr_model.train"),
    "serving": ("verb:ctr-volcano serve",),
}
#: The packages each image holds of this project (whose functions the entry check follows).
OURS: Dict[str, Tuple[str, ...]] = {
    "trainer": ("ctr_model",),
    "component": ("ctr_model", "ctr_volcano", "components", "pipelines"),
    "serving": ("ctr_model", "ctr_volcano", "components", "pipelines"),
}
#: Programs that only building needs.
BUILD_TOOLS = ("gcc", "cc", "c++", "g++", "cpp", "clang", "make", "ld", "as", "gfortran", "rustc", "cargo", "go")
_CHECK = "/ctr-volcano-check/entrycheck.py"


def _name(image: build.BuiltImage) -> str:
    return f"image {image.ref} ({image.facts.get('dockerfile', image.name)})"


def entry_problems(image: build.BuiltImage, entries: Optional[Sequence[str]] = None) -> List[str]:
    """One line per module an entrypoint of ``image`` imports and the image cannot import."""
    argv = ["python3", _CHECK, *(entries or ENTRIES[image.name]), "--ours", ",".join(OURS[image.name])]
    proc = imagerun.run(image, argv, binds=[(str(HERE / "entrycheck.py"), _CHECK)])
    try:
        report = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return [f"{_name(image)}: the entry check did not run (exit {proc.returncode}): {proc.stderr[-1500:]}"]
    return [f"{_name(image)}: `import {m['module']}` fails: {m['error']} (reached from "
            f"{' -> '.join(m['chain'])})" for m in report["missing"]]


def dockerfile_user(dockerfile: Path) -> str:
    """The last ``USER`` of a Dockerfile (``""``: none, the base's root)."""
    users = [line.split(None, 1)[1].strip() for line in dockerfile.read_text(encoding="utf-8").splitlines()
             if line.strip().upper().startswith("USER ")]
    return users[-1] if users else ""


def user_problems(image: build.BuiltImage, dockerfile: Path) -> List[str]:
    """Lines for an image whose configured or effective user is not its Dockerfile's."""
    want = dockerfile_user(dockerfile)
    have = image.config.get("User") or ""
    if have != want:
        return [f"{_name(image)}: USER is {have or 'unset (root)'!r}, the Dockerfile says {want or 'nothing'!r}"]
    expected = build.resolve_user(image.rootfs, want) or (0, 0)
    proc = imagerun.run(image, ["sh", "-c", "id -u; id -g"])
    got = tuple(int(x) for x in proc.stdout.split()[:2]) if proc.returncode == 0 else None
    if got != expected:
        return [f"{_name(image)}: a process in it runs as {got} (exit {proc.returncode}: {proc.stderr[-300:]}), "
                f"USER {want or 'root'} means {expected}"]
    return []


def hygiene_problems(image: build.BuiltImage) -> List[str]:
    """Lines for build tools and caches left in ``image``'s final file tree."""
    root = image.rootfs
    found: List[str] = []
    for directory in ("usr/bin", "usr/local/bin", "bin", "usr/sbin"):
        found += [f"build tool /{directory}/{t}" for t in BUILD_TOOLS if (root / directory / t).exists()]
    caches = [root / "root" / ".cache", *(root / "home").glob("*/.cache"), root / "var" / "cache" / "pip"]
    found += [f"cache /{c.relative_to(root)}" for c in caches if c.exists()]
    found += [f"apt package /{p.relative_to(root)}" for p in (root / "var/cache/apt/archives").glob("*.deb")]
    found += [f"apt list /{p.relative_to(root)}" for p in (root / "var/lib/apt/lists").glob("*")
              if p.name not in ("lock", "partial", "auxfiles")]
    found += [f"left in /tmp: /{p.relative_to(root)}" for p in (root / "tmp").iterdir()]
    found += [f"bytecode cache of the copied sources /{p.relative_to(root)}"
              for p in (root / "opt").rglob("__pycache__")]
    return [f"{_name(image)}: {what} in the final layers" for what in found]


def main(argv: Optional[List[str]] = None) -> int:
    names = list(sys.argv[1:] if argv is None else argv) or list(build.NAMES)
    problems: List[str] = []
    for name in names:
        image = build.built(name)
        if image is None:
            problems.append(f"{name}: not built for the current sources (tools/images/imagebuild.py {name})")
            continue
        dockerfile = build.specs()[name].dockerfile
        problems += entry_problems(image) + user_problems(image, dockerfile) + hygiene_problems(image)
    for line in problems:
        print(line)
    if not problems:
        print(f"{', '.join(names)}: entrypoints import, users as the Dockerfiles say, no build tools or caches")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
