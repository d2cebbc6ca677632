"""The credential gate: whether a write, or a read of a user's vote, may proceed, and under which
credential (docs/security.md).

A write needs a bearer token (upvotes/serving/write_credentials.py), compared in constant time,
or the live page's session cookie with that session's anti-CSRF token in X-CSRF-Token
(upvotes/serving/live_sessions.py). It is refused if its Origin is foreign (403), if it is not
application/json or application/x-ndjson (415: no "simple" cross-site request can write), and past
the rate limits of its credential and, without a valid token, of its client address (429 with
Retry-After). A user's vote is private: it is answered to a valid bearer token (an app backend)
or to the live page's session asking for its own user (cookie and anti-CSRF token, as for a
write); anything else is refused (401, or 403 for a foreign Origin or a wrong anti-CSRF token).
Each refusal names its kind, which /healthz counts (REFUSALS).
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from dataclasses import dataclass

from fastapi import Request

from upvotes.serving.http_guards import json_media_type, origin_key
from upvotes.serving.live_sessions import COOKIE, CSRF_HEADER, LiveSessions, Session, SessionRefused
from upvotes.serving.rate_limits import TokenBuckets, retry_after
from upvotes.serving.serve_settings import BURST_SECONDS, ServiceSettings

# What each refusal is counted as in /healthz "refused": the gate's, the Host allowlist's
# (upvotes/serving/http_guards.py) and "session_scope", a live-page session reaching beyond its
# own user (another user's vote, or an event it may not send).
REFUSALS = ("host", "origin", "content_type", "credential", "csrf", "rate_limited", "session_scope")
NEEDS_BEARER = {"WWW-Authenticate": "Bearer"}


@dataclass(frozen=True)
class Refusal:
    kind: str  # one of REFUSALS
    status: int
    reason: str
    headers: dict[str, str] | None = None


class CredentialGate:
    """Decides whether a write, or a read of a user's vote, may proceed, and under which
    credential (see the module docstring). `clock` is wall time (sessions), `monotonic` the rate
    limits' time."""

    def __init__(
        self,
        settings: ServiceSettings,
        sessions: LiveSessions,
        clock: Callable[[], float],
        monotonic: Callable[[], float],
    ) -> None:
        self.sessions = sessions
        self.clock = clock
        self.tokens = [token.encode() for token in settings.write_tokens]
        self.cors_origins = {origin_key(origin) for origin in settings.cors_origins}

        def buckets(rate: float) -> TokenBuckets:
            return TokenBuckets(rate, max(1.0, rate * BURST_SECONDS), monotonic)

        self.per_token = buckets(settings.token_writes_per_s)
        self.per_session = buckets(settings.session_writes_per_s)
        self.per_client = buckets(settings.client_writes_per_s)

    def origin_allowed(self, request: Request) -> bool:
        """No Origin (not a browser), the service's own origin, or a configured CORS origin."""
        origin = request.headers.get("origin")
        if origin is None:
            return True
        given = origin_key(origin)
        own = origin_key(f"{request.url.scheme}://{request.headers.get('host', '')}")
        return given is not None and (given == own or given in self.cors_origins)

    def _token_index(self, request: Request) -> int | Refusal | None:
        given = request.headers.get("authorization")
        if given is None:
            return None
        scheme, _, token = given.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return Refusal(
                "credential", 401, "a bearer token is required (Authorization: Bearer <token>)", NEEDS_BEARER
            )
        candidate = token.strip().encode()
        matches = [hmac.compare_digest(candidate, known) for known in self.tokens]  # every one compared: constant time
        if True not in matches:
            return Refusal("credential", 401, "the bearer token is not valid", NEEDS_BEARER)
        return matches.index(True)

    @staticmethod
    def _limited(wait_s: float, whose: str) -> Refusal | None:
        if wait_s <= 0:
            return None
        return Refusal(
            "rate_limited", 429, f"too many writes for this {whose}; retry later", {"Retry-After": retry_after(wait_s)}
        )

    def admit(self, request: Request) -> int | Session | Refusal:
        """For a write: the index of the bearer token, the live-page session, or the refusal."""
        if not self.origin_allowed(request):
            return Refusal(
                "origin", 403, f"writes from origin {request.headers['origin'][:100]!r} are not allowed here"
            )
        _, problem = json_media_type(request.headers.get("content-type"))
        if problem is not None:
            return Refusal("content_type", 415, problem)
        token = self._token_index(request)
        if isinstance(token, int):
            return self._limited(self.per_token.take(token), "token") or token
        client = request.client.host if request.client else "unknown"
        limited = self._limited(self.per_client.take(client), "client address")
        if limited is not None:
            return limited
        if token is not None:
            return token
        session = self._session(request, "writes need")
        if isinstance(session, Refusal):
            return session
        return self._limited(self.per_session.take(session.session_id), "live-page session") or session

    def admit_read(self, request: Request) -> int | Session | Refusal:
        """As `admit`, for a private read (a user's vote): the same Origin, token, cookie and
        anti-CSRF checks; no Content-Type and no rate limit, as for every read."""
        if not self.origin_allowed(request):
            return Refusal(
                "origin", 403, f"reads of votes from origin {request.headers['origin'][:100]!r} are not allowed here"
            )
        token = self._token_index(request)
        if token is not None:
            return token
        return self._session(request, "reading a user's vote needs")

    def _session(self, request: Request, what: str) -> Session | Refusal:
        """The live-page session the cookie proves, with its own anti-CSRF token, or the refusal."""
        session = self.sessions.check(request.cookies.get(COOKIE), self.clock())
        if isinstance(session, SessionRefused):
            return Refusal(
                "credential",
                401,
                f"{what} a credential: a bearer token (Authorization: Bearer "
                f"<token>) or the live page's session ({session.reason})",
                NEEDS_BEARER,
            )
        if not self.sessions.csrf_matches(session, request.headers.get(CSRF_HEADER)):
            return Refusal(
                "csrf", 403, f"the {CSRF_HEADER} header does not belong to this live-page session: reload the page"
            )
        return session
