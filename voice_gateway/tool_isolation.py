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
from typing import Any

from voice_gateway.errors import ApiError

log = logging.getLogger(__name__)
REFUSED = "tools_refused"  # key in Gateway.extras: the refusal message, when refusing
HINT = (
    "Grant the gateway what the sandbox needs (docker-compose.yml: cap_add SYS_ADMIN and "
    "apparmor=unconfined; see SECURITY.md), or set VG_SANDBOX_ALLOW_WEAK=1 to run custom tools "
    "without kernel isolation at your own risk"
)


async def check_tool_isolation(gw: Any) -> None:
    """Probe the sandbox; log the outcome and remember a refusal on `gw.extras`."""
    allow_weak = gw.settings.sandbox_allow_weak
    reason = await gw.loop.sandbox.check_isolation(allow_weak)
    gw.extras.pop(REFUSED, None)
    if reason is None:
        log.info("custom tools: isolated (network and mount namespaces, minimal root)")
    elif allow_weak:
        log.warning("%s; running them anyway because VG_SANDBOX_ALLOW_WEAK=1", reason)
    else:
        gw.extras[REFUSED] = f"custom tools are disabled: {reason}. {HINT}"
        log.error("%s", gw.extras[REFUSED])


def refuse_if_unisolated(gw: Any) -> None:
    """403 (JSON detail) on creating or changing a tool's code when tools are refused."""
    refused = gw.extras.get(REFUSED)
    if refused:
        raise ApiError(403, refused)
