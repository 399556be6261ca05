"""The pod's first process on a process-backed node: set up its mount namespace, then exec.

Run by the node agent as ``ip netns exec <pod netns> unshare --uts -- python podinit.py PLAN.json``,
so it starts as root inside the pod's network namespace (``ip netns exec`` also gives it a private,
slave mount namespace with ``/etc/netns/<ns>/hosts`` bound over ``/etc/hosts``) and its own UTS
namespace. It then does what a container runtime does before the entrypoint, and nothing else:

1. opens every bind source first (``O_PATH``), so mounting a tmpfs over a directory that holds a
   source (``/root`` holds the venv) cannot hide it;
2. mounts a private tmpfs on ``/root`` (the pod sees nothing of the host's root home) and on each
   top-level directory the image adds (``/opt`` for the trainer image), and copies the image's
   files there, so each pod writes only to its own copy;
3. binds the base interpreter and the image's venv read-only at their paths, then the pod's volumes
   (content volumes already written by the agent, PVC host directories, emptyDirs) at their mount
   paths, read-only where asked;
4. sets the host name, enters a new PID namespace and forks: the child mounts the namespace's own
   ``/proc``, drops to ``runAsUser``/``runAsGroup`` (no supplementary groups), changes to the
   working directory and ``execve``s the container's command, which is PID 1 of its container as
   under a container runtime (a SIGTERM it has no handler for does nothing; its ``kill(-1, ...)``
   reaches only its own container); this process stays as the container's shim, passes signals on
   and exits with the command's status (128 + N for a signal N: a SIGKILL shows as 137).

Stdlib only; Linux only.
"""
from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import socket
import sys
from typing import Dict, List

__all__ = ["main"]

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC = 1, 2, 4, 8, 32, 4096, 16384
CLONE_NEWPID = 0x20000000
#: what the shim passes on to the container's PID 1 (SIGKILL/SIGSTOP cannot be caught: the agent
#: sends those to every process of the pod's network namespace, the command included)
FORWARDED = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGCONT", "SIGWINCH")
_libc = ctypes.CDLL("libc.so.6", use_errno=True)


def _mount(source: str, target: str, fstype: str, flags: int, data: str = "") -> None:
    if _libc.mount(source.encode(), target.encode(), fstype.encode() if fstype else None, flags,
                   data.encode() if data else None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} -> {target} ({fstype or 'bind'}): {os.strerror(err)}")


def _ensure_target(target: str, is_dir: bool, created: List[str]) -> None:
    if os.path.lexists(target):
        return
    parent = os.path.dirname(target.rstrip("/")) or "/"
    if not os.path.isdir(parent):
        _ensure_target(parent, True, created)
    try:
        if is_dir:
            os.mkdir(target, 0o755)
        else:
            with open(target, "x"):
                pass
    except FileExistsError:   # another pod's container made it first
        return
    created.append(target)


def _bind(fd: int, target: str, read_only: bool, is_dir: bool, created: List[str]) -> None:
    _ensure_target(target, is_dir, created)
    _mount(f"/proc/self/fd/{fd}", target, "", MS_BIND | MS_REC)
    if read_only:
        _mount("none", target, "", MS_BIND | MS_REMOUNT | MS_RDONLY)


def _shim(child: int) -> int:
    """Pass signals on to ``child`` (the container's PID 1) and exit with its status."""
    def forward(signum: int, _frame: object) -> None:
        try:
            os.kill(child, signum)
        except ProcessLookupError:
            pass

    for name in FORWARDED:
        signal.signal(getattr(signal, name), forward)
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except ChildProcessError:  # pragma: no cover - reaped elsewhere
            return 1
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def main(argv: List[str]) -> int:
    with open(argv[1], encoding="utf-8") as fh:
        plan = json.load(fh)
    created: List[str] = []
    # opened now: the container's own /tmp may hide where it lives
    created_log = open(plan["created_file"], "a", encoding="utf-8")
    # 1. every bind source, opened before anything is hidden
    binds = [dict(b, fd=os.open(b["source"], os.O_PATH), is_dir=os.path.isdir(b["source"]))
             for b in plan["binds"] if not b.get("tmpfs")]
    binds += [b for b in plan["binds"] if b.get("tmpfs")]
    # 2. private tmpfs roots, filled with the image's files
    uid, gid = plan.get("uid"), plan.get("gid")
    for root in plan["tmpfs"]:
        _ensure_target(root["target"], True, created)
        _mount("tmpfs", root["target"], "tmpfs", 0, "mode=755")
        if root.get("copy_from"):
            shutil.copytree(root["copy_from"], root["target"], dirs_exist_ok=True, symlinks=True)
    env: Dict[str, str] = plan["env"]
    # 3. interpreter, venv and volumes (parents before children)
    for b in sorted(binds, key=lambda b: b["target"].count("/")):
        if b.get("tmpfs"):
            _ensure_target(b["target"], True, created)
            _mount("tmpfs", b["target"], "tmpfs", 0, "mode=1777")
            continue
        _bind(b["fd"], b["target"], bool(b.get("read_only")), b["is_dir"], created)
        os.close(b["fd"])
    # 4. identity, working directory, exec
    socket.sethostname(plan["hostname"])
    for path in {plan["workdir"], env.get("HOME", "")} - {""}:
        if any(path == r["target"] or path.startswith(r["target"].rstrip("/") + "/")
               for r in plan["tmpfs"]):
            os.makedirs(path, exist_ok=True)
            if uid is not None:
                os.chown(path, uid, gid if gid is not None else uid)
    with created_log as fh:
        fh.writelines(p + "\n" for p in created if not any(
            p == r["target"] or p.startswith(r["target"].rstrip("/") + "/") for r in plan["tmpfs"]))
    # 5. a PID namespace of its own: the command is PID 1 of the container, as in a container
    # runtime. Programs written for containers rely on it: Argo's emissary passes a signal on with
    # kill(-1, sig), which in the host's PID namespace would reach every process of the machine.
    # This process stays outside as the container's shim: it passes signals on to the command and
    # exits with its status (128 + N when a signal N ended it).
    if _libc.unshare(CLONE_NEWPID) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare(CLONE_NEWPID): {os.strerror(err)}")
    child = os.fork()
    if child:
        return _shim(child)
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)   # the container's own PIDs
    if gid is not None:
        os.setgroups([])
        os.setgid(gid)
    if uid is not None:
        if gid is None:
            os.setgroups([])
        os.setuid(uid)
    os.chdir(plan["workdir"])
    argv0 = plan["argv"][0]
    if "/" not in argv0:
        found = shutil.which(argv0, path=env.get("PATH", os.defpath))
        if not found:
            print(f"exec: {argv0!r}: executable file not found in $PATH", file=sys.stderr, flush=True)
            return 127
        argv0 = found
    os.execve(argv0, plan["argv"], env)
    return 127  # pragma: no cover - execve does not return


if __name__ == "__main__":
    sys.exit(main(sys.argv))
