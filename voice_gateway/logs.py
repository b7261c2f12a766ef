"""stdlib logging: text or JSON lines, with the call/session id on every record, and secrets
redacted from every record that reaches the root handler (uvicorn's access log included: it
propagates to the root, and it prints query strings such as `?session_token=...`)."""

from __future__ import annotations

import contextvars
import json
import logging
import re
import sys
import time
from collections.abc import Iterable
from typing import IO

call_id: contextvars.ContextVar[str] = contextvars.ContextVar("call_id", default="-")
REDACTED = "[REDACTED]"
_PATTERNS = [
    # Authorization headers and bearer/token schemes, however they were printed
    re.compile(r"(?i)(\b(?:bearer|basic)\s+)[A-Za-z0-9._~+/=-]{4,}"),
    re.compile(r"(\bToken\s+)[A-Za-z0-9._~+/=-]{16,}"),  # Deepgram's scheme
    re.compile(r"(?i)(authorization['\"]?\s*[:=,]\s*\(?\s*(?:b?['\"])?)[^'\"\n,)}]+"),
    # secrets in query strings, form fields, JSON and reprs
    re.compile(
        r"(?i)(\b(?:session_token|api_key|apikey|access_token|auth_token|token|secret|password"
        r"|key)['\"]?\s*[=:]\s*['\"]?)[^&\s'\",;)}]{4,}"
    ),
    re.compile(r"\bvgk-[A-Za-z0-9_-]{8,}"),  # per-user API keys
    re.compile(r"\bsk-[A-Za-z0-9_-]{16,}"),  # OpenAI-style keys
]


class RedactingFilter(logging.Filter):
    """Rewrites each record's message (and traceback text) with secrets replaced."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        # longest first, so a secret containing another is replaced whole
        self.secrets = sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True)

    def redact(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, REDACTED)
        for pattern in _PATTERNS:
            text = pattern.sub(lambda m: (m.group(1) if m.re.groups else "") + REDACTED, text)
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: keep the raw parts, redacted
            message = f"{record.msg} {record.args}"
        record.msg, record.args = self.redact(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redact(record.exc_text)
        if record.stack_info:
            record.stack_info = self.redact(record.stack_info)
        return True


class _CallIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.call_id = call_id.get()
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        data = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "call_id": getattr(record, "call_id", "-"),
            "msg": record.getMessage(),
        }
        if record.exc_info or record.exc_text:
            data["exc"] = record.exc_text or self.formatException(record.exc_info)  # type: ignore[arg-type]
        return json.dumps(data)


def make_handler(
    fmt: str = "text", secrets: Iterable[str] = (), stream: IO[str] | None = None
) -> logging.Handler:
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.addFilter(_CallIdFilter())
    handler.addFilter(RedactingFilter(secrets))
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)-7s %(name)s [%(call_id)s] %(message)s")
        )
    return handler


def setup_logging(level: str = "INFO", fmt: str = "text", secrets: Iterable[str] = ()) -> None:
    """One handler on the root logger; every logger (uvicorn's too) propagates to it."""
    root = logging.getLogger()
    root.handlers[:] = [make_handler(fmt, secrets)]
    root.setLevel(level.upper())
    for noisy in ("httpx", "httpcore", "faster_whisper", "aiosqlite", "alembic.runtime.plugins"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
