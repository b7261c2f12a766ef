"""Kernel isolation for one sandboxed tool process (see agents.tools.sandbox). Standard library
only: it is loaded by agents/tools/sandbox_child.py in the child, before any user code, with
ctypes calls to libc (Python 3.11 has no os.unshare). Nothing here runs in the server process.

Layers, each applied where the OS allows and reported by name:
- "netns": a new network namespace: only a loopback device that is down, so no connection to
  anything (not even 127.0.0.1) is possible.
- "mountns" + "minimal-root": a new mount namespace whose root is a fresh read-only tmpfs holding
  read-only bind mounts of the system directories (/usr and the /bin, /lib... links), the Python
  runtime (sys.base_prefix, sys.prefix, sys.path directories), /dev/null, /dev/zero,
  /dev/urandom, /dev/random and /etc/localtime, plus the read-write scratch directory at its own
  path, and the read-only directories the operator named for stdio MCP servers (`read_dirs`);
  then chroot into it. No /proc, no /tmp contents, no home, no repository, no database.
- "nobody": when started as root, drop to uid/gid 65534 with no supplementary groups (the
  scratch directory is chowned to it by the parent); other processes' /proc entries and every
  root-only file are out of reach even without the mount namespace.
- "userns" + "no-caps": when not root, an unprivileged user namespace makes the mounts possible;
  afterwards every capability is dropped (capset), so the chroot cannot be undone.
- "no-new-privs": prctl(PR_SET_NO_NEW_PRIVS): set-uid programs grant nothing.
- "dies-with-server": prctl(PR_SET_PDEATHSIG, SIGKILL) (set after the uid change, which clears
  it): if the server process dies, the tool process is killed instead of lingering.
If a namespace cannot be created (EPERM), the call still runs with the remaining layers.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWNET = 0x00020000, 0x10000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
KEEP_FLAGS = MS_NOSUID | MS_NODEV | MS_NOEXEC | 1024 | 2048 | 4096  # + noatime/nodiratime/relatime
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38
CAP_VERSION_3 = 0x20080522
NOBODY = 65534
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc/localtime")
DEVICES = ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random")
NEW_ROOT = "/tmp"  # mount point of the new root tmpfs (inside the private mount namespace)


def runtime_paths() -> list[str]:
    """The directories the Python runtime reads from (shown inside the minimal root)."""
    found = [sys.base_prefix, sys.prefix, *(p for p in sys.path if os.path.isdir(p))]
    out: list[str] = []
    for p in sorted({os.path.abspath(p) for p in found}, key=len):
        if not any(p == q or p.startswith(q.rstrip("/") + "/") for q in out):
            out.append(p)
    return out


def readable_paths(scratch: str) -> list[str]:
    """Everything a tool may read (the audit hook allows only these, realpath-resolved)."""
    paths = [*SYSTEM, *DEVICES, *runtime_paths(), scratch, f"/proc/{os.getpid()}"]
    return sorted({os.path.realpath(p) for p in paths if os.path.lexists(p)})


def _enc(s: str | None) -> bytes | None:
    return s.encode() if s is not None else None


def world_readable(path: str) -> bool:
    """Whether uid 65534 can read `path` (every parent directory searchable by others)."""
    path = os.path.realpath(path)
    if not os.stat(path).st_mode & 0o004:
        return False
    while path != "/":
        path = os.path.dirname(path)
        if not os.stat(path).st_mode & 0o001:
            return False
    return True


class Jail:
    def __init__(self, scratch: str, read_dirs: tuple[str, ...] = ()) -> None:
        self.scratch = scratch
        self.read_dirs = read_dirs  # shown read-only besides the system and runtime
        self.parent = os.getppid()
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.layers: list[str] = []
        self.notes: list[str] = []

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"{what}: {os.strerror(err)}")

    def _mount(
        self, src: str | None, target: str, fstype: str | None, flags: int, data: str | None = None
    ) -> None:
        rc = self.libc.mount(
            _enc(src), _enc(target), _enc(fstype), ctypes.c_ulong(flags), _enc(data)
        )
        self._check(rc, f"mount {target}")

    def setup(self, namespaces: bool) -> None:
        root = os.geteuid() == 0
        unshared = namespaces and self._unshare(root)
        if unshared:
            self._minimal_root()
        if root and not all(world_readable(p) for p in runtime_paths()):
            self.notes.append("stays root: the Python runtime is not readable by nobody")
        elif root:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            self.layers.append("nobody")
        elif unshared:
            self._drop_caps()
        self._check(self.libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl")
        self.layers.append("no-new-privs")
        self._check(self.libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl")
        if os.getppid() != self.parent:  # the server died before the signal was armed
            os._exit(1)
        self.layers.append("dies-with-server")

    def _unshare(self, root: bool) -> bool:
        flags = CLONE_NEWNS | CLONE_NEWNET | (0 if root else CLONE_NEWUSER)
        uid, gid = os.getuid(), os.getgid()
        try:
            self._check(self.libc.unshare(flags), "unshare")
        except OSError as exc:
            self.notes.append(f"namespaces unavailable ({exc})")
            return False
        if not root:
            for path, text in (
                ("setgroups", "deny"),
                ("uid_map", f"0 {uid} 1"),
                ("gid_map", f"0 {gid} 1"),
            ):
                with open(f"/proc/self/{path}", "w") as f:
                    f.write(text)
            self.layers.append("userns")
        self.layers += ["netns", "mountns"]
        return True

    def _bind(self, fd: int, target: str, is_dir: bool, writable: bool = False) -> None:
        new = NEW_ROOT + target
        if is_dir:
            os.makedirs(new, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(new), exist_ok=True)
            open(new, "a").close()
        self._mount(f"/proc/self/fd/{fd}", new, None, MS_BIND | MS_REC)
        if not writable:
            keep = os.statvfs(new).f_flag & KEEP_FLAGS
            self._mount(None, new, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | keep)

    def _minimal_root(self) -> None:
        self._mount(None, "/", None, MS_REC | MS_PRIVATE)
        links = {p: os.readlink(p) for p in SYSTEM if os.path.islink(p)}
        binds = [
            p for p in (*SYSTEM, *DEVICES, *runtime_paths(), *self.read_dirs) if p not in links
        ]
        binds = [p for p in binds if os.path.exists(p)]
        # opened after unshare (a bind source must be a mount of this namespace), before the
        # tmpfs hides them: paths under /tmp stay reachable through their descriptors
        fds = {p: os.open(p, os.O_PATH) for p in [*binds, self.scratch]}
        kinds = {p: os.path.isdir(p) for p in fds}
        self._mount("tmpfs", NEW_ROOT, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
        for path, target in links.items():
            os.makedirs(os.path.dirname(NEW_ROOT + path), exist_ok=True)
            os.symlink(target, NEW_ROOT + path)
        for path in binds:
            self._bind(fds[path], path, kinds[path])
        self._bind(fds[self.scratch], self.scratch, True, writable=True)
        for fd in fds.values():
            os.close(fd)
        self._mount(
            None, NEW_ROOT, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, "mode=0755"
        )
        os.chroot(NEW_ROOT)
        os.chdir(self.scratch)
        self.layers.append("minimal-root")

    def _drop_caps(self) -> None:
        header = (ctypes.c_uint32 * 2)(CAP_VERSION_3, 0)
        data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable x 2: all zero
        self._check(self.libc.capset(header, data), "capset")
        self.layers.append("no-caps")
