"""The checks `upvotes serve` makes before a request reaches a route, and the headers every
answer carries: plain ASGI wrappers, so they also cover answers the routes never see
(404s, 405s, refused hosts, CORS preflights).

- `HostAllowlist`: a request whose Host header names no allowed host gets 421 (Misdirected
  Request). That stops DNS rebinding: a hostile name resolved to 127.0.0.1 makes a page
  same-origin with the service, but its requests still say `Host: evil.example`. Starlette's
  TrustedHostMiddleware makes the same match but answers a plain-text 400 and may redirect
  to `www.`: not what a JSON API should answer.
- `SecurityHeaders`: nosniff, no referrer, no framing, same-origin opener and resource
  policies, `Cache-Control: no-store` (every answer is live data or carries a session) and a
  deny-all Content-Security-Policy, unless the route set its own (the live page and /docs do).
- `origin_key` / `json_media_type`: the Origin and Content-Type rules of writes.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from urllib.parse import urlsplit

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from upvotes.serving.serve_settings import normal_host

DENY_ALL_CSP = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
SECURITY_HEADERS = (
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
    (b"content-security-policy", DENY_ALL_CSP.encode()),
)
WRITE_MEDIA_TYPES = ("application/json", "application/x-ndjson")
_HOST_HEADER = re.compile(r"(?P<host>\[[0-9A-Fa-f:.]+\]|[^:\[\]/@\s]+)(:(?P<port>[0-9]{1,5}))?")
_DEFAULT_PORTS = {"http": 80, "https": 443}


def host_of(header: str | None) -> str | None:
    """The host a Host header names (lower case, IPv6 in brackets), or None if it is malformed."""
    match = _HOST_HEADER.fullmatch(header or "")
    return normal_host(match["host"]) if match else None


def origin_key(origin: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an origin, default ports filled in; None for `null` or garbage."""
    parts = urlsplit(origin.strip())
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname or parts.path not in ("", "/"):
        return None
    try:
        port = parts.port or _DEFAULT_PORTS[parts.scheme]
    except ValueError:
        return None
    return parts.scheme, normal_host(parts.hostname), port


def json_media_type(content_type: str | None) -> tuple[str | None, str | None]:
    """(media type, None) for a Content-Type writes accept, else (None, why not)."""
    media_type, *parameters = (content_type or "").split(";")
    media_type = media_type.strip().lower()
    if media_type not in WRITE_MEDIA_TYPES:
        return None, (
            f"Content-Type {(content_type or 'missing')[:80]!r} is not accepted: send {' or '.join(WRITE_MEDIA_TYPES)}"
        )
    for parameter in parameters:
        name, _, value = parameter.partition("=")
        if name.strip().lower() == "charset" and value.strip().strip('"').lower() not in ("utf-8", "utf8"):
            return None, "votes are UTF-8: charset must be utf-8 or absent"
    return media_type, None


def json_error(status: int, reason: str) -> tuple[dict, bytes]:
    body = orjson.dumps({"error": reason})
    return {
        "type": "http.response.start",
        "status": status,
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
    }, body


class HostAllowlist:
    def __init__(self, app: ASGIApp, allowed_hosts: tuple[str, ...], on_refused: Callable[[], None]) -> None:
        self.app = app
        self.allowed_hosts = frozenset(allowed_hosts)
        self.on_refused = on_refused

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            header = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"host"), None)
            if host_of(header) not in self.allowed_hosts:
                self.on_refused()
                shown = (header or "none")[:100]
                start, body = json_error(
                    421,
                    f"this server does not answer for Host {shown!r}; its operator can "
                    "allow a name with --allowed-host",
                )
                await send(start)
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


class SecurityHeaders:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                headers += [(name, value) for name, value in SECURITY_HEADERS if name not in present]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)
