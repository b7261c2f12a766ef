"""Echo cancellers: `webrtc` (AEC3 via the livekit wheel) or `off`."""

from __future__ import annotations

import logging

from voice_gateway.echo.base import EchoCanceller, NoCanceller

log = logging.getLogger(__name__)
_warned = False


def create_canceller(enabled: bool) -> EchoCanceller:
    """A canceller for one call; `off` (with one warning per process) if livekit is missing."""
    global _warned
    if not enabled:
        return NoCanceller()
    try:
        from voice_gateway.echo.apm import ApmCanceller

        return ApmCanceller()
    except ImportError:
        if not _warned:
            _warned = True
            log.warning("echo cancellation needs the livekit package; calls run without it")
        return NoCanceller()
