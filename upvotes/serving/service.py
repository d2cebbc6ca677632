"""The HTTP service app servers call (`upvotes serve`): exact counts, fresh top posts, and
validated vote publishing, on FastAPI + uvicorn.

    GET  /v1/posts/{post_id}        {"post_id", "upvotes", "shares", "as_of"} (a field per counter,
                                    schemas/counters.py); unknown posts read as zeros
    GET  /v1/posts?id=a&id=b        {"posts": [...]}
         (either, with ?unique=true) each count also has "unique_voters"
    GET  /v1/posts/{post_id}/votes/{user_id}
                                    that user's vote on that post, private (below): {"post_id", "user_id",
                                    "vote": "up"|"down"|"none", "voted_at", "event_id", "applied_at"}
                                    (upvotes/serving/user_votes.py); never voted: "none" and nulls
    GET  /v1/top?n=10               {"posts": [{"post_id", "upvotes", "shares"}...], "as_of", "exact", "bound", "folded_through"}
    GET  /v1/top?by=hot&n=10        what is viral now (spanner_reads/trending.py): the top posts by hot score, each
                                    post with "hot" (its score at the snapshot); the header adds "by": "hot",
                                    "half_life_hours", "considered", "candidate_rows". 503 when the database
                                    has no half-life recorded (run `upvotes provision`)
    GET  /v1/top?last=24h&n=10      the top posts by upvotes in the last N event hours (Nh or Nd, 1 to 720 h),
                                    each with "window_upvotes"; the header adds "by": "last", "hours", ...
                                    (by=upvotes, or no by, is the all-time answer; by=hot with last is 400)
    POST /v1/votes                  one JSON event (Content-Type application/json) or ndjson
                                    (application/x-ndjson), one event a line, with a credential:
                                    202 {"accepted": n, "rejected": [{"line", "error"}]}; 400 when nothing is valid
    GET  /healthz                   {"status": "ok", "spanner_reads": n, "limits": {...}, "refused": {...}}
    GET  /docs, /openapi.json       the OpenAPI description
    GET  /                          the live page (upvotes/serving/live_page.py), with its session cookie
    GET  /live-page.js, .css        its script and style

Reads go through one spanner_reads.counts_reader.CountsReader per process, so a hot post
costs at most one Spanner read per refresh interval however many viewers ask. A user's vote
is one strong point read (upvotes/serving/user_votes.py). Its route is declared before the
counts route, whose post ID may hold "/": the path is split at its LAST "/votes/", so the
post ID may hold anything and the user ID anything but "/votes/"; a post ID that itself holds
"/votes/" is read with GET /v1/posts?id=.

Votes are validated with the pipeline's own parser (schemas.contract.parse_vote) and
published to the votes topic, encoded by the contract (schemas.contract.events_message) exactly
as `upvotes publish` encodes them: one accepted event as a v1 message (attributes `event_id`,
its own or a new `message-<uuid4>`, and `event_time`), several as ONE contract v2 batch
(attribute format=ndjson, a new `batch-<uuid4>` event_id, one v1 event per line, at most
MAX_EVENTS events and MAX_BODY_BYTES bytes). The reply comes after Pub/Sub has accepted the
message.

Security (docs/security.md): every answer passes the Host allowlist (421) and carries the
security headers (upvotes/serving/http_guards.py). A write needs a credential: a bearer token
(upvotes/serving/write_credentials.py), compared in constant time, or the live page's session
cookie with that session's anti-CSRF token in X-CSRF-Token (upvotes/serving/live_sessions.py). It
is refused if its Origin is foreign (403), if it is not application/json or
application/x-ndjson (415: no "simple" cross-site request can write), and past the rate
limits of its credential and, without a valid token, of its client address (429 with
Retry-After). A token may send both kinds of event, a |delta| beyond --max-delta rejecting
that event. A live-page session is one voter (its user ID, live_sessions.py): it may send
only vote-state events carrying that user ID, anything else is refused (403). A user's vote
is private: it is answered to a valid bearer token (an app backend) or to the live page's
session asking for its own user (cookie and anti-CSRF token, as for a write); anything else
is refused (401, or 403 for a foreign Origin, a wrong anti-CSRF token or another user).
Bodies are limited to MAX_BODY_BYTES and MAX_EVENTS and must arrive within
`body_timeout_s`; a request head must arrive within `head_timeout_s` (uvicorn alone resets
its idle timer on every byte, so a client sending one byte a second could hold a connection
forever). Errors are JSON {"error": reason}, never a traceback.
CORS is off unless exact origins are configured. /healthz shows the limits and how many
requests each check refused.
"""
from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import logging
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Literal, Protocol

import orjson
import uvicorn
from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse, Response
from google.api_core import exceptions as google_exceptions
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp
from uvicorn.protocols.http.h11_impl import H11Protocol

from schemas.contract import (
    FORMAT_ATTRIBUTE, MAX_ABS_DELTA, MAX_BATCH_BYTES, MAX_BATCH_EVENTS,
    MAX_ID_CHARS, MAX_POST_ID_CHARS, NDJSON, events_message, parse_message, parse_vote, reason_of,
)
from schemas.records import Rejected, VoteEvent, VoteState
from spanner_reads.counts_reader import CountsReader, DEFAULT_REFRESH_S
from spanner_reads.trending import HOT, MAX_HOURS, HotRankingUnavailable, TrendingTop
from upvotes.argument_types import hours_of
from upvotes.serving.http_guards import HostAllowlist, SecurityHeaders, json_media_type, origin_key
from upvotes.serving.live_page import PAGE_CSP, PAGE_SCRIPT, PAGE_STYLE, SCRIPT_PATH, STYLE_PATH, page_html
from upvotes.serving.live_sessions import COOKIE, CSRF_HEADER, LiveSessions, Session, SessionRefused
from upvotes.serving.rate_limits import TokenBuckets, retry_after
from upvotes.serving.serve_settings import BURST_SECONDS, ServiceSettings
from upvotes.serving.user_votes import SpannerVoteReader, VoteReader, vote_json

LOG = logging.getLogger(__name__)
# A request carries at most what one contract v2 batch may: it is published as one message.
MAX_BODY_BYTES = MAX_BATCH_BYTES
MAX_EVENTS = MAX_BATCH_EVENTS
MAX_IDS_PER_READ = 1_000
MAX_TOP_N = 1_000
PUBLISH_TIMEOUT_S = 30.0
STARTUP_TIMEOUT_S = 30.0
# What each refusal is counted as in /healthz "refused". "session_scope": a live-page session
# reaching beyond its own user (another user's vote, or an event it may not send).
REFUSALS = ("host", "origin", "content_type", "credential", "csrf", "rate_limited", "session_scope")


class VotePublisher(Protocol):
    def publish(self, data: bytes, attributes: dict[str, str]) -> None:
        """Publishes one message and returns once Pub/Sub has accepted it."""


class PubSubVotePublisher:
    """Publishes to one topic with the Pub/Sub client, waiting for each publish."""

    def __init__(self, topic_path: str) -> None:
        from google.cloud import pubsub_v1

        self._client = pubsub_v1.PublisherClient()
        self._topic_path = topic_path

    def publish(self, data: bytes, attributes: dict[str, str]) -> None:
        self._client.publish(self._topic_path, data, **attributes).result(timeout=PUBLISH_TIMEOUT_S)


@dataclass(frozen=True)
class ValidatedVotes:
    events: list[bytes]  # accepted events, each one line of compact JSON
    rejected: list[dict]  # {"line": n (from 1), "error": reason}
    whole: Rejected | None = None  # the body as a whole broke a batch rule (too many events, not UTF-8)


def _over_cap(event: VoteEvent | VoteState, max_delta: int) -> str | None:
    """Why a delta event is beyond the credential's cap; None within it. A vote-state event has
    no delta: it moves a post's counts by at most one, whoever sends it."""
    if isinstance(event, VoteState) or abs(event.delta) <= max_delta:
        return None
    return f"delta_over_limit: delta {event.delta} is beyond ±{max_delta}, this credential's limit"


def validate_votes(body: bytes, one_event: bool, now_s: float, max_delta: int = MAX_ABS_DELTA) -> ValidatedVotes:
    """The body as one v1 event (`one_event`) or as a contract v2 ndjson batch, judged by the
    pipeline's own parser (schemas.contract): what it accepts here, the pipeline counts. A
    delta event whose |delta| is above `max_delta` (the credential's cap) is rejected too."""
    if one_event:
        parsed = parse_vote(body, None, now_s)
        error = parsed.error if isinstance(parsed, Rejected) else _over_cap(parsed, max_delta)
        if error is not None:
            return ValidatedVotes([], [{"line": 1, "error": error}])
        return ValidatedVotes([orjson.dumps(orjson.loads(body))], [])
    results = list(parse_message(body, {FORMAT_ATTRIBUTE: NDJSON}, now_s))
    # (line number from 1, line): the parser's own line rule
    lines = [(number, line) for number, line in enumerate(body.split(b"\n"), 1) if line.strip()]
    if len(results) != len(lines):  # one Rejected for the whole batch
        return ValidatedVotes([], [], results[0])
    events, rejected = [], []
    for (number, line), result in zip(lines, results):
        if isinstance(result, Rejected):
            rejected.append({"line": number, "error": result.error})
        elif (error := _over_cap(result, max_delta)) is not None:
            rejected.append({"line": number, "error": error})
        else:
            events.append(line.strip())
    return ValidatedVotes(events, rejected)


UNIQUE_HELP = "add unique_voters: distinct user IDs that upvoted (a HyperLogLog estimate)"
BY_HELP = ("upvotes: all-time exact upvotes (the default); hot: hot score, upvotes minus downvotes each weighing "
           "half as much every half-life, each post with \"hot\", its score at the snapshot")
LAST_HELP = ("rank by upvotes in the last N event hours instead, written Nh or Nd (24h, 7d; at most "
             f"{MAX_HOURS}h), each post with \"window_upvotes\"; not with by=hot")
HOT_SCORE = "hot"  # the per-post score field of each trending answer
WINDOW_SCORE = "window_upvotes"


def trending_json(top: TrendingTop, score_field: str) -> dict:
    """A trending answer: {"posts": [{"post_id", a field per counter, score_field}...]} and the
    ranking's header (TrendingTop.to_json: "by", "as_of", "exact", "bound", "folded_through", ...)."""
    score = int if score_field == WINDOW_SCORE else float
    return {"posts": [{**post.totals.to_json(), score_field: score(post.score)} for post in top.posts],
            **top.to_json()}


def _error(status: int, reason: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": reason}, status_code=status, headers=headers)


def _check_post_id(post_id: str) -> None:
    if not post_id:
        raise HTTPException(400, "post_id is empty")
    if len(post_id) > MAX_POST_ID_CHARS:
        raise HTTPException(400, f"post_id has {len(post_id)} characters, at most {MAX_POST_ID_CHARS}")


def _check_user_id(user_id: str) -> None:
    if not user_id:
        raise HTTPException(400, "user_id is empty")
    if len(user_id) > MAX_ID_CHARS:
        raise HTTPException(400, f"user_id has {len(user_id)} characters, at most {MAX_ID_CHARS}")


def outside_session_scope(body: bytes, user_id: str, now_s: float) -> str | None:
    """Why a live-page session voting as `user_id` may not send this one event, or None. A
    session is one voter: it sends vote-state events of its own user, so it counts once per
    post however often it clicks. An invalid event is None here: validate_votes rejects it
    with the parser's reason."""
    event = parse_vote(body, None, now_s)
    if isinstance(event, VoteEvent):
        return ('a live-page session sends vote-state events ({"post_id", "user_id", "vote": "up"|"none"|"down", '
                '"event_time"}), one vote per post; delta events need a bearer token')
    if isinstance(event, VoteState) and event.user_id != user_id:
        return f"a live-page session votes only as its own user {user_id!r}, not as {event.user_id!r}"
    return None


async def _read_body(request: Request, timeout_s: float) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > MAX_BODY_BYTES):
        raise HTTPException(413, f"the body is larger than {MAX_BODY_BYTES} bytes")
    chunks: list[bytes] = []
    size = 0

    async def collect() -> None:
        nonlocal size
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise HTTPException(413, f"the body is larger than {MAX_BODY_BYTES} bytes")
            chunks.append(chunk)

    try:
        await asyncio.wait_for(collect(), timeout_s)
    except asyncio.TimeoutError:
        raise HTTPException(408, f"the body did not arrive within {timeout_s:g} s") from None
    return b"".join(chunks)


def _inline_script_csp(html: str, sources: str) -> str:
    """A CSP for an HTML page with inline scripts: each allowed by its SHA-256 hash only."""
    hashes = " ".join(
        "'sha256-" + base64.b64encode(hashlib.sha256(script.encode()).digest()).decode() + "'"
        for script in re.findall(r"<script>(.*?)</script>", html, re.S))
    return (f"default-src 'none'; script-src {sources} {hashes}; style-src {sources} 'unsafe-inline'; "
            "img-src https://fastapi.tiangolo.com data:; connect-src 'self'; base-uri 'none'; form-action 'none'; "
            "frame-ancestors 'none'")


@dataclass(frozen=True)
class _Refusal:
    kind: str  # one of REFUSALS
    status: int
    reason: str
    headers: dict[str, str] | None = None


_NEEDS_BEARER = {"WWW-Authenticate": "Bearer"}


class _CredentialGate:
    """Decides whether a write, or a read of a user's vote, may proceed, and under which
    credential (docs/security.md)."""

    def __init__(self, settings: ServiceSettings, sessions: LiveSessions, clock: Callable[[], float],
                 monotonic: Callable[[], float]) -> None:
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

    def _token_index(self, request: Request) -> int | _Refusal | None:
        given = request.headers.get("authorization")
        if given is None:
            return None
        scheme, _, token = given.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return _Refusal("credential", 401, "a bearer token is required (Authorization: Bearer <token>)",
                            _NEEDS_BEARER)
        candidate = token.strip().encode()
        matches = [hmac.compare_digest(candidate, known) for known in self.tokens]  # every one compared: constant time
        if True not in matches:
            return _Refusal("credential", 401, "the bearer token is not valid", _NEEDS_BEARER)
        return matches.index(True)

    @staticmethod
    def _limited(wait_s: float, whose: str) -> _Refusal | None:
        if wait_s <= 0:
            return None
        return _Refusal("rate_limited", 429, f"too many writes for this {whose}; retry later",
                        {"Retry-After": retry_after(wait_s)})

    def admit(self, request: Request) -> int | Session | _Refusal:
        """For a write: the index of the bearer token, the live-page session, or the refusal."""
        if not self.origin_allowed(request):
            return _Refusal("origin", 403, f"writes from origin {request.headers['origin'][:100]!r} are not "
                            "allowed here")
        _, problem = json_media_type(request.headers.get("content-type"))
        if problem is not None:
            return _Refusal("content_type", 415, problem)
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
        if isinstance(session, _Refusal):
            return session
        return self._limited(self.per_session.take(session.session_id), "live-page session") or session

    def admit_read(self, request: Request) -> int | Session | _Refusal:
        """As `admit`, for a private read (a user's vote): the same Origin, token, cookie and
        anti-CSRF checks; no Content-Type and no rate limit, as for every read."""
        if not self.origin_allowed(request):
            return _Refusal("origin", 403, f"reads of votes from origin {request.headers['origin'][:100]!r} are not "
                            "allowed here")
        token = self._token_index(request)
        if token is not None:
            return token
        return self._session(request, "reading a user's vote needs")

    def _session(self, request: Request, what: str) -> Session | _Refusal:
        """The live-page session the cookie proves, with its own anti-CSRF token, or the refusal."""
        session = self.sessions.check(request.cookies.get(COOKIE), self.clock())
        if isinstance(session, SessionRefused):
            return _Refusal("credential", 401, f"{what} a credential: a bearer token (Authorization: Bearer "
                            f"<token>) or the live page's session ({session.reason})", _NEEDS_BEARER)
        if not self.sessions.csrf_matches(session, request.headers.get(CSRF_HEADER)):
            return _Refusal("csrf", 403, f"the {CSRF_HEADER} header does not belong to this live-page session: "
                            "reload the page")
        return session


def create_app(reader: CountsReader, votes: VoteReader, publisher: VotePublisher | None, settings: ServiceSettings,
               clock: Callable[[], float] = time.time, monotonic: Callable[[], float] = time.monotonic) -> ASGIApp:
    """The service's ASGI app: the FastAPI routes behind the Host allowlist, CORS (only when
    origins are configured) and the security headers. `reader` answers counts and top posts,
    `votes` a user's vote. `publisher` None: POST /v1/votes answers 503 (no topic configured).
    `clock` is wall time (votes, sessions), `monotonic` the rate limits' time."""
    app = FastAPI(title="upvotes", version="1", description="Exact upvote and share counts of viral posts.",
                  docs_url=None, redoc_url=None)
    sessions = LiveSessions(settings.write_tokens[0], settings.session_s)
    gate = _CredentialGate(settings, sessions, clock, monotonic)
    refused: Counter[str] = Counter({kind: 0 for kind in REFUSALS})
    docs_html = get_swagger_ui_html(openapi_url=app.openapi_url, title="upvotes API").body.decode()
    docs_csp = _inline_script_csp(docs_html, "https://cdn.jsdelivr.net")

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, error: HTTPException) -> JSONResponse:
        return _error(error.status_code, str(error.detail), getattr(error, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_: Request, error: RequestValidationError) -> JSONResponse:
        first = error.errors()[0] if error.errors() else {}
        where = ".".join(str(part) for part in first.get("loc", ()))
        return _error(400, f"invalid request: {where}: {first.get('msg', 'invalid')}")

    @app.exception_handler(google_exceptions.GoogleAPICallError)
    async def backend_error(_: Request, error: google_exceptions.GoogleAPICallError) -> JSONResponse:
        LOG.warning("backend error: %s", error)
        return _error(503, f"the database or Pub/Sub is unavailable ({type(error).__name__}); retry later")

    @app.exception_handler(HotRankingUnavailable)
    async def no_hot_ranking(_: Request, error: HotRankingUnavailable) -> JSONResponse:
        return _error(503, str(error))

    @app.exception_handler(Exception)
    async def internal_error(_: Request, error: Exception) -> JSONResponse:
        LOG.exception("internal error")  # the traceback goes to the server log, never to the client
        return _error(500, "internal error")

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def page(request: Request) -> HTMLResponse:
        """The live page, with a session: the one its cookie proves, or a new one when that is
        missing, invalid or past half its life (the Host was checked before this runs)."""
        now = clock()
        session = sessions.check(request.cookies.get(COOKIE), now)
        renew = isinstance(session, SessionRefused) or session.expires_s - now < sessions.lifetime_s / 2
        if renew:
            session, cookie = sessions.issue(now)
        response = HTMLResponse(page_html(sessions.csrf_token(session), sessions.user_id(session)),
                                headers={"Content-Security-Policy": PAGE_CSP})
        if renew:
            response.set_cookie(COOKIE, cookie, max_age=int(sessions.lifetime_s), path="/", httponly=True,
                                samesite="strict", secure=request.url.scheme == "https")
        return response

    @app.get(SCRIPT_PATH, include_in_schema=False)
    def page_script() -> Response:
        return Response(PAGE_SCRIPT, media_type="text/javascript; charset=utf-8")

    @app.get(STYLE_PATH, include_in_schema=False)
    def page_style() -> Response:
        return Response(PAGE_STYLE, media_type="text/css; charset=utf-8")

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        return HTMLResponse(docs_html, headers={"Content-Security-Policy": docs_csp})

    @app.get("/healthz")
    def healthz() -> dict:
        """Up; how many Spanner snapshots this process's reader has opened (for load tests); the
        abuse limits in force; how many requests each check refused since the start."""
        return {"status": "ok", "spanner_reads": reader.spanner_reads, "limits": settings.limits(),
                "refused": dict(refused)}

    # Declared before the counts route below, which would take ".../votes/<user>" as a post ID.
    # Both parameters may hold "/": the path splits at its last "/votes/" (module docstring).
    @app.get("/v1/posts/{post_id:path}/votes/{user_id:path}",
             summary="One user's vote on one post (private: a bearer token, or the live page's session for its user)")
    async def read_vote(request: Request, post_id: str, user_id: str) -> Response:
        credential = gate.admit_read(request)
        if isinstance(credential, _Refusal):
            refused[credential.kind] += 1
            return _error(credential.status, credential.reason, credential.headers)
        _check_post_id(post_id)
        _check_user_id(user_id)
        if isinstance(credential, Session) and user_id != sessions.user_id(credential):
            refused["session_scope"] += 1
            return _error(403, f"a live-page session reads only its own user's votes ({sessions.user_id(credential)})")
        stored = await run_in_threadpool(votes.vote_of, post_id, user_id)
        return JSONResponse(vote_json(post_id, user_id, stored))

    @app.get("/v1/posts/{post_id:path}", summary="One post's exact counts")
    def read_post(post_id: str, unique: bool = Query(False, description=UNIQUE_HELP)) -> dict:
        _check_post_id(post_id)
        return reader.get(post_id, unique).to_json()

    @app.get("/v1/posts", summary="Several posts' exact counts, in the order asked")
    def read_posts(id: list[str] = Query(..., description="a post ID; repeat for more"),  # noqa: A002
                   unique: bool = Query(False, description=UNIQUE_HELP)) -> dict:
        if len(id) > MAX_IDS_PER_READ:
            raise HTTPException(400, f"{len(id)} ids, at most {MAX_IDS_PER_READ} per request")
        for post_id in id:
            _check_post_id(post_id)
        return {"posts": [count.to_json() for count in reader.get_many(id, unique)]}

    @app.get("/v1/top", summary="Top posts by exact upvotes, fresh without a fold; by hot score (by=hot) or by "
                                "upvotes in the last N hours (last=24h): what is viral now")
    def read_top(n: int = Query(10, ge=1, le=MAX_TOP_N),
                 by: Literal["upvotes", "hot"] = Query("upvotes", description=BY_HELP),
                 last: str | None = Query(None, max_length=16, description=LAST_HELP)) -> dict:
        if last is not None:
            if by == HOT:
                raise HTTPException(400, "last ranks by upvotes in the window: ask for by=hot or last, not both")
            try:
                hours = hours_of(last)
            except ValueError as error:
                raise HTTPException(400, f"last: {error}") from None
            return trending_json(reader.window_top(n, hours), WINDOW_SCORE)
        if by == HOT:
            return trending_json(reader.hot_top(n), HOT_SCORE)
        top = reader.top(n)
        return {
            "posts": [post.to_json() for post in top.posts],
            "as_of": top.as_of.isoformat(), "exact": top.exact, "bound": top.bound,
            "folded_through": None if top.folded_through is None else top.folded_through.isoformat(),
        }

    @app.post("/v1/votes", status_code=202,
              summary="Publish votes (one JSON event, or ndjson) with a bearer token or the live page's session")
    async def post_votes(request: Request) -> Response:
        credential = gate.admit(request)
        if isinstance(credential, _Refusal):
            refused[credential.kind] += 1
            return _error(credential.status, credential.reason, credential.headers)
        if publisher is None:
            return _error(503, "this server publishes no votes: start it with --topic")
        body = await _read_body(request, settings.body_timeout_s)
        one_event = request.headers["content-type"].split(";")[0].strip().lower() == "application/json"
        if isinstance(credential, Session):
            if not one_event:
                return _error(400, "a live-page session sends one application/json event per request")
            beyond = outside_session_scope(body, sessions.user_id(credential), clock())
            if beyond is not None:
                refused["session_scope"] += 1
                return _error(403, beyond)
        validated = validate_votes(body, one_event, clock(), settings.max_delta)
        if validated.whole is not None:
            return _error(413 if reason_of(validated.whole) in ("too_many_events", "too_large") else 400,
                          validated.whole.error)
        if not validated.events:
            return JSONResponse({"error": "no valid event", "accepted": 0, "rejected": validated.rejected},
                                status_code=400)
        message = events_message(validated.events)  # the contract's encoding, as `upvotes publish`'s
        await run_in_threadpool(publisher.publish, message.data, message.attributes)
        return JSONResponse({"accepted": len(validated.events), "rejected": validated.rejected}, status_code=202)

    guarded: ASGIApp = app
    if settings.cors_origins:  # exact origins, bearer tokens only: no cookies, so no credentials mode
        guarded = CORSMiddleware(app, allow_origins=list(settings.cors_origins), allow_methods=["GET", "POST"],
                                 allow_headers=["Authorization", "Content-Type"], allow_credentials=False)

    def host_refused() -> None:
        refused["host"] += 1

    return SecurityHeaders(HostAllowlist(guarded, settings.allowed_hosts, host_refused))


# --- running it ---------------------------------------------------------------------------

def protocol_with_head_timeout(head_timeout_s: float) -> type[H11Protocol]:
    """uvicorn's h11 protocol, closing a connection whose next request head has not arrived
    `head_timeout_s` after the connection opened or the previous response ended (slow loris)."""

    class HeadTimeoutH11Protocol(H11Protocol):
        _head_deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport) -> None:  # noqa: ANN001
            super().connection_made(transport)
            self._arm_head_deadline()

        def on_response_complete(self) -> None:
            self._arm_head_deadline()  # before the base class handles a pipelined next request
            super().on_response_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._head_deadline is not None:
                self._head_deadline.cancel()
            super().connection_lost(exc)

        def _arm_head_deadline(self) -> None:
            if self._head_deadline is not None:
                self._head_deadline.cancel()
            waiting_since = self.cycle
            self._head_deadline = self.loop.call_later(head_timeout_s, self._head_overdue, waiting_since)

        def _head_overdue(self, waiting_since) -> None:  # noqa: ANN001
            # A new request cycle since arming means its head arrived in time; its body is
            # bounded by the app's body timeout.
            if self.cycle is waiting_since and not self.transport.is_closing():
                self.transport.close()

    return HeadTimeoutH11Protocol


def uvicorn_config(app: ASGIApp, host: str, port: int, settings: ServiceSettings) -> uvicorn.Config:
    """uvicorn as the service runs it. X-Forwarded-For/-Proto are believed only from
    `settings.trusted_proxies` (uvicorn alone believes them from 127.0.0.1 and ::1, so any
    local client could pick its own address for the rate limits)."""
    return uvicorn.Config(
        app, host=host, port=port, http=protocol_with_head_timeout(settings.head_timeout_s),
        timeout_keep_alive=5, limit_concurrency=1_000, server_header=False, access_log=False,
        log_level="warning", lifespan="off", proxy_headers=bool(settings.trusted_proxies),
        forwarded_allow_ips=list(settings.trusted_proxies),
    )


@dataclass
class RunningService:
    """A service started by `start_in_background`; `stop()` shuts it down and waits."""

    url: str
    server: uvicorn.Server
    thread: threading.Thread

    def stop(self, timeout_s: float = 10.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout_s)


def start_in_background(app: ASGIApp, settings: ServiceSettings, host: str = "127.0.0.1",
                        port: int = 0) -> RunningService:
    """Runs `app` on uvicorn in a daemon thread (port 0: a free port); returns once it listens."""
    server = uvicorn.Server(uvicorn_config(app, host, port, settings))
    thread = threading.Thread(target=server.run, name="upvotes-serve", daemon=True)
    thread.start()
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError(f"the service did not start on {host}:{port}")
        time.sleep(0.01)
    bound_port = server.servers[0].sockets[0].getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    return RunningService(f"http://{shown}:{bound_port}", server, thread)


def serve_in_background(project: str, instance: str, database: str, topic: str | None, settings: ServiceSettings,
                        host: str = "127.0.0.1", port: int = 0, staleness_s: float = 0.0,
                        refresh_s: float = DEFAULT_REFRESH_S) -> RunningService:
    """The whole service on one database (and votes topic, ID or path), started in a background
    thread: what `upvotes serve` runs, for the demo and tests. `.url` is the live page."""
    from pipeline.params import pubsub_path
    from spanner_store.database import open_database

    spanner = open_database(project, instance, database)
    reader = CountsReader(spanner, staleness_s=staleness_s, refresh_s=refresh_s)
    publisher = PubSubVotePublisher(pubsub_path(project, "topics", topic)) if topic else None
    app = create_app(reader, SpannerVoteReader(spanner), publisher, settings)
    return start_in_background(app, settings, host, port)
