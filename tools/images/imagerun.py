"""Run one command in a built image, the way the process nodes run a container (``docker run``'s job).

Why: the image checks (its user, what its entrypoint imports, what its file tree holds) need a
command in the image without a cluster; they get it from the same container start the node agent
uses (``tools/minicluster/podinit.py``: the unpacked tree under an overlay, ``/dev``, ``/proc``,
``pivot_root``, the image's user and environment), in new mount, UTS, PID and network namespaces
(loopback only). The image's cached tree is never written: the container writes to its own layer.

Usage: ``python3 tools/images/imagerun.py trainer -- python -c 'import paddle'`` (root; the image must be
built: ``tools/images/imagebuild.py``). Stdlib only.
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import imagebuild as build  # noqa: E402  (tools/images is not a package)

__all__ = ["PODINIT", "run", "main"]

PODINIT = HERE.parent / "minicluster" / "podinit.py"


def _plan(image: build.BuiltImage, argv: Sequence[str], scratch: Path, user: Optional[Tuple[int, int]],
          env: Dict[str, str], binds: Sequence[Tuple[str, str]]) -> Dict:
    for name, text in (("hosts", "127.0.0.1\tlocalhost\n"), ("resolv.conf", ""), ("hostname", "image-run\n")):
        (scratch / name).write_text(text)
    uid_gid = user if user is not None else build.resolve_user(image.rootfs, image.config.get("User") or "")
    entry = list(image.config.get("Entrypoint") or [])
    return {"argv": list(argv) or entry + list(image.config.get("Cmd") or []),
            "env": dict(image.env, **env), "workdir": image.config.get("WorkingDir") or "/",
            "uid": uid_gid[0] if uid_gid else None, "gid": uid_gid[1] if uid_gid else None,
            "hostname": "image-run", "rootfs": str(image.rootfs), "container_dir": str(scratch / "container"),
            "etc": {f"/etc/{n}": str(scratch / n) for n in ("hosts", "resolv.conf", "hostname")},
            "binds": [{"source": src, "target": dst, "read_only": True} for src, dst in binds]}


def run(image: build.BuiltImage, argv: Sequence[str] = (), *, user: Optional[Tuple[int, int]] = None,
        env: Optional[Dict[str, str]] = None, binds: Sequence[Tuple[str, str]] = (),
        timeout: float = 600) -> subprocess.CompletedProcess:
    """Run ``argv`` (default: the image's ``Entrypoint`` + ``Cmd``) in ``image`` as its ``USER`` (or
    ``user``), with its ``Env`` plus ``env`` and ``binds`` (host path, container path) read-only;
    its exit code and output (text)."""
    with tempfile.TemporaryDirectory(prefix="image-run-") as tmp:
        scratch = Path(tmp)
        plan = scratch / "plan.json"
        plan.write_text(json.dumps(_plan(image, argv, scratch, user, env or {}, binds)))
        return subprocess.run(["unshare", "--mount", "--uts", "--net", "--", sys.executable, str(PODINIT),
                               str(plan)], capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)


def main(argv: Optional[List[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in build.NAMES:
        print(f"usage: imagerun.py {{{','.join(build.NAMES)}}} [-- COMMAND...]", file=sys.stderr)
        return 2
    name, rest = args[0], args[1:]
    command = rest[1:] if rest[:1] == ["--"] else rest
    image = build.built(name)
    if image is None:
        print(f"imagerun.py: the {name} image is not built for the current sources: run tools/images/imagebuild.py {name}",
              file=sys.stderr)
        return 2
    proc = run(image, command)
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
