"""Build the project's three images from ``dockerfiles/*`` exactly as a user would, and unpack each
into a root filesystem the process nodes of the mini cluster run pods from.

Why: the images are what users deploy; the cluster tier must run its pods from them, not from an
environment that resembles them. A machine here has no Docker and no registry but Debian's packages,
so:

* **the base** stands in for ``python:3.11-slim`` (the Dockerfiles' ``FROM``): Debian bookworm
  ``minbase`` plus ``python3``, ``python3-venv`` and ``ca-certificates`` from the Debian mirror the
  host's apt sources name (read at run time), made by ``mmdebstrap``, with a venv at ``/usr/local``
  so ``python``, ``pip`` and ``site-packages`` sit where the official image has them (Debian's own pip
  refuses to install over Debian's packages), dpkg and apt set up as Debian's container images are
  (no docs or man pages, apt's ``docker-clean``), imported with ``buildah`` and tagged with the
  ``FROM`` reference so ``--pull=never`` finds it;
* **each image** is one ``buildah bud`` of its Dockerfile from the repository root
  (:func:`build_command`, the command ``docs/cluster.md`` documents), tagged as
  ``ctr_volcano/images.py`` names it, then copied out of a working container into
  ``<cache>/rootfs/<name>/<key>/rootfs`` with its image configuration (``config.json``: ``Env``,
  ``Entrypoint``, ``Cmd``, ``WorkingDir``, ``User``) and build facts (``build.json``: seconds,
  sizes).

Cached like the Go builds (``tools/gobuild.sh``): ``<key>`` hashes the recipe, the base's key, the
Dockerfile, its ``.dockerignore`` and every context file that ignore file admits
(``dockerignore.py``); a complete directory is reused at once, and one lock serialises builders
(a second one waits, then finds the result). ``CTR_VOLCANO_CACHE`` moves the cache.

Needs root, ``buildah`` and ``mmdebstrap`` (``apt-get install buildah mmdebstrap``); without them
:func:`missing_tools` says what is missing. Stdlib only.
"""
from __future__ import annotations

import argparse
import fcntl
import hashlib
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Dict, Iterable, List, Optional, Sequence

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import dockerignore  # noqa: E402  (tools/images is not a package)

__all__ = ["NAMES", "ImageBuildError", "ImageSpec", "BuiltImage", "specs", "missing_tools", "cache_root",
           "build_command", "image_key", "base_key", "build", "built", "resolve_user", "main"]

REPO = HERE.parents[1]
#: The images, by the suffix of their Dockerfile (``dockerfiles/Dockerfile.<name>``).
NAMES = ("trainer", "component", "serving")
#: Bump when the recipe below changes what is built (base or images).
RECIPE = "1"
SUITE = "bookworm"
#: Debian bookworm's Python: the only ``python:X.Y`` this base can stand in for.
BASE_PYTHON = "3.11"
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates")
#: As Debian's container images: no documentation, man pages or translations (copyrights kept).
DPKG_OPTIONS = ("path-exclude=/usr/share/doc/*", "path-include=/usr/share/doc/*/copyright",
                "path-exclude=/usr/share/man/*", "path-exclude=/usr/share/info/*",
                "path-exclude=/usr/share/locale/*", "path-include=/usr/share/locale/locale.alias")
#: apt as in Debian's container images (``docker-clean``, no translations, compressed indexes), so a
#: Dockerfile's ``apt-get install`` leaves no ``.deb`` behind, as it would on the official base.
APT_OPTIONS = (
    'DPkg::Post-Invoke {"rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb '
    '/var/cache/apt/*.bin || true";}',
    'APT::Update::Post-Invoke {"rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb '
    '/var/cache/apt/*.bin || true";}',
    'Dir::Cache::pkgcache ""', 'Dir::Cache::srcpkgcache ""', 'Acquire::Languages "none"',
    'Acquire::GzipIndexes "true"')
#: Run in the finished tree: the venv where the official image keeps its Python, then what the
#: install left behind (apt's package lists, caches).
HOOKS = ('chroot "$1" python3 -m venv /usr/local',
         'find "$1"/var/lib/apt/lists -maxdepth 1 -type f ! -name lock -delete',
         'rm -rf "$1"/var/cache/apt/*.bin "$1"/var/cache/apt/archives/*.deb "$1"/root/.cache')
#: The official image's ``PATH``; ``/usr/local`` is the base's venv.
BASE_PATH = "/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin"
#: The host's CA bundle, bound read-only into every ``RUN`` (pip verifies PyPI with it).
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
APT_SOURCES = Path("/etc/apt")
BASE_LABEL = "io.ctr-volcano.base-key"
LOG_TAIL_LINES = 60


class ImageBuildError(RuntimeError):
    """A build step failed; the message names the image, the step and the tail of its log."""


@dataclass(frozen=True)
class ImageSpec:
    """One image: its Dockerfile, its ignore file and the reference ``ctr_volcano/images.py`` gives."""

    name: str
    dockerfile: Path
    ignore_file: Optional[Path]
    ref: str


@dataclass(frozen=True)
class BuiltImage:
    """A built, unpacked image (``<cache>/rootfs/<name>/<key>``).

    Attributes:
        name: ``trainer``, ``component`` or ``serving``.
        ref: the reference it is tagged with.
        dir: the cache directory (``rootfs/``, ``config.json``, ``build.json``).
        config: the OCI image configuration (``Env``, ``Entrypoint``, ``Cmd``, ``WorkingDir``, ``User``).
        facts: ``build.json``: ``key``, ``build_s``, ``image_bytes``, ``rootfs_bytes``, ``dockerfile``.
    """

    name: str
    ref: str
    dir: Path
    config: Dict[str, Any]
    facts: Dict[str, Any]

    @property
    def rootfs(self) -> Path:
        return self.dir / "rootfs"

    @property
    def env(self) -> Dict[str, str]:
        return dict(item.partition("=")[::2] for item in self.config.get("Env") or [])


def _images_module() -> Any:
    path = REPO / "ctr_volcano" / "images.py"
    spec = importlib.util.spec_from_file_location("_ctr_volcano_images", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def specs(context: Path = REPO) -> Dict[str, ImageSpec]:
    """The three images: Dockerfiles under ``context/dockerfiles``, references from ``images.py``
    (its ``CTR_VOLCANO_*_IMAGE`` overrides included, so pods asking for an overridden name find it)."""
    images = _images_module()
    out = {}
    for name in NAMES:
        dockerfile = context / "dockerfiles" / f"Dockerfile.{name}"
        out[name] = ImageSpec(name, dockerfile, dockerignore.ignore_file_for(dockerfile, context),
                              getattr(images, f"{name}_image")())
    return out


def cache_root() -> Path:
    return Path(os.environ.get("CTR_VOLCANO_CACHE") or Path.home() / ".cache" / "ctr-volcano") / "rootfs"


def missing_tools() -> Optional[str]:
    """Why images cannot be built here, or ``None``."""
    if os.geteuid() != 0:
        return "building the images needs root (buildah's storage, mmdebstrap's chroot)"
    absent = [t for t in ("buildah", "mmdebstrap") if shutil.which(t) is None]
    if absent:
        return (f"building the images needs {' and '.join(absent)} (Debian: apt-get install buildah "
                "mmdebstrap)")
    return None


def build_command(spec: ImageSpec, tag: Optional[str] = None, context: Path = REPO) -> List[str]:
    """The one command that builds ``spec`` (run from ``context``, the repository root): what
    ``docker build -f dockerfiles/Dockerfile.<name> -t <ref> .`` does, with buildah's chroot isolation
    and the host's CA bundle bound read-only into the ``RUN`` steps."""
    return ["buildah", "bud", "--isolation", "chroot", "--pull=never", "--layers",
            "-v", f"{CA_BUNDLE}:{CA_BUNDLE}:ro", "-f", str(spec.dockerfile.relative_to(context)),
            "-t", tag or spec.ref, "."]


def _base_ref(all_specs: Iterable[ImageSpec]) -> str:
    """The one ``FROM`` every Dockerfile names, normalised as buildah stores it."""
    froms = set()
    for spec in all_specs:
        for line in spec.dockerfile.read_text(encoding="utf-8").splitlines():
            if line.strip().upper().startswith("FROM "):
                froms.add(line.split()[1])
    if len(froms) != 1:
        raise ImageBuildError(f"the Dockerfiles name {sorted(froms)} as their base; one local base stands "
                              "in for one FROM")
    ref = froms.pop()
    match = re.match(r"^(?:docker\.io/)?(?:library/)?python:(\d+\.\d+)", ref)
    if not match or match.group(1) != BASE_PYTHON:
        raise ImageBuildError(f"FROM {ref}: the local base is Debian {SUITE} with Python {BASE_PYTHON}; it "
                              f"can stand in for python:{BASE_PYTHON}* only")
    name = ref if "/" in ref.split(":")[0] else f"library/{ref}"
    return name if name.startswith("docker.io/") else f"docker.io/{name}"


def apt_sources() -> List[Path]:
    """The host's active apt source files that name the base's suite (the mirror it uses)."""
    files = [APT_SOURCES / "sources.list"] + sorted((APT_SOURCES / "sources.list.d").glob("*"))
    found = [f for f in files if f.is_file() and f.suffix in (".list", ".sources")
             and re.search(rf"(^|\s){SUITE}(\s|$)", f.read_text(encoding="utf-8", errors="replace"), re.M)]
    if not found:
        raise ImageBuildError(f"no apt source for Debian {SUITE} in {APT_SOURCES}/sources.list(.d): the base "
                              "image is made from the Debian mirror the host's apt uses")
    return found


def _digest(lines: Sequence[str], files: Iterable[Path] = ()) -> str:
    h = hashlib.sha256("\n".join(lines).encode())
    for f in files:
        h.update(f"\n{f.name}\n".encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def base_key(sources: Sequence[Path]) -> str:
    """The base's key: recipe, suite, packages, options, architecture and the apt sources' bytes."""
    return _digest([RECIPE, SUITE, platform.machine(), *BASE_PACKAGES, *DPKG_OPTIONS, *APT_OPTIONS,
                    *HOOKS, BASE_PATH], sources)


def image_key(spec: ImageSpec, base: str, context: Path = REPO) -> str:
    """The image's key: recipe, base key, reference, Dockerfile, ignore file and every admitted
    context file (path, executable bit, bytes)."""
    h = hashlib.sha256(f"{RECIPE}\n{base}\n{spec.ref}\n".encode())
    for f in [spec.dockerfile] + ([spec.ignore_file] if spec.ignore_file else []):
        h.update(f"{f.name}\n".encode() + f.read_bytes())
    for rel in dockerignore.admitted_files(context, spec.ignore_file):
        path = context / rel
        h.update(f"\n{rel} {os.access(path, os.X_OK)}\n".encode())
        h.update(os.readlink(path).encode() if path.is_symlink() else path.read_bytes())
    return h.hexdigest()[:16]


class _Steps:
    """Timed steps with a heartbeat, each command's output in one log file (its tail in errors)."""

    def __init__(self, what: str, log: Path, stream: Optional[IO[str]]) -> None:
        self.what, self.log, self.stream, self.t0 = what, log, stream, time.monotonic()
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("")

    def say(self, text: str) -> None:
        if self.stream is not None:
            print(f"images: [{time.monotonic() - self.t0:.0f}s] {self.what}: {text}", file=self.stream, flush=True)

    def run(self, step: str, argv: Sequence[str], cwd: Optional[Path] = None, capture: bool = False) -> str:
        self.say(f"{step} ...")
        t, done = time.monotonic(), threading.Event()

        def beat() -> None:
            while not done.wait(60):
                self.say(f"... still {step}")

        threading.Thread(target=beat, daemon=True).start()
        with open(self.log, "a", encoding="utf-8") as fh:
            fh.write(f"$ {' '.join(argv)}\n")
            fh.flush()
            try:
                proc = subprocess.run(list(argv), cwd=cwd, stdout=subprocess.PIPE if capture else fh,
                                      stderr=fh, text=True, stdin=subprocess.DEVNULL)
            finally:
                done.set()
        if proc.returncode != 0:
            tail = self.log.read_text(encoding="utf-8", errors="replace").splitlines()[-LOG_TAIL_LINES:]
            raise ImageBuildError(f"{self.what}: {step} failed (exit {proc.returncode}; full log "
                                  f"{self.log}):\n" + "\n".join(tail))
        self.say(f"{step} done in {time.monotonic() - t:.0f}s")
        return proc.stdout if capture else ""


def _has_base(ref: str, key: str) -> bool:
    proc = subprocess.run(["buildah", "inspect", "--type", "image", ref], capture_output=True, text=True)
    if proc.returncode != 0:
        return False
    labels = (json.loads(proc.stdout).get("OCIv1", {}).get("config") or {}).get("Labels") or {}
    return labels.get(BASE_LABEL) == key


def _mmdebstrap(steps: _Steps, tar: Path, sources: Sequence[Path]) -> None:
    argv = ["mmdebstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}"]
    argv += [f"--dpkgopt={o}" for o in DPKG_OPTIONS] + [f"--aptopt={o}" for o in APT_OPTIONS]
    argv += [f"--customize-hook={h}" for h in HOOKS] + [SUITE, str(tar), *map(str, sources)]
    steps.run(f"mmdebstrap {SUITE} minbase + {' '.join(BASE_PACKAGES)}", argv)


def _ensure_base(ref: str, stream: Optional[IO[str]]) -> str:
    """The base image in buildah's storage, tagged ``ref``; its key."""
    sources = apt_sources()
    key = base_key(sources)
    if _has_base(ref, key):
        return key
    root = cache_root() / "base" / key
    tar = root / "base.tar"
    steps = _Steps(f"base {ref}", root / "build.log", stream)
    if not tar.is_file():
        stage = root / f"stage.{os.getpid()}.tar"
        _mmdebstrap(steps, stage, sources)
        stage.rename(tar)
    ctr = steps.run("buildah from scratch", ["buildah", "from", "scratch"], capture=True).strip()
    try:
        steps.run("adding the Debian tree", ["buildah", "add", ctr, str(tar), "/"])
        steps.run("setting the image configuration", [
            "buildah", "config", "--env", f"PATH={BASE_PATH}", "--env", "LANG=C.UTF-8", "--cmd", "python3",
            "--label", f"{BASE_LABEL}={key}", ctr])
        steps.run(f"committing {ref}", ["buildah", "commit", "--rm", ctr, ref])
    except ImageBuildError:
        subprocess.run(["buildah", "rm", ctr], capture_output=True)
        raise
    return key


def _inspect(ref: str) -> Dict[str, Any]:
    proc = subprocess.run(["buildah", "inspect", "--type", "image", ref], capture_output=True, text=True)
    if proc.returncode != 0:
        raise ImageBuildError(f"buildah inspect {ref}: {proc.stderr.strip()[-500:]}")
    return json.loads(proc.stdout)


def _tree_bytes(root: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
            except OSError:
                pass
    return total


def _unpack(steps: _Steps, ref: str, dest: Path) -> None:
    """Copy the image's file tree (every layer applied) out of a working container into ``dest``."""
    ctr = steps.run("buildah from", ["buildah", "from", "--pull=never", ref], capture=True).strip()
    try:
        mnt = steps.run("buildah mount", ["buildah", "mount", ctr], capture=True).strip()
        dest.mkdir(parents=True)
        steps.run("copying the root filesystem", ["cp", "-a", f"{mnt}/.", str(dest)])
    finally:
        subprocess.run(["buildah", "umount", ctr], capture_output=True)
        subprocess.run(["buildah", "rm", ctr], capture_output=True)


def _slot(name: str, tag: Optional[str]) -> Path:
    """Where the unpacked copies of image ``name`` live: ``<cache>/rootfs/<name>``, or
    ``<name>-variants`` for builds of another tree under another tag (a test's broken copy)."""
    return cache_root() / (name if tag is None else f"{name}-variants")


def _build_one(spec: ImageSpec, key: str, context: Path, stream: Optional[IO[str]], tag: Optional[str]) -> Path:
    """Build, tag and unpack ``spec`` into ``<slot>/<key>``; that directory."""
    root = _slot(spec.name, tag) / key
    ref = tag or spec.ref
    steps = _Steps(f"{spec.name} image {ref}", root.parent / f"build-{key}.log", stream)
    t0 = time.monotonic()
    steps.run(f"buildah bud -f {spec.dockerfile.relative_to(context)}", build_command(spec, tag, context),
              cwd=context)
    build_s = time.monotonic() - t0
    stage = root.parent / f"stage.{key}.{os.getpid()}"
    shutil.rmtree(stage, ignore_errors=True)
    _unpack(steps, ref, stage / "rootfs")
    info = _inspect(ref)
    (stage / "config.json").write_text(json.dumps(info["OCIv1"].get("config") or {}, indent=1))
    facts = {"ref": ref, "key": key, "dockerfile": str(spec.dockerfile.relative_to(context)),
             "build_s": round(build_s, 1), "unpack_s": round(time.monotonic() - t0 - build_s, 1),
             "image_bytes": sum(_layer_sizes(info)), "layers": len(_layer_sizes(info)), "rootfs_bytes": _tree_bytes(stage / "rootfs"),
             "image_id": info.get("FromImageID", "")}
    (stage / "build.json").write_text(json.dumps(facts, indent=1))
    shutil.rmtree(root, ignore_errors=True)
    stage.rename(root)
    (root / ".complete").write_text(ref + "\n")
    steps.say(f"ready in {root} ({facts['image_bytes'] / 1e6:.0f} MB of layers, built in {build_s:.0f}s)")
    return root


def _layer_sizes(info: Dict[str, Any]) -> List[int]:
    """The image's layers, uncompressed (the sizes of its manifest in buildah's storage)."""
    return [int(layer["size"]) for layer in json.loads(info["Manifest"]).get("layers") or []]


def _prune(keep: Path) -> None:
    """Older unpacked copies beside ``keep``: the newest two stay (a running cluster may use one)."""
    dirs = sorted((d for d in keep.parent.iterdir() if d.is_dir() and d != keep
                   and (d / ".complete").exists()), key=lambda d: d.stat().st_mtime, reverse=True)
    for d in dirs[1:]:
        shutil.rmtree(d, ignore_errors=True)


def built(name: str, context: Path = REPO) -> Optional[BuiltImage]:
    """The unpacked image ``name`` for the current inputs, or ``None`` if it is not built (no build,
    no lock: for a reader such as the node agent)."""
    spec = specs(context)[name]
    try:
        key = image_key(spec, base_key(apt_sources()), context)
    except ImageBuildError:
        return None
    return _load(cache_root() / name / key, spec)


def _load(root: Path, spec: ImageSpec) -> Optional[BuiltImage]:
    if not (root / ".complete").is_file():
        return None
    return BuiltImage(spec.name, spec.ref, root, json.loads((root / "config.json").read_text()),
                      json.loads((root / "build.json").read_text()))


def build(names: Sequence[str] = NAMES, context: Path = REPO, stream: Optional[IO[str]] = sys.stderr,
          tag: Optional[str] = None) -> Dict[str, BuiltImage]:
    """Build (or reuse) the base and the images ``names``; each unpacked, by name.

    ``context`` other than the repository root builds that tree's Dockerfiles (a test's broken copy);
    ``tag`` then names the result instead of ``images.py``'s reference, and its cache key differs.

    Raises:
        ImageBuildError: tools missing, no apt source, or a step failed (its log's tail included).
    """
    reason = missing_tools()
    if reason:
        raise ImageBuildError(reason)
    all_specs = specs(context)
    unknown = sorted(set(names) - set(all_specs))
    if unknown:
        raise ImageBuildError(f"unknown image(s) {unknown}: choose from {list(NAMES)}")
    cache_root().mkdir(parents=True, exist_ok=True)
    with open(cache_root() / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        base = _ensure_base(_base_ref(all_specs.values()), stream)
        out = {}
        for name in names:
            spec = all_specs[name] if tag is None else ImageSpec(name, all_specs[name].dockerfile,
                                                                 all_specs[name].ignore_file, tag)
            key = image_key(spec, base, context)
            root = _slot(name, tag) / key
            if not (root / ".complete").is_file():
                root = _build_one(spec, key, context, stream, tag)
                _prune(root)
            loaded = _load(root, spec)
            assert loaded is not None
            out[name] = loaded
        return out


def resolve_user(rootfs: Path, user: str) -> Optional[tuple]:
    """``(uid, gid)`` of an image's ``USER`` (``1000:1000``, ``ctr``, ``ctr:ctr``, ``1000``) from its
    ``/etc/passwd`` and ``/etc/group``, as a container runtime does (a UID the passwd file lacks gets
    GID 0); ``None`` for no ``USER``.

    Raises:
        ImageBuildError: a name the image's passwd or group file does not have.
    """
    if not user:
        return None
    name, _, group = user.partition(":")

    def table(path: str) -> List[List[str]]:
        file = rootfs / path
        return [line.split(":") for line in file.read_text().splitlines() if line.count(":") >= 3] \
            if file.is_file() else []

    passwd = table("etc/passwd")
    entry = next((e for e in passwd if e[0] == name or e[2] == name), None)
    if entry is None and not name.isdigit():
        raise ImageBuildError(f"USER {user}: no user {name!r} in the image's /etc/passwd")
    uid = int(name) if name.isdigit() else int(entry[2])  # type: ignore[index]
    gid = int(entry[3]) if entry is not None else 0
    if group:
        found = next((g for g in table("etc/group") if g[0] == group or g[2] == group), None)
        if found is None and not group.isdigit():
            raise ImageBuildError(f"USER {user}: no group {group!r} in the image's /etc/group")
        gid = int(group) if group.isdigit() else int(found[2])  # type: ignore[index]
    return uid, gid


def main(argv: Optional[List[str]] = None) -> int:
    """``python3 tools/images/imagebuild.py [NAME...]``: build (or reuse) the images, print where they are."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", default=list(NAMES), help=f"images (default: {' '.join(NAMES)})")
    parser.add_argument("--command", action="store_true", help="print each image's build command only")
    args = parser.parse_args(argv)
    if args.command:
        for spec in (specs()[n] for n in args.names):
            print(" ".join(build_command(spec)))
        return 0
    try:
        images = build(args.names)
    except ImageBuildError as exc:
        print(f"images: {exc}", file=sys.stderr)
        return 1
    for name, img in images.items():
        print(f"{name}\t{img.ref}\t{img.dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
