"""The key that seals stored secrets (MCP servers' tokens, headers, environments).

VG_SECRETS_KEY wins (the way to share one key across gateways). Without it the key lives in a
file (VG_SECRETS_KEY_FILE, by default `secrets.key` in the data directory): created on the
first start with owner-only permissions (logged once), read on every later start. A key file
that exists but cannot be read, or does not hold a key, stops the start with an error naming
the file: a silent new key would orphan every secret sealed with the old one.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
from pathlib import Path

log = logging.getLogger(__name__)
KEY_CHARS = re.compile(r"[A-Za-z0-9_\-=+/]{32,512}")


class SecretsKeyError(RuntimeError):
    """The key file exists but is unusable; the message names the file and what to do."""


def _read(path: Path) -> str:
    try:
        text = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise SecretsKeyError(
            f"the secrets key file {path} cannot be read ({exc}); fix its permissions or "
            "restore it (a new key would make stored MCP secrets unreadable), or set "
            "VG_SECRETS_KEY"
        ) from exc
    if not KEY_CHARS.fullmatch(text):
        raise SecretsKeyError(
            f"the secrets key file {path} does not hold a key (32 to 512 characters of "
            "A-Z a-z 0-9 _ - = + /); restore it from a backup (a new key would make stored "
            "MCP secrets unreadable), or set VG_SECRETS_KEY"
        )
    return text


def _create(path: Path) -> str | None:
    """A new key written to `path` (mode 0600); None when another process made it first."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = secrets.token_urlsafe(48)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return None
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(key + "\n")
    log.warning(
        "created the secrets key %s (owner-only); back it up with the database: stored MCP "
        "secrets cannot be read without it",
        path,
    )
    return key


def secrets_key(configured: str | None, path: Path) -> str:
    """The key to seal secrets with: `configured` (VG_SECRETS_KEY) if set, else the key file's
    (made on the first start). Raises SecretsKeyError for an unusable key file."""
    if configured:
        return configured
    if not path.exists():
        made = _create(path)
        if made is not None:
            return made
    return _read(path)
