"""Bearer-key auth, per-user scoping, and short-lived signed voice session tokens."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass

from starlette.requests import HTTPConnection

from memory.agents import UserStore
from memory.models import AgentData
from memory.service import Memory
from voice_gateway.errors import ApiError


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling. `user_id` set: sees only that user's agents. None: sees all.
    `identity` names the caller for rate limits and quotas: "user:<id>", "admin" (the admin
    key) or "anon:<ip>" (open loopback mode, no key)."""

    user_id: str | None = None
    identity: str = "admin"
    caller: str | None = None  # the caller a session token was issued for
    by_token: bool = False  # authenticated by a session token (not a key)

    @property
    def scoped(self) -> bool:
        return self.user_id is not None


def client_ip(conn: HTTPConnection) -> str:
    return conn.client.host if conn.client is not None else "-"


def same(given: str, expected: str) -> bool:
    """Constant-time comparison of a credential. On bytes: `hmac.compare_digest` raises
    TypeError for a str with non-ASCII characters (a header such as `Bearer é`), which made
    such a key a 500 instead of a 401."""
    return hmac.compare_digest(
        given.encode("utf-8", "surrogatepass"), expected.encode("utf-8", "surrogatepass")
    )


def anonymous(ip: str) -> Principal:
    return Principal(None, f"anon:{ip}")


class Auth:
    def __init__(
        self, memory: Memory, api_key: str | None, secret: str | None, token_ttl_s: int
    ) -> None:
        self.memory = memory
        self.users: UserStore = memory.users
        self.api_key = api_key
        self.token_ttl_s = token_ttl_s
        seed = secret or (f"vg-session:{api_key}" if api_key else secrets.token_hex(32))
        self._secret = hashlib.sha256(seed.encode()).digest()

    async def check_key(self, key: str | None, client_ip: str = "-") -> Principal:
        """Resolve a bearer key. Without VG_API_KEY, no key means open (loopback) access."""
        if key:
            if self.api_key and same(key, self.api_key):
                return Principal()
            user_id = await self.users.by_key(key)
            if user_id:
                return Principal(user_id, f"user:{user_id}")
            if self.api_key:
                raise ApiError(401, "invalid API key")
            return anonymous(client_ip)  # open (loopback) mode: any other key is anonymous
        if self.api_key:
            raise ApiError(401, "missing API key: send 'Authorization: Bearer <key>'")
        return anonymous(client_ip)

    async def principal(self, conn: HTTPConnection) -> Principal:
        cached = conn.scope.get("vg.principal")
        if isinstance(cached, Principal):
            return cached
        header = conn.headers.get("authorization", "")
        scheme, _, key = header.partition(" ")
        if header and scheme.lower() != "bearer":
            raise ApiError(401, "Authorization must be 'Bearer <key>'")
        principal = await self.check_key(key.strip() or None, client_ip(conn))
        conn.scope["vg.principal"] = principal
        return principal

    async def agent(self, conn: HTTPConnection, agent_id: str) -> AgentData:
        """The agent if the caller may see it; another user's agent is a 404."""
        p = await self.principal(conn)
        return await self.memory.agents.get(agent_id, user_id=p.user_id, scoped=p.scoped)

    def issue_token(
        self, agent_id: str, principal: Principal, caller: str | None = None
    ) -> tuple[str, int]:
        """A signed token for one agent's voice socket, bound to `caller` if given (the
        client cannot then name another caller)."""
        exp = int(time.time()) + self.token_ttl_s
        claims: dict[str, object] = {
            "a": agent_id,
            "u": principal.user_id,
            "q": principal.identity,
            "e": exp,
        }
        if caller is not None:
            claims["c"] = caller
        body = json.dumps(claims, separators=(",", ":"))
        payload = base64.urlsafe_b64encode(body.encode()).decode().rstrip("=")
        return f"{payload}.{self._sign(payload)}", exp

    def verify_token(self, token: str, agent_id: str) -> Principal:
        payload, _, sig = token.partition(".")
        if not sig or not same(sig, self._sign(payload)):
            raise ApiError(401, "invalid session token")
        try:
            data = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        except ValueError as exc:
            raise ApiError(401, "invalid session token") from exc
        if data.get("a") != agent_id:
            raise ApiError(401, "session token is for another agent")
        if int(data.get("e", 0)) < time.time():
            raise ApiError(401, "session token expired")
        user_id = data.get("u")
        caller = data.get("c")
        return Principal(
            user_id,
            data.get("q") or (f"user:{user_id}" if user_id else "admin"),
            caller=caller if isinstance(caller, str) else None,
            by_token=True,
        )

    def _sign(self, payload: str) -> str:
        mac = hmac.new(self._secret, payload.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac).decode().rstrip("=")
