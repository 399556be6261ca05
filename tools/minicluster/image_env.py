"""Map a container image to a Python environment built from that image's own Dockerfile.

Why: the process-backed nodes run pods without a container engine, but a pod must still run with
what its image holds, not with the developer's environment (the trainer image has paddle, numpy
and pyarrow only; a module that imports anything else must fail here as it would on a cluster).
So the image's Dockerfile is read for the subset that decides what Python code can import:

* ``FROM python:X.Y...``: the host interpreter must be Python X.Y (it is the venv's base);
* ``RUN pip install ...``: installed into a venv, cached under
  ``${CTR_VOLCANO_CACHE:-~/.cache/ctr-volcano}/images/<key>/venv`` keyed by a hash of the base
  version and the pip lines (like the Go builds: built once, reused while the pins stay); a line
  installing a local path (the component image's ``pip install .``) runs in the ``WORKDIR`` of that
  line over the ``COPY``'d sources, and then the sources' content is part of the key, so the pods
  never run a stale copy of the package;
* ``COPY src dst``: copied from the build context into a root-filesystem directory that the pod's
  mount namespace binds over the image paths (``/opt/ctr/ctr_model`` for the trainer; a relative
  ``dst`` is relative to the ``WORKDIR`` in force, as Docker resolves it);
* ``ENV``, ``USER``, ``WORKDIR``, ``CMD``: the container defaults the pod runs with.

Other ``RUN`` lines (``apt-get install libgomp1``, ``useradd``) are reported as not reproduced: the
host provides the system libraries, and the pod runs with the numeric UID of ``runAsUser``.

Stdlib only.
"""
from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

__all__ = ["ImageError", "Dockerfile", "parse_dockerfile", "ImageEnv", "build_venv", "prepare_image",
           "image_repository", "cache_root", "default_context"]

LOG = logging.getLogger("minicluster.image")


class ImageError(RuntimeError):
    """The image cannot be mapped to an environment; the message names the image or Dockerfile."""


@dataclass(frozen=True)
class Dockerfile:
    """What of a Dockerfile matters for a process-backed pod.

    Attributes:
        path: the Dockerfile.
        base_python: ``"3.11"`` from ``FROM python:3.11-slim``.
        pip_args: the arguments of every ``RUN pip install`` (one tuple per line).
        copies: ``(source relative to the build context, destination in the image)``.
        env: ``ENV`` values, in order (later ones win).
        user: ``USER`` (``"1000:1000"``) or ``""``.
        workdir: ``WORKDIR`` or ``""``.
        cmd: ``CMD`` in exec form.
        skipped: ``RUN`` lines not reproduced (reported, not silently dropped).
        pip_dirs: the ``WORKDIR`` in force at each ``pip_args`` line (where a local path resolves).
    """

    path: Path
    base_python: str
    pip_args: Tuple[Tuple[str, ...], ...]
    copies: Tuple[Tuple[str, str], ...]
    env: Tuple[Tuple[str, str], ...]
    user: str = ""
    workdir: str = ""
    cmd: Tuple[str, ...] = ()
    skipped: Tuple[str, ...] = ()
    pip_dirs: Tuple[str, ...] = ()

    @property
    def local_installs(self) -> bool:
        """Whether a ``pip install`` line installs a local path (``.``, ``.[extra]``, ``./pkg``,
        ``/opt/src``)."""
        paths = (re.sub(r"\[[^\]]*\]$", "", a) for args in self.pip_args for a in args)
        return any(a == "." or a.startswith(("./", "/")) for a in paths)


def _logical_lines(text: str) -> List[str]:
    lines, current = [], ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        lines.append((current + stripped).strip())
        current = ""
    if current.strip():
        lines.append(current.strip())
    return lines


def _parse_env(args: str) -> List[Tuple[str, str]]:
    tokens = shlex.split(args)
    if tokens and "=" not in tokens[0]:  # legacy form: ENV KEY value with spaces
        return [(tokens[0], " ".join(tokens[1:]))]
    out = []
    for tok in tokens:
        key, _, value = tok.partition("=")
        out.append((key, value))
    return out


def parse_dockerfile(path: Path) -> Dockerfile:
    """Read the instructions that decide a pod's Python environment (see the module docstring)."""
    import json

    text = Path(path).read_text()
    base = ""
    pips: List[Tuple[str, ...]] = []
    pip_dirs: List[str] = []
    copies: List[Tuple[str, str]] = []
    env: List[Tuple[str, str]] = []
    skipped: List[str] = []
    user = workdir = ""
    cmd: Tuple[str, ...] = ()
    for line in _logical_lines(text):
        instr, _, args = line.partition(" ")
        instr = instr.upper()
        args = args.strip()
        if instr == "FROM":
            match = re.match(r"^(?:docker\.io/)?(?:library/)?python:(\d+\.\d+)", args)
            if not match:
                raise ImageError(f"{path}: FROM {args!r} is not a python:X.Y image; only those map "
                                 "to a host interpreter")
            base = match.group(1)
        elif instr == "RUN":
            for command in re.split(r"\s*&&\s*", args):
                words = shlex.split(command, comments=True)   # as /bin/sh -c reads it
                if words[:2] == ["pip", "install"] or words[:4] == ["python", "-m", "pip", "install"]:
                    pips.append(tuple(words[words.index("install") + 1:]))
                    pip_dirs.append(workdir or "/")
                else:
                    skipped.append(command)
        elif instr == "COPY":
            words = shlex.split(args)
            words = [w for w in words if not w.startswith("--")]
            if len(words) != 2:
                raise ImageError(f"{path}: COPY {args!r}: only 'COPY SRC DST' is supported")
            dst = words[1]
            if not dst.startswith("/"):   # relative to the WORKDIR in force
                dst = os.path.normpath(os.path.join(workdir or "/", dst)) + ("/" if dst.endswith("/") else "")
            copies.append((words[0], dst))
        elif instr == "ENV":
            env.extend(_parse_env(args))
        elif instr == "USER":
            user = args
        elif instr == "WORKDIR":
            workdir = args if args.startswith("/") else os.path.join(workdir or "/", args)
        elif instr == "CMD":
            cmd = tuple(json.loads(args)) if args.startswith("[") else ("/bin/sh", "-c", args)
    if not base:
        raise ImageError(f"{path}: no FROM python:X.Y line")
    return Dockerfile(Path(path), base, tuple(pips), tuple(copies), tuple(env), user, workdir, cmd,
                      tuple(skipped), tuple(pip_dirs))


def image_repository(image: str) -> str:
    """The last path segment of an image reference without tag or digest:
    ``registry:5000/ctr-volcano/ctr-trainer:0.1.0`` -> ``ctr-trainer``."""
    ref = image.split("@", 1)[0]
    last = ref.rsplit("/", 1)[-1]
    return last.split(":", 1)[0]


def cache_root() -> Path:
    return Path(os.environ.get("CTR_VOLCANO_CACHE") or Path.home() / ".cache" / "ctr-volcano")


@dataclass(frozen=True)
class ImageEnv:
    """A prepared image: the venv, the root-filesystem overlay and the container defaults.

    Attributes:
        image: the image reference.
        venv: the virtual environment (its ``bin/python`` is the pod's ``python``).
        rootfs: directory whose top-level entries are bound over ``/<entry>`` in the pod.
        env: the image's ``ENV`` plus ``PATH`` (venv first) and ``VIRTUAL_ENV``.
        user: ``(uid, gid)`` of ``USER`` or ``None``.
        workdir: the image's working directory (``/`` if none).
        cmd: the image's ``CMD``.
        base_prefix: the base interpreter's installation prefix (the pod must see it).
    """

    image: str
    venv: Path
    rootfs: Path
    env: Dict[str, str]
    user: Optional[Tuple[int, int]]
    workdir: str
    cmd: Tuple[str, ...]
    base_prefix: Path = field(default_factory=lambda: Path(sys.base_prefix))


def default_context() -> Path:
    """The build context of the project's Dockerfiles: the repository root."""
    return Path(__file__).resolve().parents[2]


def _sources_digest(df: Dockerfile, context: Path) -> str:
    """sha256 over the ``COPY`` sources (paths and bytes; caches and bytecode left out)."""
    h = hashlib.sha256()
    for src, dst in df.copies:
        root = (Path(context) / src).resolve()
        files = [root] if root.is_file() else sorted(
            p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts
            and not p.name.endswith(".pyc") and not any(part.endswith(".egg-info") for part in p.parts))
        for f in files:
            h.update(f"{dst}:{f.relative_to(root) if f != root else f.name}\n".encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def _venv_key(df: Dockerfile, context: Optional[Path] = None) -> str:
    blob = "\n".join([f"python {sys.version_info[0]}.{sys.version_info[1]}.{sys.version_info[2]}",
                      sys.base_prefix] + [" ".join(a) for a in df.pip_args])
    if df.local_installs:
        blob += "\nsources " + _sources_digest(df, context or default_context())
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _copy_sources(df: Dockerfile, context: Path, rootfs: Path) -> None:
    for src, dst in df.copies:
        source = (Path(context) / src).resolve()
        target = rootfs / dst.lstrip("/")
        if source.is_dir():
            shutil.copytree(source, target, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
        else:
            if dst.endswith("/"):
                target = target / source.name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def build_venv(df: Dockerfile, context: Optional[Path] = None) -> Path:
    """The venv of ``df``'s ``RUN pip install`` lines, built once per pin set (under a lock)."""
    import tempfile

    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if here != df.base_python:
        raise ImageError(f"{df.path}: the image is based on python:{df.base_python} but the host "
                         f"interpreter is {here}; run with Python {df.base_python}")
    context = Path(context or default_context())
    root = cache_root() / "images" / _venv_key(df, context)
    venv = root / "venv"
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (venv / ".complete").is_file():
            return venv
        LOG.info("building the Python environment of %s in %s (once per pin set)", df.path, venv)
        # Built at its final path (a venv's scripts embed it), under a lock, marked complete last.
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        with tempfile.TemporaryDirectory(prefix="image-src-") as staging:
            if df.local_installs:  # the COPY'd tree, so `pip install .` sees what the image would
                _copy_sources(df, context, Path(staging))
            dirs = df.pip_dirs or ("/",) * len(df.pip_args)
            for args, workdir in zip(df.pip_args, dirs):
                cwd = Path(staging) / workdir.lstrip("/")
                cwd.mkdir(parents=True, exist_ok=True)
                proc = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install",
                                       "--disable-pip-version-check", *args],
                                      capture_output=True, text=True, env=env, cwd=cwd)
                if proc.returncode != 0:
                    raise ImageError(f"{df.path}: pip install {' '.join(args)} failed:\n"
                                     + proc.stdout[-2000:] + proc.stderr[-2000:])
        (venv / ".complete").write_text("\n".join(" ".join(a) for a in df.pip_args) + "\n")
        os.chmod(root, 0o755)
        return venv


def _parse_user(user: str) -> Optional[Tuple[int, int]]:
    if not user:
        return None
    uid, _, gid = user.partition(":")
    if not uid.isdigit() or (gid and not gid.isdigit()):
        raise ImageError(f"USER {user!r}: only numeric UID[:GID] is supported")
    return int(uid), int(gid or uid)


def prepare_image(image: str, dockerfile: Path, context: Path, rootfs_parent: Path) -> ImageEnv:
    """Build (or reuse) the venv of ``dockerfile`` and copy its ``COPY`` sources into a fresh
    root-filesystem directory under ``rootfs_parent``.

    Raises:
        ImageError: the Dockerfile is outside the supported subset, the host Python does not
            match its base, or pip failed.
    """
    df = parse_dockerfile(dockerfile)
    for skipped in df.skipped:
        LOG.info("%s: not reproduced on process nodes: RUN %s", dockerfile.name, skipped)
    venv = build_venv(df, context)
    rootfs = Path(rootfs_parent) / hashlib.sha256(image.encode()).hexdigest()[:12]
    shutil.rmtree(rootfs, ignore_errors=True)
    rootfs.mkdir(parents=True)
    _copy_sources(df, context, rootfs)
    if df.workdir:  # WORKDIR creates its directory in the image
        (rootfs / df.workdir.lstrip("/")).mkdir(parents=True, exist_ok=True)
    for d in [rootfs, *rootfs.rglob("*")]:
        if d.is_dir():
            d.chmod(0o755)
    env: Dict[str, str] = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
    for key, value in df.env:
        env[key] = re.sub(r"\$\{?(\w+)\}?", lambda m: env.get(m.group(1), ""), value)
    env["PATH"] = f"{venv / 'bin'}:{env['PATH']}"
    env["VIRTUAL_ENV"] = str(venv)
    return ImageEnv(image=image, venv=venv, rootfs=rootfs, env=env, user=_parse_user(df.user),
                    workdir=df.workdir or "/", cmd=df.cmd)


def main(argv: Optional[List[str]] = None) -> int:
    """``python tools/minicluster/image_env.py DOCKERFILE``: build the venv now, print its path."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dockerfile", type=Path)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    print(build_venv(parse_dockerfile(args.dockerfile)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
