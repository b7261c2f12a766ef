"""Start a stdio MCP server inside the custom tools' kernel isolation (standard library only:
run by path, `python -I -B mcp_jail.py <scratch> <strict 0|1> <memory_mb> <read_dirs> <command>
[args...]`, read_dirs ':'-separated, possibly empty).

The same layers as a sandboxed tool call (agents/tools/sandbox_jail.py): no network (a new
network namespace), a read-only minimal root (system directories, the Python runtime, the
scratch directory, the directories the operator lets stdio servers read), nobody / no
capabilities, no new privileges, killed with the server. Then the address-space limit, and
`exec` of the command: the server speaks MCP on stdin/stdout.
With strict 1, a server that could not get its network and mount namespaces is not started
(exit 126 with the reason on stderr): where isolation is unavailable, stdio servers are refused.
"""

from __future__ import annotations

import os
import resource
import sys

REQUIRED = ("netns", "mountns", "minimal-root")


def main() -> None:
    scratch, strict, memory_mb = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3])
    read_dirs = tuple(d for d in sys.argv[4].split(":") if d)
    command, args = sys.argv[5], sys.argv[5:]
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    import sandbox_jail

    jail = sandbox_jail.Jail(scratch, read_dirs)
    try:
        jail.setup(True)
    except Exception as exc:
        sys.stderr.write(f"mcp sandbox setup failed: {exc}\n")
        os._exit(126)
    missing = [layer for layer in REQUIRED if layer not in jail.layers]
    if strict and missing:
        sys.stderr.write(f"mcp sandbox: isolation unavailable ({', '.join(missing)})\n")
        os._exit(126)
    mb = 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (memory_mb * mb, memory_mb * mb))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    os.execvp(command, args)


if __name__ == "__main__":
    main()
