"""The pod's first process on a process-backed node: set up its mount namespace, then exec.

Run by the node agent as ``ip netns exec <pod netns> unshare --uts -- python podinit.py PLAN.json``,
so it starts as root inside the pod's network namespace (``ip netns exec`` also gives it a private,
slave mount namespace with ``/etc/netns/<ns>/hosts`` bound over ``/etc/hosts``) and its own UTS
namespace. It then does what a container runtime does before the entrypoint, and nothing else.

A container of one of the project's images (the plan names its unpacked root filesystem, ``rootfs``)
gets that file tree as its root, as runc gives it:

1. an overlay mount: the image's tree read-only below, a writable layer of the container's own above
   (``<container_dir>/upper``; each container writes only to its own copy, and the image stays as
   built);
2. ``/dev`` (a tmpfs with ``null``, ``zero``, ``full``, ``random``, ``urandom``, ``tty`` bound from the
   host, ``pts``, and ``/dev/shm``: a 64 MiB tmpfs, the container runtimes' default), ``/sys``
   read-only, and the pod's ``/etc/hosts``, ``/etc/resolv.conf`` and ``/etc/hostname``;
3. the pod's volumes (content volumes written by the agent, PVC host directories, emptyDirs) bound
   at their mount paths, read-only where asked; a mount path is resolved inside the image (its
   ``/var/run -> /run`` link leads to the image's ``/run``, never the host's), and a missing one is
   created in the container's writable layer;
4. a new PID namespace: the child unshares its mount namespace, mounts its own ``/proc``, makes the
   overlay its root with ``pivot_root`` (the host's tree is unmounted from its view), drops to the
   user (no supplementary groups), changes to the working directory (made if missing, as runc does)
   and ``execve``s the command found on the image's ``PATH``.

A container of a host-binary image (``--binary-image``: Argo's and KFP's Go programs built here) runs
on the host's tree instead: a private tmpfs on ``/root``, the binaries' directory and the volumes
bound at their paths (a missing mount point is created on the host and listed for the agent to
remove), a private ``/tmp``.

In both, the command is PID 1 of its container, as under a container runtime (a SIGTERM it has no
handler for does nothing; its ``kill(-1, ...)`` reaches only its own container); this process stays
outside as the container's shim, passes signals on and exits with the command's status (128 + N for
a signal N: a SIGKILL shows as 137).

Stdlib only; Linux only.
"""
from __future__ import annotations

import ctypes
import json
import os
import platform
import shutil
import signal
import socket
import sys
from typing import Dict, List

__all__ = ["main", "in_root"]

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC = 1, 2, 4, 8, 32, 4096, 16384
MS_PRIVATE, MNT_DETACH = 1 << 18, 2
CLONE_NEWNS, CLONE_NEWPID = 0x00020000, 0x20000000
#: ``pivot_root``'s system call number (glibc has no wrapper)
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
#: what the shim passes on to the container's PID 1 (SIGKILL/SIGSTOP cannot be caught: the agent
#: sends those to every process of the pod's network namespace, the command included)
FORWARDED = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGCONT", "SIGWINCH")
#: the host devices a container sees, as a container runtime's defaults
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
DEV_LINKS = (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
             ("stderr", "/proc/self/fd/2"), ("ptmx", "pts/ptmx"))
_libc = ctypes.CDLL("libc.so.6", use_errno=True)


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source: str, target: str, fstype: str, flags: int, data: str = "") -> None:
    _check(_libc.mount(source.encode(), target.encode(), fstype.encode() if fstype else None, flags,
                       data.encode() if data else None), f"mount {source} -> {target} ({fstype or 'bind'})")


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


def in_root(root: str, path: str) -> str:
    """``path`` of the container as a host path under ``root``, every symbolic link on the way
    resolved inside ``root`` (an absolute link restarts at ``root``, ``..`` stops there), as a
    container runtime resolves mount targets; a missing tail is returned as is."""
    todo = [p for p in path.split("/") if p not in ("", ".")]
    done: List[str] = []
    hops = 0
    while todo:
        part = todo.pop(0)
        if part == "..":
            if done:
                done.pop()
            continue
        here = os.path.join(root, *done, part)
        if os.path.islink(here):
            hops += 1
            if hops > 40:
                raise OSError(40, f"too many levels of symbolic links resolving {path} in {root}")
            link = os.readlink(here)
            if link.startswith("/"):
                done = []
            todo = [p for p in link.split("/") if p not in ("", ".")] + todo
            continue
        done.append(part)
    return os.path.join(root, *done)


def _dev(root: str) -> None:
    """``/dev`` of a container: a tmpfs with the runtime's default devices, links, pts and shm."""
    dev = in_root(root, "/dev")
    os.makedirs(dev, exist_ok=True)
    _mount("tmpfs", dev, "tmpfs", MS_NOSUID, "mode=755,size=65536k")
    for name in DEVICES:
        open(os.path.join(dev, name), "x").close()
        _mount(f"/dev/{name}", os.path.join(dev, name), "", MS_BIND)
    for name, link in DEV_LINKS:
        os.symlink(link, os.path.join(dev, name))
    os.mkdir(os.path.join(dev, "pts"))
    _mount("devpts", os.path.join(dev, "pts"), "devpts", MS_NOSUID | MS_NOEXEC,
           "newinstance,ptmxmode=0666,mode=0620")
    os.mkdir(os.path.join(dev, "shm"))
    _mount("shm", os.path.join(dev, "shm"), "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=65536k")


def _image_root(plan: Dict, binds: List[Dict]) -> str:
    """The container's root from its image (see the module docstring, steps 1-3); its path."""
    base = plan["container_dir"]
    upper, work, root = (os.path.join(base, d) for d in ("upper", "work", "root"))
    for d in (upper, work, root):
        os.makedirs(d, exist_ok=True)
    _mount("overlay", root, "overlay", 0, f"lowerdir={plan['rootfs']},upperdir={upper},workdir={work}")
    _dev(root)
    sys_dir = in_root(root, "/sys")
    os.makedirs(sys_dir, exist_ok=True)
    _mount("sysfs", sys_dir, "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
    etc = [dict(source=src, target=dst, fd=os.open(src, os.O_PATH), is_dir=False)
           for dst, src in sorted(plan["etc"].items())]
    scratch: List[str] = []   # mount points made in the container's own layer: nothing to undo
    for b in etc + sorted(binds, key=lambda b: b["target"].count("/")):
        target = in_root(root, b["target"])
        if b.get("tmpfs"):
            _ensure_target(target, True, scratch)
            _mount("tmpfs", target, "tmpfs", 0, "mode=1777")
            continue
        _bind(b["fd"], target, bool(b.get("read_only")), b["is_dir"], scratch)
        os.close(b["fd"])
    return root


def _host_root(plan: Dict, binds: List[Dict], created_log) -> None:
    """A host-binary container's view of the host's tree (see the module docstring)."""
    created: List[str] = []
    for root in plan["tmpfs"]:
        _ensure_target(root["target"], True, created)
        _mount("tmpfs", root["target"], "tmpfs", 0, "mode=755")
    for b in sorted(binds, key=lambda b: b["target"].count("/")):
        if b.get("tmpfs"):
            _ensure_target(b["target"], True, created)
            _mount("tmpfs", b["target"], "tmpfs", 0, "mode=1777")
            continue
        _bind(b["fd"], b["target"], bool(b.get("read_only")), b["is_dir"], created)
        os.close(b["fd"])
    with created_log as fh:
        fh.writelines(p + "\n" for p in created if not any(
            p == r["target"] or p.startswith(r["target"].rstrip("/") + "/") for r in plan["tmpfs"]))


def _pivot(root: str) -> None:
    """In the container's PID namespace: a mount namespace of its own, its ``/proc``, and ``root``
    as ``/`` (the host's tree detached)."""
    _check(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _mount("proc", in_root(root, "/proc"), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    os.chdir(root)
    _check(_libc.syscall(SYS_PIVOT_ROOT[platform.machine()], b".", b"."), f"pivot_root({root})")
    _check(_libc.umount2(b".", MNT_DETACH), "umount2(old root)")
    os.chdir("/")


def _home(uid: int) -> str:
    """The user's home from the container's ``/etc/passwd``, else ``/`` (as container runtimes)."""
    try:
        with open("/etc/passwd", encoding="utf-8") as fh:
            for line in fh:
                fields = line.rstrip("\n").split(":")
                if len(fields) >= 6 and fields[2] == str(uid):
                    return fields[5] or "/"
    except OSError:
        pass
    return "/"


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


def _exec(plan: Dict, env: Dict[str, str]) -> int:
    """Become the user, enter the working directory, exec the command (the child's last step)."""
    uid, gid = plan.get("uid"), plan.get("gid")
    if plan.get("rootfs"):
        os.makedirs(plan["workdir"], exist_ok=True)
        env.setdefault("HOME", _home(uid or 0))
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


def _prepare_home(plan: Dict, env: Dict[str, str]) -> None:
    """Host mode: the working directory and ``HOME`` inside a private tmpfs exist, owned by the user."""
    uid, gid = plan.get("uid"), plan.get("gid")
    for path in {plan["workdir"], env.get("HOME", "")} - {""}:
        if any(path == r["target"] or path.startswith(r["target"].rstrip("/") + "/") for r in plan["tmpfs"]):
            os.makedirs(path, exist_ok=True)
            if uid is not None:
                os.chown(path, uid, gid if gid is not None else uid)


def main(argv: List[str]) -> int:
    with open(argv[1], encoding="utf-8") as fh:
        plan = json.load(fh)
    env: Dict[str, str] = plan["env"]
    # every bind source, opened before anything is mounted (a tmpfs on /root may hide one)
    binds = [dict(b, fd=os.open(b["source"], os.O_PATH), is_dir=os.path.isdir(b["source"]))
             for b in plan["binds"] if not b.get("tmpfs")] + [b for b in plan["binds"] if b.get("tmpfs")]
    root = ""
    if plan.get("rootfs"):
        _mount("none", "/", "", MS_REC | MS_PRIVATE)   # pivot_root refuses shared mounts
        root = _image_root(plan, binds)
    else:
        # opened now: the container's own /tmp may hide where it lives
        _host_root(plan, binds, open(plan["created_file"], "a", encoding="utf-8"))
        _prepare_home(plan, env)
    socket.sethostname(plan["hostname"])
    # A PID namespace of its own: the command is PID 1 of the container, as in a container runtime.
    # Programs written for containers rely on it: Argo's emissary passes a signal on with
    # kill(-1, sig), which in the host's PID namespace would reach every process of the machine.
    # This process stays outside as the container's shim (signals on, the command's status back).
    _check(_libc.unshare(CLONE_NEWPID), "unshare(CLONE_NEWPID)")
    child = os.fork()
    if child:
        return _shim(child)
    if root:
        _pivot(root)
    else:
        _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)   # the container's own PIDs
    return _exec(plan, env)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
