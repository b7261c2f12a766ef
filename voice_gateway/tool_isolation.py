"""Custom tools only where they can be isolated (SECURITY.md, "Uploaded tool code").

At start the gateway probes the tool sandbox once. Without network and mount namespaces (a
container not granted them, a kernel that forbids them, VG_TOOL_NAMESPACES=false) a tool could
open network connections and read the server's files, so the gateway refuses custom tools: an
error in the start log, 403 with a JSON `detail` on tool creation, and a tool error (the tool is
not run) on every call of a tool stored earlier. VG_SANDBOX_ALLOW_WEAK=1 runs them anyway with
the remaining layers (rlimits, clean environment, uid nobody, audit hook), logged as a warning.
"""

from __future__ import annotations

import logging
import os
import shutil
from typing import TYPE_CHECKING

from agents.tools.sandbox import Sandbox
from agents.tools.sandbox_jail import SYSTEM, runtime_paths
from voice_gateway.errors import ApiError

if TYPE_CHECKING:
    from voice_gateway.gateway import Gateway

log = logging.getLogger(__name__)
HINT = (
    "Grant the gateway what the sandbox needs (docker-compose.yml: cap_add SYS_ADMIN and "
    "apparmor=unconfined; see SECURITY.md), or set VG_SANDBOX_ALLOW_WEAK=1 to run custom tools "
    "without kernel isolation at your own risk"
)


async def check_tool_isolation(sandbox: Sandbox, allow_weak: bool) -> str | None:
    """Probe the sandbox and log the outcome; the refusal message when custom tools are
    refused (kept on `Gateway.tools_refused`), else None."""
    reason = await sandbox.check_isolation(allow_weak)
    if reason is None:
        log.info("custom tools: isolated (network and mount namespaces, minimal root)")
        return None
    if allow_weak:
        log.warning("%s; running them anyway because VG_SANDBOX_ALLOW_WEAK=1", reason)
        return None
    refused = f"custom tools are disabled: {reason}. {HINT}"
    log.error("%s", refused)
    return refused


def refuse_if_unisolated(gw: Gateway) -> None:
    """403 (JSON detail) on creating or changing a tool's code when tools are refused."""
    refused = gw.tools_refused
    if refused:
        raise ApiError(403, refused)


def stdio_outside(command: str, args: list[str], read_dirs: list[str]) -> str | None:
    """The first path of a stdio MCP server (its program, found on PATH, or an absolute path
    among its arguments) that its isolation would not show: outside the system directories,
    the Python runtime and the directories named by VG_MCP_STDIO_DIRS. None: all visible."""
    roots = [os.path.realpath(p) for p in (*SYSTEM, *runtime_paths(), *read_dirs)]
    found = shutil.which(command) or command
    paths = [found, os.path.realpath(found), *(a for a in args if a.startswith("/"))]
    for path in paths:
        real = os.path.realpath(path)
        if not any(
            p == root or p.startswith(root.rstrip("/") + "/")
            for root in roots
            for p in (path, real)
        ):
            return path
    return None


def refuse_stdio_outside(command: str, args: list[str], read_dirs: list[str]) -> None:
    """422 naming the path and the setting, for a stdio server its isolation could not run."""
    outside = stdio_outside(command, args, read_dirs)
    if outside is not None:
        raise ApiError(
            422,
            f"the stdio MCP server's {outside!r} lies outside the directories it may read "
            "(the system's, the Python runtime's, and VG_MCP_STDIO_DIRS); add its directory "
            "to VG_MCP_STDIO_DIRS (':'-separated) to let the server read it, read-only",
        )
