"""The live page's credential: a signed session cookie and the anti-CSRF token bound to it.

`upvotes serve` hands both to a browser that loads `/` from an allowed Host: the cookie
(HttpOnly, SameSite=Strict, host-only, Secure over https) carries `<id>.<expiry>.<mac>`;
the page carries the session's anti-CSRF token, which its script sends in the
X-CSRF-Token header. A write with the cookie counts only with the token of that same
session: a form or a simple fetch from another page cannot set the header, and a page from
another origin cannot read the token (no CORS for it, and the Host check stops DNS
rebinding).

Each session is also one voter: its user ID (`user_id`, "live-<mac>") is what its vote-state
events must carry and the one user whose vote it may read, so a session votes once per post
(docs/security.md). The ID is a MAC of the session ID rather than the session ID itself, so
the page, the topic and the Votes table never see any part of the cookie. A new session (a
cleared cookie, or a reload past half a session's life) is a new voter.

Nothing is stored server-side: every value is HMAC-SHA256 under a key derived from the
first write token, so every `serve` process sharing the token accepts the same sessions,
and rotating the token ends them all. Comparisons are constant-time.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass

COOKIE = "upvotes_session"
CSRF_HEADER = "X-CSRF-Token"
_KEY_LABEL = b"upvotes live-page session key v1"
USER_PREFIX = "live-"  # every live-page session's user ID starts with it


def _mac(key: bytes, *parts: str) -> str:
    digest = hmac.new(key, "|".join(parts).encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


@dataclass(frozen=True)
class Session:
    session_id: str
    expires_s: int  # epoch seconds


@dataclass(frozen=True)
class SessionRefused:
    reason: str


class LiveSessions:
    """Issues and checks live-page sessions; `lifetime_s` after issue, one is refused."""

    def __init__(self, write_token: str, lifetime_s: float) -> None:
        self._key = hmac.new(write_token.encode(), _KEY_LABEL, hashlib.sha256).digest()
        self.lifetime_s = lifetime_s

    def issue(self, now_s: float) -> tuple[Session, str]:
        """A new session and its cookie value."""
        session = Session(secrets.token_urlsafe(16), int(now_s + self.lifetime_s))
        return session, self.cookie_value(session)

    def cookie_value(self, session: Session) -> str:
        expires = str(session.expires_s)
        return f"{session.session_id}.{expires}.{_mac(self._key, 'session', session.session_id, expires)}"

    def csrf_token(self, session: Session) -> str:
        return _mac(self._key, "csrf", session.session_id)

    def user_id(self, session: Session) -> str:
        """The user this session votes as: the same for every page load of the session, and
        within the contract's 128 characters (48)."""
        return USER_PREFIX + _mac(self._key, "user", session.session_id)

    def check(self, cookie: str | None, now_s: float) -> Session | SessionRefused:
        """The session a cookie proves, or why it is refused."""
        if not cookie:
            return SessionRefused("no live-page session")
        session_id, _, rest = cookie.partition(".")
        expires, _, mac = rest.partition(".")
        if not (session_id and expires.isdigit() and mac):
            return SessionRefused("the live-page session cookie is malformed")
        if not hmac.compare_digest(mac.encode(), _mac(self._key, "session", session_id, expires).encode()):
            return SessionRefused(
                "the live-page session is not valid (or the write token was rotated): reload the page"
            )
        if int(expires) <= now_s:
            return SessionRefused("the live-page session has expired: reload the page")
        return Session(session_id, int(expires))

    def csrf_matches(self, session: Session, token: str | None) -> bool:
        return token is not None and hmac.compare_digest(token.encode(), self.csrf_token(session).encode())
