"""uvicorn's HTTP/1.1 protocol (httptools) with a size limit on the request head.

uvicorn's httptools protocol, the one `uvicorn[standard]` selects, has no limit on the request
line and headers: one 64 MB header was read whole (httptools buffers a header until it ends)
and stalled the event loop for over a second. This subclass answers
`431 {"detail": ...}` and closes the connection as soon as a request head (request line plus
headers) goes over `VG_MAX_HEADER_BYTES`:

- while the head is incomplete, every byte received since the request began counts, so at
  most one read (<= 256 KiB) more than the limit is ever buffered;
- the head that completes within a read is measured exactly (target + header lines).

uvicorn is pinned to an exact version (pyproject.toml): this relies on its parser callbacks
and on `send_400_response` being how it answers a request the parser refused. Were the server
run with h11 instead, `h11_max_incomplete_event_size` is the same limit (uvicorn answers 400
there).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from voice_gateway.settings import Settings


class HeadTooLarge(Exception):
    """Raised in a parser callback: uvicorn catches the parser error and calls
    send_400_response, which answers 431 instead."""


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    max_head_bytes = 16_384  # set per server by `http_options`
    _read = 0  # bytes read since the request began, while its head is incomplete
    _exact = 0  # the head's request target and header lines parsed so far
    _in_head = False
    _too_large = False

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._read = self._exact = 0
        self._in_head = True

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        self._count(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        super().on_header(name, value)
        self._count(len(name) + len(value) + 4)

    def on_headers_complete(self) -> None:
        self._in_head = False
        super().on_headers_complete()

    def _count(self, n: int) -> None:
        self._exact += n
        if self._exact > self.max_head_bytes:
            self._too_large = True
            raise HeadTooLarge

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if not self._in_head or self.transport.is_closing():
            return
        self._read += len(data)  # the head is still incomplete: all of this read was head
        if self._read > self.max_head_bytes:
            self._too_large = True
            self.send_400_response("")

    def send_400_response(self, msg: str) -> None:
        if not self._too_large:
            super().send_400_response(msg)
            return
        detail = f"request headers over {self.max_head_bytes} bytes (VG_MAX_HEADER_BYTES)"
        body = json.dumps({"detail": detail}).encode()
        head = (
            b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
            b"content-type: application/json\r\n"
            b"content-length: " + str(len(body)).encode() + b"\r\n"
            b"connection: close\r\n\r\n"
        )
        self.transport.write(head + body)
        self.transport.close()


def http_options(settings: Settings) -> dict[str, Any]:
    """uvicorn.Config options for the gateway's HTTP/1.1 server (`voice-gateway serve` and the
    tests' in-process servers): the head-limited protocol, and the same limit for h11."""
    limited: type[asyncio.Protocol] = type(
        "LimitedHttpToolsProtocol",
        (LimitedHttpToolsProtocol,),
        {"max_head_bytes": settings.max_header_bytes},
    )
    return {"http": limited, "h11_max_incomplete_event_size": settings.max_header_bytes}
