"""Run a command where the kernel refuses new network and mount namespaces, as in a container
that was not granted them: `python -m tests.support.no_namespaces CMD ARGS...`.

The process moves into a new user namespace that maps uids/gids 0-65535 onto the host's (a
helper child, still in the parent namespace, writes the maps), sets that namespace's
user.max_net_namespaces, max_mnt_namespaces and max_user_namespaces to 0 (per-namespace
limits: they bind this namespace and its descendants only, never the host), then execs CMD as
uid 0. unshare(CLONE_NEWNET | CLONE_NEWNS) then fails there with ENOSPC. Needs root."""

from __future__ import annotations

import ctypes
import os
import sys

CLONE_NEWUSER = 0x10000000
LIMITS = ("max_net_namespaces", "max_mnt_namespaces", "max_user_namespaces")


def main(argv: list[str]) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    ready_r, ready_w = os.pipe()
    done_r, done_w = os.pipe()
    parent = os.getpid()
    helper = os.fork()
    if helper == 0:  # in the parent namespace: map the new namespace's ids
        os.read(ready_r, 1)
        for name in ("uid_map", "gid_map"):
            with open(f"/proc/{parent}/{name}", "w") as f:
                f.write("0 0 65536\n")
        os.write(done_w, b"x")
        os._exit(0)
    if libc.unshare(CLONE_NEWUSER) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWUSER)")
    os.write(ready_w, b"x")
    os.read(done_r, 1)
    _, status = os.waitpid(helper, 0)
    if status != 0:
        raise SystemExit("could not map the user namespace's ids")
    os.setgid(0)
    os.setuid(0)
    for limit in LIMITS:
        with open(f"/proc/sys/user/{limit}", "w") as f:
            f.write("0\n")
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    main(sys.argv[1:])
